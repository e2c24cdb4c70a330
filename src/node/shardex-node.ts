// The node process: hosts shard replicas, serves HTTP for clients and gRPC for peers, and
// follows the cluster state to open, lead, follow and close its replicas.
import { mkdir, rm, type FileHandle } from 'node:fs/promises';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { FastifyInstance } from 'fastify';
import { leaderTargets, rebalancedPreferences, type CollectionSpec, type CollectionState, type Coordinator, type NodeInfo } from '../coordination/index.js';
import { CommandDistributor } from '../distrib/distributor.js';
import { checkId } from '../distrib/documents.js';
import type { CopyMessage, CopyShardRequest, ShardUpdate, ShardUpdateResult, WireOp } from '../transport/index.js';
import { SearchIndexBinding, ShardReplica } from '../distrib/replica.js';
import { DEFAULT_CHECKPOINT_POLICY, PersistedIndex, type CheckpointPolicy, type CommittedIndex, type CommittedSegments } from '../distrib/index-persistence.js';
import { ShardStatsCache } from '../distrib/shard-stats-cache.js';
import { MergeThread, schemaFingerprint } from '../distrib/segment-merge.js';
import { distributedSearch, servePhase, type SearchParams, type SearchResponse, type ShardPhaseRequest } from '../distrib/search.js';
import { parseFieldList, parseSchema, projectFields, type CollectionSchema, type ReplicaSearcher, type StoredDoc } from '../index/index.js';
import { canPeerSync, holdsSameLog, peerSync, syncFrom, syncStartOf, type PeerLogInfo, type RecoveryProgress, type SyncSource } from '../distrib/recovery.js';
import { mayStand, type ShardEffect } from '../distrib/shard-state.js';
import { Deadline, nodeRetryBackoff, retry, type BackoffPolicy } from '../distrib/retry.js';
import { MAX_REQUEST_TIMEOUT_MS, sleep } from '../distrib/deadline.js';
import { UpdateProcessor, routerOf, type UpdateResponse } from '../distrib/update-processor.js';
import { ShardexError } from '../errors.js';
import { READ_BALANCE_CONFIG, PriorityName, eraseSettings, parseStoredSettings, storedSettings, upsertSetting } from '../read/balance-settings.js';
import { PRIMARY_TARGET, allowedTargets, type BalanceSetting, type ShardNeed, type SlotRow } from '../read/balancer.js';
import { ReadBalancerRuntime, coordinatorSettingsSource, type CancelSignal, type ReadPermit } from '../read/balancer-runtime.js';
import { EventualRouter, type ServedBy } from '../read/eventual.js';
import { DEFAULT_GROUP } from '../read/profiles.js';
import { ReadPath, ReaderGroupRouters, type ReadOptions as PathReadOptions, type ReadTransport } from '../read/read-path.js';
import { ReaderSelector } from '../read/selector.js';
import { Mutex } from '../distrib/mutex.js';
import { DEFAULT_DURABILITY, ReplicaStore, type CommitPoint, type Doc, type Durability, type LogDigest, type StoreWrite, type StoredEntry } from '../ulog/index.js';
import { PeerClients, PeerServer, portError, type TlsMaterial } from '../transport/index.js';
import { buildHttp, type HttpOptions } from './http/app.js';
import { readAccessOf } from './http/auth.js';
import type { LeaderRebalance } from '../client/types.js';
import { nodeMetrics, type NodeMetrics } from './metrics.js';
import { checkpointWork, MergeGate, mergeHold } from './merge-gate.js';
import { LeaderBalance, fitInState, handoversOf, type LeadCheck } from './leader-balance.js';

export interface ShardexNodeOptions {
  readonly name: string;
  /** Address to bind (0.0.0.0 = every interface). */
  readonly host?: string;
  /** Address peers and clients reach this node at (default: host). */
  readonly advertiseHost?: string;
  readonly httpPort: number;
  readonly grpcPort: number;
  readonly dataDir: string;
  readonly coordinator: Coordinator;
  readonly logger: Logger;
  /** Largest accepted HTTP body (Elasticsearch's http.max_content_length: 100 MiB). */
  readonly bodyLimit?: number;
  /** The secret every gRPC call between nodes and readers carries (`--cluster-secret-file`); none: calls are not checked. */
  readonly clusterSecret?: string;
  /** TLS of the HTTP and gRPC servers and of the gRPC clients (`--tls-cert`, `--tls-key`); with its `ca`, gRPC is mutual TLS (`--tls-ca`). */
  readonly tls?: TlsMaterial;
  /** More HTTP settings (authentication, limits: see http/app.ts), given to the HTTP layer as they are. */
  readonly http?: Partial<Omit<HttpOptions, 'logger'>>;
  readonly maxInFlight?: number;
  readonly backoff?: BackoffPolicy;
  readonly forwardRetries?: number;
  readonly replicaRetries?: number;
  readonly logRetention?: number;
  /** LevelDB write buffer per replica, MiB (default LevelDB's 4). */
  readonly writeBufferMb?: number;
  /** LevelDB's block compression in the replicas' stores (default off: see ReplicaStoreOptions.compression). */
  readonly storeCompression?: boolean;
  /** Parsed documents each replica's store keeps for pages of hits (ReplicaStoreOptions.docCacheSize). */
  readonly docCacheSize?: number;
  readonly callTimeoutMs?: number;
  /** Scan-server selector profiles (Accumulo's JSON); default: Accumulo's default profile. */
  readonly selectorProfiles?: unknown;
  /** How long a delete's tombstone is kept (Elasticsearch's gc_deletes); default 60 s. */
  readonly deleteRetentionMs?: number;
  /** When replicas write their index segment, and the merge policy (default DEFAULT_CHECKPOINT_POLICY: 10,000 changes, or any change 0.3 s after the last checkpoint). */
  readonly checkpointPolicy?: Partial<CheckpointPolicy>;
  /** Observes every batch a replica writes to disk (tests check sync-before-ack with it). */
  readonly onStoreWrite?: (replica: string, write: StoreWrite) => void;
  /** The read balancer of this node (issue 12). */
  readonly readBalance?: ReadBalanceOptions;
}

export interface ReadBalanceOptions {
  /** Priority of reads that name none (`--read-priority`); absent: such reads run unbalanced. */
  readonly defaultPriority?: string;
  /** Reads that may wait in each priority's queue (`--read-queue-size`, default 100). */
  readonly queueSize?: number;
  /** How long a read may wait in its queue unless it gives `timeoutMs` (default 30 s). */
  readonly timeoutMs?: number;
  /** How often the settings in coordination are re-read (default 1 s). */
  readonly pollMs?: number;
}

/** How often replicas' index checkpoint policies are checked: at most this long apart... */
const CHECKPOINT_CHECK_MS = 250;
/** ...and at least twice per checkpoint interval (a shorter `maxAgeMs` is checked as often as it asks). */
export function checkpointCheckMs(maxAgeMs: number): number {
  return Math.max(25, Math.min(CHECKPOINT_CHECK_MS, Math.floor(maxAgeMs / 2)));
}
/** The longest merges wait in a row for replicas coming up (merge-gate.ts). */
const MERGE_HOLD_MAX_MS = 60_000;

export const DEFAULT_READ_QUEUE_SIZE = 100;
export const DEFAULT_READ_TIMEOUT_MS = 30_000;

/** Checks the node's read-balance options; messages name the flag. */
export function checkReadBalanceOptions(o: ReadBalanceOptions = {}): void {
  if (o.defaultPriority !== undefined && !PriorityName.safeParse(o.defaultPriority).success) {
    throw new ShardexError('SHX_BAD_CONFIG', `readBalance.defaultPriority (--read-priority) must match [A-Za-z0-9_.-]{1,64}, got ${JSON.stringify(o.defaultPriority)}`);
  }
  if (o.queueSize !== undefined && (!Number.isInteger(o.queueSize) || o.queueSize < 0 || o.queueSize > 1_000_000)) {
    throw new ShardexError('SHX_BAD_CONFIG', `readBalance.queueSize (--read-queue-size) must be an integer from 0 to 1000000, got ${o.queueSize}`);
  }
  if (o.timeoutMs !== undefined && (!Number.isInteger(o.timeoutMs) || o.timeoutMs < 1 || o.timeoutMs > MAX_REQUEST_TIMEOUT_MS)) {
    throw new ShardexError('SHX_BAD_CONFIG', `readBalance.timeoutMs must be an integer from 1 to ${MAX_REQUEST_TIMEOUT_MS}, got ${o.timeoutMs}`);
  }
}

/** What a read tells the balancer, besides where it reads. */
export interface BalancedRead {
  /** The read's priority (`priority=`); absent: the node's default priority. */
  readonly priority?: string;
  /** The read's timeout, ms: time in the queue counts against it (default readBalance.timeoutMs). */
  readonly timeoutMs?: number;
  /**
   * Makes a signal that fires when the HTTP response has ended or its client went away: a
   * balanced read keeps its slots until then (without one, until its result is ready). Called
   * only for a read that is balanced: unbalanced reads never pay for a signal.
   */
  readonly endSignal?: () => CancelSignal;
}

/** The targets of an `immediate` read's shards: one list for them all. */
const PRIMARY_ONLY: readonly string[] = Object.freeze([PRIMARY_TARGET]);

