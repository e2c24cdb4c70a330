// A snapshot reader (Accumulo's scan server): holds no shard permanently. The first eventual
// read of a shard copies the shard's latest commit point from its leader (streamed); later
// reads are served from the local copy, which is refreshed incrementally (the leader's log
// between the two commit points). Least recently used shards are evicted past the disk
// budget. Scans run in a bounded pool; a request that cannot start within its busy timeout is
// answered BUSY.
//
// The staleness bound: a copy is "checked" at the moment the reader asks the leader for its
// newest commit point, and holds every commit acknowledged before that moment. The reader
// serves a copy only while it was checked at most `snapshotExpiryMs` ago; an older copy is
// refreshed before the request is answered (one refresh shared by every request waiting for
// it), and a copy that cannot be refreshed is not served. So an eventual read answered by a
// reader sees every commit acknowledged more than `snapshotExpiryMs` before the reader started
// it. Past half the expiry a copy in use is refreshed in the background, so that reads rarely
// wait. Only durations on the reader's own clock are compared: no clock sync is assumed.
//
// Stopping drains: new scans (and queued ones) are answered BUSY at once, so the selector
// picks another reader without delay; started scans finish; then the reader deregisters and
// closes.
import { mkdir, readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { Counter, Gauge, Registry } from 'prom-client';
import type { FastifyInstance } from 'fastify';
import type { Coordinator, NodeInfo } from '../coordination/index.js';
import { SearchIndexBinding, ShardReplica } from '../distrib/replica.js';
import { schemaFingerprint } from '../distrib/segment-merge.js';
import { servePhase, type ShardPhaseRequest } from '../distrib/search.js';
import { parseSchema } from '../index/index.js';
import { ShardexError } from '../errors.js';
import { PeerClients, PeerServer, type TlsMaterial } from '../transport/index.js';
import { readShardCopy } from './shard-copy.js';
import type { CommitPoint, StoredEntry } from '../ulog/index.js';
import { ReplicaStore } from '../ulog/index.js';
import { readAccessOf, type ApiKey } from '../node/http/auth.js';
import { startReaderHttp } from './reader-http.js';
import { ScanPool } from './scan-pool.js';

export interface EventualOptions {
  /** How long the request may wait for a scan slot before the reader answers BUSY. */
  readonly busyTimeoutMs: number;
  /** Serve only from a snapshot at least this new (per shard); else SHX_SNAPSHOT_BEHIND. */
  readonly minVersion?: number;
}

/** A request without eventual options waits for a scan slot as long as the default busy timeout. */
function eventualOf(e: EventualOptions | undefined): EventualOptions {
  return e ?? { busyTimeoutMs: 5000 };
}

export interface ReaderAnswer<T> {
  readonly snapshot: number;
  readonly result: T;
}

export interface SnapshotReaderOptions {
  readonly name: string;
  readonly group?: string;
  /** Address to bind (0.0.0.0 = every interface). */
  readonly host?: string;
  /** Address nodes and clients reach this reader at (default: host). */
  readonly advertiseHost?: string;
  readonly grpcPort: number;
  readonly httpPort: number;
  readonly dataDir: string;
  readonly coordinator: Coordinator;
  readonly logger: Logger;
  /** Age after which a cached shard is refreshed to the newest commit point (Accumulo: sserv.cache.metadata.expiration). */
  readonly snapshotExpiryMs?: number;
  /** Disk the cached shards may use before the least recently used are evicted. */
  readonly diskBudgetBytes?: number;
  /** Concurrent scans at most. */
  readonly maxScans?: number;
  /** Fault injection for tests and benchmarks: every scan takes at least this long. */
  readonly scanDelayMs?: number;
  /** A shard copy that receives nothing from the leader for this long is given up (default 10 s). */
  readonly copyStallMs?: number;
  /** How long stop() lets started scans finish before it closes anyway (default 30 s). */
  readonly drainTimeoutMs?: number;
  /** The secret every gRPC call between nodes and readers carries (`--cluster-secret-file`). */
  readonly clusterSecret?: string;
  /** TLS of the HTTP and gRPC servers and of the gRPC clients (`--tls-cert`, `--tls-key`); with its `ca`, gRPC is mutual TLS (`--tls-ca`). */
  readonly tls?: TlsMaterial;
  /** API keys of the reader's HTTP port (`--api-keys`): everything but /health then needs a valid key. */
  readonly apiKeys?: readonly ApiKey[];
  /** Copy a commit point's documents only and index them here, not the leader's segment files (`--copy-documents`: to compare, or to rule the segment copy out). */
  readonly copyDocuments?: boolean;
  /** The clock of snapshot ages, ms (tests inject one). */
  readonly now?: () => number;
}

const DEFAULT_SNAPSHOT_EXPIRY_MS = 5000;
export const DEFAULT_DRAIN_TIMEOUT_MS = 30_000;
const DEFAULT_COPY_STALL_MS = 10_000;

interface CachedShard {
  readonly key: string;
  readonly dir: string;
  readonly replica: ShardReplica;
  readonly binding: SearchIndexBinding;
  commit: CommitPoint;
  /** When the leader was last asked for its newest commit point, which `commit` is (or follows). */
  checkedAt: number;
  lastUsed: number;
  refreshing?: Promise<void>;
  /** Requests holding this copy: it is closed only once none does. */
  users: number;
  /** Replaced by a new copy, or evicted: closed when its last user lets go. */
  retired: boolean;
  /** How the copy's index was made: the leader's segments loaded, or its documents indexed here. */
  readonly index: 'segments' | 'documents';
  /** The leadership the copy was made or last refreshed from (see refresh). */
  epoch: number | undefined;
}

interface LeaderCommitInfo {
  readonly maxVersion: number;
  readonly trimmedThrough: number;
  /** Whether the node asked still leads the shard: its replica leads, and it may act as a leader (its coordination session is up, or within its grace). */
  readonly leading?: boolean;
  /** The leadership epoch of the node asked. */
  readonly epoch?: number;
  readonly commit?: CommitPoint;
}

export class SnapshotReader {
  readonly name: string;
  readonly group: string;
  readonly metrics = new Registry();
  private readonly o: SnapshotReaderOptions;
  private readonly log: Logger;
  private readonly peers: PeerClients;
  private readonly server: PeerServer;
  private readonly pool: ScanPool;
  private readonly shards = new Map<string, CachedShard>();
  private readonly loading = new Map<string, Promise<CachedShard>>();
  private http: FastifyInstance | undefined;
  private readonly busyCounter: Counter;
  private readonly servedCounter: Counter;
  private readonly refreshCounter: Counter;
  private readonly cache: { readonly hits: Counter; readonly misses: Counter; readonly copies: Counter; readonly evictions: Counter; readonly indexed: Counter };
  private readonly now: () => number;
  private readonly expiryMs: number;
  private generation = 0;
  grpcAddress = '';
  httpUrl = '';
  private stopped = false;

  constructor(opts: SnapshotReaderOptions) {
    this.o = opts;
    this.name = opts.name;
    this.group = opts.group ?? 'default';
    this.log = opts.logger.child({ reader: opts.name, group: this.group });
    this.pool = new ScanPool(opts.maxScans ?? 8);
    this.now = opts.now ?? (() => performance.timeOrigin + performance.now());
    this.expiryMs = opts.snapshotExpiryMs ?? DEFAULT_SNAPSHOT_EXPIRY_MS;
    const counter = (name: string, help: string): Counter => new Counter({ name, help, registers: [this.metrics] });
    this.busyCounter = counter('shardex_reader_busy_total', 'Requests refused as BUSY');
    this.servedCounter = counter('shardex_reader_scans_total', 'Scans served');
    this.refreshCounter = counter('shardex_reader_refreshes_total', 'Times a cached shard asked its leader for a newer commit point');
    this.cache = {
      hits: counter('shardex_reader_cache_hits_total', 'Scans that found their shard in the local cache'),
      misses: counter('shardex_reader_cache_misses_total', 'Scans that found their shard not cached (and waited for a copy)'),
      copies: counter('shardex_reader_copies_total', "Full copies of a shard's commit point made from its leader (first use, or a log that no longer reaches back)"),
      evictions: counter('shardex_reader_evictions_total', 'Cached shards evicted past the disk budget'),
      indexed: counter('shardex_reader_copy_indexed_docs_total', "Documents a full copy indexed itself, because the leader sent no usable segments for its commit point (0 when copies load the leader's segments)"),
    };
    const shards = this.shards;
    new Gauge({
      name: 'shardex_reader_cached_shards',
      help: 'Shards held in the local cache',
      registers: [this.metrics],
      collect() {
        this.set(shards.size);
      },
    });
    const trust = { ...(opts.clusterSecret !== undefined && { secret: opts.clusterSecret }), ...(opts.tls && { tls: opts.tls }) };
    this.peers = new PeerClients({ resolve: (n) => opts.coordinator.liveNodes().find((x) => x.name === n)?.grpc, logger: this.log, ...trust });
    const refuse = async (): Promise<never> => {
      throw new ShardexError('SHX_BAD_REQUEST', 'a snapshot reader serves only eventual reads (get and search)');
    };
    this.server = new PeerServer(
      {
        update: refuse,
        commit: refuse,
        versions: refuse,
        updatesAfter: refuse,
        copyShard: () => {
          throw new ShardexError('SHX_BAD_REQUEST', 'a snapshot reader serves only eventual reads (get and search)');
        },
        get: (req) => this.get({ ...req, eventual: eventualOf(req.eventual) }),
        search: (req) => {
          if (req.kind === 'export') throw new ShardexError('SHX_BAD_REQUEST', 'a snapshot reader serves only eventual reads (get and search)');
          return this.search({ ...(req as ShardPhaseRequest), eventual: eventualOf(req.eventual) });
        },
      },
      this.log,
      { ...trust, readAccess: readAccessOf(opts.apiKeys) },
    );
  }

  get info(): NodeInfo {
    return { name: this.name, http: this.httpUrl, grpc: this.grpcAddress, role: 'reader', group: this.group };
  }

  async start(): Promise<void> {
    const host = this.o.host ?? '127.0.0.1';
    await rm(this.o.dataDir, { recursive: true, force: true });
    await mkdir(this.o.dataDir, { recursive: true });
    const advertised = this.o.advertiseHost ?? host;
    this.grpcAddress = `${advertised}:${await this.server.listen(host, this.o.grpcPort)}`;
    const app = await startReaderHttp({
      host,
      port: this.o.httpPort,
      logger: this.log,
      metrics: this.metrics,
      ...(this.o.tls && { tls: this.o.tls }),
      ...(this.o.apiKeys && { apiKeys: this.o.apiKeys }),
      health: () => ({ status: this.pool.draining ? 'draining' : 'ok', reader: this.name, group: this.group }),
      status: () => this.status(),
    });
    this.http = app;
    const addr = app.server.address();
    this.httpUrl = `${this.o.tls ? 'https' : 'http'}://${advertised}:${typeof addr === 'object' && addr ? addr.port : this.o.httpPort}`;
    await this.o.coordinator.start(this.info);
    this.log.info({ http: this.httpUrl, grpc: this.grpcAddress }, 'snapshot reader started');
  }

  /** What GET /api/readers shows of this reader. */
  status(): unknown {
    return {
      name: this.name,
      group: this.group,
      snapshotExpiryMs: this.expiryMs,
      draining: this.pool.draining,
      shards: [...this.shards.values()].map((s) => ({ shard: s.key, snapshot: s.commit.version, docs: s.replica.store.docCount, index: s.index, fetchedAt: Math.round(s.checkedAt) })),
      scans: { running: this.pool.running, waiting: this.pool.waiting, served: this.pool.served, busy: this.pool.busy },
    };
  }

  private async scan<T>(eventual: EventualOptions, collection: string, shard: string, work: (s: CachedShard) => Promise<T>): Promise<ReaderAnswer<T>> {
    try {
      return await this.pool.run(eventual.busyTimeoutMs, async () => {
        const cached = await this.acquire(collection, shard, eventual.minVersion);
        try {
          cached.lastUsed = this.now();
          if (this.o.scanDelayMs) await new Promise((r) => setTimeout(r, this.o.scanDelayMs));
          this.servedCounter.inc();
          return { snapshot: cached.commit.version, result: await work(cached) };
        } finally {
          this.release(cached);
        }
      });
    } catch (err) {
      if (err instanceof ShardexError && err.code === 'SHX_BUSY') this.busyCounter.inc();
      throw err;
    }
  }

  private get(req: { collection: string; shard: string; ids: string[]; eventual: EventualOptions }): Promise<ReaderAnswer<Array<StoredEntry | null>>> {
    return this.scan(req.eventual, req.collection, req.shard, async (s) => (await s.replica.store.getMany(req.ids)).map((e) => e ?? null));
  }

  private search(req: ShardPhaseRequest & { eventual: EventualOptions }): Promise<ReaderAnswer<unknown>> {
    return this.scan(req.eventual, req.collection, req.shard, (s) => servePhase(req, s.binding.index, s.replica.store));
  }

  // ---- the shard cache -----------------------------------------------------------------

  private leaderOf(collection: string, shard: string): string {
    const leader = this.o.coordinator.leader(collection, shard);
    if (!leader) throw new ShardexError('SHX_NO_LEADER', `shard ${collection}/${shard} has no leader to copy a snapshot from; retry shortly`);
    return leader.node;
  }

  /**
   * The copy of a shard a request may read, held for it until `release`: loaded on first use;
   * refreshed first if it is past the snapshot expiry (or older than `minVersion`); refused if
   * it cannot be made fresh.
   */
  private async acquire(collection: string, shard: string, minVersion?: number): Promise<CachedShard> {
    const key = `${collection}/${shard}`;
    const arrived = this.now();
    const found = this.shards.get(key);
    (found ? this.cache.hits : this.cache.misses).inc();
    let cached = this.hold(found ?? (await this.loadOnce(collection, shard)));
    try {
      const behind = (c: CachedShard): boolean => minVersion !== undefined && c.commit.version < minVersion;
      // Checked at most the expiry before this request started: it holds every commit acknowledged before then.
      const fresh = (c: CachedShard): boolean => arrived - c.checkedAt <= this.expiryMs;
      const refreshed = async (): Promise<unknown> => {
        const failure = await this.refreshOnce(cached, collection, shard).then(
          () => undefined,
          (err: unknown) => err,
        );
        // A full copy may have replaced this one while it refreshed.
        const current = this.shards.get(key);
        if (current && current !== cached) {
          this.release(cached);
          cached = this.hold(current);
        }
        return failure;
      };
      if (!fresh(cached) || behind(cached)) {
        let failure = await refreshed();
        // The refresh shared may have asked the leader before this request started: ask again.
        if (failure === undefined && !fresh(cached)) failure = await refreshed();
        if (!fresh(cached)) {
          const why = failure instanceof Error ? failure.message : 'the refresh did not complete';
          throw new ShardexError(
            'SHX_UNAVAILABLE',
            `reader ${this.name} cannot serve ${key}: its copy was checked ${Math.round(arrived - cached.checkedAt)} ms before the request, more than the snapshot expiry of ${this.expiryMs} ms, and refreshing it failed (${why}); another reader or the leader will serve`,
            failure === undefined ? undefined : { cause: failure },
          );
        }
      } else if (arrived - cached.checkedAt > this.expiryMs / 2) {
        void this.refreshOnce(cached, collection, shard).catch(() => undefined);
      }
      if (behind(cached)) {
        throw new ShardexError('SHX_SNAPSHOT_BEHIND', `reader ${this.name} holds ${key} as of version ${cached.commit.version}, older than minVersion ${minVersion}`);
      }
      return cached;
    } catch (err) {
      this.release(cached);
      throw err;
    }
  }

  private hold(cached: CachedShard): CachedShard {
    cached.users++;
    return cached;
  }

  private release(cached: CachedShard): void {
    if (--cached.users === 0 && cached.retired) void this.close(cached);
  }

  /** Takes a copy out of service: closed (and removed) now if nobody reads it, else after its last reader. */
  private retire(cached: CachedShard): Promise<void> {
    if (this.shards.get(cached.key) === cached) this.shards.delete(cached.key);
    cached.retired = true;
    return cached.users === 0 ? this.close(cached) : Promise.resolve();
  }

  private close(cached: CachedShard): Promise<void> {
    return cached.replica.store
      .close()
      .then(() => rm(cached.dir, { recursive: true, force: true }))
      .catch((err) => this.log.warn({ shard: cached.key, err: (err as Error).message }, 'could not close a retired shard copy'));
  }

  /** One load per shard at a time: concurrent first requests share it. */
  private loadOnce(collection: string, shard: string): Promise<CachedShard> {
    const key = `${collection}/${shard}`;
    let p = this.loading.get(key);
    if (!p) {
      p = this.load(collection, shard).finally(() => this.loading.delete(key));
      this.loading.set(key, p);
    }
    return p;
  }

  /** One refresh per copy at a time: every request that needs it waits for the same one. */
  private refreshOnce(cached: CachedShard, collection: string, shard: string): Promise<void> {
    cached.refreshing ??= this.refresh(cached, collection, shard)
      .catch((err: unknown) => {
        this.log.warn({ shard: cached.key, err: (err as Error).message }, 'snapshot refresh failed');
        throw err;
      })
      .finally(() => (cached.refreshing = undefined));
    return cached.refreshing;
  }

  private async load(collection: string, shard: string): Promise<CachedShard> {
    const key = `${collection}/${shard}`;
    const state = this.o.coordinator.collection(collection);
    if (!state) throw new ShardexError('SHX_COLLECTION_NOT_FOUND', `collection '${collection}' does not exist`);
    const dir = join(this.o.dataDir, collection, `${shard}.${this.generation++}`);
    await rm(dir, { recursive: true, force: true });
    // A copy that is refreshed in place for as long as it is cached: no change journal (it has no
    // persisted index), and no sync per batch (a cache: a reader that restarts copies again).
    const store = await ReplicaStore.open(dir, { logRetention: 1, journalChanges: false, durability: { mode: 'async', syncIntervalMs: 60_000 } });
    const replica = new ShardReplica(collection, shard, store, this.log);
    const schema = parseSchema(state.fields);
    try {
      const leader = this.leaderOf(collection, shard);
      const asked = this.now();
      this.refreshCounter.inc();
      const info = await this.newestCommit(leader, collection, shard);
      const stream = this.peers.streamCall<unknown>(leader, 'copyShard', { collection, shard, commit: true, segments: !this.o.copyDocuments, raw: true });
      const copy = await readShardCopy({ dir, replica, schema, fingerprint: schemaFingerprint(state.fields), log: this.log.child({ shard: key }) }, untilStalled(stream, this.o.copyStallMs ?? DEFAULT_COPY_STALL_MS, `copying ${key} from ${leader}`));
      this.cache.indexed.inc(copy.indexed);
      const binding = new SearchIndexBinding(schema, copy.index);
      replica.index = binding;
      // The commit point the leader copied (it may be newer than the one it named when asked).
      const commit = copy.commit ?? info.commit ?? { version: 0, at: 0 };
      const cached: CachedShard = { key, dir, replica, binding, commit, checkedAt: asked, lastUsed: this.now(), users: 0, retired: false, index: copy.how, epoch: info.epoch };
      this.cache.copies.inc();
      const previous = this.shards.get(key);
      this.shards.set(key, cached);
      if (previous) void this.retire(previous);
      this.log.info({ shard: key, snapshot: commit.version, docs: store.docCount, index: copy.how, segments: copy.segments }, 'snapshot copied');
      void this.evict().catch((err) => this.log.warn({ err }, 'eviction failed'));
      return cached;
    } catch (err) {
      await store.close().catch(() => undefined);
      await rm(dir, { recursive: true, force: true }).catch(() => undefined);
      throw err;
    }
  }

  /**
   * The newest commit point of `leader`, which this reader's view of the cluster names as the
   * shard's leader. A node that no longer leads it is refused: while the view is behind a leader
   * change, a former leader's commit points can be older than commits the new leader
   * acknowledged, and a copy checked against them would break the staleness bound. The read
   * fails on this reader (retryable), and another reader or the leader serves it.
   */
  private async newestCommit(leader: string, collection: string, shard: string): Promise<LeaderCommitInfo> {
    const info = await this.peers.call<LeaderCommitInfo>(leader, 'versions', { collection, shard });
    if (info.leading === false) throw new ShardexError('SHX_NOT_LEADER', `reader ${this.name} cannot check ${collection}/${shard} against ${leader}: it no longer leads the shard, and this reader does not see the new leader yet; retry shortly`);
    return info;
  }

  /** Moves a cached shard to the leader's newest commit point: the log between the two, or a new copy. */
  private async refresh(cached: CachedShard, collection: string, shard: string): Promise<void> {
    const leader = this.leaderOf(collection, shard);
    // Asked before the request is sent: every commit acknowledged before now is in the answer.
    const asked = this.now();
    this.refreshCounter.inc();
    const info = await this.newestCommit(leader, collection, shard);
    const next = info.commit;
    // Copied whole again, beside the old copy (which serves the requests already reading it and
    // is closed after them), when the log between the two may not tell every change:
    // - another leadership: the copy may hold a deposed leader's writes nobody acknowledged,
    //   which the new leader's log does not undo;
    // - an older commit point of the same leadership (versions only grow within one): another
    //   incarnation of the collection, deleted and created again;
    // - the log no longer reaches back to the copy.
    const otherLeadership = info.epoch !== undefined && cached.epoch !== undefined && info.epoch !== cached.epoch;
    if (otherLeadership || (next !== undefined && next.version < cached.commit.version)) {
      await this.load(collection, shard);
      return;
    }
    if (!next || next.version === cached.commit.version) {
      cached.checkedAt = asked;
      return;
    }
    if (info.trimmedThrough > cached.commit.version) {
      await this.load(collection, shard);
      return;
    }
    let after = cached.commit.version;
    for (;;) {
      const page = await this.peers.call<StoredEntry[]>(leader, 'updatesAfter', { collection, shard, after, limit: 5000, upto: next.version });
      // The leader trims its log as it writes: a page read once it had trimmed past `after` may
      // lack entries, and the copy would silently miss their changes.
      if ((await this.newestCommit(leader, collection, shard)).trimmedThrough > after) {
        await this.load(collection, shard);
        return;
      }
      if (page.length === 0) break;
      // Only the newest entry of each id in the page matters: older ones would be indexed for nothing.
      const newest = new Map<string, StoredEntry>();
      for (const e of page) newest.set(e.id, e);
      await cached.replica.apply([...newest.values()]);
      after = page[page.length - 1]!.version;
      if (page.length < 5000) break;
    }
    cached.commit = next;
    cached.checkedAt = asked;
    this.log.info({ shard: cached.key, snapshot: next.version }, 'snapshot refreshed');
  }

  private async evict(): Promise<void> {
    const budget = this.o.diskBudgetBytes;
    if (budget === undefined) return;
    let used = await dirSize(this.o.dataDir);
    const lru = [...this.shards.values()].sort((a, b) => a.lastUsed - b.lastUsed);
    while (used > budget && lru.length > 1) {
      const victim = lru.shift()!;
      // Retired at once (no new request gets it), closed after the requests reading it.
      await this.retire(victim);
      this.cache.evictions.inc();
      used = await dirSize(this.o.dataDir);
      this.log.info({ shard: victim.key, used, budget }, 'evicted a cached shard');
    }
  }

  /**
   * Drains, then closes: new and queued scans are answered BUSY at once, started scans (and
   * refreshes) finish, within `drainTimeoutMs`; then the reader leaves coordination, so that
   * no node picks it again, and closes its servers and shard copies.
   */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.log.info({ running: this.pool.running, waiting: this.pool.waiting }, 'snapshot reader draining: new scans are answered BUSY');
    const limit = this.o.drainTimeoutMs ?? DEFAULT_DRAIN_TIMEOUT_MS;
    const drained = this.pool.drain(`reader ${this.name} is stopping`).then(() =>
      Promise.allSettled([...this.loading.values(), ...[...this.shards.values()].flatMap((s) => (s.refreshing ? [s.refreshing] : []))]),
    );
    let timer: NodeJS.Timeout | undefined;
    const inTime = await Promise.race([drained.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), limit)))]);
    clearTimeout(timer);
    if (!inTime) this.log.warn({ running: this.pool.running, drainTimeoutMs: limit }, 'scans still running after the drain timeout: closing anyway');
    await this.o.coordinator.close().catch(() => undefined);
    await this.http?.close();
    await this.server.close();
    this.peers.close();
    for (const s of [...this.shards.values()]) await this.retire(s);
    this.log.info('snapshot reader stopped');
  }
}

