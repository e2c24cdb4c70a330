// ShardexClient: the leader-aware smart client (Solr's CloudSolrClient with MarkLogic DMSDK's
// host failover). It keeps a cached cluster state, routes every update with the nodes' own
// router and sends each shard's group straight to that shard's leader (so no node has to
// forward it: phase TOLEADER work happens where the request lands), retries retryable errors
// with backoff (never a rejected request), and suspends hosts that cannot be reached.
import pLimit from 'p-limit';
import type { Logger } from 'pino';
import { checkId, toAddOps } from '../distrib/documents.js';
import { exponentialBackoff, isTransient, sleep, type BackoffPolicy } from '../distrib/retry.js';
import { groupByShard } from '../distrib/update-processor.js';
import { ShardexError, isShardexError } from '../errors.js';
import { ClusterSnapshot, type NodeView } from './cluster-state.js';
import { DEFAULT_MIN_HOSTS, DEFAULT_SUSPEND_TIME_MS, HostAvailability, minHostsError } from './host-availability.js';
import { CoordinatorStateSource, HttpStateSource, normalizeUrls, type ClusterStateSource } from './state-source.js';
import { intOption } from './options.js';
import { httpCall } from './transport.js';
import type {
  AddResult,
  DeleteResult,
  FetchLike,
  HostSuspendedEvent,
  HostsRestoredEvent,
  ReadOptions,
  RequestOptions,
  RetryInfo,
  Scheduler,
  SearchOptions,
  SearchResult,
  ShardexClientOptions,
  StoredDoc,
  WriteOptions,
} from './types.js';
import { QueryBatcher, type QueryBatcherOptions } from './query-batcher.js';
import { WriteBatcher, type WriteBatcherOptions } from './write-batcher.js';
import { distributedSearch } from '../distrib/search.js';
import { parseSchema } from '../index/index.js';
import { PeerClients } from '../transport/index.js';
import { silentLogger } from '../node/logger.js';
import { EventualRouter, type ServedBy } from '../read/eventual.js';
import { ReadPath } from '../read/read-path.js';
import { ReaderSelector } from '../read/selector.js';

/** The failover context of one job (a batcher) or of one plain operation. */
export interface JobContext {
  readonly minHosts: number;
  readonly maxRetries: number;
  /** The reason the job was stopped, if it was: no new attempt is made. */
  stopReason(): unknown;
  stop(reason: unknown): void;
}

/** One request sent with failover: where it goes, and how. */
interface FailoverRequest<T> {
  /** The host this request should go to (a shard leader), if any; else any usable host. */
  readonly preferred: () => string | undefined;
  /** Spreads requests over usable hosts when the preferred one is not usable (DMSDK: batchNumber % hosts). */
  readonly spread: number;
  readonly send: (host: string) => Promise<T>;
  readonly onRetry?: (info: RetryInfo) => void;
  readonly signal?: AbortSignal;
}

export interface ExportPage {
  readonly docs: ReadonlyArray<Record<string, unknown>>;
  readonly next: string | null;
}

const STALE_STATE_CODES = new Set(['SHX_NOT_LEADER', 'SHX_NO_LEADER', 'SHX_STALE_EPOCH']);
const MIN_REFRESH_GAP_MS = 250;

const defaultScheduler: Scheduler = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

const enc = encodeURIComponent;

export class ShardexClient {
  private readonly source: ClusterStateSource;
  private readonly fetchFn: FetchLike;
  private readonly log: Logger | undefined;
  private readonly backoff: BackoffPolicy;
  private readonly requestTimeoutMs: number;
  private readonly concurrency: number;
  private readonly refreshIntervalMs: number;
  readonly minHosts: number;
  readonly maxRetries: number;
  private readonly failover: HostAvailability;
  private readonly selectorProfiles: unknown;
  private snapshot: ClusterSnapshot = ClusterSnapshot.empty();
  private loaded = false;
  private refreshing: Promise<ClusterSnapshot> | undefined;
  private followUp: Promise<ClusterSnapshot> | undefined;
  private lastRefresh = 0;
  private pollTimer: NodeJS.Timeout | undefined;
  private unwatch: (() => void) | undefined;
  private spreadCounter = 0;
  private closed = false;
  private readonly suspendedListeners = new Set<(e: HostSuspendedEvent) => void>();
  private readonly restoredListeners = new Set<(e: HostsRestoredEvent) => void>();