/** The permit of a read that no setting balances: it routes as before and holds nothing. */
const UNBALANCED: ReadPermit = Object.freeze({ balanced: false, targets: Object.freeze({}), waitedMs: 0, deadline: Infinity, release: () => undefined });

/** How a balanced read was placed, as its response reports it. */
export interface ReadBalanceInfo {
  readonly priority: string;
  /** Shard -> `primary` or a reader group. */
  readonly targets: Readonly<Record<string, string>>;
  readonly waitedMs: number;
}

/** A collection's durability as its cluster state says (default: `request`). */
export function durabilityOf(state: CollectionState | undefined): Durability {
  return {
    mode: state?.durability ?? DEFAULT_DURABILITY.mode,
    syncIntervalMs: state?.syncIntervalMs ?? DEFAULT_DURABILITY.syncIntervalMs,
  };
}

interface ShardRef {
  readonly collection: string;
  readonly shard: string;
}

export interface ExportPage {
  readonly docs: Doc[];
  /** Cursor for the next page (the last id), or null at the end of the shard. */
  readonly next: string | null;
}

export interface ExportRequest {
  readonly collection: string;
  readonly shard: string;
  readonly after?: string;
  readonly limit: number;
  /** Only documents matching this query (default: all). */
  readonly q?: string;
  readonly filters?: readonly string[];
  /** Comma list of fields to return (id and _version_ always). */
  readonly fields?: string;
}

/** Entries an export page reads at most (see exportLocal). */
const EXPORT_SCAN_LIMIT = 50_000;

type PeerSearchRequest = ({ kind: 'export' } & ExportRequest) | ShardPhaseRequest;

/** A read's options at the node: where it reads, and its balancing (the targets are the balancer's). */
export type ReadOptions = Omit<PathReadOptions, 'targets'> & BalancedRead;

export interface GetResult {
  /** The document, or undefined when an eventual read found none (servedBy says where it looked). */
  readonly entry: StoredEntry | undefined;
  readonly shard: string;
  readonly servedBy?: ServedBy;
  readonly readBalance?: ReadBalanceInfo;
}


export class ShardexNode {
  readonly name: string;
  readonly log: Logger;
  readonly coordinator: Coordinator;
  readonly metrics = new Registry();
  private readonly o: ShardexNodeOptions;
  private readonly replicas = new Map<string, ShardReplica>();
  private readonly opening = new Map<string, Promise<ShardReplica | undefined>>();
  private readonly peers: PeerClients;
  private readonly distributor: CommandDistributor;
  readonly processor: UpdateProcessor;
  private readonly grpcServer: PeerServer;
  private http: FastifyInstance | undefined;
  private unsubscribe: (() => void) | undefined;
  private syncing: Promise<void> = Promise.resolve();
  private stopped = false;
  /** Ends at stop: cuts short the pauses of recovery and catch-up. */
  private readonly lifetimeAbort = new AbortController();
  private readonly lifetime = new Deadline({ signal: this.lifetimeAbort.signal, what: 'the node' });
  /** Set once the node has read the cluster state and opened its replicas: until then it answers SHX_STARTING. */
  private started = false;
  private readonly m: NodeMetrics;
  private readonly readPath: ReadPath;
  /** This node's read balancer: its slot counters are its own, never shared with other nodes. */
  readonly readBalance: ReadBalancerRuntime;
  private readonly readTimeoutMs: number;
  private readonly balanceWrites = new Mutex();
  /** The priorities the settings name, as last loaded: reads of any other one skip the balancer. */
  private balancedPriorities: ReadonlySet<string> = new Set();
  private unwatchReaders: (() => void) | undefined;
  private readonly commitTimers = new Map<string, NodeJS.Timeout>();
  private checkpointTimer: NodeJS.Timeout | undefined;
  private readonly mergeGate = new MergeGate(MERGE_HOLD_MAX_MS);
  /** The replicas' segment merges run here, off the event loop. */
  private readonly mergeThread: MergeThread;
  /** The replicas' checkpoint files are written here, off the event loop (never behind a merge). */
  private readonly checkpointThread: MergeThread;
  /** Replicas whose checkpoint check is running. */
  private readonly checkpointing = new Set<ShardReplica>();
  /** Each shard's term statistics by query, as this node last saw them coordinating a search. */
  private readonly shardStats = new ShardStatsCache();
  /** Hands this node's leaderships over to the replicas that should lead (leader balance). */
  private readonly leaderBalance: LeaderBalance;
  private unwatchLeaderBalance: (() => void) | undefined;
  httpUrl = '';
  grpcAddress = '';

  constructor(opts: ShardexNodeOptions) {
    this.o = opts;
    this.name = opts.name;
    this.log = opts.logger.child({ node: opts.name });
    this.mergeThread = new MergeThread({ log: this.log });
    this.checkpointThread = new MergeThread({ log: this.log });
    this.coordinator = opts.coordinator;
    collectDefaultMetrics({ register: this.metrics, prefix: 'shardex_' });
    const node = this;
    this.m = nodeMetrics(this.metrics, {
      replicas: () => this.replicas.values(),
      get distributor() {
        return node.distributor;
      },
      coordinator: this.coordinator,
    });
    this.peers = new PeerClients({
      resolve: (node) => this.coordinator.liveNodes().find((n) => n.name === node)?.grpc,
      logger: this.log,
      ...(opts.callTimeoutMs !== undefined && { callTimeoutMs: opts.callTimeoutMs }),
      ...(opts.clusterSecret !== undefined && { secret: opts.clusterSecret }),
      ...(opts.tls && { tls: opts.tls }),
    });
    this.distributor = new CommandDistributor({
      transport: this.peers,
      logger: this.log,
      ...(opts.maxInFlight !== undefined && { maxInFlight: opts.maxInFlight }),
      backoff: opts.backoff ?? nodeRetryBackoff(),
      onOutcome: (dest, outcome) => this.m.distributorOutcomes.inc({ dest, outcome }),
    });
    this.processor = new UpdateProcessor({
      self: this.name,
      coordinator: this.coordinator,
      replica: (c, s) => this.replicas.get(`${c}/${s}`),
      schema: (c) => this.schemaOf(c),
      perform: (replica, effects) => this.perform(replica, effects),
      distributor: this.distributor,
      logger: this.log,
      ...(opts.backoff && { backoff: opts.backoff }),
      ...(opts.forwardRetries !== undefined && { forwardRetries: opts.forwardRetries }),
      ...(opts.replicaRetries !== undefined && { replicaRetries: opts.replicaRetries }),
      onForward: (phase, n) => this.m.forwarded.inc({ phase }, n),
      onMarkedDown: (replica, nodes) => this.m.markedDown.inc({ replica }, nodes.length),
      isStopping: () => this.stopped,
    });
    const eventual = new EventualRouter({
      selector: new ReaderSelector(opts.selectorProfiles),
      readers: () => this.readers(),
      call: (reader, body, options) => this.readPath.callReader(reader, body, options),
    });
    const groups = new ReaderGroupRouters({
      profiles: opts.selectorProfiles,
      readers: () => this.readers(),
      call: (reader, body, options) => this.readPath.callReader(reader, body, options),
    });
    this.readPath = new ReadPath(this.readTransport(), eventual, groups.router);
    checkReadBalanceOptions(opts.readBalance);
    this.readTimeoutMs = opts.readBalance?.timeoutMs ?? DEFAULT_READ_TIMEOUT_MS;
    this.readBalance = readBalancer(opts.readBalance ?? {}, this.coordinator, this.metrics, this.log, (settings) => {
      this.balancedPriorities = new Set(settings.map((s) => s.priority));
      this.markReadTargets(settings);
    });
    this.leaderBalance = new LeaderBalance({
      name: this.name,
      coordinator: this.coordinator,
      log: this.log,
      replicas: () => this.replicas.values(),
      leadCheck: (node, collection, shard) => this.peers.call<LeadCheck>(node, 'versions', { collection, shard, replica: this.name, leadCheck: true }),
      sameLog: (replica, node) => holdsSameLog(replica, this.syncSource(node, replica.collection, replica.shard)),
      acceptedWritesDone: (replica, ms) => this.processor.acceptedWritesDone(replica, ms),
      perform: (replica, effects) => this.perform(replica, effects),
      resign: (replica) => this.resign(replica),
      counted: (outcome, replica) => this.m.handovers.inc({ replica: replica.key, outcome }),
      isStopping: () => this.stopped,
    });
    this.grpcServer = new PeerServer(
      {
        update: (u) => this.onPeerUpdate(u),
        get: (req) => this.onPeerGet(req),
        // The schema checked the shape; term statistics are the index's to read.
        search: (req) => this.onPeerSearch(req as PeerSearchRequest),
        commit: (req) => this.commitLocal(req.collection, req.shard),
        versions: async (req) => (req.leadCheck ? this.onLeadCheck(req) : this.onPeerVersions(req)),
        updatesAfter: async (r) => {
          const replica = this.localReplica(r.collection, r.shard);
          // A dirty replica holds writes nobody acknowledged: no new leader may take them from it.
          if (replica.health === 'dirty') throw new ShardexError('SHX_RECOVERING', `${this.name}'s replica of ${replica.key} is recovering from a deposed leadership; sync from another replica`);
          if (r.digest) return replica.store.logDigest(r.after, r.upto ?? replica.store.maxVersion);
          if (r.versionsOnly) return replica.store.logVersionsAfter(r.after, Math.min(r.limit, 100_000), r.upto);
          if (r.only) return replica.store.logEntries(r.only.filter((v) => v > r.after && (r.upto === undefined || v <= r.upto)));
          return replica.store.updatesAfter(r.after, Math.min(r.limit, 10_000), r.upto);
        },
        copyShard: (req) => this.onPeerCopy(req),
      },
      this.log,
      { ...(opts.clusterSecret !== undefined && { secret: opts.clusterSecret }), readAccess: readAccessOf(opts.http?.apiKeys), ...(opts.tls && { tls: opts.tls }) },
    );
  }

