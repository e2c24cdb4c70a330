// The embedded ZooKeeper: one in-process znode tree served to any number of sessions. It backs
// the one-command local cluster and the unit tests, so it keeps ZooKeeper's semantics where the
// coordination logic can observe them (ZooKeeper's DataTree and PrepRequestProcessor are the
// reference):
// - watches are one-shot, per session, deduplicated per (path, watcher) as the Java client does,
//   and delivered asynchronously in the order their changes happened;
// - a create fires `created` on the path and `children_changed` on the parent; a delete fires
//   `deleted` on the path (data and child watches) and `children_changed` on the parent;
// - the sequential suffix is the parent's cversion, printed as %010d; in ZooKeeper 3.8 it advances
//   on every child create (sequential or not) and not on deletes, so numbers are never reused;
// - sessions can be disconnected (a partition) and expired: a disconnected client learns of its
//   expiry only when it reaches the server again; an expired session's ephemerals vanish and its
//   watches are dropped when the server expires it. The store then reports 'expired', opens a
//   new session (new sessionId) and reports 'connected', as ZooKeeperStore does; the caller
//   re-registers its ephemerals.
// Operations fail with CONNECTION_LOSS while disconnected, SESSION_EXPIRED while the session is
// expired and not yet replaced, and CLOSED after close(), as in ZooKeeperStore.
// With a journal (tree-store.ts keeps one on disk), every change to a persistent znode is handed
// to it as it happens, and nothing is acknowledged, answered or delivered as a watch before the
// journal has it durable: as in ZooKeeper, a client never observes a change a crash could undo.
// Ephemerals are not journaled (a restarted server has none: their sessions died with it), but
// the sequence numbers they take are, so that numbers are never reused across a restart.

import { assertValidData, assertValidPath, StoreError, fromChroot, underChroot } from './store.js';
import type { CreateMode, NodeData, SessionState, StoreLogger, WatchEvent, WatchEventType, Watcher, ZNodeStore } from './store.js';

// Kept only for test/coordination-store.test.ts, which still imports it from here; its home is store.ts.
export { MAX_DATA_BYTES } from './store.js';

export interface MemoryZNodeServerOptions {
  /** Session timeout of sessions that do not name one: how long a disconnected session survives. Default 15000 (Solr's). */
  readonly sessionTimeoutMs?: number;
  /** Receives exceptions thrown by watchers and session listeners (they are not rethrown). */
  readonly logger?: StoreLogger;
  /** The persistent znodes to start from, each parent before its children ('/' first, if present). */
  readonly restore?: readonly PersistedZNode[];
  /** Where changes to persistent znodes are recorded; without one the tree lives in memory only. */
  readonly journal?: ZNodeJournal;
}

/** A persistent znode as it is saved and restored: data, version and sequence counter exactly. */
export interface PersistedZNode {
  readonly path: string;
  readonly data: Buffer;
  readonly version: number;
  readonly cversion: number;
}

/** One change to the persistent part of the tree, with the values it produced. */
export type ZNodeChange =
  | { readonly op: 'create'; readonly path: string; readonly data: Buffer; readonly parentCversion: number }
  /** An ephemeral child took a sequence number of its (persistent) parent. */
  | { readonly op: 'cversion'; readonly path: string; readonly cversion: number }
  | { readonly op: 'set'; readonly path: string; readonly data: Buffer; readonly version: number }
  | { readonly op: 'delete'; readonly path: string };

/** Records changes to persistent znodes durably (see tree-store.ts). */
export interface ZNodeJournal {
  /** Called by the server once, before any change: how to read the persistent znodes now (for snapshots). */
  attach(snapshot: () => PersistedZNode[]): void;
  /** Called synchronously after each change, in the order of the changes. */
  record(change: ZNodeChange): void;
  /** Undefined when every recorded change is durable; else resolves once it is (rejects if it cannot be). */
  durable(): Promise<void> | undefined;
  /** Makes everything durable and releases the journal's files. */
  close(): Promise<void>;
}

export interface MemoryConnectOptions {
  /** Root of the store's paths, e.g. '/shardex'; created if missing. */
  readonly chroot?: string;
  readonly sessionTimeoutMs?: number;
}

const DEFAULT_SESSION_TIMEOUT_MS = 15_000;

/** Formats a ZooKeeper sequence number: %010d of a signed 32-bit counter. */
export function sequenceSuffix(counter: number): string {
  return counter < 0 ? `-${String(-counter).padStart(9, '0')}` : String(counter).padStart(10, '0');
}

