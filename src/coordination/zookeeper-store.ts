// ZNodeStore over Apache ZooKeeper (node-zookeeper-client 1.1.3). What the library leaves to us,
// and how this file fills it in:
// - Chroot: handled here, not by the library, so that the chroot is created (mkdirp) on the same
//   session that then uses it, and every path in an event or a result is relative to it.
// - Expiry: a client whose session expired is dead for good. On 'expired' the store fails what the
//   old client still had in flight with SESSION_EXPIRED, reports 'expired', opens a new client (a
//   new session) and reports 'connected' once it is up; the caller re-registers its ephemerals.
// - Silent connection loss: the library has no read timeout, so a blackholed connection (a paused
//   server, a cut cable) would never be reported. Like the Java client's read timeout, a store that
//   has heard nothing from its server for 2/3 of the session timeout drops the connection, so that
//   'disconnected' is reported and the library reconnects within the session; a reconnection whose
//   handshake goes unanswered for a session timeout is dropped and tried again.
// - Operations never wait for a connection: while disconnected they fail with CONNECTION_LOSS, while
//   a replacement session is being opened with SESSION_EXPIRED, after close() with CLOSED — the same
//   as MemoryZNodeServer's stores. An operation whose connection drops mid-flight fails with
//   CONNECTION_LOSS: its outcome is unknown, as in ZooKeeper.
// - Watches: one library watcher per (path, kind) dispatches to every watcher the caller set there,
//   once, as the Java client does; a get() on a missing node leaves an exists-watch so that its
//   watcher fires on create.
// - ACLs: with `digest` credentials ('user:password') every session authenticates with them (the
//   library re-sends them on every reconnection, and a replacement session gets them too), and
//   every znode the store creates, the chroot included, gets an ACL giving that user every
//   permission, as Solr's DigestZkACLProvider does, and read to everyone (the state holds no
//   secret, and the smart client and the CLI read it without a credential that could change it).
//   Without credentials znodes are open (world:anyone, all permissions), ZooKeeper's default.

import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import zookeeper from 'node-zookeeper-client';
import type { ACL, Client, Event as ZooKeeperEvent, Stat } from 'node-zookeeper-client';
import { ShardexError } from '../errors.js';
import { assertValidData, assertValidPath, StoreError, fromChroot, underChroot } from './store.js';
import type { CreateMode, NodeData, SessionState, StoreErrorCode, StoreLogger, WatchEvent, WatchEventType, Watcher, ZNodeStore } from './store.js';

export interface ZooKeeperStoreOptions {
  /** 'host:port[,host:port...][/chroot]', as ZooKeeper's own clients take it. */
  readonly connectString: string;
  /** Requested session timeout; the server clamps it to its [minSessionTimeout, maxSessionTimeout]. */
  readonly sessionTimeoutMs: number;
  /** How long connect() waits for the first connection. Default: the session timeout, at least 10 s. */
  readonly connectTimeoutMs?: number;
  readonly logger?: StoreLogger;
  /** Digest credentials 'user:password': the session authenticates with them, and created znodes are writable by that user only (see above). */
  readonly digest?: string;
}

const MODES: Record<CreateMode, number> = {
  persistent: zookeeper.CreateMode.PERSISTENT,
  ephemeral: zookeeper.CreateMode.EPHEMERAL,
  persistent_sequential: zookeeper.CreateMode.PERSISTENT_SEQUENTIAL,
  ephemeral_sequential: zookeeper.CreateMode.EPHEMERAL_SEQUENTIAL,
};

const ERROR_CODES = new Map<number, StoreErrorCode>([
  [zookeeper.Exception.NO_NODE, 'NO_NODE'],
  [zookeeper.Exception.NODE_EXISTS, 'NODE_EXISTS'],
  [zookeeper.Exception.BAD_VERSION, 'BAD_VERSION'],
  [zookeeper.Exception.NOT_EMPTY, 'NOT_EMPTY'],
  [zookeeper.Exception.NO_CHILDREN_FOR_EPHEMERALS, 'NO_CHILDREN_FOR_EPHEMERALS'],
  [zookeeper.Exception.CONNECTION_LOSS, 'CONNECTION_LOSS'],
  [zookeeper.Exception.OPERATION_TIMEOUT, 'CONNECTION_LOSS'],
  [zookeeper.Exception.SESSION_EXPIRED, 'SESSION_EXPIRED'],
]);