  get info(): NodeInfo {
    return { name: this.name, http: this.httpUrl, grpc: this.grpcAddress, role: 'data' };
  }

  async start(): Promise<void> {
    const host = this.o.host ?? '127.0.0.1';
    await mkdir(this.o.dataDir, { recursive: true });
    const grpcPort = await this.grpcServer.listen(host, this.o.grpcPort);
    const advertised = this.o.advertiseHost ?? host;
    this.grpcAddress = `${advertised}:${grpcPort}`;
    const https = this.o.tls && { cert: this.o.tls.cert, key: this.o.tls.key };
    this.http = await buildHttp(this, { bodyLimit: this.o.bodyLimit ?? 100 * 1024 * 1024, ...this.o.http, ...(https && { https }), ...(this.o.tls?.ca && { trustedCa: this.o.tls.ca }), logger: this.log });
    await this.http.listen({ host, port: this.o.httpPort }).catch((err: Error) => {
      throw portError('HTTP', host, this.o.httpPort, err);
    });
    const addr = this.http.server.address();
    this.httpUrl = `${this.o.tls ? 'https' : 'http'}://${advertised}:${typeof addr === 'object' && addr ? addr.port : this.o.httpPort}`;
    // Until each replica has opened and caught up it is down for everyone (as Solr's cores
    // publish "down" at registration): the state may still say "active" from before a restart.
    await this.coordinator.start(this.info, () => this.publishReplicasDown());
    this.unsubscribe = this.coordinator.onChange(() => this.scheduleSync());
    this.scheduleSync();
    await this.syncing;
    this.unwatchReaders = this.coordinator.onChange(() => this.markReadTargets(this.readBalance.settings()));
    this.unwatchLeaderBalance = this.coordinator.onChange(() => this.leaderBalance.check());
    await this.readBalance.start().catch(() => this.retryReadBalanceLoad());
    this.checkpointTimer = setInterval(() => this.checkpointReplicas(), checkpointCheckMs(this.o.checkpointPolicy?.maxAgeMs ?? DEFAULT_CHECKPOINT_POLICY.maxAgeMs));
    this.checkpointTimer.unref();
    this.started = true;
    this.log.info({ http: this.httpUrl, grpc: this.grpcAddress }, 'node started');
  }

  /** Replicas leaving and rejoining their election (resign). */
  private readonly resigning = new Set<ShardReplica>();

  /**
   * Writes the index checkpoint of each replica whose policy says so (while replicas come up, by
   * count of changes only: merge-gate.ts). Replicas checkpoint side by
   * side (a checkpoint mostly waits for fsync), each at most once at a time: one replica's slow
   * checkpoint does not delay another's, whose journal to replay after a crash would grow.
   */
  private checkpointReplicas(): void {
    const allowed = this.mayMerge();
    for (const r of this.replicas.values()) {
      if (this.stopped) return;
      if (!(r.index instanceof PersistedIndex) || this.checkpointing.has(r)) continue;
      this.checkpointing.add(r);
      void r.index
        .maybeCheckpoint(Date.now(), checkpointWork(r.recovering, allowed))
        .catch((err: Error) => this.log.warn({ replica: r.key, err: err.message }, 'could not write the index segment; the next check tries again'))
        .finally(() => this.checkpointing.delete(r));
    }
  }

  /** Whether a merge may start now (see merge-gate.ts: replicas coming up hold merges back). */
  private mayMerge(now = Date.now()): boolean {
    const held = mergeHold({
      opening: this.opening.size,
      replicas: this.replicas.values(),
      shardReplicas: (c, s) => this.coordinator.collection(c)?.shards.find((x) => x.name === s)?.replicas,
      isLive: (node) => this.coordinator.isLive(node),
    });
    return this.mergeGate.allows(held !== undefined, now);
  }

  /** False until the node has read the cluster state (requests that need it get SHX_STARTING). */
  get ready(): boolean {
    return this.started && !this.stopped;
  }

  /** Throws SHX_STARTING until the node knows the cluster state: a definite, retryable answer. */
  assertReady(): void {
    if (!this.started) throw new ShardexError('SHX_STARTING', `node ${this.name} is starting and has not read the cluster state yet; retry shortly (nothing was done)`);
  }

  // ---- following the cluster state ----------------------------------------------------

  private scheduleSync(): void {
    if (this.stopped) return;
    this.syncing = this.syncing.then(() => this.syncReplicas()).catch((err) => this.log.error({ err }, 'replica sync failed'));
  }

  private async syncReplicas(): Promise<void> {
    const wanted = new Set<string>();
    // Replicas open side by side: a node holding several waits for the slowest, not for their sum.
    const opens: Array<Promise<unknown>> = [];
    for (const [c, state] of this.coordinator.collections()) {
      for (const s of state.shards) {
        if (!s.replicas.some((r) => r.node === this.name)) continue;
        const key = `${c}/${s.name}`;
        wanted.add(key);
        if (!this.replicas.has(key) && !this.opening.has(key)) opens.push(this.openReplica(c, s.name));
      }
    }
    const failed = (await Promise.allSettled(opens)).find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
    for (const replica of this.replicas.values()) {
      const state = this.coordinator.collection(replica.collection);
      replica.store.setDurability(durabilityOf(state));
      const mine = state?.shards.find((s) => s.name === replica.shard)?.replicas.find((r) => r.node === this.name);
      if (mine?.state === 'down' && replica.role === 'follower' && !replica.recovering) void this.recover(replica);
      // A replica that could not rejoin its election (it resigned while coordination was
      // unreachable) stands again now: otherwise its shard may be left without a candidate.
      if (!this.stopped && !this.coordinator.inElection(replica.collection, replica.shard)) {
        void this.joinElection(replica).catch((err: Error) => this.log.warn({ replica: replica.key, err: err.message }, 'could not join the election; retrying on the next cluster change'));
      }
    }
    for (const [key, replica] of this.replicas) {
      if (wanted.has(key)) continue;
      this.replicas.delete(key);
      await this.coordinator.leaveElection(replica.collection, replica.shard);
      // A checkpoint or merge still running would write into the directory removed below.
      if (replica.index instanceof PersistedIndex) await replica.index.discard();
      await replica.store.close();
      await rm(this.replicaDir(replica.collection, replica.shard), { recursive: true, force: true });
      this.log.info({ replica: key }, 'replica removed');
    }
  }

  private async publishReplicasDown(): Promise<void> {
    for (const [c, state] of this.coordinator.collections()) {
      for (const s of state.shards) {
        if (s.replicas.some((r) => r.node === this.name && r.state !== 'down')) await this.coordinator.setReplicaState(c, s.name, this.name, 'down');
      }
    }
  }

  private replicaDir(collection: string, shard: string): string {
    return join(this.o.dataDir, collection, shard);
  }

  private async openReplica(collection: string, shard: string): Promise<ShardReplica | undefined> {
    const key = `${collection}/${shard}`;
    const p = (async () => {
      const onStoreWrite = this.o.onStoreWrite;
      // The index's segments load while LevelDB opens (and recovers its log) on its own thread.
      const committed = PersistedIndex.readCommitted(this.indexFiles(collection, shard));
      committed.catch(() => undefined); // awaited by attachReplica; not when the store fails to open
      const store = await ReplicaStore.open(this.replicaDir(collection, shard), {
        durability: durabilityOf(this.coordinator.collection(collection)),
        ...(this.o.logRetention !== undefined && { logRetention: this.o.logRetention }),
        ...(this.o.deleteRetentionMs !== undefined && { deleteRetentionMs: this.o.deleteRetentionMs }),
        ...(this.o.writeBufferMb !== undefined && { writeBufferSize: this.o.writeBufferMb * 1024 * 1024 }),
        ...(this.o.storeCompression !== undefined && { compression: this.o.storeCompression }),
        ...(this.o.docCacheSize !== undefined && { docCacheSize: this.o.docCacheSize }),
        ...(onStoreWrite && { onWrite: (w: StoreWrite) => onStoreWrite(`${this.name}/${key}`, w) }),
      });
      try {
        // A store created after its shard had a leader (a replica added, or one whose data was
        // lost) holds none of the shard's data: it recovers before it may lead.
        if (store.created && this.coordinator.hadLeader(collection, shard)) await store.markIncomplete();
        return await this.attachReplica(key, collection, shard, store, committed);
      } catch (err) {
        // Release LevelDB's lock, or every later attempt to open this replica would fail on it.
        this.replicas.delete(key);
        await store.close().catch(() => undefined);
        throw err;
      }
    })();
    this.opening.set(key, p);
    try {
      return await p;
    } finally {
      this.opening.delete(key);
    }
  }

  /** Where a replica's index files are, and what they must have been written for. */
  private indexFiles(collection: string, shard: string): { dir: string; schema: CollectionSchema; fingerprint: string } {
    return { dir: this.replicaDir(collection, shard), schema: this.schemaOf(collection), fingerprint: schemaFingerprint(this.knownCollection(collection).fields) };
  }