  constructor(opts: ShardexClientOptions) {
    this.fetchFn = opts.fetch ?? ((url, init) => fetch(url, init));
    this.log = opts.logger?.child({ component: 'client' });
    this.backoff = opts.backoff ?? exponentialBackoff(100, 5000);
    this.requestTimeoutMs = intOption('requestTimeoutMs', opts.requestTimeoutMs, 60_000);
    this.concurrency = intOption('concurrency', opts.concurrency, 8);
    this.refreshIntervalMs = intOption('refreshIntervalMs', opts.refreshIntervalMs, 30_000, 0);
    this.minHosts = intOption('minHosts', opts.minHosts, DEFAULT_MIN_HOSTS);
    this.maxRetries = intOption('maxRetries', opts.maxRetries, 10, 0);
    this.selectorProfiles = opts.selectorProfiles;
    if ('coordinator' in opts) {
      this.source = new CoordinatorStateSource(async () => opts.coordinator, false, 'coordinator');
    } else if ('zk' in opts) {
      this.source = CoordinatorStateSource.zookeeper(opts.zk, opts.zkSessionTimeoutMs ?? 15_000, opts.logger);
    } else {
      this.source = new HttpStateSource(normalizeUrls(opts.urls), this.fetchFn, this.requestTimeoutMs);
    }
    this.failover = new HostAvailability({
      suspendTimeMs: opts.suspendTimeForHostUnavailableMs ?? DEFAULT_SUSPEND_TIME_MS,
      ...(opts.hostUnavailableCodes && { codes: opts.hostUnavailableCodes }),
      scheduler: opts.scheduler ?? defaultScheduler,
      reload: async () => (await this.refresh({ force: true })).allHosts(),
      ...(this.log && { logger: this.log }),
      onSuspended: (e) => emit(this.suspendedListeners, e, this.log),
      onRestored: (e) => emit(this.restoredListeners, e, this.log),
    });
  }

  // ---- cluster state ------------------------------------------------------------------

  /** Reads the cluster state (once) and starts following it. Operations call it themselves. */
  async connect(): Promise<ClusterSnapshot> {
    if (this.closed) throw new ShardexError('SHX_UNAVAILABLE', 'the client is closed');
    if (this.loaded) return this.snapshot;
    const s = await this.refresh({ force: true });
    if (!this.unwatch && this.source.onChange) {
      this.unwatch = this.source.onChange(() => void this.refresh({ force: true }).catch(() => undefined));
    }
    if (!this.pollTimer && this.refreshIntervalMs > 0) {
      this.pollTimer = setInterval(() => void this.refresh({ force: true }).catch((err) => this.log?.warn({ err: (err as Error).message }, 'cluster state refresh failed')), this.refreshIntervalMs);
      this.pollTimer.unref();
    }
    return s;
  }

  /** The cached cluster state. */
  get state(): ClusterSnapshot {
    return this.snapshot;
  }

  /** Hosts suspended after a host-unavailable error. */
  get suspendedHosts(): readonly string[] {
    return [...this.failover.suspended];
  }

  /** Whether the one post-suspension refresh timer is pending. */
  get suspensionRefreshPending(): boolean {
    return this.failover.refreshPending;
  }

  /**
   * Re-reads the cluster state. Concurrent callers share one read; a forced call during a read
   * gets the one read that follows it; without `force` a read within the last 250 ms is reused
   * (Solr's retryExpiryTime, shortened).
   */
  refresh(opts: { force?: boolean } = {}): Promise<ClusterSnapshot> {
    if (this.refreshing) {
      if (!opts.force) return this.refreshing;
      // The read in flight may have started before what the caller just learned: one more after it.
      this.followUp ??= this.refreshing
        .catch(() => undefined)
        .then(() => {
          this.followUp = undefined;
          return this.refresh({ force: true });
        });
      return this.followUp;
    }
    if (!opts.force && this.loaded && Date.now() - this.lastRefresh < MIN_REFRESH_GAP_MS) return Promise.resolve(this.snapshot);
    const p = (async () => {
      try {
        const s = await this.source.read(this.usableHosts(this.snapshot.allHosts()));
        this.snapshot = s;
        this.loaded = true;
        this.lastRefresh = Date.now();
        return s;
      } finally {
        this.refreshing = undefined;
      }
    })();
    this.refreshing = p;
    return p;
  }