/**
 * The items of `source`, failing with SHX_TIMEOUT when the next one takes longer than `ms`: a
 * copy stream has no deadline of its own, and a leader that stops sending must not hold the
 * requests waiting for the copy (they go to another reader) or the reader's drain.
 */
export async function* untilStalled<T>(source: AsyncGenerator<T>, ms: number, what: string): AsyncGenerator<T> {
  let stuck = false;
  try {
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const stalled = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          stuck = true;
          reject(new ShardexError('SHX_TIMEOUT', `${what}: nothing received for ${ms} ms; the copy is given up and retried by the next request`));
        }, ms);
      });
      let next: IteratorResult<T>;
      try {
        next = await Promise.race([source.next(), stalled]);
      } finally {
        clearTimeout(timer);
      }
      if (next.done) return;
      yield next.value;
    }
  } finally {
    // A stream still waiting cannot be returned now (its return queues behind the wait).
    if (stuck) void source.next().then(() => source.return(undefined), () => undefined);
    else await source.return(undefined);
  }
}

async function dirSize(dir: string): Promise<number> {
  let total = 0;
  for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    const p = join(dir, e.name);
    total += e.isDirectory() ? await dirSize(p) : (await stat(p).catch(() => ({ size: 0 }))).size;
  }
  return total;
}