  private async attachReplica(key: string, collection: string, shard: string, store: ReplicaStore, committed: Promise<CommittedIndex>): Promise<ShardReplica> {
    const replica = new ShardReplica(collection, shard, store, this.log);
    replica.onRoleChange = (from) => {
      if (from === 'leader') this.m.leadershipsLost.inc({ replica: key });
    };
    // The index: its segment on disk and the changes journaled after it, or rebuilt from the documents.
    const { index, report } = await PersistedIndex.open(
      {
        ...this.indexFiles(collection, shard),
        store,
        log: this.log.child({ replica: key }),
        ...(this.o.checkpointPolicy && { policy: this.o.checkpointPolicy }),
        onSegmentWritten: () => this.m.segmentsWritten.inc({ replica: key }),
        merger: this.mergeThread,
        writer: this.checkpointThread,
      },
      committed,
    );
    this.m.indexOpens.inc({ method: report.method });
    replica.index = index;
    this.replicas.set(key, replica);
    this.log.info({ replica: key, docs: store.docCount, maxVersion: store.maxVersion, index: report.method, segments: report.segments, replayed: report.replayed, indexMs: report.ms, ...(report.problem && { problem: report.problem }) }, 'replica opened');
    // A replica that (re)starts catches up from its leader before it counts as active: recovering
    // from the moment it is seen (it ends at once if this replica is elected instead).
    void this.recover(replica);
    await this.joinElection(replica);
    return replica;
  }

  private joinElection(replica: ShardReplica): Promise<void> {
    return this.coordinator.joinElection(replica.collection, replica.shard, {
      canLead: async () => this.mayLead(replica),
      onElected: (epoch) => void this.takeLeadership(replica, epoch).catch((err) => this.log.error({ replica: replica.key, err }, 'taking leadership failed')),
      onLost: () => this.perform(replica, replica.step({ type: 'lost' })),
    });
  }

  /** Performs the shard machine's node-level effects. */
  private perform(replica: ShardReplica, effects: readonly ShardEffect[]): void {
    for (const e of effects) {
      switch (e.type) {
        case 'startAutoCommit':
          this.startAutoCommit(replica);
          break;
        case 'stopAutoCommit':
          this.stopAutoCommit(replica);
          break;
        case 'resign':
          this.log.warn({ replica: replica.key, why: e.why }, 'replica resigns its leadership');
          void this.resign(replica);
          break;
        case 'recover':
          void this.recover(replica);
          break;
        case 'catchUp':
          void this.catchUp(replica, e.epoch);
          break;
        default:
          break;
      }
    }
  }

  /** Leaves the election and joins it again at the back of the queue (a new leadership gets a new epoch). */
  private async resign(replica: ShardReplica): Promise<void> {
    // Every update the deposed leader was writing asks to resign: one leave and rejoin serves them all.
    if (this.resigning.has(replica)) return;
    this.resigning.add(replica);
    try {
      await this.coordinator.leaveElection(replica.collection, replica.shard);
      if (!this.stopped && this.replicas.get(replica.key) === replica) await this.joinElection(replica);
    } catch (err) {
      this.log.warn({ replica: replica.key, err: (err as Error).message }, 'could not rejoin the election; retrying on the next cluster change');
    } finally {
      this.resigning.delete(replica);
    }
  }

  private localReplica(collection: string, shard: string): ShardReplica {
    const replica = this.replica(collection, shard);
    if (!replica) throw new ShardexError('SHX_NOT_FOUND', `${this.name} hosts no replica of ${collection}/${shard}`);
    return replica;
  }

  /** The state `node`'s replica of the shard has in the cluster state. */
  private replicaState(collection: string, shard: string, node: string): string | undefined {
    return this.coordinator.collection(collection)?.shards.find((s) => s.name === shard)?.replicas.find((r) => r.node === node)?.state;
  }

  /**
   * A leader asks whether this replica may take its leadership over (leader balance): it must be a
   * follower of that leadership, active in the cluster state and here, not recovering nor catching
   * up, complete, in the election, and with its term at the shard's top (mayLead).
   */
  private async onLeadCheck(req: ShardRef & { replica?: string }): Promise<LeadCheck> {
    const replica = this.localReplica(req.collection, req.shard);
    const unfit = await this.leadUnfitness(replica, req.replica);
    return { maxVersion: replica.store.maxVersion, ...(unfit !== undefined && { unfit }) };
  }

  /** Why `replica` may not take over `from`'s leadership now; undefined when it may. */
  private async leadUnfitness(replica: ShardReplica, from: string | undefined): Promise<string | undefined> {
    const { collection, shard } = replica;
    const leader = this.coordinator.leader(collection, shard);
    if (replica.role !== 'follower') return `${this.name}'s replica is ${replica.role}, not a follower`;
    if (leader === undefined || leader.node !== from || replica.fence !== leader.epoch) return `${this.name} does not follow ${from}'s leadership yet`;
    if (replica.recovering || replica.catchingUp || replica.health !== 'active') return `${this.name}'s replica is recovering`;
    if (this.replicaState(collection, shard, this.name) !== 'active') return `${this.name}'s replica is not active in the cluster state`;
    if (!this.coordinator.inElection(collection, shard)) return `${this.name}'s replica is not in the election`;
    if (!(await this.mayLead(replica))) return `${this.name}'s replica may not lead (incomplete, or its term is behind)`;
    return undefined;
  }

  private onPeerVersions(req: ShardRef & { replica?: string }): PeerLogInfo {
    const replica = this.localReplica(req.collection, req.shard);
    const state = req.replica ? this.replicaState(req.collection, req.shard, req.replica) : undefined;
    const commit = replica.store.lastCommit;
    return {
      maxVersion: replica.store.maxVersion,
      trimmedThrough: replica.store.trimmedThrough,
      epoch: replica.epoch || replica.fence,
      // As a write would find it: a leader cut off from coordination past its grace (whose
      // session may have expired, and another replica been elected) keeps its role until it
      // hears so, but no longer says it leads; snapshot readers do not check against it.
      leading: replica.role === 'leader' && this.coordinator.canActAsLeader(),
      ...(state && { replicaState: state }),
      ...(commit && { commit }),
    };
  }

  /**
   * A full copy of a replica: its current entries, or those of its latest commit point. A
   * snapshot reader (`raw`) gets the commit point named first, with its index segments when it
   * asks (read from files the index keeps for that point), then the entries as stored.
   */
  private async *onPeerCopy(req: CopyShardRequest): AsyncGenerator<StoredEntry[] | CopyMessage> {
    const replica = this.localReplica(req.collection, req.shard);
    if (!req.commit) {
      yield* inChunks(replica.store.entries());
      return;
    }
    const held = replica.store.openCommit();
    let committed: CommittedSegments | undefined;
    try {
      if (!req.raw) {
        if (held) yield* inChunks(held.entries());
        return;
      }
      if (req.segments && held && replica.index instanceof PersistedIndex) committed = await replica.index.openCommitted(held.point);
      const files = committed?.files.map(({ name, bytes, deleted }) => ({ name, bytes, deleted: [...deleted] }));
      yield { commit: held?.point ?? null, segments: committed && files ? { fingerprint: committed.fingerprint, files } : null };
      for (const f of committed?.files ?? []) for await (const data of readChunks(f.handle, f.bytes)) yield { file: f.name, data: data.toString('base64') };
      if (held) for await (const raw of inChunks(held.values())) yield { raw };
    } finally {
      // Also when the reader went away mid-copy: the snapshot and the files are let go.
      await Promise.all(committed?.files.map((f) => f.handle.close()) ?? []);
      await held?.release();
    }
  }

  private syncSource(node: string, collection: string, shard: string): SyncSource {
    return {
      info: () => this.peers.call<PeerLogInfo>(node, 'versions', { collection, shard, replica: this.name }),
      logVersions: (after, limit) => this.peers.call<number[]>(node, 'updatesAfter', { collection, shard, after, limit, versionsOnly: true }),
      logDigest: (after, upto) => this.peers.call<LogDigest>(node, 'updatesAfter', { collection, shard, after, upto, limit: 1, digest: true }),
      logEntries: (versions) => this.peers.call<StoredEntry[]>(node, 'updatesAfter', { collection, shard, after: 0, limit: versions.length || 1, only: versions }),
      entries: async (ids) => (await this.peers.call<Array<StoredEntry | null>>(node, 'get', { collection, shard, ids })).map((e) => e ?? undefined),
      copy: () => this.peers.streamCall<StoredEntry[]>(node, 'copyShard', { collection, shard }),
    };
  }