  /** The state, with `collection` in it (re-read once if it is missing). */
  async collectionState(collection: string): Promise<ClusterSnapshot> {
    let s = this.loaded ? this.snapshot : await this.connect();
    if (!s.collection(collection)) s = await this.refresh({ force: true });
    if (!s.collection(collection)) {
      throw new ShardexError('SHX_COLLECTION_NOT_FOUND', `collection '${collection}' does not exist; create it with POST /api/collections`);
    }
    return s;
  }

  private usableHosts(listed: readonly string[]): string[] {
    return listed.filter((h) => !this.failover.isSuspended(h));
  }

  /** The listed data hosts that are not suspended. */
  get liveHosts(): readonly string[] {
    return this.usableHosts(this.snapshot.dataHosts());
  }

  onHostSuspended(fn: (e: HostSuspendedEvent) => void): () => void {
    this.suspendedListeners.add(fn);
    return () => this.suspendedListeners.delete(fn);
  }

  onHostsRestored(fn: (e: HostsRestoredEvent) => void): () => void {
    this.restoredListeners.add(fn);
    return () => this.restoredListeners.delete(fn);
  }

  // ---- sending with failover ------------------------------------------------------------

  private pickHost(preferred: string | undefined, spread: number): string {
    if (preferred !== undefined && !this.failover.isSuspended(preferred)) return preferred;
    const usable = this.liveHosts;
    if (usable.length === 0) {
      throw new ShardexError('SHX_UNAVAILABLE', `no usable host: the cluster state lists ${this.snapshot.dataHosts().length} data node(s), suspended: ${this.suspendedHosts.join(', ') || 'none'}`);
    }
    return usable[spread % usable.length]!;
  }

  /** A context for one plain operation: the client's minHosts, never stopped from outside. */
  private singleOp(): JobContext {
    let reason: unknown;
    return { minHosts: this.minHosts, maxRetries: this.maxRetries, stopReason: () => reason, stop: (r) => (reason = r) };
  }