const EVENT_TYPES = new Map<number, WatchEventType>([
  [zookeeper.Event.NODE_CREATED, 'created'],
  [zookeeper.Event.NODE_DELETED, 'deleted'],
  [zookeeper.Event.NODE_DATA_CHANGED, 'data_changed'],
  [zookeeper.Event.NODE_CHILDREN_CHANGED, 'children_changed'],
]);

/** How many times deleteRecursive retries a node that gained a child while it was being emptied. */
const DELETE_RECURSIVE_ATTEMPTS = 5;
/** How long close() waits for the server to acknowledge the end of the session. */
const CLOSE_WAIT_MS = 3_000;

/** Reconnection attempts after all servers failed wait a random time up to this (the library's default is 1 s). */
const SPIN_DELAY_MS = 250;

function createClient(hosts: string, sessionTimeoutMs: number, digest: string | undefined): Client {
  const client = zookeeper.createClient(hosts, { sessionTimeout: sessionTimeoutMs, spinDelay: SPIN_DELAY_MS, retries: 0 });
  if (digest !== undefined) client.addAuthInfo('digest', Buffer.from(digest, 'utf8'));
  return client;
}

/** Checks 'user:password' (neither empty); TypeError saying what is wrong, never showing the password. */
export function checkDigest(digest: string): void {
  const colon = digest.indexOf(':');
  if (colon <= 0 || colon === digest.length - 1 || /[\r\n]/.test(digest)) {
    throw new TypeError('ZooKeeper digest credentials must be one line user:password, neither part empty');
  }
}

/** The id ZooKeeper's DigestAuthenticationProvider gives 'user:password': 'user:' + base64(sha1('user:password')). */
export function digestId(digest: string): string {
  return `${digest.slice(0, digest.indexOf(':'))}:${createHash('sha1').update(digest, 'utf8').digest('base64')}`;
}

/** The ACL of every znode created with these credentials: all for the user, read for everyone; none: open. */
function aclsFor(digest: string | undefined): ACL[] {
  const anyone = new zookeeper.Id('world', 'anyone');
  if (digest === undefined) return [new zookeeper.ACL(zookeeper.Permission.ALL, anyone)];
  return [new zookeeper.ACL(zookeeper.Permission.ALL, new zookeeper.Id('digest', digestId(digest))), new zookeeper.ACL(zookeeper.Permission.READ, anyone)];
}

/** The library's connection manager, for the two things its API does not offer: its state and its socket. */
interface ConnectionInternals extends EventEmitter {
  state: number;
  socket?: Socket;
}
const LIBRARY_STATE_CLOSED = -2;
const LIBRARY_STATE_SESSION_EXPIRED = -3;

function internals(client: Client): ConnectionInternals {
  return (client as unknown as { connectionManager: ConnectionInternals }).connectionManager;
}

/** Splits 'hosts/chroot'; the chroot is '/' when absent. */
export function parseConnectString(connectString: string): { hosts: string; chroot: string } {
  const slash = connectString.indexOf('/');
  const hosts = slash === -1 ? connectString : connectString.slice(0, slash);
  const chroot = slash === -1 || slash === connectString.length - 1 ? '/' : connectString.slice(slash);
  if (hosts.length === 0 || hosts.split(',').some((h) => !/^[^:,\s]+(:\d+)?$/.test(h))) {
    throw new TypeError(`Invalid ZooKeeper connect string ${JSON.stringify(connectString)}: expected host:port[,host:port...][/chroot]`);
  }
  try {
    assertValidPath(chroot);
  } catch (err) {
    throw new TypeError(`Invalid chroot in ZooKeeper connect string ${JSON.stringify(connectString)}: ${(err as Error).message}`);
  }
  return { hosts, chroot };
}

function toStoreError(error: unknown, path: string): Error {
  const code = (error as { code?: unknown }).code;
  const mapped = typeof code === 'number' ? ERROR_CODES.get(code) : undefined;
  if (mapped !== undefined) return new StoreError(mapped, path);
  if (code === zookeeper.Exception.NO_AUTH) {
    return new ShardexError(
      'SHX_FORBIDDEN',
      `NO_AUTH at ${path}: ZooKeeper refused the change, this session's credentials do not allow it (the znode was created with an ACL for a ZooKeeper digest user): give every node and reader the same --zk-digest-file (or SHARDEX_ZK_DIGEST_FILE)`,
      { cause: error },
    );
  }
  if (error instanceof Error) return error;
  return new Error(`ZooKeeper error at ${path}: ${String(error)}`);
}