function parentOf(path: string): string {
  const i = path.lastIndexOf('/');
  return i === 0 ? '/' : path.slice(0, i);
}

function join(parent: string, name: string): string {
  return parent === '/' ? `/${name}` : `${parent}/${name}`;
}

interface ZNode {
  data: Buffer;
  version: number;
  /** Children created so far: the source of sequence numbers. */
  cversion: number;
  readonly ephemeralOwner: ServerSession | undefined;
  readonly children: Map<string, ZNode>;
}

interface WatchEntry {
  readonly session: ServerSession;
  readonly watcher: Watcher;
}

type WatchTable = Map<string, WatchEntry[]>;

interface ServerSession {
  readonly id: string;
  readonly timeoutMs: number;
  state: 'live' | 'expired' | 'closed';
  /** Whether the client currently reaches the server (false during a partition). */
  connected: boolean;
  /** The client attached to this session; undefined once it closed while partitioned. */
  client: MemoryZNodeStore | undefined;
  readonly ephemerals: Set<string>;
  expiryTimer: NodeJS.Timeout | undefined;
  healTimer: NodeJS.Timeout | undefined;
}

/** The tree and its watch tables; every path here is absolute (chroot already applied). */
class ZNodeTree {
  private readonly root: ZNode = { data: Buffer.alloc(0), version: 0, cversion: 0, ephemeralOwner: undefined, children: new Map() };
  // Data watches serve both get and exists, as in ZooKeeper's server.
  private readonly dataWatches: WatchTable = new Map();
  private readonly childWatches: WatchTable = new Map();

  constructor(private readonly journal: ZNodeJournal | undefined) {}

  /** Loads persistent znodes into the empty tree (no watches fire: nobody is connected yet). */
  restore(nodes: readonly PersistedZNode[]): void {
    for (const n of nodes) {
      if (n.path === '/') {
        this.root.data = Buffer.from(n.data);
        this.root.version = n.version;
        this.root.cversion = n.cversion;
        continue;
      }
      const parent = this.lookup(parentOf(n.path));
      const name = n.path.slice(n.path.lastIndexOf('/') + 1);
      if (parent === undefined || parent.children.has(name)) throw new Error(`restore: ${n.path} has no parent or comes twice`);
      parent.children.set(name, { data: Buffer.from(n.data), version: n.version, cversion: n.cversion, ephemeralOwner: undefined, children: new Map() });
    }
  }

  /** Every persistent znode, parents first. */
  persistentNodes(): PersistedZNode[] {
    const out: PersistedZNode[] = [];
    const walk = (path: string, node: ZNode): void => {
      out.push({ path, data: node.data, version: node.version, cversion: node.cversion });
      for (const [name, child] of node.children) if (child.ephemeralOwner === undefined) walk(join(path, name), child);
    };
    walk('/', this.root);
    return out;
  }

  private lookup(path: string): ZNode | undefined {
    if (path === '/') return this.root;
    let node: ZNode | undefined = this.root;
    for (const name of path.slice(1).split('/')) {
      node = node.children.get(name);
      if (node === undefined) return undefined;
    }
    return node;
  }

  create(path: string, data: Buffer, mode: CreateMode, session: ServerSession): string {
    if (path === '/') throw new StoreError('NODE_EXISTS', path);
    const parentPath = parentOf(path);
    const parent = this.lookup(parentPath);
    if (parent === undefined) throw new StoreError('NO_NODE', path, `NO_NODE: parent of ${path} does not exist`);
    const sequential = mode === 'persistent_sequential' || mode === 'ephemeral_sequential';
    const actual = sequential ? path + sequenceSuffix(parent.cversion) : path;
    const name = actual.slice(actual.lastIndexOf('/') + 1);
    if (parent.children.has(name)) throw new StoreError('NODE_EXISTS', actual);
    if (parent.ephemeralOwner !== undefined) throw new StoreError('NO_CHILDREN_FOR_EPHEMERALS', actual);
    const ephemeral = mode === 'ephemeral' || mode === 'ephemeral_sequential';
    const stored = Buffer.from(data);
    parent.children.set(name, { data: stored, version: 0, cversion: 0, ephemeralOwner: ephemeral ? session : undefined, children: new Map() });
    parent.cversion += 1;
    if (ephemeral) session.ephemerals.add(actual);
    this.journal?.record(ephemeral ? { op: 'cversion', path: parentPath, cversion: parent.cversion } : { op: 'create', path: actual, data: stored, parentCversion: parent.cversion });
    this.trigger(this.dataWatches, actual, 'created');
    this.trigger(this.childWatches, parentPath, 'children_changed');
    return actual;
  }