  /**
   * A new leader persists its epoch and announces it to the replicas (so that a deposed leader's
   * updates are refused from now on), pulls from every other live replica what they have beyond
   * its own state (Solr's SyncStrategy), then accepts writes. Unreachable peers count as synced.
   */
  private async takeLeadership(replica: ShardReplica, epoch: number): Promise<void> {
    const effects = replica.step({ type: 'elected', epoch });
    this.perform(replica, effects);
    if (!effects.some((e) => e.type === 'announce')) return;
    this.m.elections.inc({ replica: replica.key });
    await replica.apply([], { fence: epoch });
    const shard = this.coordinator.collection(replica.collection)?.shards.find((s) => s.name === replica.shard);
    const live = (shard?.replicas ?? []).filter((r) => r.node !== this.name && this.coordinator.isLive(r.node));
    const announcement: ShardUpdate = { collection: replica.collection, shard: replica.shard, phase: 'FROMLEADER', epoch, ops: [], minRf: 1, from: this.name };
    await Promise.all(
      live.map((p) =>
        this.distributor.submit(p.node, announcement, { maxRetries: 0 }).catch((err: Error) => {
          this.log.warn({ replica: replica.key, peer: p.node, err: err.message }, 'could not announce the new leadership epoch to a replica');
        }),
      ),
    );
    const peers = live.filter((r) => r.state === 'active');
    await Promise.all(
      peers.map(async (p) => {
        try {
          const from = await syncStartOf(replica.store);
          const { applied: n } = await peerSync(replica, this.syncSource(p.node, replica.collection, replica.shard), from, { valid: () => replica.fence === epoch });
          if (n > 0) this.log.info({ replica: replica.key, from: p.node, applied: n }, 'new leader synced updates from a replica');
        } catch (err) {
          this.log.warn({ replica: replica.key, peer: p.node, err: (err as Error).message }, 'new leader could not sync from a replica');
        }
      }),
    );
    if (this.coordinator.leader(replica.collection, replica.shard)?.epoch !== epoch) return;
    // Commit points live on the leader that recorded them: the new leader records one before it
    // leads, so that every commit acknowledged by an earlier leader (whose writes it now holds)
    // stays visible to eventual reads. Uncommitted writes it holds become visible with it, as
    // after a restart.
    await replica.commit().then(
      () => this.m.commits.inc({ replica: replica.key }),
      (err: Error) => this.log.warn({ replica: replica.key, err: err.message }, 'could not record the new leadership\'s commit point'),
    );
    // Its log is now the one the others compare with: a sync it had begun as a follower is over.
    await replica.store.setSyncFloor(undefined).catch(() => undefined);
    this.perform(replica, replica.step({ type: 'ready', epoch }));
    if (replica.role === 'leader') await this.coordinator.setReplicaState(replica.collection, replica.shard, this.name, 'active').catch(() => undefined);
    // A replica elected while a fitter one should lead (at creation, or after failover) hands over.
    this.leaderBalance.check();
  }

  /**
   * Recovery (Solr's RecoveryStrategy): publish `recovering`, wait until the leader sees us
   * recovering (so that it sends us every later update, which we apply as it comes), sync
   * from it, then publish `active` with the leader's term. Every failure is tried again, as
   * Solr's recovery does, for as long as the replica is this node's follower and the node runs.
   */
  async recover(replica: ShardReplica): Promise<void> {
    if (replica.recovering || this.stopped) return;
    replica.recovering = true;
    const { collection, shard } = replica;
    const current = (): boolean => !this.stopped && this.replicas.get(replica.key) === replica && replica.role === 'follower';
    try {
      await retry(
        async () => {
          const leader = await this.otherLeader(replica, current);
          if (leader === undefined) return;
          const source = this.syncSource(leader, collection, shard);
          // After every node restarted, the leader on record is the one before the restart until
          // an election replaces it: recovering from it would wait for its open, and a replica
          // that recovers may not stand. So the replica stays a candidate until its leader leads
          // (asked again shortly while it is still the leader on record).
          const onRecord = (): boolean => current() && this.coordinator.leader(collection, shard)?.node === leader;
          const probe = await this.infoUntil(source, (i) => i.leading === true, onRecord, LEADER_POLLS);
          if (probe.leading !== true) throw new ShardexError('SHX_NOT_LEADER', `${leader} does not lead ${replica.key} yet`);
          const t0 = performance.now();
          // The highest term as the recovery begins, before the leader may send this replica
          // anything: the recovery brings the replica up to it, never to a term the leader
          // raises meanwhile because an update to this replica failed.
          const termAtStart = Math.max(0, ...Object.values(await this.coordinator.terms(collection, shard)));
          replica.step({ type: 'recoveryStarted' });
          // Where the sync will compare the logs from, fixed before the leader sends this replica
          // any update (it applies them as they come): their versions must not move the sync's
          // window above what this replica lacks, or above its own unacknowledged writes.
          await replica.store.setSyncFloor(await syncStartOf(replica.store));
          await this.coordinator.setReplicaState(collection, shard, this.name, 'recovering');
          // The leader learns of the new state by its watch: asked again shortly until it has.
          const info = await this.infoUntil(source, (i) => i.replicaState !== 'down', current, SEE_RECOVERING_POLLS);
          if (info.replicaState === 'down') throw new ShardexError('SHX_RECOVERING', `leader ${leader} does not see ${this.name} recovering yet`);
          const t1 = performance.now();
          // The leadership synced from: once a newer one is seen, what it gives is not stored (and this is tried again).
          const leaderEpoch = info.epoch ?? replica.fence;
          const report = await syncFrom(replica, source, info, { progress: this.recoveryProgress(replica), valid: () => replica.fence <= leaderEpoch });
          const t2 = performance.now();
          // A new leader announces its epoch only to the replicas it reaches then: one that was
          // down, or not open yet, learns it here, from the leader it synced from, as the
          // announcement would have told it. It then follows that leadership (and may be handed
          // it by leader balance) without waiting for a write to bring the epoch.
          if (info.leading === true && info.epoch !== undefined && info.epoch > replica.fence) {
            this.perform(replica, replica.step({ type: 'fromLeader', epoch: info.epoch }));
            await replica.apply([], { fence: info.epoch });
          }
          await replica.store.markComplete();
          await this.coordinator.catchUpTerm(collection, shard, this.name, termAtStart);
          // Active only if still recovering: a leader that could not reach this replica during
          // the sync marked it down and stopped sending it updates, so it may lack writes
          // acknowledged since. It then recovers again (SHX_RECOVERING is retried).
          await this.coordinator.setReplicaState(collection, shard, this.name, 'active', { from: 'recovering' });
          this.m.recoveries.inc({ method: report.method });
          replica.step({ type: 'recoveryFinished' });
          const ms = (a: number, b: number): number => Math.round(b - a);
          const t3 = performance.now();
          this.log.info({ replica: replica.key, leader, ...report, ms: ms(t0, t3), seenMs: ms(t0, t1), syncMs: ms(t1, t2), activeMs: ms(t2, t3) }, 'replica recovered');
        },
        { maxRetries: Infinity, backoff: RECOVERY_BACKOFF, retryable: current },
        { deadline: this.lifetime, onRetry: (err, attempt) => this.log.warn({ replica: replica.key, attempt, err: (err as Error).message }, 'recovery attempt failed; retrying') },
      );
    } catch (err) {
      // Ends here only when the replica is no longer ours to recover (stopped, removed, leading).
      this.log.debug({ replica: replica.key, err: (err as Error).message }, 'recovery given up');
    } finally {
      replica.recovering = false;
    }
  }

  /** Asks `source` for its log info until `settled` holds of the answer: again every INFO_POLL_MS, at most `polls` more times, while `going()`. */
  private async infoUntil(source: SyncSource, settled: (info: PeerLogInfo) => boolean, going: () => boolean, polls: number): Promise<PeerLogInfo> {
    let info = await source.info();
    for (let i = 0; !settled(info) && i < polls && going(); i++) {
      await sleep(INFO_POLL_MS, this.lifetimeAbort.signal);
      info = await source.info();
    }
    return info;
  }

  /** Counts the documents a recovery or catch-up of `replica` stores, as it stores them. */
  private recoveryProgress(replica: ShardReplica): RecoveryProgress {
    return (step, docs) => this.m.recoveryDocs.inc({ replica: replica.key, step }, docs);
  }

  /**
   * The shard's leader when it is another node (not ourselves while we resign: a deposed leader
   * recovers from the next one), waiting for one while there is none; undefined once `current`
   * no longer holds.
   */
  private async otherLeader(replica: ShardReplica, current: () => boolean): Promise<string | undefined> {
    const other = (): string | undefined => {
      const l = this.coordinator.leader(replica.collection, replica.shard);
      return l !== undefined && l.node !== this.name ? l.node : undefined;
    };
    await this.waitFor(() => !current() || other() !== undefined, 60_000);
    return current() ? other() : undefined;
  }