  /**
   * Sends one request, retrying retryable failures with backoff. A host-unavailable failure
   * goes through the failover decision: suspend (then re-read the state and retry elsewhere),
   * unchanged (retry elsewhere), or stop the job (no retry). Rejected requests are not retried.
   */
  async withFailover<T>(job: JobContext, req: FailoverRequest<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const stopped = job.stopReason();
      if (stopped !== undefined) throw stopped;
      if (req.signal?.aborted) throw req.signal.reason;
      const live = this.liveHosts;
      if (this.loaded && live.length < job.minHosts) {
        const stop = minHostsError(undefined, live, job.minHosts, undefined);
        job.stop(stop);
        throw stop;
      }
      const host = this.pickHost(req.preferred(), req.spread + attempt - 1);
      try {
        return await req.send(host);
      } catch (err) {
        if (req.signal?.aborted) throw req.signal.reason;
        const decision = this.failover.onFailure(host, err, this.snapshot.dataHosts(), job.minHosts);
        if (decision.action === 'stop') {
          const stop = minHostsError(host, decision.remaining, job.minHosts, err);
          job.stop(stop);
          throw stop;
        }
        const hostUnavailable = decision.action !== 'not-host-unavailable';
        if (!(hostUnavailable || isTransient(err)) || attempt > job.maxRetries) throw err;
        // The state may name a new leader by now (Solr re-reads it on comm errors and stale leaders).
        if (hostUnavailable || (isShardexError(err) && STALE_STATE_CODES.has(err.code))) await this.refresh({ force: true }).catch(() => undefined);
        const delayMs = this.backoff(attempt);
        req.onRetry?.({ host, error: err, attempt, delayMs, hostUnavailable, suspended: decision.action === 'suspend' });
        this.log?.debug({ host, attempt, delayMs, err: (err as Error).message }, 'retrying');
        await sleep(delayMs, req.signal);
      }
    }
  }

  /** Runs `fn` under the caller's signal and `timeoutMs` deadline (SHX_TIMEOUT when it passes). */
  private async withDeadline<T>(opts: RequestOptions, what: string, fn: (signal: AbortSignal | undefined) => Promise<T>): Promise<T> {
    if (this.closed) throw new ShardexError('SHX_UNAVAILABLE', 'the client is closed');
    const deadline = opts.timeoutMs !== undefined ? AbortSignal.timeout(opts.timeoutMs) : undefined;
    const signals = [opts.signal, deadline].filter((s): s is AbortSignal => s !== undefined);
    const signal = signals.length === 0 ? undefined : signals.length === 1 ? signals[0] : AbortSignal.any(signals);
    try {
      return await fn(signal);
    } catch (err) {
      if (deadline?.aborted && !opts.signal?.aborted) {
        throw new ShardexError('SHX_TIMEOUT', `${what} did not complete within ${opts.timeoutMs} ms`, { cause: err });
      }
      throw err;
    }
  }

  /** Posts one shard's documents to that shard's leader (used by add and the write batcher). */
  postShard(
    job: JobContext,
    collection: string,
    shard: string,
    docs: readonly unknown[],
    o: { minRf?: number; spread: number; onRetry?: (info: RetryInfo) => void; signal?: AbortSignal | undefined },
  ): Promise<{ host: string; added: number; rf: number; versions: Record<string, number>; minRfMet: boolean }> {
    const query = o.minRf !== undefined ? `?minRf=${o.minRf}` : '';
    return this.viaLeader(job, collection, shard, o, async (host) => {
      const { body } = await httpCall<{ added: number; rf: number; versions: Record<string, number>; minRfMet?: boolean }>(this.fetchFn, {
        method: 'POST',
        host,
        path: `/api/collections/${enc(collection)}/docs${query}`,
        body: docs,
        timeoutMs: this.requestTimeoutMs,
        ...(o.signal && { signal: o.signal }),
      });
      return { host, added: body.added, rf: body.rf, versions: body.versions ?? {}, minRfMet: body.minRfMet !== false };
    });
  }

  /** One page of a shard's export cursor, from that shard's leader (used by the query batcher). */
  exportPage(
    job: JobContext,
    collection: string,
    shard: string,
    page: { q: string; after: string | undefined; limit: number; fields?: readonly string[] },
    o: { spread: number; onRetry?: (info: RetryInfo) => void; signal?: AbortSignal | undefined },
  ): Promise<ExportPage & { host: string }> {
    const params = new URLSearchParams({ shard, q: page.q, limit: String(page.limit) });
    if (page.after !== undefined) params.set('after', page.after);
    if (page.fields && page.fields.length > 0) params.set('fields', page.fields.join(','));
    return this.viaLeader(job, collection, shard, o, async (host) => {
      const { body } = await httpCall<ExportPage>(this.fetchFn, {
        method: 'GET',
        host,
        path: `/api/collections/${enc(collection)}/export?${params}`,
        timeoutMs: this.requestTimeoutMs,
        ...(o.signal && { signal: o.signal }),
      });
      if (!Array.isArray(body?.docs)) throw new ShardexError('SHX_INTERNAL', `${host} answered the export of ${collection}/${shard} without a docs array`);
      return { host, docs: body.docs, next: body.next ?? null };
    });
  }

  /** A job's request to a shard's leader, failing over (and re-routing) as the job's hosts fail. */
  private viaLeader<T>(
    job: JobContext,
    collection: string,
    shard: string,
    o: { spread: number; onRetry?: (info: RetryInfo) => void; signal?: AbortSignal | undefined },
    send: (host: string) => Promise<T>,
  ): Promise<T> {
    return this.withFailover(job, {
      preferred: () => this.snapshot.leaderHost(collection, shard),
      spread: o.spread,
      ...(o.onRetry && { onRetry: o.onRetry }),
      ...(o.signal && { signal: o.signal }),
      send,
    });
  }

  nextSpread(): number {
    return this.spreadCounter++;
  }

  // ---- operations -------------------------------------------------------------------------

  /** Adds documents: validated whole first, grouped by shard, each group posted to its leader. */
  async add(collection: string, docs: readonly unknown[], opts: WriteOptions = {}): Promise<AddResult & { minRfMet: boolean }> {
    // Shape and ids first, without the cluster; then the field values against the collection's schema.
    toAddOps(docs);
    return this.withDeadline(opts, `adding ${docs.length} document(s) to ${collection}`, async (signal) => {
      const s = await this.collectionState(collection);
      const ops = toAddOps(docs, s.schema(collection));
      const groups = groupByShard(s.router(collection), ops);
      const job = this.singleOp();
      const limit = pLimit(this.concurrency);
      const spread = this.nextSpread();
      const settled = await Promise.allSettled(
        [...groups].map(([shard, group]) =>
          limit(() => this.postShard(job, collection, shard, group.map((op) => op.doc), { ...(opts.minRf !== undefined && { minRf: opts.minRf }), spread, signal })),
        ),
      );
      return mergeWrites(settled, [...groups.keys()], ops.length);
    });
  }

  /** Deletes documents by id, each sent to its shard's leader. */
  async delete(collection: string, ids: readonly string[], opts: WriteOptions = {}): Promise<DeleteResult> {
    for (const id of ids) checkId(id);
    return this.withDeadline(opts, `deleting ${ids.length} document(s) from ${collection}`, async (signal) => {
      const s = await this.collectionState(collection);
      const router = s.router(collection);
      const job = this.singleOp();
      const limit = pLimit(this.concurrency);
      const query = opts.minRf !== undefined ? `?minRf=${opts.minRf}` : '';
      const versions: Record<string, number> = {};
      const settled = await Promise.allSettled(
        ids.map((id, i) =>
          limit(async () => {
            const shard = router.route(id).shard;
            const body = await this.withFailover(job, {
              preferred: () => this.snapshot.leaderHost(collection, shard),
              spread: i,
              ...(signal && { signal }),
              send: async (host) =>
                (
                  await httpCall<{ version: number }>(this.fetchFn, {
                    method: 'DELETE',
                    host,
                    path: `/api/collections/${enc(collection)}/docs/${enc(id)}${query}`,
                    timeoutMs: this.requestTimeoutMs,
                    ...(signal && { signal }),
                  })
                ).body,
            });
            versions[id] = body.version;
          }),
        ),
      );
      const failures = settled.flatMap((r, i) => (r.status === 'rejected' ? [{ id: ids[i]!, error: r.reason as unknown }] : []));
      if (failures.length > 0) {
        const first = failures[0]!.error;
        throw new ShardexError(isShardexError(first) ? first.code : 'SHX_INTERNAL', `${failures.length} of ${ids.length} delete(s) failed: ${(first as Error).message}`, {
          cause: first,
          details: { deleted: Object.keys(versions).length, failedIds: failures.map((f) => f.id) },
        });
      }
      return { deleted: ids.length, versions };
    });
  }

  /**
   * A document by id. Immediate (default): from the shard's leader, which sees every
   * acknowledged write. Eventual: the client runs the scan-server selector itself and asks the
   * chosen snapshot reader over gRPC, falling back to the leader when none can serve.
   */
  async get(collection: string, id: string, opts: ReadOptions = {}): Promise<StoredDoc | undefined> {
    checkId(id);
    return this.withDeadline(opts, `getting ${collection}/${id}`, async (signal) => {
      const s = await this.collectionState(collection);
      const shard = s.router(collection).route(id).shard;
      if (opts.consistency === 'eventual') return this.eventualGet(collection, shard, id, opts);
      try {
        return await this.withFailover(this.singleOp(), {
          preferred: () => this.snapshot.leaderHost(collection, shard),
          spread: this.nextSpread(),
          ...(signal && { signal }),
          send: async (host) =>
            (await httpCall<StoredDoc>(this.fetchFn, { method: 'GET', host, path: `/api/collections/${enc(collection)}/docs/${enc(id)}${readQuery(opts)}`, timeoutMs: this.requestTimeoutMs, ...(signal && { signal }) })).body,
        });
      } catch (err) {
        if (isShardexError(err) && err.code === 'SHX_NOT_FOUND') return undefined;
        throw err;
      }
    });
  }

  // ---- eventual reads: the selector runs here, readers are asked over gRPC ---------------

  private readPathCache: { path: ReadPath; peers: PeerClients } | undefined;

  /** The read path of eventual reads: the same selector and protocol a node uses. */
  private eventualPath(): ReadPath {
    if (!this.readPathCache) {
      const nodes = (): readonly NodeView[] => this.snapshot.nodes;
      const peers = new PeerClients({ resolve: (name) => nodes().find((n) => n.name === name)?.grpc, logger: this.log ?? silentLogger() });
      const router = new EventualRouter({
        selector: new ReaderSelector(this.selectorProfiles),
        readers: () => nodes().filter((n) => n.role === 'reader').map((n) => ({ name: n.name, http: n.http, grpc: n.grpc, role: 'reader' as const, ...(n.group !== undefined && { group: n.group }) })),
        call: (reader, body, eventual) => path.callReader(reader, body, eventual),
      });
      const path: ReadPath = new ReadPath(
        {
          leader: (c, shard) => this.snapshot.collection(c)?.shards.find((x) => x.name === shard)?.leader ?? undefined,
          call: (node, method, body, timeoutMs) => peers.call(node, method, body, timeoutMs),
        },
        router,
      );
      this.readPathCache = { path, peers };
    }
    return this.readPathCache.path;
  }

  private eventualOptions(opts: ReadOptions): { consistency: 'eventual'; scanType?: string; minVersion?: string } {
    return {
      consistency: 'eventual',
      ...(opts.scanType !== undefined && { scanType: opts.scanType }),
      ...(opts.minVersion !== undefined && { minVersion: String(opts.minVersion) }),
    };
  }

  /** Retries a read on retryable errors, re-reading the cluster state in between. */
  private async retryRead<T>(what: string, run: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await run();
      } catch (err) {
        if (!isTransient(err) || attempt > this.maxRetries) throw err;
        this.log?.warn({ what, attempt, err: (err as Error).message }, 'eventual read failed; retrying');
        await sleep(this.backoff(attempt));
        await this.refresh({ force: true }).catch(() => undefined);
      }
    }
  }

  private async eventualGet(collection: string, shard: string, id: string, opts: ReadOptions): Promise<StoredDoc | undefined> {
    const { entries } = await this.retryRead(`get ${collection}/${id}`, () => this.eventualPath().get(collection, shard, [id], this.eventualOptions(opts)));
    const e = entries[0];
    return e && e.doc !== null ? ({ ...e.doc, id: e.id, _version_: e.version, _shard_: shard } as StoredDoc) : undefined;
  }

  private async eventualSearch(collection: string, query: string, opts: SearchOptions): Promise<SearchResult> {
    const c = (await this.collectionState(collection)).collection(collection)!;
    return this.retryRead(`search ${collection}`, async () => {
      const servedBy: Record<string, ServedBy> = {};
      const searchers = this.eventualPath().searchers(collection, c.shards.map((s) => s.name), this.eventualOptions(opts), servedBy);
      const res = await distributedSearch(parseSchema(c.fields), searchers, {
        q: query,
        ...(opts.filter !== undefined && { filters: [opts.filter] }),
        ...(opts.sort !== undefined && { sort: opts.sort }),
        ...(opts.offset !== undefined && { offset: opts.offset }),
        ...(opts.limit !== undefined && { limit: opts.limit }),
        ...(opts.fields !== undefined && { fields: opts.fields.join(',') }),
      });
      return { ...res, servedBy } as SearchResult;
    });
  }

  /** A distributed search, through any usable node (eventual: the client picks readers itself). */
  async search(collection: string, query: string, opts: SearchOptions = {}): Promise<SearchResult> {
    if (opts.consistency === 'eventual') return this.withDeadline(opts, `searching ${collection}`, () => this.eventualSearch(collection, query, opts));
    const params = readParams(opts);
    params.set('q', query);
    if (opts.filter !== undefined) params.set('filter', opts.filter);
    if (opts.sort !== undefined) params.set('sort', opts.sort);
    if (opts.offset !== undefined) params.set('offset', String(opts.offset));
    if (opts.limit !== undefined) params.set('limit', String(opts.limit));
    if (opts.fields !== undefined) params.set('fields', opts.fields.join(','));
    return this.viaAnyNode<SearchResult>(opts, `searching ${collection}`, collection, 'GET', `/api/collections/${enc(collection)}/search?${params}`);
  }

  /** One request that any live node can serve (it forwards or fans out as needed), with failover. */
  private viaAnyNode<T>(opts: RequestOptions, what: string, collection: string, method: 'GET' | 'POST', path: string): Promise<T> {
    return this.withDeadline(opts, what, async (signal) => {
      await this.collectionState(collection);
      return this.withFailover(this.singleOp(), {
        preferred: () => undefined,
        spread: this.nextSpread(),
        ...(signal && { signal }),
        send: async (host) => (await httpCall<T>(this.fetchFn, { method, host, path, timeoutMs: this.requestTimeoutMs, ...(signal && { signal }) })).body,
      });
    });
  }

  /** Records a commit point on every shard leader. */
  commit(collection: string, opts: RequestOptions = {}): Promise<Record<string, unknown>> {
    return this.viaAnyNode<{ commit: Record<string, unknown> }>(opts, `committing ${collection}`, collection, 'POST', `/api/collections/${enc(collection)}/commit`).then(
      (r) => r.commit,
    );
  }

  /** A bulk write job (DMSDK's WriteBatcher). */
  writeBatcher(opts: WriteBatcherOptions): WriteBatcher {
    return new WriteBatcher(this, opts);
  }

  /** A job walking every id matching `query` across all shards (DMSDK's QueryBatcher). */
  queryBatcher(collection: string, query = '*', opts: QueryBatcherOptions = {}): QueryBatcher {
    return new QueryBatcher(this, collection, query, opts);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.pollTimer) clearInterval(this.pollTimer);
    this.unwatch?.();
    this.failover.close();
    this.readPathCache?.peers.close();
    await this.source.close();
  }
}

