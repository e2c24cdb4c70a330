// The embedded coordinator across threads: a ZNodeStore whose session lives in another
// thread's MemoryZNodeServer, spoken to over a MessagePort. The local dev cluster runs each
// node in a worker thread (so that it uses every core) around one coordinator in the main
// thread. Requests carry an id; watch events and session states flow back as messages.
import type { MessagePort } from 'node:worker_threads';
import type { MemoryZNodeServer } from './memory-store.js';
import { StoreError, type CreateMode, type NodeData, type SessionState, type StoreErrorCode, type WatchEvent, type Watcher, type ZNodeStore } from './store.js';

type Op = 'create' | 'mkdirp' | 'get' | 'set' | 'delete' | 'deleteRecursive' | 'children' | 'exists' | 'close';

interface Request {
  readonly kind: 'request';
  readonly id: number;
  readonly op: Op;
  readonly args: unknown[];
  /** Set when the call carries a watcher: events for it come back with this id. */
  readonly watchId?: number;
}

type Message =
  | { kind: 'result'; id: number; value: unknown }
  | { kind: 'error'; id: number; code?: StoreErrorCode; path?: string; message: string; name?: string }
  | { kind: 'watch'; watchId: number; event: WatchEvent }
  | { kind: 'state'; state: SessionState; sessionId: string };

/** The caller's bad input stays the error class it is in-process (TypeError, RangeError). */
function rebuildError(name: string | undefined, message: string): Error {
  if (name === 'TypeError') return new TypeError(message);
  if (name === 'RangeError') return new RangeError(message);
  return new Error(message);
}

/** Main-thread side: one session of `server` per port, driven by the worker's requests. */
export function servePort(port: MessagePort, server: MemoryZNodeServer, options: { chroot?: string; sessionTimeoutMs?: number } = {}): void {
  const store = server.connect({
    ...(options.chroot !== undefined && { chroot: options.chroot }),
    ...(options.sessionTimeoutMs !== undefined && { sessionTimeoutMs: options.sessionTimeoutMs }),
  });
  const post = (m: Message): void => port.postMessage(m);
  // The port closes when the worker's thread ends, however it ends (an uncaught error, out of
  // memory): its session ends with it, so that its ephemerals (live node, candidacies) go and
  // its shards fail over, as a ZooKeeper session of a dead process expires.
  port.once('close', () => void store.close());
  post({ kind: 'state', state: 'connected', sessionId: store.sessionId });
  store.onSessionState((state) => post({ kind: 'state', state, sessionId: store.sessionId }));
  // One function per watch id: the worker sends the same id for the same watcher, so the
  // server sees the same function and fires it once per change, as it would in-process.
  const watchers = new Map<number, Watcher>();
  const watcherFor = (watchId: number): Watcher => {
    let w = watchers.get(watchId);
    if (!w) {
      w = (event) => post({ kind: 'watch', watchId, event });
      watchers.set(watchId, w);
    }
    return w;
  };
  port.on('message', (req: Request) => {
    const watcher = req.watchId === undefined ? undefined : watcherFor(req.watchId);
    const a = req.args;
    const run = (): Promise<unknown> => {
      switch (req.op) {
        case 'create':
          return store.create(a[0] as string, Buffer.from(a[1] as Uint8Array), a[2] as CreateMode);
        case 'mkdirp':
          return store.mkdirp(a[0] as string);
        case 'get':
          return store.get(a[0] as string, watcher);
        case 'set':
          return store.set(a[0] as string, Buffer.from(a[1] as Uint8Array), a[2] as number | undefined);
        case 'delete':
          return store.delete(a[0] as string, a[1] as number | undefined);
        case 'deleteRecursive':
          return store.deleteRecursive(a[0] as string);
        case 'children':
          return store.children(a[0] as string, watcher);
        case 'exists':
          return store.exists(a[0] as string, watcher);
        case 'close':
          return store.close();
      }
    };
    run().then(
      (value) => post({ kind: 'result', id: req.id, value }),
      (err: unknown) =>
        post(
          err instanceof StoreError
            ? { kind: 'error', id: req.id, code: err.code, path: err.path, message: err.message }
            : { kind: 'error', id: req.id, message: err instanceof Error ? err.message : String(err), ...(err instanceof Error && { name: err.name }) },
        ),
    );
  });
}

/** Worker side: the ZNodeStore the node's coordinator uses. */
export class PortZNodeStore implements ZNodeStore {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  private readonly watchers = new Map<number, Watcher>();
  private readonly watchIds = new WeakMap<Watcher, number>();
  private readonly listeners = new Set<(s: SessionState) => void>();
  private session = '';
  private portClosed = false;
  /** Resolves once the session is open (its id is known). */
  readonly ready: Promise<void>;
  private opened!: () => void;

  constructor(private readonly port: MessagePort) {
    this.ready = new Promise((resolve) => (this.opened = resolve));
    port.on('message', (m: Message) => this.receive(m));
  }

  get sessionId(): string {
    return this.session;
  }

  private receive(m: Message): void {
    switch (m.kind) {
      case 'result':
      case 'error': {
        const p = this.pending.get(m.id);
        if (!p) return;
        this.pending.delete(m.id);
        if (m.kind === 'result') p.resolve(m.value);
        else p.reject(m.code ? new StoreError(m.code, m.path ?? '', m.message) : rebuildError(m.name, m.message));
        return;
      }
      case 'watch':
        this.watchers.get(m.watchId)?.(m.event);
        return;
      case 'state':
        this.session = m.sessionId;
        this.opened();
        for (const l of this.listeners) l(m.state);
    }
  }

  private call<T>(op: Op, args: unknown[], watch?: Watcher): Promise<T> {
    if (this.portClosed) return Promise.reject(new StoreError('CLOSED', String(args[0] ?? ''), 'the store is closed'));
    const id = this.nextId++;
    let watchId: number | undefined;
    if (watch) {
      watchId = this.watchIds.get(watch);
      if (watchId === undefined) {
        watchId = id;
        this.watchIds.set(watch, watchId);
        this.watchers.set(watchId, watch);
      }
    }
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.port.postMessage({ kind: 'request', id, op, args, ...(watchId !== undefined && { watchId }) } satisfies Request);
    });
  }

  create(path: string, data: Buffer, mode: CreateMode): Promise<string> {
    return this.call('create', [path, data, mode]);
  }
  mkdirp(path: string): Promise<void> {
    return this.call('mkdirp', [path]);
  }
  async get(path: string, watch?: Watcher): Promise<NodeData | undefined> {
    const d = await this.call<{ data: Uint8Array; version: number } | undefined>('get', [path], watch);
    return d && { data: Buffer.from(d.data), version: d.version };
  }
  set(path: string, data: Buffer, version?: number): Promise<number> {
    return this.call('set', [path, data, version]);
  }
  delete(path: string, version?: number): Promise<void> {
    return this.call('delete', [path, version]);
  }
  deleteRecursive(path: string): Promise<void> {
    return this.call('deleteRecursive', [path]);
  }
  children(path: string, watch?: Watcher): Promise<string[]> {
    return this.call('children', [path], watch);
  }
  exists(path: string, watch?: Watcher): Promise<boolean> {
    return this.call('exists', [path], watch);
  }
  onSessionState(listener: (state: SessionState) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
  async close(): Promise<void> {
    if (this.portClosed) return;
    try {
      await this.call('close', []);
    } finally {
      this.portClosed = true;
      this.port.close();
      for (const [, p] of this.pending) p.reject(new StoreError('CLOSED', '', 'the store is closed'));
      this.pending.clear();
    }
  }
}