  /**
   * After a new leadership's announcement: once its leader is ready, peer sync from it (with
   * convergence), so that a write of the deposed leader that reached the new leader and not us
   * is not missing here. A replica that is recovering syncs anyway; when the leader's log does
   * not reach back far enough, a full recovery runs instead.
   */
  private async catchUp(replica: ShardReplica, epoch: number): Promise<void> {
    if (this.stopped) return;
    if (replica.catchingUp) {
      // A newer leadership while one catch-up runs: that one ends (its epoch is no longer the fence), this one follows.
      replica.catchUpNext = Math.max(replica.catchUpNext ?? 0, epoch);
      return;
    }
    replica.catchingUp = true;
    const { collection, shard } = replica;
    // A newer leadership than this one has its own catch-up; a recovery syncs by itself.
    const relevant = (): boolean =>
      !this.stopped && this.replicas.get(replica.key) === replica && replica.fence === epoch && replica.role === 'follower' && !replica.recovering;
    try {
      await retry(
        async () => {
          if (!relevant()) return;
          const leader = this.coordinator.leader(collection, shard);
          if (!leader || leader.node === this.name || leader.epoch !== epoch) throw new ShardexError('SHX_NO_LEADER', `the leader of epoch ${epoch} of ${replica.key} is not announced yet`);
          const source = this.syncSource(leader.node, collection, shard);
          const info = await source.info();
          if (!info.leading || info.epoch !== epoch) throw new ShardexError('SHX_NOT_LEADER', `${leader.node} does not lead epoch ${epoch} of ${replica.key} yet`);
          if (!canPeerSync(replica.store.maxVersion, await syncStartOf(replica.store), info)) {
            void this.recover(replica);
            return;
          }
          const report = await syncFrom(replica, source, info, { progress: this.recoveryProgress(replica), valid: () => replica.fence === epoch });
          if (report.applied > 0 || report.reverted > 0) this.log.info({ replica: replica.key, leader: leader.node, epoch, ...report }, 'replica caught up with a new leader');
        },
        { maxRetries: CATCH_UP_RETRIES, backoff: CATCH_UP_BACKOFF, retryable: relevant },
        { deadline: this.lifetime, onRetry: (err) => this.log.debug({ replica: replica.key, err: (err as Error).message }, 'catch-up with the new leader failed; retrying') },
      );
    } catch (err) {
      if (relevant()) this.log.warn({ replica: replica.key, epoch, err: (err as Error).message }, 'could not catch up with the new leader');
    } finally {
      replica.catchingUp = false;
      const next = replica.catchUpNext;
      replica.catchUpNext = undefined;
      if (next !== undefined && next > epoch) void this.catchUp(replica, next);
    }
  }

  /** The leader records a commit point every autoCommit interval (what eventual reads see). */
  private startAutoCommit(replica: ShardReplica): void {
    this.stopAutoCommit(replica);
    const ms = this.coordinator.collection(replica.collection)?.autoCommitMs ?? 0;
    if (ms <= 0) return;
    const t = setInterval(() => {
      if (replica.role !== 'leader' || this.stopped) return;
      replica.commit().then(
        () => this.m.commits.inc({ replica: replica.key }),
        (err) => this.log.warn({ replica: replica.key, err: (err as Error).message }, 'auto-commit failed'),
      );
    }, ms);
    t.unref();
    this.commitTimers.set(replica.key, t);
  }

  private stopAutoCommit(replica: ShardReplica): void {
    const t = this.commitTimers.get(replica.key);
    if (t) clearInterval(t);
    this.commitTimers.delete(replica.key);
  }

  /** A replica whose term is behind the shard's highest missed acknowledged updates: it may not lead. */
  private async mayLead(replica: ShardReplica): Promise<boolean> {
    // A replica that is not a whole copy of its shard yet never leads, whatever its term.
    if (this.stopped || replica.store.incomplete) return false;
    const shard = this.coordinator.collection(replica.collection)?.shards.find((s) => s.name === replica.shard);
    const activePeers = (shard?.replicas ?? []).filter((r) => r.node !== this.name && r.state === 'active' && this.coordinator.isLive(r.node)).length;
    if (!mayStand(replica.state, activePeers)) return false;
    const terms = await this.coordinator.terms(replica.collection, replica.shard);
    const top = Math.max(0, ...Object.values(terms));
    return (terms[this.name] ?? 0) >= top;
  }

  replica(collection: string, shard: string): ShardReplica | undefined {
    return this.replicas.get(`${collection}/${shard}`);
  }

  // ---- operations (called by the HTTP layer) ------------------------------------------

  /** A collection's state, for requests: SHX_STARTING before the node has read the cluster. */
  collectionState(name: string): CollectionState {
    this.assertReady();
    return this.knownCollection(name);
  }

  private knownCollection(name: string): CollectionState {
    const state = this.coordinator.collection(name);
    if (!state) throw new ShardexError('SHX_COLLECTION_NOT_FOUND', `collection '${name}' does not exist; create it with POST /api/collections`);
    return state;
  }

  async createCollection(spec: CollectionSpec): Promise<CollectionState> {
    const state = await this.coordinator.createCollection(spec);
    await this.waitFor(() => state.shards.every((s) => this.coordinator.leader(spec.name, s.name) !== undefined), 30_000);
    return this.coordinator.collection(spec.name) ?? state;
  }

  async deleteCollection(name: string): Promise<void> {
    await this.coordinator.deleteCollection(name);
  }

  /**
   * Solr's BALANCESHARDUNIQUE (preferredLeader) then REBALANCELEADERS: sets each shard's
   * preferred leader, one per node as evenly as the replicas allow (keeping the present ones where
   * they fit), then waits up to `waitMs` until the leaders have handed over to their targets.
   */
  async rebalanceLeaders(collection: string, waitMs: number): Promise<LeaderRebalance> {
    const state = this.collectionState(collection);
    const preferred = rebalancedPreferences(state, (shard) => this.coordinator.leader(collection, shard)?.node);
    const written = await this.coordinator.requestLeaderRebalance(collection, preferred);
    // Judged on the state written (this node's copy follows by a watch), not the one before it.
    const seen = (): boolean => (this.coordinator.collection(collection)?.leaderRebalances ?? 0) >= (written.leaderRebalances ?? 0);
    const settled = (): boolean => seen() && this.leaderPlacement(collection).settled;
    if (waitMs > 0) await this.waitFor(settled, waitMs).catch(() => undefined);
    const report = this.leaderPlacement(collection);
    this.log.info({ collection, settled: report.settled, leadersPerNode: report.leadersPerNode, bound: report.bound }, 'leader rebalance');
    return report;
  }

  /** Where a collection's leaders are and should be, as this node sees the cluster. */
  leaderPlacement(collection: string): LeaderRebalance {
    const state = this.knownCollection(collection);
    const targets = leaderTargets(state, fitInState(this.coordinator, state));
    const moves = handoversOf(this.coordinator, state);
    const leadersPerNode: Record<string, number> = {};
    const perTarget = new Map<string, number>();
    const shards = state.shards.map((s) => {
      const leader = this.coordinator.leader(collection, s.name)?.node ?? null;
      const target = targets.get(s.name) ?? null;
      if (leader !== null) leadersPerNode[leader] = (leadersPerNode[leader] ?? 0) + 1;
      if (target !== null) perTarget.set(target, (perTarget.get(target) ?? 0) + 1);
      return { shard: s.name, leader, target, preferredLeader: s.preferredLeader ?? null };
    });
    const pending = [...moves].map(([shard, to]) => `${shard} (led by ${this.coordinator.leader(collection, shard)?.node}, to ${to})`);
    const message =
      pending.length === 0
        ? 'every shard is led by its preferred leader or within the bound'
        : `not moved yet: ${pending.join(', ')}; a leader hands over only to a replica that is active, caught up and in the election (the leaders' logs say why not), and tries again shortly`;
    return { collection, settled: pending.length === 0, bound: Math.max(0, ...perTarget.values()), leadersPerNode, shards, message };
  }