function isCode(err: unknown, code: StoreErrorCode): boolean {
  return err instanceof StoreError && err.code === code;
}

type WatchKind = 'data' | 'child';
type Callback<T> = (error: unknown, value?: T) => void;

/** One library client = one ZooKeeper session, with what this store tracks for it. */
class ClientSession {
  /** Rejecters of operations not yet answered, so that expiry or close can fail them. */
  private readonly inflight = new Set<(fail: (path: string) => Error) => void>();
  private readonly watchers: Record<WatchKind, Map<string, Set<Watcher>>> = { data: new Map(), child: new Map() };
  private readonly dispatchers: Record<WatchKind, Map<string, (event: ZooKeeperEvent) => void>> = { data: new Map(), child: new Map() };
  /** When the server last answered: the watchdog's measure of a live connection. */
  lastHeard = Date.now();

  constructor(
    readonly client: Client,
    private readonly deliver: (watcher: Watcher, event: WatchEvent) => void,
  ) {}

  get id(): string {
    return `0x${this.client.getSessionId().toString('hex')}`;
  }

  /** Runs one library call; `path` (relative) names the node in errors. */
  run<T>(path: string, start: (client: Client, done: Callback<T>) => void): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      const abort = (fail: (path: string) => Error) => {
        if (settled) return;
        settled = true;
        this.inflight.delete(abort);
        reject(fail(path));
      };
      this.inflight.add(abort);
      const done: Callback<T> = (error, value) => {
        if (settled) return;
        settled = true;
        this.inflight.delete(abort);
        if (error) {
          const mapped = toStoreError(error, path);
          if (!isCode(mapped, 'CONNECTION_LOSS') && !isCode(mapped, 'SESSION_EXPIRED')) this.lastHeard = Date.now();
          reject(mapped);
        } else {
          this.lastHeard = Date.now();
          resolve(value as T);
        }
      };
      try {
        start(this.client, done);
      } catch (err) {
        abort(() => (err instanceof Error ? err : new Error(String(err))));
      }
    });
  }

  /** Fails every operation still waiting for a reply (the library forgets some when a session ends). */
  abortAll(fail: (path: string) => Error): void {
    for (const abort of [...this.inflight]) abort(fail);
  }

  /** The one library watcher for (kind, absolute path); the library dedups it by identity. */
  dispatcher(kind: WatchKind, absolute: string, relative: string): (event: ZooKeeperEvent) => void {
    let dispatch = this.dispatchers[kind].get(absolute);
    if (dispatch === undefined) {
      dispatch = (event) => this.fire(kind, absolute, relative, event);
      this.dispatchers[kind].set(absolute, dispatch);
    }
    return dispatch;
  }

  /** Records `watcher` once the library has confirmed the watch (i.e. in the reply callback). */
  watch(kind: WatchKind, absolute: string, watcher: Watcher): void {
    const set = this.watchers[kind].get(absolute);
    if (set === undefined) this.watchers[kind].set(absolute, new Set([watcher]));
    else set.add(watcher);
  }

  private fire(kind: WatchKind, absolute: string, relative: string, event: ZooKeeperEvent): void {
    const set = this.watchers[kind].get(absolute);
    this.watchers[kind].delete(absolute);
    this.dispatchers[kind].delete(absolute);
    const type = EVENT_TYPES.get(event.getType());
    if (set === undefined || type === undefined) return;
    for (const watcher of set) this.deliver(watcher, { type, path: relative });
  }
}

type Connection = 'connected' | 'disconnected' | 'expired' | 'closed';

export class ZooKeeperStore implements ZNodeStore {
  private session: ClientSession;
  private connection: Connection = 'connected';
  private readonly listeners = new Set<(state: SessionState) => void>();
  private readonly watchdog: NodeJS.Timeout;
  private lastTick = Date.now();
  private lastProbe = 0;
  /** The ACL every created znode gets. */
  private readonly acls: ACL[];
  /** Since when no session has been usable (disconnected, or expired and not yet replaced). */
  private unconnectedSince = 0;
  private closing: Promise<void> | undefined;

