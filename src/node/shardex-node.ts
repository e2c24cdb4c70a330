// The node process: hosts shard replicas, serves HTTP for clients and gRPC for peers, and
// follows the cluster state to open, lead, follow and close its replicas.
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { Counter, Registry, collectDefaultMetrics } from 'prom-client';
import type { FastifyInstance } from 'fastify';
import type { CollectionSpec, CollectionState, Coordinator, NodeInfo } from '../coordination/index.js';
import { CommandDistributor } from '../distrib/distributor.js';
import { checkId } from '../distrib/documents.js';
import type { ShardUpdate, ShardUpdateResult, WireOp } from '../transport/index.js';
import { SearchIndexBinding, ShardReplica } from '../distrib/replica.js';
import { distributedSearch, servePhase, type SearchParams, type SearchResponse, type ShardPhaseRequest } from '../distrib/search.js';
import { parseFieldList, parseSchema, projectFields, type CollectionSchema, type ShardIndex, type StoredDoc } from '../index/index.js';
import { canPeerSync, peerSync, syncFrom, syncStartOf, type PeerLogInfo, type SyncSource } from '../distrib/recovery.js';
import { mayStand, type ShardEffect } from '../distrib/shard-state.js';
import { linearBackoff, sleep, type BackoffPolicy } from '../distrib/retry.js';
import { UpdateProcessor, routerOf, type UpdateResponse } from '../distrib/update-processor.js';
import { ShardexError } from '../errors.js';
import { EventualRouter, type ServedBy } from '../read/eventual.js';
import { ReadPath, type ReadOptions, type ReadTransport } from '../read/read-path.js';
import { ReaderSelector } from '../read/selector.js';
import { DEFAULT_DURABILITY, ReplicaStore, type CommitPoint, type Doc, type Durability, type StoreWrite, type StoredEntry } from '../ulog/index.js';
import { PeerClients, PeerServer, portError } from '../transport/index.js';
import { buildHttp } from './http/app.js';

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
  readonly maxInFlight?: number;
  readonly backoff?: BackoffPolicy;
  readonly forwardRetries?: number;
  readonly replicaRetries?: number;
  readonly logRetention?: number;
  /** LevelDB write buffer per replica, MiB (default LevelDB's 4). */
  readonly writeBufferMb?: number;
  readonly callTimeoutMs?: number;
  /** Scan-server selector profiles (Accumulo's JSON); default: Accumulo's default profile. */
  readonly selectorProfiles?: unknown;
  /** How long a delete's tombstone is kept (Elasticsearch's gc_deletes); default 60 s. */
  readonly deleteRetentionMs?: number;
  /** Observes every batch a replica writes to disk (tests check sync-before-ack with it). */
  readonly onStoreWrite?: (replica: string, write: StoreWrite) => void;
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

export type { ReadOptions } from '../read/read-path.js';

export interface GetResult {
  /** The document, or undefined when an eventual read found none (servedBy says where it looked). */
  readonly entry: StoredEntry | undefined;
  readonly shard: string;
  readonly servedBy?: ServedBy;
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
  /** Set once the node has read the cluster state and opened its replicas: until then it answers SHX_STARTING. */
  private started = false;
  private readonly forwarded: Counter<'phase'>;
  private readonly recoveries: Counter<'method'>;
  private readonly readPath: ReadPath;
  private readonly commitTimers = new Map<string, NodeJS.Timeout>();
  httpUrl = '';
  grpcAddress = '';