  mkdirp(path: string, session: ServerSession): void {
    let current = '';
    for (const name of path.slice(1).split('/')) {
      if (name === '') break; // path is '/'
      current = `${current}/${name}`;
      if (this.lookup(current) === undefined) this.create(current, Buffer.alloc(0), 'persistent', session);
    }
  }

  get(path: string, watch: WatchEntry | undefined): NodeData | undefined {
    const node = this.lookup(path);
    if (watch) this.register(this.dataWatches, path, watch);
    return node === undefined ? undefined : { data: Buffer.from(node.data), version: node.version };
  }

  exists(path: string, watch: WatchEntry | undefined): boolean {
    if (watch) this.register(this.dataWatches, path, watch);
    return this.lookup(path) !== undefined;
  }

  children(path: string, watch: WatchEntry | undefined): string[] {
    const node = this.lookup(path);
    if (node === undefined) throw new StoreError('NO_NODE', path);
    if (watch) this.register(this.childWatches, path, watch);
    return [...node.children.keys()];
  }

  set(path: string, data: Buffer, version: number | undefined): number {
    const node = this.lookup(path);
    if (node === undefined) throw new StoreError('NO_NODE', path);
    if (version !== undefined && version !== -1 && version !== node.version) {
      throw new StoreError('BAD_VERSION', path, `BAD_VERSION at ${path}: expected ${version}, is ${node.version}`);
    }
    node.data = Buffer.from(data);
    node.version += 1;
    if (node.ephemeralOwner === undefined) this.journal?.record({ op: 'set', path, data: node.data, version: node.version });
    this.trigger(this.dataWatches, path, 'data_changed');
    return node.version;
  }

  delete(path: string, version: number | undefined): void {
    if (path === '/') throw new TypeError('The root znode cannot be deleted');
    const parentPath = parentOf(path);
    const parent = this.lookup(parentPath);
    const name = path.slice(path.lastIndexOf('/') + 1);
    const node = parent?.children.get(name);
    if (parent === undefined || node === undefined) throw new StoreError('NO_NODE', path);
    if (version !== undefined && version !== -1 && version !== node.version) {
      throw new StoreError('BAD_VERSION', path, `BAD_VERSION at ${path}: expected ${version}, is ${node.version}`);
    }
    if (node.children.size > 0) throw new StoreError('NOT_EMPTY', path);
    // ZooKeeper 3.8 advances cversion (the sequence source) on child creates only.
    parent.children.delete(name);
    node.ephemeralOwner?.ephemerals.delete(path);
    if (node.ephemeralOwner === undefined) this.journal?.record({ op: 'delete', path });
    this.trigger(this.dataWatches, path, 'deleted');
    this.trigger(this.childWatches, path, 'deleted');
    this.trigger(this.childWatches, parentPath, 'children_changed');
  }

  /** Deletes `path` and its subtree, children first; with `keepTop`, only the subtree. */
  deleteRecursive(path: string, keepTop: boolean): void {
    const node = this.lookup(path);
    if (node === undefined) return;
    for (const name of [...node.children.keys()]) this.deleteRecursive(join(path, name), false);
    if (!keepTop && path !== '/') this.delete(path, undefined);
  }

  /** Removes a dead session: its watches first (it hears nothing more), then its ephemerals. */
  removeSession(session: ServerSession): void {
    for (const table of [this.dataWatches, this.childWatches]) {
      for (const [path, entries] of table) {
        const kept = entries.filter((e) => e.session !== session);
        if (kept.length === 0) table.delete(path);
        else if (kept.length !== entries.length) table.set(path, kept);
      }
    }
    for (const path of [...session.ephemerals]) this.delete(path, undefined);
  }

  private register(table: WatchTable, path: string, watch: WatchEntry): void {
    const entries = table.get(path);
    if (entries === undefined) table.set(path, [watch]);
    else if (!entries.some((e) => e.session === watch.session && e.watcher === watch.watcher)) entries.push(watch);
  }

  private trigger(table: WatchTable, path: string, type: WatchEventType): void {
    const entries = table.get(path);
    if (entries === undefined) return;
    table.delete(path);
    for (const entry of entries) entry.session.client?.watchTriggered(entry.watcher, type, path);
  }
}