  private constructor(
    private readonly hosts: string,
    private readonly chroot: string,
    private readonly options: ZooKeeperStoreOptions,
    client: Client,
  ) {
    this.acls = aclsFor(options.digest);
    this.session = this.adopt(client);
    this.watchdog = setInterval(() => this.checkConnection(), this.checkPeriodMs());
    this.watchdog.unref();
  }

  /**
   * Connects to ZooKeeper and creates the chroot if it is missing; resolves once the session is
   * up. Rejects, naming the connect string, when no server answers within `connectTimeoutMs`.
   */
  static async connect(options: ZooKeeperStoreOptions): Promise<ZooKeeperStore> {
    const { hosts, chroot } = parseConnectString(options.connectString);
    if (!(options.sessionTimeoutMs > 0)) throw new TypeError(`sessionTimeoutMs must be positive, got ${options.sessionTimeoutMs}`);
    if (options.digest !== undefined) checkDigest(options.digest);
    const timeoutMs = options.connectTimeoutMs ?? Math.max(options.sessionTimeoutMs, 10_000);
    const client = createClient(hosts, options.sessionTimeoutMs, options.digest);
    const connected = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      client.once('connected', () => {
        clearTimeout(timer);
        resolve(true);
      });
      client.connect();
    });
    if (!connected) {
      await closeClient(client);
      throw new Error(`Could not connect to ZooKeeper at ${options.connectString} within ${timeoutMs} ms (is it running and reachable?)`);
    }
    const store = new ZooKeeperStore(hosts, chroot, options, client);
    if (chroot !== '/') {
      try {
        await store.mkdirpAbsolute(chroot, chroot);
      } catch (err) {
        await store.close();
        throw new Error(`Could not create the chroot ${chroot} on ZooKeeper at ${options.connectString}: ${(err as Error).message}`, { cause: err });
      }
    }
    options.logger?.info(
      { sessionId: store.sessionId, connectString: options.connectString, sessionTimeoutMs: store.sessionTimeoutMs, ...(options.digest !== undefined && { digestUser: options.digest.slice(0, options.digest.indexOf(':')) }) },
      'ZooKeeper session established',
    );
    return store;
  }

  get sessionId(): string {
    return this.session.id;
  }

  /** The session timeout the server granted (it may differ from the one requested). */
  get sessionTimeoutMs(): number {
    return this.session.client.getSessionTimeout() || this.options.sessionTimeoutMs;
  }

  create(path: string, data: Buffer, mode: CreateMode): Promise<string> {
    return this.op<string>(path, (client, done) => {
      assertValidData(data, path);
      client.create(this.absolute(path), data, this.acls, MODES[mode], done);
    }).then((actual) => this.relative(actual));
  }

  async mkdirp(path: string): Promise<void> {
    this.usable(path);
    await this.mkdirpAbsolute(this.absolute(path), path);
  }

  async get(path: string, watch?: Watcher): Promise<NodeData | undefined> {
    const absolute = this.absolute(path);
    for (;;) {
      try {
        const session = this.usable(path);
        const dispatch = watch && session.dispatcher('data', absolute, path);
        const node = await session.run<NodeData>(path, (client, done) => {
          const reply = (error: unknown, data?: Buffer, stat?: Stat) => {
            if (!error && watch) session.watch('data', absolute, watch);
            done(error, error ? undefined : { data: data ?? Buffer.alloc(0), version: stat?.version ?? 0 });
          };
          if (dispatch) client.getData(absolute, dispatch, reply);
          else client.getData(absolute, reply);
        });
        return node;
      } catch (err) {
        if (!isCode(err, 'NO_NODE')) throw err;
      }
      // Absent: ZooKeeper sets no watch for a failed getData, so leave an exists-watch instead.
      if (watch === undefined || !(await this.exists(path, watch))) return undefined;
    }
  }

  set(path: string, data: Buffer, version?: number): Promise<number> {
    return this.op<Stat>(path, (client, done) => {
      assertValidData(data, path);
      client.setData(this.absolute(path), data, version ?? -1, done);
    }).then((stat) => stat.version);
  }

  delete(path: string, version?: number): Promise<void> {
    return this.op<void>(path, (client, done) => client.remove(this.absolute(path), version ?? -1, (error) => done(error)));
  }

  async deleteRecursive(path: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      let names: string[];
      try {
        names = await this.children(path);
      } catch (err) {
        if (isCode(err, 'NO_NODE')) return;
        throw err;
      }
      await Promise.all(names.map((name) => this.deleteRecursive(path === '/' ? `/${name}` : `${path}/${name}`)));
      // '/' is the chroot: its subtree goes, the chroot itself stays (as with MemoryZNodeServer).
      if (path === '/') return;
      try {
        await this.delete(path);
        return;
      } catch (err) {
        if (isCode(err, 'NO_NODE')) return;
        if (!isCode(err, 'NOT_EMPTY') || attempt >= DELETE_RECURSIVE_ATTEMPTS) throw err;
      }
    }
  }

  async children(path: string, watch?: Watcher): Promise<string[]> {
    const absolute = this.absolute(path);
    const session = this.usable(path);
    const dispatch = watch && session.dispatcher('child', absolute, path);
    return session.run<string[]>(path, (client, done) => {
      const reply = (error: unknown, children?: string[]) => {
        if (!error && watch) session.watch('child', absolute, watch);
        done(error, children ?? []);
      };
      if (dispatch) client.getChildren(absolute, dispatch, reply);
      else client.getChildren(absolute, reply);
    });
  }

  async exists(path: string, watch?: Watcher): Promise<boolean> {
    const absolute = this.absolute(path);
    const session = this.usable(path);
    const dispatch = watch && session.dispatcher('data', absolute, path);
    return session.run<boolean>(path, (client, done) => {
      const reply = (error: unknown, stat?: Stat | null) => {
        if (!error && watch) session.watch('data', absolute, watch);
        done(error, stat !== null && stat !== undefined);
      };
      if (dispatch) client.exists(absolute, dispatch, reply);
      else client.exists(absolute, reply);
    });
  }

  onSessionState(listener: (state: SessionState) => void): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }

  close(): Promise<void> {
    if (this.closing) return this.closing;
    this.connection = 'closed';
    this.listeners.clear();
    clearInterval(this.watchdog);
    const session = this.session;
    this.closing = closeClient(session.client).then(() => session.abortAll((path) => new StoreError('CLOSED', path, 'CLOSED: the store was closed')));
    return this.closing;
  }

  // --- internals ---------------------------------------------------------------------------

  private op<T>(path: string, start: (client: Client, done: Callback<T>) => void): Promise<T> {
    try {
      return this.usable(path).run(path, start);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** The session to run an operation on, or the error that says why there is none right now. */
  private usable(path: string): ClientSession {
    assertValidPath(path);
    switch (this.connection) {
      case 'closed':
        throw new StoreError('CLOSED', path, `CLOSED: the store was closed (${path})`);
      case 'disconnected':
        throw new StoreError('CONNECTION_LOSS', path, `CONNECTION_LOSS: session ${this.session.id} is disconnected from ZooKeeper (${path})`);
      case 'expired':
        throw new StoreError('SESSION_EXPIRED', path, `SESSION_EXPIRED: the session expired and a new one is not yet established (${path})`);
      case 'connected':
        return this.session;
    }
  }

  private async mkdirpAbsolute(absolute: string, path: string): Promise<void> {
    const session = this.usable(path);
    const exists = await session.run<boolean>(path, (client, done) => client.exists(absolute, (error, stat) => done(error, !!stat)));
    if (exists) return;
    let current = '';
    for (const name of absolute.slice(1).split('/')) {
      current = `${current}/${name}`;
      const prefix = current;
      try {
        await this.usable(path).run<string>(path, (client, done) => client.create(prefix, Buffer.alloc(0), this.acls, zookeeper.CreateMode.PERSISTENT, done));
      } catch (err) {
        if (!isCode(err, 'NODE_EXISTS')) throw err instanceof StoreError ? new StoreError(err.code, this.relative(prefix)) : err;
      }
    }
  }

  private absolute(path: string): string {
    return underChroot(this.chroot, path);
  }

  private relative(path: string): string {
    return fromChroot(this.chroot, path);
  }

  /** Wires a library client's events to this store; events of a client that is no longer current are ignored. */
  private adopt(client: Client): ClientSession {
    const session = new ClientSession(client, (watcher, event) => this.call(watcher, event));
    client.on('connected', () => this.onConnected(session));
    client.on('disconnected', () => this.onDisconnected(session));
    client.on('expired', () => this.onExpired(session));
    return session;
  }

  private onConnected(session: ClientSession): void {
    if (session !== this.session || this.connection === 'closed' || this.connection === 'connected') return;
    const after = this.connection;
    this.connection = 'connected';
    session.lastHeard = Date.now();
    if (after === 'expired') {
      this.options.logger?.info({ sessionId: session.id }, 'ZooKeeper session re-established after expiry');
    }
    this.report('connected');
  }

  private onDisconnected(session: ClientSession): void {
    if (session !== this.session || this.connection !== 'connected') return;
    this.connection = 'disconnected';
    this.unconnectedSince = Date.now();
    this.options.logger?.warn({ sessionId: session.id, connectString: this.options.connectString }, 'ZooKeeper connection lost');
    this.report('disconnected');
  }

  private onExpired(session: ClientSession): void {
    if (session !== this.session || this.connection === 'closed') return;
    this.options.logger?.warn({ sessionId: session.id }, 'ZooKeeper session expired; opening a new one');
    this.connection = 'expired';
    this.unconnectedSince = Date.now();
    session.abortAll((path) => new StoreError('SESSION_EXPIRED', path));
    // The library closes an expired client itself once the server hangs up; make sure it does.
    setTimeout(() => internals(session.client).socket?.destroy(), 1_000).unref();
    this.report('expired');
    if (this.connection !== 'expired') return; // a listener closed the store
    this.session = this.adopt(createClient(this.hosts, this.options.sessionTimeoutMs, this.options.digest));
    this.session.client.connect();
  }

  /** Checks often enough to notice 2/3 of the session timeout of silence well before the server expires the session. */
  private checkPeriodMs(): number {
    return Math.max(50, Math.floor(this.sessionTimeoutMs / 10));
  }

  /** The Java client's read timeout: a connection silent for 2/3 of the session timeout is dropped. */
  private checkConnection(): void {
    const now = Date.now();
    // After an event-loop stall, replies may be waiting unread: judge the connection next time.
    const stalled = now - this.lastTick > 3 * this.checkPeriodMs();
    this.lastTick = now;
    const session = this.session;
    if (this.connection === 'disconnected' || this.connection === 'expired') {
      // The library waits forever for a handshake that a half-open server never answers: retry.
      if (now - this.unconnectedSince > this.sessionTimeoutMs) {
        this.unconnectedSince = now;
        internals(session.client).socket?.destroy();
      }
      return;
    }
    if (this.connection !== 'connected') return;
    if (stalled) {
      session.lastHeard = now;
      return;
    }
    if (now - session.lastHeard > (2 * this.sessionTimeoutMs) / 3) {
      this.options.logger?.warn({ sessionId: session.id, silentMs: now - session.lastHeard }, 'No reply from ZooKeeper; dropping the connection');
      internals(session.client).socket?.destroy();
      return;
    }
    if (now - this.lastProbe >= this.sessionTimeoutMs / 3) {
      this.lastProbe = now;
      session.client.exists('/', (error) => {
        if (!error) session.lastHeard = Date.now();
      });
    }
  }

  private report(state: SessionState): void {
    for (const listener of [...this.listeners]) this.call(listener, state);
  }

  private call<T>(fn: (arg: T) => void, arg: T): void {
    try {
      fn(arg);
    } catch (err) {
      const logger = this.options.logger;
      if (logger) logger.error({ err, sessionId: this.session.id }, 'znode store listener threw');
      else process.emitWarning(`znode store listener threw: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    }
  }
}

/** Closes a library client and waits (bounded) until it has let go of its connection. */
function closeClient(client: Client): Promise<void> {
  const connection = internals(client);
  // An expired client closes itself and must not be sent a close request on its dead socket.
  if (connection.state === LIBRARY_STATE_CLOSED || connection.state === LIBRARY_STATE_SESSION_EXPIRED) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const finish = () => {
      clearTimeout(timer);
      connection.off('state', onState);
      resolve();
    };
    const onState = (state: number) => {
      if (state === LIBRARY_STATE_CLOSED) finish();
    };
    // If the server never answers, the library still ends the connection by itself (it does not
    // reconnect once closing); we only stop waiting for it.
    const timer = setTimeout(finish, CLOSE_WAIT_MS);
    connection.on('state', onState);
    client.close();
  });
}
