// The znode store: the small subset of ZooKeeper that cluster coordination needs. The
// cluster logic (live nodes, collection state, elections, terms) is written once against
// this interface; `MemoryZNodeServer` (embedded, in-process) and `ZooKeeperStore`
// (node-zookeeper-client) implement it with the same semantics:
// - paths are absolute ('/a/b'), relative to the store's chroot;
// - ephemeral nodes belong to the session that created them and vanish when it closes or expires;
// - sequential nodes get a 10-digit, zero-padded, per-parent increasing suffix;
// - watches are one-shot and fire once for the first change after they were set;
// - versions start at 0 and grow by one on each set; a set/delete with an expected
//   version fails with BAD_VERSION when it differs.

export type CreateMode = 'persistent' | 'ephemeral' | 'persistent_sequential' | 'ephemeral_sequential';

export type WatchEventType = 'created' | 'deleted' | 'data_changed' | 'children_changed';

export interface WatchEvent {
  readonly type: WatchEventType;
  readonly path: string;
}

export type Watcher = (event: WatchEvent) => void;

export interface NodeData {
  readonly data: Buffer;
  readonly version: number;
}

/** Session states, as ZooKeeper reports them to a client. */
export type SessionState = 'connected' | 'disconnected' | 'expired';

export type StoreErrorCode = 'NO_NODE' | 'NODE_EXISTS' | 'BAD_VERSION' | 'NOT_EMPTY' | 'NO_CHILDREN_FOR_EPHEMERALS' | 'CONNECTION_LOSS' | 'SESSION_EXPIRED' | 'CLOSED';

export class StoreError extends Error {
  readonly code: StoreErrorCode;
  readonly path: string;
  constructor(code: StoreErrorCode, path: string, message?: string) {
    super(message ?? `${code} at ${path}`);
    this.name = 'StoreError';
    this.code = code;
    this.path = path;
  }
}

export interface ZNodeStore {
  /** Identifies the session (ephemeral owner); changes after expiry and reconnect. */
  readonly sessionId: string;
  /** Creates a node and returns its actual path (with the sequence suffix for sequential modes). */
  create(path: string, data: Buffer, mode: CreateMode): Promise<string>;
  /** Creates `path` and any missing parents as persistent empty nodes; no error if it exists. */
  mkdirp(path: string): Promise<void>;
  /** The node's data and version, or undefined when it does not exist. The watch fires on data change or delete (or create, if absent). */
  get(path: string, watch?: Watcher): Promise<NodeData | undefined>;
  /** Sets data; with `version`, only if the node is at that version. Returns the new version. */
  set(path: string, data: Buffer, version?: number): Promise<number>;
  /** Deletes a node (it must have no children); with `version`, only at that version. */
  delete(path: string, version?: number): Promise<void>;
  /** Deletes a node and everything below it; no error if absent. */
  deleteRecursive(path: string): Promise<void>;
  /** Child names (not paths), unsorted; the watch fires when a child is added or removed, or the node deleted. Throws NO_NODE. */
  children(path: string, watch?: Watcher): Promise<string[]>;
  /** Whether the node exists; the watch fires on create, delete or data change. */
  exists(path: string, watch?: Watcher): Promise<boolean>;
  /** Session state changes. Returns an unsubscribe function. */
  onSessionState(listener: (state: SessionState) => void): () => void;
  /** Closes the session: its ephemeral nodes are removed. */
  close(): Promise<void>;
}

/** The part of a pino logger the stores use to report listener failures and session changes. */
export interface StoreLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** Throws a TypeError unless `path` is a valid znode path (the rules of ZooKeeper's PathUtils). */
export function assertValidPath(path: string): void {
  if (typeof path !== 'string' || path.length === 0 || path[0] !== '/') {
    throw new TypeError(`Invalid znode path ${JSON.stringify(path)}: it must start with '/'`);
  }
  if (path.length === 1) return;
  if (path.endsWith('/')) throw new TypeError(`Invalid znode path ${JSON.stringify(path)}: it must not end with '/'`);
  for (const name of path.slice(1).split('/')) {
    if (name === '') throw new TypeError(`Invalid znode path ${JSON.stringify(path)}: empty node name`);
    if (name === '.' || name === '..') throw new TypeError(`Invalid znode path ${JSON.stringify(path)}: relative names are not allowed`);
    if (name.includes('\u0000')) throw new TypeError(`Invalid znode path ${JSON.stringify(path)}: NUL character`);
  }
}

/**
 * The most data a znode may hold here: ZooKeeper refuses a request over its jute.maxbuffer
 * (0xfffff bytes by default, path and headers included), so the stores stop short of it.
 */
export const MAX_DATA_BYTES = 1_000_000;

/** Throws a RangeError when `data` is too large for a znode (ZooKeeper refuses it). */
export function assertValidData(data: Buffer, path: string): void {
  if (data.length > MAX_DATA_BYTES) {
    throw new RangeError(`znode data for ${path} is ${data.length} bytes; ZooKeeper takes at most ${MAX_DATA_BYTES}`);
  }
}

/** The server path of `path` under `chroot` ('/' = no chroot). */
export function underChroot(chroot: string, path: string): string {
  if (chroot === '/') return path;
  return path === '/' ? chroot : chroot + path;
}

/** The path, relative to `chroot`, of a server path under it. */
export function fromChroot(chroot: string, path: string): string {
  if (chroot === '/') return path;
  return path === chroot ? '/' : path.slice(chroot.length);
}
