// A snapshot reader (Accumulo's scan server): holds no shard permanently. The first eventual
// read of a shard copies the shard's latest commit point from its leader (streamed); later
// reads are served from the local copy, which is refreshed incrementally (the leader's log
// between the two commit points) once it is older than the snapshot expiry. Least recently
// used shards are evicted past the disk budget. Scans run in a bounded pool; a request that
// cannot start within its busy timeout is answered BUSY.
import { mkdir, readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { Counter, Gauge, Registry } from 'prom-client';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Coordinator, NodeInfo } from '../coordination/index.js';
import { SearchIndexBinding, ShardReplica } from '../distrib/replica.js';
import { servePhase, type ShardPhaseRequest } from '../distrib/search.js';
import { parseSchema } from '../index/index.js';
import { ShardexError } from '../errors.js';
import { PeerClients, PeerServer, portError } from '../transport/index.js';
import type { CommitPoint, StoredEntry } from '../ulog/index.js';
import { ReplicaStore } from '../ulog/index.js';
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
}

interface CachedShard {
  readonly key: string;
  readonly replica: ShardReplica;
  readonly binding: SearchIndexBinding;
  commit: CommitPoint;
  fetchedAt: number;
  lastUsed: number;
  refreshing?: Promise<void>;
}

interface LeaderCommitInfo {
  readonly maxVersion: number;
  readonly trimmedThrough: number;
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
  grpcAddress = '';
  httpUrl = '';
  private stopped = false;

  constructor(opts: SnapshotReaderOptions) {
    this.o = opts;
    this.name = opts.name;
    this.group = opts.group ?? 'default';
    this.log = opts.logger.child({ reader: opts.name, group: this.group });
    this.pool = new ScanPool(opts.maxScans ?? 8);
    this.busyCounter = new Counter({ name: 'shardex_reader_busy_total', help: 'Requests refused as BUSY', registers: [this.metrics] });
    this.servedCounter = new Counter({ name: 'shardex_reader_scans_total', help: 'Scans served', registers: [this.metrics] });
    const shards = this.shards;
    new Gauge({
      name: 'shardex_reader_cached_shards',
      help: 'Shards held in the local cache',
      registers: [this.metrics],
      collect() {
        this.set(shards.size);
      },
    });
    this.peers = new PeerClients({ resolve: (n) => opts.coordinator.liveNodes().find((x) => x.name === n)?.grpc, logger: this.log });
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
    const app = Fastify({ loggerInstance: this.log as FastifyBaseLogger, logController: new LogController({ disableRequestLogging: true }) });
    app.get('/health', async () => ({ status: 'ok', reader: this.name, group: this.group }));
    app.get('/api/reader', async () => this.status());
    app.get('/metrics', async (_req, reply) => {
      void reply.header('content-type', this.metrics.contentType);
      return this.metrics.metrics();
    });
    await app.listen({ host, port: this.o.httpPort }).catch((err: Error) => {
      throw portError('HTTP', host, this.o.httpPort, err);
    });
    this.http = app as unknown as FastifyInstance;
    const addr = app.server.address();
    this.httpUrl = `http://${advertised}:${typeof addr === 'object' && addr ? addr.port : this.o.httpPort}`;
    await this.o.coordinator.start(this.info);
    this.log.info({ http: this.httpUrl, grpc: this.grpcAddress }, 'snapshot reader started');
  }

  /** What GET /api/readers shows of this reader. */
  status(): unknown {
    return {
      name: this.name,
      group: this.group,
      shards: [...this.shards.values()].map((s) => ({ shard: s.key, snapshot: s.commit.version, docs: s.replica.store.docCount, fetchedAt: s.fetchedAt })),
      scans: { running: this.pool.running, waiting: this.pool.waiting, served: this.pool.served, busy: this.pool.busy },
    };
  }