function readParams(opts: ReadOptions): URLSearchParams {
  const p = new URLSearchParams();
  if (opts.consistency !== undefined) p.set('consistency', opts.consistency);
  if (opts.scanType !== undefined) p.set('scanType', opts.scanType);
  if (opts.minVersion !== undefined) p.set('minVersion', String(opts.minVersion));
  if (opts.priority !== undefined) p.set('priority', opts.priority);
  return p;
}

function readQuery(opts: ReadOptions): string {
  const p = readParams(opts).toString();
  return p ? `?${p}` : '';
}

type ShardWrite = { added: number; rf: number; versions: Record<string, number>; minRfMet: boolean };

/** Merges per-shard answers: all ok -> one result; any failure -> an error saying what was written. */
function mergeWrites(settled: PromiseSettledResult<ShardWrite>[], shards: readonly string[], total: number): AddResult & { minRfMet: boolean } {
  const versions: Record<string, number> = {};
  let rf = Infinity;
  let minRfMet = true;
  const failed: Array<{ shard: string; error: unknown }> = [];
  settled.forEach((r, i) => {
    if (r.status === 'rejected') return void failed.push({ shard: shards[i]!, error: r.reason });
    Object.assign(versions, r.value.versions);
    rf = Math.min(rf, r.value.rf);
    minRfMet &&= r.value.minRfMet;
  });
  if (failed.length > 0) {
    const first = failed.find((f) => isShardexError(f.error) && !f.error.retryable) ?? failed[0]!;
    const written = Object.keys(versions).length;
    throw new ShardexError(
      isShardexError(first.error) ? first.error.code : 'SHX_INTERNAL',
      `${written} of ${total} document(s) written; shard(s) ${failed.map((f) => f.shard).join(', ')} failed: ${failed.map((f) => (f.error as Error).message).join('; ')}`,
      { cause: first.error, details: { written, versions, failedShards: failed.map((f) => f.shard) } },
    );
  }
  return { added: total, rf: rf === Infinity ? 0 : rf, versions, minRfMet };
}

function emit<E>(listeners: Set<(e: E) => void>, e: E, log: Logger | undefined): void {
  for (const fn of listeners) {
    try {
      fn(e);
    } catch (err) {
      log?.error({ err }, 'client listener failed');
    }
  }
}