/** What a store may ask of its server; kept off the server's public API. */
interface ServerLink {
  readonly tree: ZNodeTree;
  readonly logger: StoreLogger | undefined;
  /** Undefined when every change so far is durable; else resolves once it is. */
  durable(): Promise<void> | undefined;
  openSession(client: MemoryZNodeStore, timeoutMs: number): ServerSession;
  clientClosed(session: ServerSession): void;
  clientMoved(oldSession: ServerSession): void;
}

type Connection = 'connected' | 'disconnected' | 'expired' | 'closed';

class MemoryZNodeStore implements ZNodeStore {
  private session: ServerSession;
  private connection: Connection = 'connected';
  private readonly listeners = new Set<(state: SessionState) => void>();
  /** Watch deliveries held back during a partition, delivered on reconnect (ZooKeeper's SetWatches). */
  private missed: Array<() => void> = [];
  /** The last delivery queued behind the journal, while any is pending. */
  private deliveries: Promise<void> | undefined;

  constructor(
    private readonly link: ServerLink,
    private readonly chroot: string,
    private readonly timeoutMs: number,
  ) {
    this.session = link.openSession(this, timeoutMs);
  }

  get sessionId(): string {
    return this.session.id;
  }

  // Each operation runs on the tree at once, then answers only once the journal (if any) has every
  // change made so far durable: its own, and any other one it may have observed. A failed
  // operation waits too: its failure may rest on a change that is not yet durable.

  async create(path: string, data: Buffer, mode: CreateMode): Promise<string> {
    const session = this.live(path);
    assertValidData(data, path);
    return this.settle(() => this.relative(this.link.tree.create(this.absolute(path), data, mode, session)));
  }

  async mkdirp(path: string): Promise<void> {
    const session = this.live(path);
    return this.settle(() => this.link.tree.mkdirp(this.absolute(path), session));
  }

  async get(path: string, watch?: Watcher): Promise<NodeData | undefined> {
    const session = this.live(path);
    return this.settle(() => this.link.tree.get(this.absolute(path), watch && { session, watcher: watch }));
  }

  async set(path: string, data: Buffer, version?: number): Promise<number> {
    this.live(path);
    assertValidData(data, path);
    return this.settle(() => this.link.tree.set(this.absolute(path), data, version));
  }

  async delete(path: string, version?: number): Promise<void> {
    this.live(path);
    return this.settle(() => this.link.tree.delete(this.absolute(path), version));
  }

  async deleteRecursive(path: string): Promise<void> {
    this.live(path);
    // '/' is the chroot: its subtree goes, the chroot itself stays (as with ZooKeeperStore).
    return this.settle(() => this.link.tree.deleteRecursive(this.absolute(path), path === '/'));
  }

  async children(path: string, watch?: Watcher): Promise<string[]> {
    const session = this.live(path);
    return this.settle(() => this.link.tree.children(this.absolute(path), watch && { session, watcher: watch }));
  }

  async exists(path: string, watch?: Watcher): Promise<boolean> {
    const session = this.live(path);
    return this.settle(() => this.link.tree.exists(this.absolute(path), watch && { session, watcher: watch }));
  }