  /** Waits until `cond` holds (re-checked on every cluster change), or fails after `ms`. */
  waitFor(cond: () => boolean, ms: number): Promise<void> {
    if (cond()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const done = (err?: Error): void => {
        clearTimeout(timer);
        clearInterval(poll);
        off();
        if (err) reject(err);
        else resolve();
      };
      const check = (): void => {
        if (cond()) done();
      };
      const off = this.coordinator.onChange(check);
      const poll = setInterval(check, 50);
      const timer = setTimeout(() => done(new ShardexError('SHX_TIMEOUT', `cluster did not reach the expected state within ${ms} ms`)), ms);
    });
  }

  /** An update from a client; `deadline` (its `timeoutMs`) bounds the forwards to the leaders. */
  update(collection: string, ops: readonly WireOp[], minRf?: number, deadline?: Deadline): Promise<UpdateResponse> {
    this.m.received.inc({ phase: 'NONE' }, ops.length);
    return this.processor.update(collection, ops, minRf, deadline);
  }

  private onPeerUpdate(u: ShardUpdate): Promise<ShardUpdateResult> {
    this.m.received.inc({ phase: u.phase }, u.ops.length);
    return u.phase === 'TOLEADER' ? this.processor.toLeader(u) : this.processor.fromLeader(u);
  }

  /** Real-time get: from the shard leader (distrib), or only from this node's replica. */
  async get(collection: string, id: string, opts: ReadOptions & { distrib?: boolean } = {}): Promise<GetResult | undefined> {
    const state = this.collectionState(collection);
    checkId(id);
    const shard = routerOf(state).route(id).shard;
    if (opts.distrib === false) {
      const local = this.replica(collection, shard);
      if (!local && state.shards.find((s) => s.name === shard)?.replicas.some((r) => r.node === this.name)) {
        throw new ShardexError('SHX_RECOVERING', `the replica of ${collection}/${shard} on ${this.name} is still opening; retry shortly`);
      }
      const entry = local ? await local.store.get(id) : undefined;
      return entry && entry.doc !== null ? { entry, shard } : undefined;
    }
    return this.balanced([shard], opts, async (permit) => {
      const { entries, servedBy } = await this.readPath.get(collection, shard, [id], pathOptions(opts, permit, this.readTimeoutMs));
      const entry = entries[0];
      const placed = balanceInfo(permit);
      if (entry && entry.doc !== null) return { entry, shard, ...(servedBy && { servedBy }), ...(placed && { readBalance: placed }) };
      return servedBy || placed ? { entry: undefined, shard, ...(servedBy && { servedBy }), ...(placed && { readBalance: placed }) } : undefined;
    });
  }

  // ---- read balancing -----------------------------------------------------------------

  /**
   * Runs `read` once the balancer lets it: at once when unbalanced, else with one slot on each
   * target its shards were placed on. The slots go back when the end signal fires (the response
   * ended or its client went away), or, without one, when the read is done; a failed read gives
   * them back at once.
   */
  private async balanced<T>(shards: readonly string[], opts: ReadOptions, read: (permit: ReadPermit) => Promise<T>): Promise<T> {
    // No settings for its priority (or no priority): the balancer would run it unbalanced. Skip
    // it, and the signal, so that unbalanced reads cost what they did before balancing existed.
    const priority = opts.priority ?? this.o.readBalance?.defaultPriority;
    if (priority === undefined || !this.balancedPriorities.has(priority)) return read(UNBALANCED);
    const signal = opts.endSignal?.();
    const admitted = this.readBalance.admit({
      priority,
      shards: this.readNeeds(shards, opts.consistency ?? 'immediate'),
      timeoutMs: opts.timeoutMs ?? this.readTimeoutMs,
      signal,
    });
    // Only a read that waits for its slots awaits them: an await costs more than the balancer.
    const permit = admitted instanceof Promise ? await admitted : admitted;
    let done = false;
    try {
      const value = await read(permit);
      done = true;
      return value;
    } finally {
      if (!done || !signal) permit.release();
    }
  }

  /**
   * The targets each shard of a read may use: `immediate` only the leaders; `eventual` any reader
   * group (those with live readers and those the settings name, so that a configured group
   * without readers counts as down, not as absent) or the leaders.
   */
  private readNeeds(shards: readonly string[], consistency: 'immediate' | 'eventual'): ShardNeed[] {
    const targets = consistency === 'eventual' ? allowedTargets('eventual', this.readerGroups(this.readBalance.settings())) : PRIMARY_ONLY;
    return shards.map((shard) => ({ shard, targets }));
  }

  private readerGroups(settings: readonly BalanceSetting[]): string[] {
    const groups = new Set(this.readers().map((r) => r.group || DEFAULT_GROUP));
    for (const s of settings) if (s.target !== PRIMARY_TARGET) groups.add(s.target);
    return [...groups].sort();
  }

  /** A reader group is up while it has a live reader; `primary` is always up (a shard without a leader fails as before). */
  private markReadTargets(settings: readonly BalanceSetting[]): void {
    const live = new Set(this.readers().map((r) => r.group || DEFAULT_GROUP));
    for (const s of settings) if (s.target !== PRIMARY_TARGET) this.readBalance.setTargetUp(s.target, live.has(s.target));
  }

  private retryReadBalanceLoad(): void {
    if (this.stopped) return;
    setTimeout(() => void this.readBalance.reload().catch(() => this.retryReadBalanceLoad()), 1000).unref();
  }

  /** The stored read-balance settings (coordination is the truth; every node applies them). */
  async readBalanceSettings(): Promise<BalanceSetting[]> {
    this.assertReady();
    return parseStoredSettings(await this.coordinator.getConfig(READ_BALANCE_CONFIG));
  }

  /** Upserts a setting in coordination; this node applies it at once, the others at their next poll. */
  putReadBalance(setting: BalanceSetting): Promise<BalanceSetting[]> {
    return this.changeReadBalance((stored) => upsertSetting(stored, setting)).then((r) => r.settings);
  }

  /** Removes a setting (or every setting of the priority); `removed` 0 when none matched. */
  eraseReadBalance(priority: string, target?: string): Promise<{ settings: BalanceSetting[]; removed: number }> {
    return this.changeReadBalance((stored) => eraseSettings(stored, priority, target));
  }

  // Read-modify-write of one document, compare-and-set in coordination: two nodes (or two
  // requests) changing settings at once both land, the later one applied to the earlier's result.
  private changeReadBalance(change: (stored: BalanceSetting[]) => BalanceSetting[] | { settings: BalanceSetting[]; removed: number }): Promise<{ settings: BalanceSetting[]; removed: number }> {
    this.assertReady();
    return this.balanceWrites.run(async () => {
      let result: { settings: BalanceSetting[]; removed: number } = { settings: [], removed: 0 };
      await this.coordinator.updateConfig(READ_BALANCE_CONFIG, (current) => {
        const changed = change(parseStoredSettings(current));
        result = Array.isArray(changed) ? { settings: changed, removed: 0 } : changed;
        if (!Array.isArray(changed) && changed.removed === 0) return undefined;
        return storedSettings(result.settings);
      });
      await this.readBalance.reload();
      return result;
    });
  }

  /** GET /api/read-slots: this node's limit, taken, free and queued per priority and target. */
  readSlots(): SlotRow[] {
    return this.readBalance.snapshot();
  }

  /** POST /api/read-slots/reset: zeroes this node's counters; running reads go on. */
  resetReadSlots(): SlotRow[] {
    this.readBalance.reset();
    this.log.info('read slot counters reset');
    return this.readBalance.snapshot();
  }

  /** The snapshot readers known to the cluster. */
  readers(): NodeInfo[] {
    return this.coordinator.liveNodes().filter((n) => n.role === 'reader');
  }

  private async onPeerGet(req: { collection: string; shard: string; ids: string[] }): Promise<Array<StoredEntry | null>> {
    const replica = this.replica(req.collection, req.shard);
    if (!replica) throw new ShardexError('SHX_NOT_FOUND', `${this.name} hosts no replica of ${req.collection}/${req.shard}`);
    const entries = await replica.store.getMany(req.ids);
    return entries.map((e) => e ?? null);
  }

  /**
   * One page of a shard's documents in id order after `after`: a stable per-shard cursor
   * (not deep paging), served by the shard leader, or by this node's replica with distrib=false.
   */
  async exportShard(req: ExportRequest, opts: { distrib?: boolean } & BalancedRead = {}): Promise<ExportPage & { readBalance?: ReadBalanceInfo }> {
    const state = this.collectionState(req.collection);
    if (!state.shards.some((s) => s.name === req.shard)) {
      throw new ShardexError('SHX_BAD_REQUEST', `collection '${req.collection}' has no shard '${req.shard}'; shards are ${state.shards.map((s) => s.name).join(', ')}`);
    }
    if (opts.distrib === false) return this.exportLocal(req);
    // One page is one balanced read: it holds a slot on the leaders until the page is sent.
    return this.balanced([req.shard], { ...opts, consistency: 'immediate' }, async (permit) => {
      const leader = this.coordinator.leader(req.collection, req.shard);
      if (!leader) throw new ShardexError('SHX_NO_LEADER', `shard ${req.collection}/${req.shard} has no leader right now; retry shortly`);
      const page = leader.node === this.name ? await this.exportLocal(req) : await this.peers.call<ExportPage>(leader.node, 'search', { kind: 'export', ...req } satisfies PeerSearchRequest);
      const placed = balanceInfo(permit);
      return placed ? { ...page, readBalance: placed } : page;
    });
  }

  private async exportLocal(req: ExportRequest): Promise<ExportPage> {
    const replica = this.localReplica(req.collection, req.shard);
    const filtered = (req.q !== undefined && req.q !== '*' && req.q !== '*:*') || (req.filters?.length ?? 0) > 0;
    const matches = filtered
      ? this.searchIndex(req.collection, req.shard).matcher({ ...(req.q !== undefined && { q: req.q }), ...(req.filters && { filters: req.filters }) })
      : undefined;
    const wanted = parseFieldList(req.fields);
    const docs: Doc[] = [];
    let scanned = 0;
    for await (const e of replica.store.entries(req.after === undefined ? {} : { afterId: req.after })) {
      // A selective query may skip most of a shard: a page ends after this many entries even
      // with fewer documents, and the cursor moves on.
      if (++scanned > EXPORT_SCAN_LIMIT) return { docs, next: e.id };
      if (e.doc === null || (matches && !matches(e.id))) continue;
      docs.push({ ...projectFields(e.id, e.doc as StoredDoc, wanted), _version_: e.version });
      if (docs.length >= req.limit) return { docs, next: e.id };
    }
    return { docs, next: null };
  }

  private readonly schemas = new WeakMap<CollectionState, CollectionSchema>();

  /** The search schema of a collection (parsed once per cluster-state version). */
  schemaOf(collection: string): CollectionSchema {
    const state = this.knownCollection(collection);
    let schema = this.schemas.get(state);
    if (!schema) {
      schema = parseSchema(state.fields);
      this.schemas.set(state, schema);
    }
    return schema;
  }

  private searchIndex(collection: string, shard: string): ReplicaSearcher {
    const binding = this.localReplica(collection, shard).index;
    if (!(binding instanceof SearchIndexBinding)) throw new ShardexError('SHX_UNAVAILABLE', `the index of ${collection}/${shard} is not open yet`);
    return binding.index;
  }

  /**
   * A distributed search over every shard of the collection: each shard served by its leader
   * (immediate) or a snapshot reader (eventual). Balanced, it holds one slot per target its
   * shards were placed on for all its phases.
   */
  async search(
    collection: string,
    params: SearchParams,
    opts: ReadOptions = {},
  ): Promise<SearchResponse & { servedBy?: Record<string, ServedBy>; readBalance?: ReadBalanceInfo }> {
    const state = this.collectionState(collection);
    const shards = state.shards.map((s) => s.name);
    return this.balanced(shards, opts, async (permit) => {
      const servedBy: Record<string, ServedBy> = {};
      const searchers = this.readPath.searchers(collection, shards, pathOptions(opts, permit, this.readTimeoutMs), servedBy);
      const res = await distributedSearch(this.schemaOf(collection), searchers, params, this.shardStats.of(collection));
      const placed = balanceInfo(permit);
      return { ...res, ...(opts.consistency === 'eventual' && { servedBy }), ...(placed && { readBalance: placed }) };
    });
  }

  /** Peer calls for reads, answered locally when this node is the target. */
  private readTransport(): ReadTransport {
    return {
      leader: (c, s) => this.coordinator.leader(c, s)?.node,
      call: <T>(node: string, method: 'get' | 'search', body: object, timeoutMs?: number): Promise<T> => {
        if (node === this.name) {
          // On the next turn of the event loop: the calls of the same round to other nodes go out
          // first, instead of waiting for this node's own share of the work to end.
          return nextTurn().then(() => (method === 'get' ? this.onPeerGet(body as ShardRef & { ids: string[] }) : this.onPeerSearch(body as PeerSearchRequest))) as Promise<T>;
        }
        return this.peers.call<T>(node, method, body, timeoutMs);
      },
    };
  }

  private async onPeerSearch(req: PeerSearchRequest): Promise<unknown> {
    switch (req.kind) {
      case 'export':
        return this.exportLocal(req);
      case 'stats':
      case 'query':
      case 'fetch':
        return servePhase(req, this.searchIndex(req.collection, req.shard), this.localReplica(req.collection, req.shard).store);
    }
    throw new ShardexError('SHX_BAD_REQUEST', `unknown search request kind ${JSON.stringify((req as { kind?: unknown }).kind)}`);
  }

  /** Commits every shard at its leader. */
  async commit(collection: string): Promise<Record<string, CommitPoint>> {
    const state = this.collectionState(collection);
    const out: Record<string, CommitPoint> = {};
    await Promise.all(
      state.shards.map(async (s) => {
        const leader = this.coordinator.leader(collection, s.name);
        if (!leader) throw new ShardexError('SHX_NO_LEADER', `shard ${collection}/${s.name} has no leader right now; retry shortly`);
        out[s.name] =
          leader.node === this.name
            ? await this.commitLocal(collection, s.name)
            : await this.peers.call<CommitPoint>(leader.node, 'commit', { collection, shard: s.name });
      }),
    );
    return out;
  }

  private async commitLocal(collection: string, shard: string): Promise<CommitPoint> {
    const replica = this.replica(collection, shard);
    if (!replica) throw new ShardexError('SHX_NOT_FOUND', `${this.name} hosts no replica of ${collection}/${shard}`);
    const point = await replica.commit();
    this.m.commits.inc({ replica: replica.key });
    return point;
  }

  metricsText(): Promise<string> {
    return this.metrics.metrics();
  }

  /** Graceful stop: leave elections first (fast failover), then close servers and stores. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.lifetimeAbort.abort(new ShardexError('SHX_UNAVAILABLE', `node ${this.name} is stopping`));
    this.unsubscribe?.();
    this.unwatchReaders?.();
    this.unwatchLeaderBalance?.();
    this.leaderBalance.stop();
    this.readBalance.stop();
    for (const t of this.commitTimers.values()) clearInterval(t);
    this.commitTimers.clear();
    await this.syncing;
    for (const r of this.replicas.values()) await this.coordinator.leaveElection(r.collection, r.shard).catch(() => undefined);
    await this.http?.close();
    this.distributor.close();
    await this.grpcServer.close();
    this.peers.close();
    await this.coordinator.close().catch(() => undefined);
    if (this.checkpointTimer) clearInterval(this.checkpointTimer);
    for (const r of this.replicas.values()) {
      // A clean stop writes the index, so that the next start replays nothing.
      if (r.index instanceof PersistedIndex) await r.index.close().catch((err: Error) => this.log.warn({ replica: r.key, err: err.message }, 'could not write the index checkpoint at stop'));
      await r.store.close().catch(() => undefined);
    }
    this.replicas.clear();
    await this.mergeThread.close();
    await this.checkpointThread.close();
    this.log.info('node stopped');
  }
}

/**
 * The node's read balancer, following the settings in coordination (`loaded` sees each load
 * before it applies), with its metrics in `metrics`.
 */
