// The smart client's public vocabulary: how it connects, per-request options, and what its
// listeners are told. Implementation lives beside this file; this one holds only shapes.
import type { Logger } from 'pino';
import type { Coordinator } from '../coordination/index.js';
import type { BackoffPolicy } from '../distrib/retry.js';
import type { ServedBy } from '../read/eventual.js';

/** The `fetch` the client calls (injectable so tests can fake the network). */
export type FetchLike = (url: string, init: RequestInit) => Promise<Response>;

/** PEM text (or its bytes) of the client's TLS settings. */
export interface ClientTls {
  readonly ca?: string | Uint8Array;
  readonly cert?: string | Uint8Array;
  readonly key?: string | Uint8Array;
}

/** Timers the failover machinery uses (injectable so tests can drive them). */
export interface Scheduler {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

interface CommonClientOptions {
  /** Suspension of a host that failed with a host-unavailable error, whole ms >= 0 (DMSDK default: 10 min). */
  readonly suspendTimeForHostUnavailableMs?: number;
  /** A job stops rather than drop below this many live hosts (DMSDK default: 1; gateway: must be 1). */
  readonly minHosts?: number;
  /**
   * Error codes (matched through the whole `cause` chain) that mean "host unavailable". Replaces
   * the default list (DEFAULT_HOST_UNAVAILABLE_CODES); an entry ending in `*` matches a prefix.
   */
  readonly hostUnavailableCodes?: readonly string[];
  /** Retries of one request on a retryable failure (5xx, 429, connection errors, no answer). */
  readonly maxRetries?: number;
  /** Pause after the n-th failed attempt; default exponential 100 ms .. 5 s, each pause up to 20% shorter at random. */
  readonly backoff?: BackoffPolicy;
  /** Timeout of one HTTP attempt (default 60 s). */
  readonly requestTimeoutMs?: number;
  /** Parallel requests of one add/delete (p-limit bound; default 8). */
  readonly concurrency?: number;
  /** Cluster state is re-read this often (default 30 s; 0 = only on demand). */
  readonly refreshIntervalMs?: number;
  readonly logger?: Logger;
  readonly fetch?: FetchLike;
  readonly scheduler?: Scheduler;
  /** API key sent as `Authorization: Bearer KEY` to every node (needed when nodes run with --api-keys). */
  readonly apiKey?: string;
  /**
   * TLS towards nodes that run with --tls-cert: `ca` (PEM) to trust for https and for gRPC to
   * readers (absent: the system's CAs); `cert` and `key` (PEM) to present where gRPC is mutual TLS
   * (--tls-ca: eventual reads go to readers over it). A given `fetch` does its own https.
   */
  readonly tls?: ClientTls;
  /** Scan-server selector profiles (Accumulo's JSON) for eventual reads; default: Accumulo's default. */
  readonly selectorProfiles?: unknown;
}

/** Connect through the HTTP API of any of these nodes (`GET /api/cluster`). */
export interface UrlClientOptions extends CommonClientOptions {
  readonly urls: string | readonly string[];
  /**
   * `direct` (default): the client talks to each node itself (leader routing, host suspension).
   * `gateway`: `urls` is one address for the whole cluster (a load balancer, a Kubernetes
   * Service): every request goes to it, it is never suspended, and failures are retried by the
   * retry policy only (DMSDK's GATEWAY connection).
   */
  readonly connection?: 'direct' | 'gateway';
}

/** Connect by watching ZooKeeper (`host:port[,host:port]/chroot`). */
export interface ZkClientOptions extends CommonClientOptions {
  readonly zk: string;
  readonly zkSessionTimeoutMs?: number;
}

/** Watch a coordinator the caller made (e.g. over an embedded znode store). */
export interface CoordinatorClientOptions extends CommonClientOptions {
  readonly coordinator: Coordinator;
}

export type ShardexClientOptions = UrlClientOptions | ZkClientOptions | CoordinatorClientOptions;

export type { ServedBy };

export type Consistency = 'immediate' | 'eventual';

/** Options every operation takes. */
export interface RequestOptions {
  /** Deadline for the whole operation, retries included. */
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
}

export interface ReadOptions extends RequestOptions {
  /** `immediate` (default): the shard leader; `eventual`: a snapshot reader chosen by the selector. */
  readonly consistency?: Consistency;
  /** Picks the selector profile that lists it (Accumulo's scan_type). */
  readonly scanType?: string;
  /**
   * An eventual read must come from a snapshot at least this new, else the leader serves: one
   * version for every shard, or `shard1:v1,shard2:v2`.
   */
  readonly minVersion?: number | string;
  /**
   * Read-balancer priority, passed to the node, which holds the read to the priority's slots. An
   * eventual read with a priority goes through a node (its eventual router picks the reader).
   */
  readonly priority?: string;
}

export interface WriteOptions extends RequestOptions {
  readonly minRf?: number;
}

export interface SearchOptions extends ReadOptions {
  readonly filter?: string;
  readonly sort?: string;
  readonly offset?: number;
  readonly limit?: number;
  readonly fields?: readonly string[];
  /** Count `total` exactly (true, the default), at least up to a number, or false (Elasticsearch's track_total_hits). */
  readonly trackTotalHits?: boolean | number;
}

export interface AddResult {
  readonly added: number;
  /** Lowest achieved replication factor over the shards written. */
  readonly rf: number;
  readonly versions: Record<string, number>;
}

export interface DeleteResult {
  readonly deleted: number;
  readonly versions: Record<string, number>;
}

export interface SearchHit {
  readonly id: string;
  readonly score: number;
  readonly [field: string]: unknown;
}

export interface SearchResult {
  /** With `totalRelation: 'gte'`, a lower bound: the count stopped past `trackTotalHits`. */
  readonly total: number;
  readonly totalRelation?: 'gte';
  readonly hits: readonly SearchHit[];
  readonly shards: { readonly total: number; readonly ok: number; readonly failed: number };
  /** Eventual reads: who served each shard (reader, snapshot, attempts, fallback to the leader). */
  readonly servedBy?: Readonly<Record<string, ServedBy>>;
}

/** A document as read back: its fields plus `_version_` and `_shard_`. */
export type StoredDoc = Record<string, unknown> & { readonly id: string; readonly _version_: number; readonly _shard_: string };

// ---- failover events ------------------------------------------------------------------------

export interface HostSuspendedEvent {
  readonly host: string;
  readonly error: unknown;
  /** Hosts still usable after this suspension. */
  readonly remaining: readonly string[];
  /** When the state will be read again and the host may return (epoch ms). */
  readonly until: number;
}

export interface HostsRestoredEvent {
  /** Hosts that were suspended and are listed again. */
  readonly restored: readonly string[];
  /** Hosts that were suspended and are no longer listed. */
  readonly gone: readonly string[];
}

/** One failed attempt. */
export interface RetryInfo {
  /** The host the attempt went to ('' for eventual reads, which pick readers themselves). */
  readonly host: string;
  readonly error: unknown;
  /** The attempt that failed (1 = the first). */
  readonly attempt: number;
  readonly delayMs: number;
  /** The failure counts as the host being unavailable (host-unavailable list, or no answer in time). */
  readonly hostUnavailable: boolean;
  /** This failure suspended the host. */
  readonly suspended: boolean;
}

/** Where a collection's leaders are after a rebalance (POST /api/collections/:c/rebalance-leaders). */
export interface LeaderRebalance {
  readonly collection: string;
  /** Every shard is led by its target (or has no fit replica to move to). */
  readonly settled: boolean;
  /** The most shards one node should lead: ceil(shards / nodes with a fit replica). */
  readonly bound: number;
  readonly leadersPerNode: Record<string, number>;
  readonly shards: ReadonlyArray<{ readonly shard: string; readonly leader: string | null; readonly target: string | null; readonly preferredLeader: string | null }>;
  /** Which shards have not moved yet, and why that may be. */
  readonly message: string;
}