  onSessionState(listener: (state: SessionState) => void): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }

  async close(): Promise<void> {
    if (this.connection === 'closed') return;
    this.connection = 'closed';
    this.missed = [];
    this.listeners.clear();
    this.link.clientClosed(this.session);
  }

  // --- driven by the server -------------------------------------------------------------

  watchTriggered(watcher: Watcher, type: WatchEventType, absolutePath: string): void {
    const event: WatchEvent = { type, path: this.relative(absolutePath) };
    const deliver = () => this.call(watcher, event);
    if (this.connection === 'disconnected') this.missed.push(deliver);
    else this.enqueue(deliver);
  }

  connectionLost(): void {
    if (this.connection !== 'connected') return;
    this.connection = 'disconnected';
    this.report('disconnected');
  }

  /** The client reaches the server again: same session if it still lives, else expiry and a new session. */
  connectionRegained(): void {
    if (this.connection !== 'disconnected') return;
    if (this.session.state === 'live') {
      this.connection = 'connected';
      this.report('connected');
      const missed = this.missed;
      this.missed = [];
      for (const deliver of missed) this.enqueue(deliver);
      return;
    }
    this.connection = 'expired';
    this.missed = [];
    this.report('expired');
    this.enqueue(() => {
      if (this.connection !== 'expired') return;
      const old = this.session;
      this.session = this.link.openSession(this, this.timeoutMs);
      this.link.clientMoved(old);
      this.connection = 'connected';
      this.notify('connected');
    });
  }

  // --- internals ---------------------------------------------------------------------------

  private live(path: string): ServerSession {
    assertValidPath(path);
    switch (this.connection) {
      case 'closed':
        throw new StoreError('CLOSED', path, `CLOSED: the store was closed (${path})`);
      case 'disconnected':
        throw new StoreError('CONNECTION_LOSS', path, `CONNECTION_LOSS: session ${this.session.id} is disconnected (${path})`);
      case 'expired':
        throw new StoreError('SESSION_EXPIRED', path, `SESSION_EXPIRED: session ${this.session.id} expired (${path})`);
      case 'connected':
        return this.session;
    }
  }

  /** Runs `op` on the tree now; its result or error is given once every change so far is durable. */
  private async settle<T>(op: () => T): Promise<T> {
    let value: T;
    try {
      value = op();
    } catch (err) {
      const pending = this.link.durable();
      if (pending) await pending;
      throw err;
    }
    const pending = this.link.durable();
    if (pending) await pending;
    return value;
  }

  private absolute(path: string): string {
    return underChroot(this.chroot, path);
  }

  private relative(path: string): string {
    return fromChroot(this.chroot, path);
  }

  private report(state: SessionState): void {
    this.enqueue(() => this.notify(state));
  }

  private notify(state: SessionState): void {
    for (const listener of [...this.listeners]) this.call(listener, state);
  }

  /**
   * Deliveries run asynchronously and in order; nothing is delivered after close(), and nothing
   * before the changes made so far are durable (then deliveries queue behind the journal).
   */
  private enqueue(task: () => void): void {
    const run = (): void => {
      if (this.connection !== 'closed') task();
    };
    const pending = this.link.durable();
    if (pending === undefined && this.deliveries === undefined) {
      queueMicrotask(run);
      return;
    }
    // A journal that cannot write fails every operation; its deliveries are dropped.
    const next = (this.deliveries ?? Promise.resolve()).then(() => pending).then(run, () => undefined);
    this.deliveries = next;
    void next.then(() => {
      if (this.deliveries === next) this.deliveries = undefined;
    });
  }

  private call<T>(fn: (arg: T) => void, arg: T): void {
    try {
      fn(arg);
    } catch (err) {
      const logger = this.link.logger;
      if (logger) logger.error({ err, sessionId: this.session.id, arg }, 'znode store listener threw');
      else process.emitWarning(`znode store listener threw: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    }
  }
}

/**
 * One in-process znode tree. `connect()` opens a session on it; `expire`, `disconnect` and
 * `reconnect` let tests and the local cluster do to a session what a network or a pause does to a
 * ZooKeeper client.
 */
export class MemoryZNodeServer {
  private readonly tree: ZNodeTree;
  private readonly journal: ZNodeJournal | undefined;
  private readonly sessions = new Map<string, ServerSession>();
  private readonly defaultTimeoutMs: number;
  private readonly logger: StoreLogger | undefined;
  private nextSession = 1;
  private closed = false;
  private readonly link: ServerLink;

  constructor(options: MemoryZNodeServerOptions = {}) {
    this.defaultTimeoutMs = options.sessionTimeoutMs ?? DEFAULT_SESSION_TIMEOUT_MS;
    this.logger = options.logger;
    this.tree = new ZNodeTree(options.journal);
    if (options.restore) this.tree.restore(options.restore);
    this.journal = options.journal;
    this.journal?.attach(() => this.tree.persistentNodes());
    const journal = this.journal;
    this.link = {
      tree: this.tree,
      logger: this.logger,
      durable: journal ? () => journal.durable() : () => undefined,
      openSession: (client, timeoutMs) => this.openSession(client, timeoutMs),
      clientClosed: (session) => this.clientClosed(session),
      clientMoved: (session) => this.forget(session),
    };
  }

  /** Opens a new session (connected at once); paths of the returned store are relative to `chroot`. */
  connect(options: MemoryConnectOptions = {}): ZNodeStore {
    if (this.closed) throw new Error('MemoryZNodeServer is closed');
    const chroot = options.chroot ?? '/';
    assertValidPath(chroot);
    const store = new MemoryZNodeStore(this.link, chroot, options.sessionTimeoutMs ?? this.defaultTimeoutMs);
    const session = this.sessions.get(store.sessionId);
    if (session && chroot !== '/') this.tree.mkdirp(chroot, session);
    return store;
  }

  /** Ids of the sessions the server holds (live, or expired but not yet noticed by their client). */
  sessionIds(): string[] {
    return [...this.sessions.values()].filter((s) => s.state === 'live').map((s) => s.id);
  }

  /**
   * Expires a session now, as ZooKeeper does when it misses the session's heartbeats: its
   * ephemerals vanish and its watches are dropped. A connected client then reports
   * 'disconnected', 'expired' and, on its new session, 'connected'; a partitioned one reports
   * 'expired' and 'connected' when it reconnects.
   */
  expire(sessionId: string): void {
    const session = this.session(sessionId);
    if (session.state !== 'live') throw new Error(`Session ${sessionId} is not live (${session.state})`);
    this.expireSession(session);
    if (session.connected) {
      session.client?.connectionLost();
      session.client?.connectionRegained();
    }
  }

  /**
   * Cuts a session's client off the server for `ms` (default: until `reconnect`). The client
   * reports 'disconnected' and its operations fail with CONNECTION_LOSS; if the cut lasts the
   * session timeout, the server expires the session meanwhile and the client learns it on reconnect.
   */
  disconnect(sessionId: string, ms = Number.POSITIVE_INFINITY): void {
    const session = this.session(sessionId);
    if (session.state !== 'live' || !session.connected) throw new Error(`Session ${sessionId} is not connected`);
    session.connected = false;
    session.client?.connectionLost();
    session.expiryTimer = setTimeout(() => this.expireSession(session), session.timeoutMs);
    if (Number.isFinite(ms)) session.healTimer = setTimeout(() => this.reconnect(sessionId), ms);
  }

  /** Ends a partition started by `disconnect`. */
  reconnect(sessionId: string): void {
    const session = this.sessions.get(sessionId);
    if (session === undefined || session.connected) return;
    clearTimeout(session.healTimer);
    session.healTimer = undefined;
    if (session.state === 'live') {
      clearTimeout(session.expiryTimer);
      session.expiryTimer = undefined;
      session.connected = true;
    }
    session.client?.connectionRegained();
  }

  /** Every persistent znode, parents first, as a snapshot would save it. */
  persistentNodes(): PersistedZNode[] {
    return this.tree.persistentNodes();
  }

  /** Closes every session and stops all timers; the stores answer CLOSED from then on. The journal is closed last. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const clients = [...this.sessions.values()].map((s) => s.client);
    for (const client of clients) await client?.close();
    for (const session of this.sessions.values()) this.clearTimers(session);
    this.sessions.clear();
    await this.journal?.close();
  }

  private session(sessionId: string): ServerSession {
    const session = this.sessions.get(sessionId);
    if (session === undefined) throw new Error(`Unknown session ${sessionId}`);
    return session;
  }

  private openSession(client: MemoryZNodeStore, timeoutMs: number): ServerSession {
    const id = `0x${(this.nextSession++).toString(16).padStart(16, '0')}`;
    const session: ServerSession = {
      id,
      timeoutMs,
      state: 'live',
      connected: true,
      client,
      ephemerals: new Set(),
      expiryTimer: undefined,
      healTimer: undefined,
    };
    this.sessions.set(id, session);
    return session;
  }

  private expireSession(session: ServerSession): void {
    if (session.state !== 'live') return;
    session.state = 'expired';
    clearTimeout(session.expiryTimer);
    session.expiryTimer = undefined;
    this.tree.removeSession(session);
    if (session.client === undefined) this.forget(session);
  }

  private clientClosed(session: ServerSession): void {
    session.client = undefined;
    clearTimeout(session.healTimer);
    session.healTimer = undefined;
    // A partitioned client cannot tell the server it closes: its session lives until it expires.
    if (session.state === 'live' && !session.connected) return;
    if (session.state === 'live') {
      session.state = 'closed';
      this.tree.removeSession(session);
    }
    this.forget(session);
  }

  private forget(session: ServerSession): void {
    this.clearTimers(session);
    this.sessions.delete(session.id);
  }

  private clearTimers(session: ServerSession): void {
    clearTimeout(session.expiryTimer);
    clearTimeout(session.healTimer);
    session.expiryTimer = undefined;
    session.healTimer = undefined;
  }
}