function readBalancer(
  o: ReadBalanceOptions,
  coordinator: Coordinator,
  metrics: Registry,
  log: Logger,
  loaded: (settings: readonly BalanceSetting[]) => void,
): ReadBalancerRuntime {
  const rejected = new Counter({
    name: 'shardex_read_rejected_total',
    help: 'Balanced reads this node refused, by priority and reason (queue-full, not-configured, down, timeout)',
    labelNames: ['priority', 'reason'],
    registers: [metrics],
  });
  const source = coordinatorSettingsSource(coordinator, { ...(o.pollMs !== undefined && { pollMs: o.pollMs }) });
  const balance = new ReadBalancerRuntime({
    queueSize: o.queueSize ?? DEFAULT_READ_QUEUE_SIZE,
    ...(o.defaultPriority !== undefined && { defaultPriority: o.defaultPriority }),
    source: {
      load: async () => {
        const settings = await source.load();
        loaded(settings);
        return settings;
      },
      watch: (onChange) => source.watch(onChange),
    },
    onOutcome: (out) => {
      if (out.kind === 'rejected') rejected.inc({ priority: out.priority, reason: out.reason });
      else if (out.kind === 'timeout') rejected.inc({ priority: out.priority, reason: 'timeout' });
    },
    onSettingsError: (err) => log.warn({ err: (err as Error).message }, 'read-balance settings could not be loaded; the last good ones stay in force'),
  });
  new Gauge({
    name: 'shardex_read_slots_taken',
    help: 'Read slots this node has given out and not got back, by priority and target',
    labelNames: ['priority', 'target'],
    registers: [metrics],
    collect() {
      this.reset();
      for (const r of balance.snapshot()) this.set({ priority: r.priority, target: r.target }, r.taken);
    },
  });
  new Gauge({
    name: 'shardex_read_queue_length',
    help: "Reads waiting in this node's queue of each configured priority",
    labelNames: ['priority'],
    registers: [metrics],
    collect() {
      this.reset();
      for (const p of new Set(balance.settings().map((s) => s.priority))) this.set({ priority: p }, balance.queueLength(p));
    },
  });
  return balance;
}

/**
 * The read-path options of a read the balancer let through: its targets, when it was placed.
 * Every get and search builds one: properties are assigned, not spread.
 */
function pathOptions(opts: ReadOptions, permit: ReadPermit, defaultTimeoutMs: number): PathReadOptions {
  const o: { -readonly [K in keyof PathReadOptions]: PathReadOptions[K] } = {
    // The read's one deadline: what the balancer's queue left of it, else its own timeoutMs.
    timeoutMs: permit.balanced ? Math.max(1, permit.deadline - performance.now()) : (opts.timeoutMs ?? defaultTimeoutMs),
  };
  if (opts.consistency !== undefined) o.consistency = opts.consistency;
  if (opts.scanType !== undefined) o.scanType = opts.scanType;
  if (opts.minVersion !== undefined) o.minVersion = opts.minVersion;
  if (permit.balanced) o.targets = permit.targets;
  return o;
}

function balanceInfo(permit: ReadPermit): ReadBalanceInfo | undefined {
  if (!permit.balanced || permit.priority === undefined) return undefined;
  return { priority: permit.priority, targets: permit.targets, waitedMs: Math.round(permit.waitedMs * 100) / 100 };
}

/** Pauses between recovery attempts, and between tries to catch up with a new leader (the shared linear backoff, with jitter). */
const RECOVERY_BACKOFF = nodeRetryBackoff(100, 2000);
/** How often a recovery asks its leader again: whether it leads yet (at most 5 s of asking), whether it sees the replica recovering (1 s). */
const INFO_POLL_MS = 25;
const LEADER_POLLS = 200;
const SEE_RECOVERING_POLLS = 40;
const CATCH_UP_BACKOFF = nodeRetryBackoff(50, 1000);
/** Tries after the first to catch up with a new leader (about 90 s of pauses). */
const CATCH_UP_RETRIES = 99;

/** Entries in arrays of up to 1,000 (the messages of a copy). */
async function* inChunks<T>(entries: AsyncIterable<T>): AsyncGenerator<T[]> {
  let chunk: T[] = [];
  for await (const e of entries) {
    chunk.push(e);
    if (chunk.length === 1000) {
      yield chunk;
      chunk = [];
    }
  }
  if (chunk.length > 0) yield chunk;
}

const FILE_CHUNK = 512 * 1024;

/** The first `bytes` of a file, in pieces of at most 512 KiB; the file is left open. */
async function* readChunks(handle: FileHandle, bytes: number): AsyncGenerator<Buffer> {
  if (bytes === 0) return;
  let read = 0;
  for await (const data of handle.createReadStream({ start: 0, end: bytes - 1, highWaterMark: FILE_CHUNK, autoClose: false }) as AsyncIterable<Buffer>) {
    read += data.length;
    yield data;
  }
  if (read < bytes) throw new ShardexError('SHX_INTERNAL', `a segment file ended at ${read} of its ${bytes} bytes while it was copied`);
}