  private async scan<T>(eventual: EventualOptions, collection: string, shard: string, work: (s: CachedShard) => Promise<T>): Promise<ReaderAnswer<T>> {
    try {
      return await this.pool.run(eventual.busyTimeoutMs, async () => {
        const cached = await this.shard(collection, shard, eventual.minVersion);
        cached.lastUsed = Date.now();
        if (this.o.scanDelayMs) await new Promise((r) => setTimeout(r, this.o.scanDelayMs));
        this.servedCounter.inc();
        return { snapshot: cached.commit.version, result: await work(cached) };
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

  private async shard(collection: string, shard: string, minVersion?: number): Promise<CachedShard> {
    const key = `${collection}/${shard}`;
    let cached = this.shards.get(key);
    if (!cached) {
      let p = this.loading.get(key);
      if (!p) {
        p = this.load(collection, shard).finally(() => this.loading.delete(key));
        this.loading.set(key, p);
      }
      cached = await p;
    }
    const stale = Date.now() - cached.fetchedAt > (this.o.snapshotExpiryMs ?? 5000);
    const behind = minVersion !== undefined && cached.commit.version < minVersion;
    if (stale || behind) {
      cached.refreshing ??= this.refresh(cached, collection, shard).finally(() => (cached!.refreshing = undefined));
      // A read that needs a newer snapshot waits for the refresh; others are served as they are.
      if (behind) await cached.refreshing.catch((err) => this.log.warn({ shard: key, err: (err as Error).message }, 'snapshot refresh failed'));
      else void cached.refreshing.catch((err) => this.log.warn({ shard: key, err: (err as Error).message }, 'snapshot refresh failed'));
    }
    if (minVersion !== undefined && cached.commit.version < minVersion) {
      throw new ShardexError('SHX_SNAPSHOT_BEHIND', `reader ${this.name} holds ${key} as of version ${cached.commit.version}, older than minVersion ${minVersion}`);
    }
    return cached;
  }

  private async load(collection: string, shard: string): Promise<CachedShard> {
    const key = `${collection}/${shard}`;
    const state = this.o.coordinator.collection(collection);
    if (!state) throw new ShardexError('SHX_COLLECTION_NOT_FOUND', `collection '${collection}' does not exist`);
    const dir = join(this.o.dataDir, collection, shard);
    await rm(dir, { recursive: true, force: true });
    const store = await ReplicaStore.open(dir, { logRetention: 1 });
    const replica = new ShardReplica(collection, shard, store, this.log);
    const binding = new SearchIndexBinding(parseSchema(state.fields));
    replica.index = binding;
    try {
      const leader = this.leaderOf(collection, shard);
      const info = await this.peers.call<LeaderCommitInfo>(leader, 'versions', { collection, shard });
      const commit = info.commit ?? { version: 0, at: 0 };
      for await (const chunk of this.peers.streamCall<StoredEntry[]>(leader, 'copyShard', { collection, shard, commit: true })) await replica.apply(chunk);
      const cached: CachedShard = { key, replica, binding, commit, fetchedAt: Date.now(), lastUsed: Date.now() };
      this.shards.set(key, cached);
      this.log.info({ shard: key, snapshot: commit.version, docs: store.docCount }, 'snapshot copied');
      void this.evict().catch((err) => this.log.warn({ err }, 'eviction failed'));
      return cached;
    } catch (err) {
      await store.close().catch(() => undefined);
      throw err;
    }
  }

  /** Moves a cached shard to the leader's newest commit point: the log between the two, or a new copy. */
  private async refresh(cached: CachedShard, collection: string, shard: string): Promise<void> {
    const leader = this.leaderOf(collection, shard);
    const info = await this.peers.call<LeaderCommitInfo>(leader, 'versions', { collection, shard });
    const next = info.commit;
    cached.fetchedAt = Date.now();
    if (!next || next.version <= cached.commit.version) return;
    if (info.trimmedThrough > cached.commit.version) {
      // The log no longer reaches back: copy the new snapshot in full.
      this.shards.delete(cached.key);
      await cached.replica.store.close();
      await this.shard(collection, shard);
      return;
    }
    let after = cached.commit.version;
    for (;;) {
      const page = await this.peers.call<StoredEntry[]>(leader, 'updatesAfter', { collection, shard, after, limit: 5000, upto: next.version });
      if (page.length === 0) break;
      // Only the newest entry of each id in the page matters: older ones would be indexed for nothing.
      const newest = new Map<string, StoredEntry>();
      for (const e of page) newest.set(e.id, e);
      await cached.replica.apply([...newest.values()]);
      after = page[page.length - 1]!.version;
      if (page.length < 5000) break;
    }
    cached.commit = next;
    this.log.info({ shard: cached.key, snapshot: next.version }, 'snapshot refreshed');
  }

  private async evict(): Promise<void> {
    const budget = this.o.diskBudgetBytes;
    if (budget === undefined) return;
    let used = await dirSize(this.o.dataDir);
    const lru = [...this.shards.values()].sort((a, b) => a.lastUsed - b.lastUsed);
    while (used > budget && lru.length > 1) {
      const victim = lru.shift()!;
      this.shards.delete(victim.key);
      await victim.replica.store.close();
      const dir = join(this.o.dataDir, victim.key);
      await rm(dir, { recursive: true, force: true });
      used = await dirSize(this.o.dataDir);
      this.log.info({ shard: victim.key, used, budget }, 'evicted a cached shard');
    }
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    await this.http?.close();
    await this.server.close();
    this.peers.close();
    await this.o.coordinator.close().catch(() => undefined);
    for (const s of this.shards.values()) await s.replica.store.close().catch(() => undefined);
    this.shards.clear();
    this.log.info('snapshot reader stopped');
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