  constructor(opts: ShardexNodeOptions) {
    this.o = opts;
    this.name = opts.name;
    this.log = opts.logger.child({ node: opts.name });
    this.coordinator = opts.coordinator;
    collectDefaultMetrics({ register: this.metrics, prefix: 'shardex_' });
    this.forwarded = new Counter({
      name: 'shardex_updates_forwarded_total',
      help: 'Update ops this node sent on to another node, by phase',
      labelNames: ['phase'],
      registers: [this.metrics],
    });
    this.recoveries = new Counter({
      name: 'shardex_recoveries_total',
      help: 'Replica recoveries completed on this node, by method (peer-sync or full-copy)',
      labelNames: ['method'],
      registers: [this.metrics],
    });
    this.peers = new PeerClients({
      resolve: (node) => this.coordinator.liveNodes().find((n) => n.name === node)?.grpc,
      logger: this.log,
      ...(opts.callTimeoutMs !== undefined && { callTimeoutMs: opts.callTimeoutMs }),
    });
    this.distributor = new CommandDistributor({
      transport: this.peers,
      logger: this.log,
      maxInFlight: opts.maxInFlight ?? 16,
      backoff: opts.backoff ?? linearBackoff(),
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
      onForward: (phase, n) => this.forwarded.inc({ phase }, n),
      isStopping: () => this.stopped,
    });
    const eventual = new EventualRouter({
      selector: new ReaderSelector(opts.selectorProfiles),
      readers: () => this.readers(),
      call: (reader, body, options) => this.readPath.callReader(reader, body, options),
    });
    this.readPath = new ReadPath(this.readTransport(), eventual);
    this.grpcServer = new PeerServer(
      {
        update: (u) => this.onPeerUpdate(u),
        get: (req) => this.onPeerGet(req),
        // The schema checked the shape; term statistics are the index's to read.
        search: (req) => this.onPeerSearch(req as PeerSearchRequest),
        commit: (req) => this.commitLocal(req.collection, req.shard),
        versions: async (req) => this.onPeerVersions(req),
        updatesAfter: async (r) => {
          const replica = this.localReplica(r.collection, r.shard);
          // A dirty replica holds writes nobody acknowledged: no new leader may take them from it.
          if (replica.health === 'dirty') throw new ShardexError('SHX_RECOVERING', `${this.name}'s replica of ${replica.key} is recovering from a deposed leadership; sync from another replica`);
          return replica.store.updatesAfter(r.after, Math.min(r.limit, 10_000), r.upto);
        },
        copyShard: (req) => this.onPeerCopy(req),
      },
      this.log,
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
    this.http = await buildHttp(this, { bodyLimit: this.o.bodyLimit ?? 100 * 1024 * 1024, logger: this.log });
    await this.http.listen({ host, port: this.o.httpPort }).catch((err: Error) => {
      throw portError('HTTP', host, this.o.httpPort, err);
    });
    const addr = this.http.server.address();
    this.httpUrl = `http://${advertised}:${typeof addr === 'object' && addr ? addr.port : this.o.httpPort}`;
    // Until each replica has opened and caught up it is down for everyone (as Solr's cores
    // publish "down" at registration): the state may still say "active" from before a restart.
    await this.coordinator.start(this.info, () => this.publishReplicasDown());
    this.unsubscribe = this.coordinator.onChange(() => this.scheduleSync());
    this.scheduleSync();
    await this.syncing;
    this.started = true;
    this.log.info({ http: this.httpUrl, grpc: this.grpcAddress }, 'node started');
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
    for (const [c, state] of this.coordinator.collections()) {
      for (const s of state.shards) {
        if (!s.replicas.some((r) => r.node === this.name)) continue;
        const key = `${c}/${s.name}`;
        wanted.add(key);
        if (!this.replicas.has(key) && !this.opening.has(key)) await this.openReplica(c, s.name);
      }
    }
    for (const replica of this.replicas.values()) {
      const state = this.coordinator.collection(replica.collection);
      replica.store.setDurability(durabilityOf(state));
      const mine = state?.shards.find((s) => s.name === replica.shard)?.replicas.find((r) => r.node === this.name);
      if (mine?.state === 'down' && replica.role === 'follower' && !replica.recovering) void this.recover(replica);
    }
    for (const [key, replica] of this.replicas) {
      if (wanted.has(key)) continue;
      this.replicas.delete(key);
      await this.coordinator.leaveElection(replica.collection, replica.shard);
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
      const store = await ReplicaStore.open(this.replicaDir(collection, shard), {
        durability: durabilityOf(this.coordinator.collection(collection)),
        ...(this.o.logRetention !== undefined && { logRetention: this.o.logRetention }),
        ...(this.o.deleteRetentionMs !== undefined && { deleteRetentionMs: this.o.deleteRetentionMs }),
        ...(this.o.writeBufferMb !== undefined && { writeBufferSize: this.o.writeBufferMb * 1024 * 1024 }),
        ...(onStoreWrite && { onWrite: (w: StoreWrite) => onStoreWrite(`${this.name}/${key}`, w) }),
      });
      try {
        return await this.attachReplica(key, collection, shard, store);
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

  private async attachReplica(key: string, collection: string, shard: string, store: ReplicaStore): Promise<ShardReplica> {
    const replica = new ShardReplica(collection, shard, store, this.log);
    // The index lives in memory: rebuild it from the stored documents before serving.
    const t0 = performance.now();
    const binding = new SearchIndexBinding(this.schemaOf(collection));
    let unindexable = 0;
    for await (const e of store.entries()) {
      if (e.doc === null) continue;
      try {
        binding.index.add(e.id, e.doc as { id: string });
      } catch {
        // Only data written before admission existed can hold such a document: keep the replica usable.
        unindexable++;
      }
    }
    if (unindexable > 0) this.log.warn({ replica: key, unindexable }, 'stored documents the index refuses were left out of the search index');
    binding.index.trim();
    replica.index = binding;
    this.replicas.set(key, replica);
    this.log.info({ replica: key, docs: store.docCount, maxVersion: store.maxVersion, indexMs: Math.round(performance.now() - t0) }, 'replica opened');
    await this.joinElection(replica);
    // A replica that (re)starts catches up from its leader before it counts as active.
    void this.recover(replica);
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
    try {
      await this.coordinator.leaveElection(replica.collection, replica.shard);
      if (!this.stopped && this.replicas.get(replica.key) === replica) await this.joinElection(replica);
    } catch (err) {
      this.log.warn({ replica: replica.key, err: (err as Error).message }, 'could not rejoin the election; retrying on the next cluster change');
    }
  }

  private localReplica(collection: string, shard: string): ShardReplica {
    const replica = this.replica(collection, shard);
    if (!replica) throw new ShardexError('SHX_NOT_FOUND', `${this.name} hosts no replica of ${collection}/${shard}`);
    return replica;
  }

  private onPeerVersions(req: ShardRef & { replica?: string }): PeerLogInfo {
    const replica = this.localReplica(req.collection, req.shard);
    const state = req.replica
      ? this.coordinator.collection(req.collection)?.shards.find((s) => s.name === req.shard)?.replicas.find((r) => r.node === req.replica)?.state
      : undefined;
    const commit = replica.store.lastCommit;
    return {
      maxVersion: replica.store.maxVersion,
      trimmedThrough: replica.store.trimmedThrough,
      epoch: replica.epoch || replica.fence,
      leading: replica.role === 'leader',
      ...(state && { replicaState: state }),
      ...(commit && { commit }),
    };
  }

  /** A shard's documents in chunks: its current state (recovery) or its latest commit point (readers). */
  private async *onPeerCopy(req: ShardRef & { commit?: boolean }): AsyncGenerator<StoredEntry[]> {
    const replica = this.localReplica(req.collection, req.shard);
    let chunk: StoredEntry[] = [];
    for await (const e of req.commit ? replica.store.commitEntries() : replica.store.entries()) {
      chunk.push(e);
      if (chunk.length === 1000) {
        yield chunk;
        chunk = [];
      }
    }
    if (chunk.length > 0) yield chunk;
  }

  private syncSource(node: string, collection: string, shard: string): SyncSource {
    return {
      info: () => this.peers.call<PeerLogInfo>(node, 'versions', { collection, shard, replica: this.name }),
      updatesAfter: (after, limit) => this.peers.call<StoredEntry[]>(node, 'updatesAfter', { collection, shard, after, limit }),
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
          const n = await peerSync(replica, this.syncSource(p.node, replica.collection, replica.shard), from);
          if (n > 0) this.log.info({ replica: replica.key, from: p.node, applied: n }, 'new leader synced updates from a replica');
        } catch (err) {
          this.log.warn({ replica: replica.key, peer: p.node, err: (err as Error).message }, 'new leader could not sync from a replica');
        }
      }),
    );
    if (this.coordinator.leader(replica.collection, replica.shard)?.epoch !== epoch) return;
    this.perform(replica, replica.step({ type: 'ready', epoch }));
    if (replica.role === 'leader') await this.coordinator.setReplicaState(replica.collection, replica.shard, this.name, 'active').catch(() => undefined);
  }

  /**
   * Recovery (Solr's RecoveryStrategy): publish `recovering`, wait until the leader sees us
   * recovering (so that it sends us every later update, which we apply as it comes), sync
   * from it, then publish `active` with the leader's term.
   */
  async recover(replica: ShardReplica): Promise<void> {
    if (replica.recovering || this.stopped) return;
    replica.recovering = true;
    const { collection, shard } = replica;
    try {
      for (let attempt = 1; !this.stopped && this.replicas.get(replica.key) === replica; attempt++) {
        const leader = this.coordinator.leader(collection, shard);
        if (replica.role !== 'follower') return;
        // No leader, or still ourselves while we resign (a deposed leader recovers from the next one).
        if (!leader || leader.node === this.name) {
          const other = (): boolean => {
            const l = this.coordinator.leader(collection, shard);
            return l !== undefined && l.node !== this.name;
          };
          await this.waitFor(() => this.stopped || replica.role !== 'follower' || other(), 60_000).catch(() => undefined);
          continue;
        }
        try {
          replica.step({ type: 'recoveryStarted' });
          await this.coordinator.setReplicaState(collection, shard, this.name, 'recovering');
          const source = this.syncSource(leader.node, collection, shard);
          const info = await source.info();
          if (info.replicaState === 'down') throw new ShardexError('SHX_RECOVERING', `leader ${leader.node} does not see ${this.name} recovering yet`);
          const report = await syncFrom(replica, source, info);
          await this.coordinator.catchUpTerm(collection, shard, this.name);
          await this.coordinator.setReplicaState(collection, shard, this.name, 'active');
          this.recoveries.inc({ method: report.method });
          replica.step({ type: 'recoveryFinished' });
          this.log.info({ replica: replica.key, leader: leader.node, ...report }, 'replica recovered');
          return;
        } catch (err) {
          this.log.warn({ replica: replica.key, attempt, err: (err as Error).message }, 'recovery attempt failed; retrying');
          await sleep(Math.min(100 * attempt, 2000));
        }
      }
    } finally {
      replica.recovering = false;
    }
  }

  /**
   * After a new leadership's announcement: once its leader is ready, peer sync from it (with
   * convergence), so that a write of the deposed leader that reached the new leader and not us
   * is not missing here. A replica that is recovering syncs anyway; when the leader's log does
   * not reach back far enough, a full recovery runs instead.
   */
  private async catchUp(replica: ShardReplica, epoch: number): Promise<void> {
    if (replica.catchingUp || this.stopped) return;
    replica.catchingUp = true;
    const { collection, shard } = replica;
    try {
      for (let attempt = 1; attempt <= 100 && !this.stopped && this.replicas.get(replica.key) === replica; attempt++) {
        // A newer leadership than this one has its own catch-up; a recovery syncs by itself.
        if (replica.fence !== epoch || replica.role !== 'follower' || replica.recovering) return;
        const leader = this.coordinator.leader(collection, shard);
        if (leader && leader.node !== this.name && leader.epoch === epoch) {
          try {
            const source = this.syncSource(leader.node, collection, shard);
            const info = await source.info();
            if (info.leading && info.epoch === epoch) {
              if (!canPeerSync(replica.store.maxVersion, await syncStartOf(replica.store), info)) {
                void this.recover(replica);
                return;
              }
              const report = await syncFrom(replica, source, info);
              if (report.applied > 0 || report.reverted > 0) this.log.info({ replica: replica.key, leader: leader.node, epoch, ...report }, 'replica caught up with a new leader');
              return;
            }
          } catch (err) {
            this.log.debug({ replica: replica.key, err: (err as Error).message }, 'catch-up with the new leader failed; retrying');
          }
        }
        await sleep(Math.min(50 * attempt, 1000));
      }
    } finally {
      replica.catchingUp = false;
    }
  }

  /** The leader records a commit point every autoCommit interval (what eventual reads see). */
  private startAutoCommit(replica: ShardReplica): void {
    this.stopAutoCommit(replica);
    const ms = this.coordinator.collection(replica.collection)?.autoCommitMs ?? 0;
    if (ms <= 0) return;
    const t = setInterval(() => {
      if (replica.role !== 'leader' || this.stopped) return;
      replica.store.commit().catch((err) => this.log.warn({ replica: replica.key, err: (err as Error).message }, 'auto-commit failed'));
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
    if (this.stopped) return false;
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

  update(collection: string, ops: readonly WireOp[], minRf?: number): Promise<UpdateResponse> {
    return this.processor.update(collection, ops, minRf);
  }

  private onPeerUpdate(u: ShardUpdate): Promise<ShardUpdateResult> {
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
    const { entries, servedBy } = await this.readPath.get(collection, shard, [id], opts);
    const entry = entries[0];
    if (entry && entry.doc !== null) return { entry, shard, ...(servedBy && { servedBy }) };
    return servedBy ? { entry: undefined, shard, servedBy } : undefined;
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
  async exportShard(req: ExportRequest, opts: { distrib?: boolean } = {}): Promise<ExportPage> {
    const state = this.collectionState(req.collection);
    if (!state.shards.some((s) => s.name === req.shard)) {
      throw new ShardexError('SHX_BAD_REQUEST', `collection '${req.collection}' has no shard '${req.shard}'; shards are ${state.shards.map((s) => s.name).join(', ')}`);
    }
    if (opts.distrib === false) return this.exportLocal(req);
    const leader = this.coordinator.leader(req.collection, req.shard);
    if (!leader) throw new ShardexError('SHX_NO_LEADER', `shard ${req.collection}/${req.shard} has no leader right now; retry shortly`);
    if (leader.node === this.name) return this.exportLocal(req);
    return this.peers.call<ExportPage>(leader.node, 'search', { kind: 'export', ...req } satisfies PeerSearchRequest);
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

  private searchIndex(collection: string, shard: string): ShardIndex {
    const binding = this.localReplica(collection, shard).index;
    if (!(binding instanceof SearchIndexBinding)) throw new ShardexError('SHX_UNAVAILABLE', `the index of ${collection}/${shard} is not open yet`);
    return binding.index;
  }

  /** A distributed search over every shard of the collection, each served by its leader. */
  async search(collection: string, params: SearchParams, opts: ReadOptions = {}): Promise<SearchResponse & { servedBy?: Record<string, ServedBy> }> {
    const state = this.collectionState(collection);
    const servedBy: Record<string, ServedBy> = {};
    const searchers = this.readPath.searchers(collection, state.shards.map((s) => s.name), opts, servedBy);
    const res = await distributedSearch(this.schemaOf(collection), searchers, params);
    return opts.consistency === 'eventual' ? { ...res, servedBy } : res;
  }

  /** Peer calls for reads, answered locally when this node is the target. */
  private readTransport(): ReadTransport {
    return {
      leader: (c, s) => this.coordinator.leader(c, s)?.node,
      call: <T>(node: string, method: 'get' | 'search', body: object, timeoutMs?: number): Promise<T> => {
        if (node === this.name) {
          return (method === 'get' ? this.onPeerGet(body as ShardRef & { ids: string[] }) : this.onPeerSearch(body as PeerSearchRequest)) as Promise<T>;
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
    return replica.store.commit();
  }

  metricsText(): Promise<string> {
    return this.metrics.metrics();
  }

  /** Graceful stop: leave elections first (fast failover), then close servers and stores. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.unsubscribe?.();
    for (const t of this.commitTimers.values()) clearInterval(t);
    this.commitTimers.clear();
    await this.syncing;
    for (const r of this.replicas.values()) await this.coordinator.leaveElection(r.collection, r.shard).catch(() => undefined);
    await this.http?.close();
    this.distributor.close();
    await this.grpcServer.close();
    this.peers.close();
    await this.coordinator.close().catch(() => undefined);
    for (const r of this.replicas.values()) await r.store.close().catch(() => undefined);
    this.replicas.clear();
    this.log.info('node stopped');
  }
}
