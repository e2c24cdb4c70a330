// ShardexClient: the leader-aware smart client (Solr's CloudSolrClient with MarkLogic DMSDK's
// host failover). It keeps a cached cluster state, routes every update with the nodes' own
// router and sends each shard's group straight to that shard's leader (so no node has to
// forward it: phase TOLEADER work happens where the request lands), retries retryable errors
// with backoff (never a rejected request), and suspends hosts that cannot be reached. Every
// request goes through the one retry loop (failover.ts). In gateway mode (one URL for the whole
// cluster, behind a load balancer) it only groups by shard and retries: no leader routing.
import { Agent } from 'node:https';
import pLimit from 'p-limit';
import type { Logger } from 'pino';
import { checkId, toAddOps } from '../distrib/documents.js';
import { Deadline, MAX_REQUEST_TIMEOUT_MS } from '../distrib/deadline.js';
import { exponentialBackoff, withJitter, type BackoffPolicy } from '../distrib/retry.js';
import { groupByShard } from '../distrib/update-processor.js';
import { ShardexError, isShardexError } from '../errors.js';
import { ClusterSnapshot, type NodeView } from './cluster-state.js';
import { DEFAULT_HOST_UNAVAILABLE_CODES, DEFAULT_MIN_HOSTS, DEFAULT_SUSPEND_TIME_MS, HostAvailability } from './host-availability.js';
import { RequestExecutor, type AttemptFailure, type JobContext, type Outcome, type Request } from './failover.js';
import { CoordinatorStateSource, HttpStateSource, normalizeUrls, type ClusterStateSource } from './state-source.js';
import { apiKeyOption, checkKeys, codeListOption, durationOption, functionOption, intOption, oneOf, tlsOption } from './options.js';
import { agentFetch, httpCall, withApiKey } from './transport.js';
import type {
  AddResult,
  DeleteResult,
  FetchLike,
  HostSuspendedEvent,
  HostsRestoredEvent,
  LeaderRebalance,
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
import { ReadBalanceAdmin, type NodeReadSlots, type ReadSlotsOptions } from './read-balance.js';
import { WriteBatcher, type WriteBatcherOptions } from './write-batcher.js';
import { distributedSearch } from '../distrib/search.js';
import { parseSchema } from '../index/index.js';
import { PeerClients, type ClientTlsMaterial } from '../transport/index.js';
import { silentLogger } from '../logger.js';
import { EventualRouter, type ServedBy } from '../read/eventual.js';
import { ReadPath } from '../read/read-path.js';
import { ReaderSelector } from '../read/selector.js';

export type { JobContext } from './failover.js';

/** One request sent with failover: where it goes, and how. */
interface FailoverRequest<T> {
  /** The host this request should go to (a shard leader), if any; else any usable host. */
  readonly preferred: () => string | undefined;
  /** Spreads requests over usable hosts when the preferred one is not usable (DMSDK: batchNumber % hosts). */
  readonly spread: number;
  readonly send: (host: string) => Promise<T>;
  readonly onRetry?: (info: RetryInfo) => void;
  readonly deadline?: Deadline;
}

export interface ExportPage {
  readonly docs: ReadonlyArray<Record<string, unknown>>;
  readonly next: string | null;
}

const MIN_REFRESH_GAP_MS = 250;

const COMMON_KEYS = [
  'suspendTimeForHostUnavailableMs',
  'minHosts',
  'hostUnavailableCodes',
  'maxRetries',
  'backoff',
  'requestTimeoutMs',
  'concurrency',
  'refreshIntervalMs',
  'logger',
  'fetch',
  'scheduler',
  'selectorProfiles',
  'apiKey',
  'tls',
] as const;

/** Refuses unknown keys and a connection that names no cluster (or more than one way to it). */
function checkConnection(opts: ShardexClientOptions): void {
  const o = opts as unknown as Record<string, unknown>;
  const ways = (['urls', 'zk', 'coordinator'] as const).filter((k) => o[k] !== undefined);
  if (ways.length !== 1) {
    throw new ShardexError(
      'SHX_BAD_CONFIG',
      ways.length === 0
        ? 'the client needs one of urls (node URLs), zk (a ZooKeeper connect string) or coordinator'
        : `give only one of urls, zk and coordinator, not ${ways.join(' and ')}`,
    );
  }
  const own = { urls: ['urls', 'connection'], zk: ['zk', 'zkSessionTimeoutMs'], coordinator: ['coordinator'] }[ways[0]!];
  checkKeys('client', opts, [...COMMON_KEYS, ...own]);
}

const defaultScheduler: Scheduler = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

const enc = encodeURIComponent;

export class ShardexClient {
  private readonly source: ClusterStateSource;
  private readonly fetchFn: FetchLike;
  /** TLS towards nodes and readers (the `tls` option), and the https agent that carries it. */
  private readonly tls: ClientTlsMaterial | undefined;
  private readonly agent: Agent | undefined;
  private readonly log: Logger | undefined;
  /** The client's pino logger (silent unless one was given). */
  readonly logger: Logger;
  /** The gateway's URL in gateway mode (`connection: "gateway"`). */
  readonly gateway: string | undefined;
  /** Timers of the failover machinery and of job deadlines (injectable: tests fire them). */
  readonly scheduler: Scheduler;
  private readonly executor: RequestExecutor;
  private readonly backoff: BackoffPolicy;
  private readonly requestTimeoutMs: number;
  private readonly apiKey: string | undefined;
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
    checkConnection(opts);
    this.tls = tlsOption(opts.tls);
    const given = functionOption<FetchLike>('fetch', opts.fetch);
    this.agent = this.tls && !given ? new Agent({ keepAlive: true, ...this.tls }) : undefined;
    const fetchFn = given ?? (this.agent ? agentFetch(this.agent) : (url, init) => fetch(url, init));
    const apiKey = apiKeyOption(opts.apiKey);
    this.apiKey = apiKey;
    this.fetchFn = apiKey === undefined ? fetchFn : withApiKey(fetchFn, apiKey);
    this.log = opts.logger?.child({ component: 'client' });
    this.logger = this.log ?? silentLogger();
    this.backoff = functionOption<BackoffPolicy>('backoff', opts.backoff) ?? withJitter(exponentialBackoff(100, 5000));
    this.requestTimeoutMs = intOption('requestTimeoutMs', opts.requestTimeoutMs, 60_000);
    this.concurrency = intOption('concurrency', opts.concurrency, 8);
    this.refreshIntervalMs = intOption('refreshIntervalMs', opts.refreshIntervalMs, 30_000, 0);
    this.minHosts = intOption('minHosts', opts.minHosts, DEFAULT_MIN_HOSTS);
    this.maxRetries = intOption('maxRetries', opts.maxRetries, 10, 0);
    const suspendTimeMs = durationOption('suspendTimeForHostUnavailableMs', opts.suspendTimeForHostUnavailableMs, DEFAULT_SUSPEND_TIME_MS);
    const codes = codeListOption('hostUnavailableCodes', opts.hostUnavailableCodes) ?? DEFAULT_HOST_UNAVAILABLE_CODES;
    this.selectorProfiles = opts.selectorProfiles;
    if ('coordinator' in opts) {
      this.source = new CoordinatorStateSource(async () => opts.coordinator, false, 'coordinator');
      this.gateway = undefined;
    } else if ('zk' in opts) {
      this.source = CoordinatorStateSource.zookeeper(opts.zk, opts.zkSessionTimeoutMs ?? 15_000, opts.logger);
      this.gateway = undefined;
    } else {
      const urls = normalizeUrls(opts.urls);
      if (oneOf('connection', opts.connection, ['direct', 'gateway'], 'direct') === 'gateway') {
        if (urls.length !== 1) {
          throw new ShardexError('SHX_BAD_CONFIG', `connection "gateway" takes one URL (the load balancer's), got ${urls.length}: ${urls.join(', ')}`);
        }
        // DMSDK: with a GATEWAY connection minHosts must be 1 (there is one host).
        if (this.minHosts !== 1) throw new ShardexError('SHX_BAD_CONFIG', `minHosts must be 1 with connection "gateway" (one URL for the whole cluster), got ${this.minHosts}`);
        this.gateway = urls[0];
      } else {
        this.gateway = undefined;
      }
      this.source = new HttpStateSource(urls, this.fetchFn, this.requestTimeoutMs);
    }
    if (opts.scheduler !== undefined && (typeof opts.scheduler?.setTimeout !== 'function' || typeof opts.scheduler.clearTimeout !== 'function')) {
      throw new ShardexError('SHX_BAD_CONFIG', 'scheduler must have setTimeout(fn, ms) and clearTimeout(handle)');
    }
    this.scheduler = opts.scheduler ?? defaultScheduler;
    this.failover = new HostAvailability({
      suspendTimeMs,
      codes,
      scheduler: this.scheduler,
      reload: async () => (await this.refresh({ force: true })).allHosts(),
      logger: this.logger,
      onSuspended: (e) => emit(this.suspendedListeners, e, this.log),
      onRestored: (e) => emit(this.restoredListeners, e, this.log),
    });
    this.executor = new RequestExecutor({
      gateway: this.gateway,
      hosts: this.failover,
      backoff: this.backoff,
      logger: this.logger,
      state: () => this.snapshot,
      loaded: () => this.loaded,
      refresh: () => this.refresh({ force: true }),
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
        // A gateway's cluster lists addresses the client cannot reach: read through the gateway only.
        const preferred = this.gateway !== undefined ? [] : this.snapshot.allHosts().filter((h) => !this.failover.isSuspended(h));
        const s = await this.source.read(preferred);
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

  /** The listed data hosts that are not suspended (the gateway, in gateway mode). */
  get liveHosts(): readonly string[] {
    return this.executor.usableHosts();
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

  /** A context for one plain operation: the client's minHosts, never stopped from outside. */
  private singleOp(): JobContext {
    let reason: unknown;
    return { minHosts: this.minHosts, maxRetries: this.maxRetries, stopReason: () => reason, stop: (r) => (reason = r) };
  }

  /**
   * Sends one request with failover and the retry policy (the one retry loop, failover.ts), and
   * returns its value or throws the error it failed with.
   */
  withFailover<T>(job: JobContext, req: FailoverRequest<T>): Promise<T> {
    return this.executor.value(job, {
      route: { to: 'any', spread: req.spread, preferred: req.preferred },
      send: (host) => req.send(host!),
      ...(req.deadline && { deadline: req.deadline }),
      ...(req.onRetry && { onFailure: (f: AttemptFailure) => void (f.retrying && req.onRetry!(f)) }),
    });
  }

  /**
   * Runs `fn` under one Deadline made of the caller's `timeoutMs` and signal: every attempt,
   * retry, wait and eventual read below it is bounded by it (SHX_TIMEOUT when it passes, naming
   * the last attempt that failed), and the nodes are told what is left of it.
   */
  private async withDeadline<T>(opts: RequestOptions, what: string, fn: (deadline: Deadline) => Promise<T>): Promise<T> {
    if (this.closed) throw new ShardexError('SHX_UNAVAILABLE', 'the client is closed');
    const deadline = new Deadline({ what, timeoutMs: opts.timeoutMs, signal: opts.signal });
    try {
      return await fn(deadline);
    } catch (err) {
      // Ended outside an attempt (e.g. while reading the cluster state): say so, as the executor would.
      if (deadline.expired && !(isShardexError(err) && err.code === 'SHX_TIMEOUT')) throw this.executor.ended(deadline) ?? err;
      throw err;
    } finally {
      deadline.release();
    }
  }

  /**
   * How long one attempt of a request may take: the per-request timeout, or what is left of the
   * operation's deadline if that is less. The node is told (`timeoutMs`), so that its forwards to
   * the leader and their retries, and a read's waits for slots and readers, end when the client
   * stops waiting for this attempt.
   */
  private attemptMs(deadline: Deadline | undefined): number {
    return Math.max(1, Math.floor(Math.min(this.requestTimeoutMs, MAX_REQUEST_TIMEOUT_MS, deadline?.remainingMs() ?? Infinity)));
  }

  private updateQuery(minRf: number | undefined, attemptMs: number): string {
    const p = new URLSearchParams({ timeoutMs: String(attemptMs) });
    if (minRf !== undefined) p.set('minRf', String(minRf));
    return `?${p}`;
  }

  /** Posts one shard's documents to that shard's leader (used by add and the write batcher). */
  postShard(
    job: JobContext,
    collection: string,
    shard: string,
    docs: readonly unknown[],
    o: { minRf?: number; spread: number; onFailure?: (f: AttemptFailure) => void; deadline?: Deadline | undefined },
  ): Promise<Outcome<ShardWrite & { host: string }>> {
    const signal = o.deadline?.abortSignal();
    return this.executor.run(job, {
      route: { to: 'leader', collection, shard, spread: o.spread },
      update: true,
      ...(o.onFailure && { onFailure: o.onFailure }),
      deadline: o.deadline,
      send: async (host) => {
        const timeoutMs = this.attemptMs(o.deadline);
        const { body } = await httpCall<{ added: number; rf: number; versions: Record<string, number>; minRfMet?: boolean }>(this.fetchFn, {
          method: 'POST',
          host: host!,
          path: `/api/collections/${enc(collection)}/docs${this.updateQuery(o.minRf, timeoutMs)}`,
          body: docs,
          timeoutMs,
          ...(signal && { signal }),
        });
        return { host: host!, added: body.added, rf: body.rf, versions: body.versions ?? {}, minRfMet: body.minRfMet !== false };
      },
    });
  }

  /**
   * One page of a shard's export cursor, from that shard's leader (used by the query batcher).
   * While the shard has no leader the page waits for one (no retry budget is spent).
   */
  exportPage(
    job: JobContext,
    collection: string,
    shard: string,
    page: { q: string; after: string | undefined; limit: number; fields?: readonly string[]; priority?: string },
    o: { spread: number; onFailure?: (f: AttemptFailure) => void; onParked?: (parked: boolean) => void; deadline?: Deadline | undefined },
  ): Promise<Outcome<ExportPage & { host: string }>> {
    const params = new URLSearchParams({ shard, q: page.q, limit: String(page.limit) });
    if (page.after !== undefined) params.set('after', page.after);
    if (page.fields && page.fields.length > 0) params.set('fields', page.fields.join(','));
    if (page.priority !== undefined) params.set('priority', page.priority);
    const signal = o.deadline?.abortSignal();
    return this.executor.run(job, {
      route: { to: 'leader', collection, shard, spread: o.spread, parkWithoutLeader: true },
      ...(o.onFailure && { onFailure: o.onFailure }),
      ...(o.onParked && { onParked: o.onParked }),
      deadline: o.deadline,
      send: async (host) => {
        params.set('timeoutMs', String(this.attemptMs(o.deadline)));
        const { body } = await httpCall<ExportPage>(this.fetchFn, {
          method: 'GET',
          host: host!,
          path: `/api/collections/${enc(collection)}/export?${params}`,
          timeoutMs: this.requestTimeoutMs,
          ...(signal && { signal }),
        });
        if (!Array.isArray(body?.docs)) throw new ShardexError('SHX_INTERNAL', `${host} answered the export of ${collection}/${shard} without a docs array`);
        return { host: host!, docs: body.docs, next: body.next ?? null };
      },
    });
  }

  /** Runs a job's own work through the one retry loop (the query batcher's listeners: DMSDK's RetryListener). */
  runForJob<T>(job: JobContext, req: Request<T>): Promise<Outcome<T>> {
    return this.executor.run(job, req);
  }

  nextSpread(): number {
    return this.spreadCounter++;
  }

  // ---- operations -------------------------------------------------------------------------

  /**
   * Adds documents: validated whole first, grouped by shard, each group posted to its leader.
   * A failure says which shards failed, what was written, and whether the failed part may
   * still have been applied (`details.indeterminate`).
   */
  async add(collection: string, docs: readonly unknown[], opts: WriteOptions = {}): Promise<AddResult & { minRfMet: boolean }> {
    // Shape and ids first, without the cluster; then the field values against the collection's schema.
    toAddOps(docs);
    return this.withDeadline(opts, `adding ${docs.length} document(s) to ${collection}`, async (deadline) => {
      const s = await this.collectionState(collection);
      const ops = toAddOps(docs, s.schema(collection));
      const groups = groupByShard(s.router(collection), ops);
      const job = this.singleOp();
      const limit = pLimit(this.concurrency);
      const spread = this.nextSpread();
      const outcomes = await Promise.all(
        [...groups].map(([shard, group]) =>
          limit(() => this.postShard(job, collection, shard, group.map((op) => op.doc), { ...(opts.minRf !== undefined && { minRf: opts.minRf }), spread, deadline })),
        ),
      );
      rethrowAbort(deadline);
      return mergeWrites(outcomes, [...groups.keys()], ops.length);
    });
  }

  /** Deletes documents by id, each sent to its shard's leader. */
  async delete(collection: string, ids: readonly string[], opts: WriteOptions = {}): Promise<DeleteResult> {
    for (const id of ids) checkId(id);
    return this.withDeadline(opts, `deleting ${ids.length} document(s) from ${collection}`, async (deadline) => {
      const s = await this.collectionState(collection);
      const router = s.router(collection);
      const signal = deadline.abortSignal();
      const job = this.singleOp();
      const limit = pLimit(this.concurrency);
      const versions: Record<string, number> = {};
      const outcomes = await Promise.all(
        ids.map((id, i) =>
          limit(async () => {
            const out = await this.executor.run(job, {
              route: { to: 'leader', collection, shard: router.route(id).shard, spread: i },
              update: true,
              deadline,
              send: async (host) => {
                const timeoutMs = this.attemptMs(deadline);
                return (
                  await httpCall<{ version: number }>(this.fetchFn, {
                    method: 'DELETE',
                    host: host!,
                    path: `/api/collections/${enc(collection)}/docs/${enc(id)}${this.updateQuery(opts.minRf, timeoutMs)}`,
                    timeoutMs,
                    ...(signal && { signal }),
                  })
                ).body;
              },
            });
            if (out.ok) versions[id] = out.value.version;
            return out;
          }),
        ),
      );
      rethrowAbort(deadline);
      const failures = outcomes.flatMap((r, i) => (r.ok ? [] : [{ id: ids[i]!, error: r.error, indeterminate: r.indeterminate }]));
      if (failures.length > 0) {
        const first = failures[0]!.error;
        const unsure = failures.filter((f) => f.indeterminate).map((f) => f.id);
        throw new ShardexError(
          isShardexError(first) ? first.code : 'SHX_INTERNAL',
          `${failures.length} of ${ids.length} delete(s) failed: ${(first as Error).message}${unsure.length > 0 ? `; ${unsure.length} of them may have been applied (indeterminate): retry them` : ''}`,
          {
            cause: first,
            details: { deleted: Object.keys(versions).length, failedIds: failures.map((f) => f.id), indeterminate: unsure.length > 0, indeterminateIds: unsure },
          },
        );
      }
      return { deleted: ids.length, versions };
    });
  }

  /**
   * A document by id. Immediate (default): from the shard's leader, which sees every
   * acknowledged write. Eventual: the client runs the scan-server selector itself and asks the
   * chosen snapshot reader over gRPC, falling back to the leader when none can serve. Through a
   * gateway, or with a read-balancer `priority`, a node does that: the node's balancer holds the
   * read to its priority's slots.
   */
  async get(collection: string, id: string, opts: ReadOptions = {}): Promise<StoredDoc | undefined> {
    checkId(id);
    return this.withDeadline(opts, `getting ${collection}/${id}`, async (deadline) => {
      const s = await this.collectionState(collection);
      const shard = s.router(collection).route(id).shard;
      if (this.readsItself(opts)) return this.eventualGet(collection, shard, id, opts, deadline);
      const signal = deadline.abortSignal();
      try {
        return await this.executor.value(this.singleOp(), {
          route: { to: 'leader', collection, shard, spread: this.nextSpread() },
          deadline,
          send: async (host) =>
            (await httpCall<StoredDoc>(this.fetchFn, { method: 'GET', host: host!, path: `/api/collections/${enc(collection)}/docs/${enc(id)}?${readParams(opts, this.attemptMs(deadline))}`, timeoutMs: this.requestTimeoutMs, ...(signal && { signal }) }))
              .body,
        });
      } catch (err) {
        if (isShardexError(err) && err.code === 'SHX_NOT_FOUND') return undefined;
        throw err;
      }
    });
  }

  // ---- eventual reads: the selector runs here, readers are asked over gRPC ---------------

  /**
   * Whether the client serves an eventual read itself (selector here, readers over gRPC). Not
   * behind a gateway (only the gateway is reachable), and not with a read-balancer priority:
   * slots are counted by nodes, so a balanced read goes through one.
   */
  private readsItself(opts: ReadOptions): boolean {
    return opts.consistency === 'eventual' && this.gateway === undefined && opts.priority === undefined;
  }

  private readPathCache: { path: ReadPath; peers: PeerClients } | undefined;

  /** The read path of eventual reads: the same selector and protocol a node uses. */
  private eventualPath(): ReadPath {
    if (!this.readPathCache) {
      const nodes = (): readonly NodeView[] => this.snapshot.nodes;
      // The client's key goes with its reads, as on HTTP: readers and leaders let in a key with the read role.
      const peers = new PeerClients({
        resolve: (name) => nodes().find((n) => n.name === name)?.grpc,
        logger: this.log ?? silentLogger(),
        ...(this.apiKey !== undefined && { authorization: `Bearer ${this.apiKey}` }),
        ...(this.tls && { tls: this.tls }),
      });
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

  private eventualOptions(opts: ReadOptions, deadline: Deadline): { consistency: 'eventual'; scanType?: string; minVersion?: string; deadline: Deadline } {
    return {
      consistency: 'eventual',
      deadline,
      ...(opts.scanType !== undefined && { scanType: opts.scanType }),
      ...(opts.minVersion !== undefined && { minVersion: String(opts.minVersion) }),
    };
  }

  /** An eventual read through the one retry loop: retryable failures retried, the state re-read in between. */
  private retryRead<T>(deadline: Deadline, run: () => Promise<T>): Promise<T> {
    return this.executor.value(this.singleOp(), { route: { to: 'self' }, deadline, send: () => run() });
  }

  private async eventualGet(collection: string, shard: string, id: string, opts: ReadOptions, deadline: Deadline): Promise<StoredDoc | undefined> {
    const { entries } = await this.retryRead(deadline, () => this.eventualPath().get(collection, shard, [id], this.eventualOptions(opts, deadline)));
    const e = entries[0];
    return e && e.doc !== null ? ({ ...e.doc, id: e.id, _version_: e.version, _shard_: shard } as StoredDoc) : undefined;
  }

  private async eventualSearch(collection: string, query: string, opts: SearchOptions, deadline: Deadline): Promise<SearchResult> {
    const c = (await this.collectionState(collection)).collection(collection)!;
    return this.retryRead(deadline, async () => {
      const servedBy: Record<string, ServedBy> = {};
      const searchers = this.eventualPath().searchers(collection, c.shards.map((s) => s.name), this.eventualOptions(opts, deadline), servedBy);
      const res = await distributedSearch(parseSchema(c.fields), searchers, {
        q: query,
        ...(opts.filter !== undefined && { filters: [opts.filter] }),
        ...(opts.sort !== undefined && { sort: opts.sort }),
        ...(opts.offset !== undefined && { offset: opts.offset }),
        ...(opts.limit !== undefined && { limit: opts.limit }),
        ...(opts.fields !== undefined && { fields: opts.fields.join(',') }),
        ...(opts.trackTotalHits !== undefined && { trackTotalHits: opts.trackTotalHits }),
      });
      return { ...res, servedBy } as SearchResult;
    });
  }

  /** A distributed search, through any usable node (eventual without a priority: the client picks readers itself). */
  async search(collection: string, query: string, opts: SearchOptions = {}): Promise<SearchResult> {
    if (this.readsItself(opts)) return this.withDeadline(opts, `searching ${collection}`, (deadline) => this.eventualSearch(collection, query, opts, deadline));
    const params = readParams(opts);
    params.set('q', query);
    if (opts.filter !== undefined) params.set('filter', opts.filter);
    if (opts.sort !== undefined) params.set('sort', opts.sort);
    if (opts.offset !== undefined) params.set('offset', String(opts.offset));
    if (opts.limit !== undefined) params.set('limit', String(opts.limit));
    if (opts.fields !== undefined) params.set('fields', opts.fields.join(','));
    if (opts.trackTotalHits !== undefined) params.set('trackTotalHits', String(opts.trackTotalHits));
    return this.viaAnyNode<SearchResult>(opts, `searching ${collection}`, collection, 'GET', (attemptMs) => {
      params.set('timeoutMs', String(attemptMs));
      return `/api/collections/${enc(collection)}/search?${params}`;
    });
  }

  /**
   * One request that any live node can serve (it forwards or fans out as needed), with failover;
   * `path` is made for each attempt with the time that attempt may take.
   */
  private viaAnyNode<T>(opts: RequestOptions, what: string, collection: string, method: 'GET' | 'POST', path: (attemptMs: number) => string): Promise<T> {
    return this.withDeadline(opts, what, async (deadline) => {
      await this.collectionState(collection);
      const signal = deadline.abortSignal();
      return this.withFailover(this.singleOp(), {
        preferred: () => undefined,
        spread: this.nextSpread(),
        deadline,
        send: async (host) => (await httpCall<T>(this.fetchFn, { method, host, path: path(this.attemptMs(deadline)), timeoutMs: this.requestTimeoutMs, ...(signal && { signal }) })).body,
      });
    });
  }

  /** Records a commit point on every shard leader. */
  commit(collection: string, opts: RequestOptions = {}): Promise<Record<string, unknown>> {
    return this.viaAnyNode<{ commit: Record<string, unknown> }>(opts, `committing ${collection}`, collection, 'POST', () => `/api/collections/${enc(collection)}/commit`).then(
      (r) => r.commit,
    );
  }

  /**
   * Solr's REBALANCELEADERS: spreads the collection's leaders over its nodes and waits up to
   * `waitMs` (default 30 s, bounded by the request's timeout) for the handovers; resolves with
   * where the leaders are (`settled` false: some have not moved yet, `message` says which).
   */
  rebalanceLeaders(collection: string, opts: RequestOptions & { readonly waitMs?: number } = {}): Promise<LeaderRebalance> {
    return this.viaAnyNode<LeaderRebalance>(opts, `rebalancing the leaders of ${collection}`, collection, 'POST', (attemptMs) => {
      // Leave the answer time to arrive within the attempt.
      const wait = Math.max(0, Math.min(opts.waitMs ?? 30_000, attemptMs - 1000));
      return `/api/collections/${enc(collection)}/rebalance-leaders?wait=${wait}ms`;
    });
  }

  /** A bulk write job (DMSDK's WriteBatcher). */
  writeBatcher(opts: WriteBatcherOptions): WriteBatcher {
    return new WriteBatcher(this, opts);
  }

  /** A job walking every id matching `query` across all shards (DMSDK's QueryBatcher). */
  queryBatcher(collection: string, query = '*', opts: QueryBatcherOptions = {}): QueryBatcher {
    return new QueryBatcher(this, collection, query, opts);
  }

  private readBalanceAdmin: ReadBalanceAdmin | undefined;

  /** The read balancer's settings (stored in coordination, applied live by every node) and slot counters. */
  get readBalance(): ReadBalanceAdmin {
    // Counters are per node: list the nodes as they are now (a read within 250 ms is reused).
    // Behind a gateway only the gateway is reachable: it answers for whichever node it picks.
    const nodes = async (): Promise<Array<{ name: string; http: string }>> => {
      if (this.gateway !== undefined) return [{ name: 'gateway', http: this.gateway }];
      await this.connect();
      return (await this.refresh()).nodes.filter((n) => n.role === 'data');
    };
    return (this.readBalanceAdmin ??= new ReadBalanceAdmin({ fetch: this.fetchFn, timeoutMs: this.requestTimeoutMs, nodes }));
  }

  /** Each live data node's read slots: limit, taken, free and queued per priority and target. */
  readSlots(opts?: ReadSlotsOptions): Promise<NodeReadSlots[]> {
    return this.readBalance.slots(opts);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.pollTimer) clearInterval(this.pollTimer);
    this.unwatch?.();
    this.failover.close();
    this.readPathCache?.peers.close();
    this.agent?.destroy();
    await this.source.close();
  }
}

/** A read's query parameters; with `attemptMs`, the time its attempt may take (`timeoutMs`). */
function readParams(opts: ReadOptions, attemptMs?: number): URLSearchParams {
  const p = new URLSearchParams();
  if (opts.consistency !== undefined) p.set('consistency', opts.consistency);
  if (opts.scanType !== undefined) p.set('scanType', opts.scanType);
  if (opts.minVersion !== undefined) p.set('minVersion', String(opts.minVersion));
  if (opts.priority !== undefined) p.set('priority', opts.priority);
  if (attemptMs !== undefined) p.set('timeoutMs', String(attemptMs));
  return p;
}

type ShardWrite = { added: number; rf: number; versions: Record<string, number>; minRfMet: boolean };

/**
 * Merges per-shard outcomes: all ok -> one result; any failure -> an error saying what was
 * written, which shards failed, and which of them may have been applied all the same.
 */
/**
 * A caller's abort ends a write with the signal's reason, as it ends a read. The end of its
 * deadline does not: the failure then says what was written and what may have been.
 */
function rethrowAbort(deadline: Deadline): void {
  if (deadline.signal?.aborted !== true) return;
  const reason = deadline.ended();
  if (reason !== undefined && !(isShardexError(reason) && reason.code === 'SHX_TIMEOUT')) throw reason;
}

function mergeWrites(outcomes: ReadonlyArray<Outcome<ShardWrite>>, shards: readonly string[], total: number): AddResult & { minRfMet: boolean } {
  const versions: Record<string, number> = {};
  let rf = Infinity;
  let minRfMet = true;
  const failed: Array<{ shard: string; error: unknown; indeterminate: boolean }> = [];
  outcomes.forEach((r, i) => {
    if (!r.ok) return void failed.push({ shard: shards[i]!, error: r.error, indeterminate: r.indeterminate });
    Object.assign(versions, r.value.versions);
    rf = Math.min(rf, r.value.rf);
    minRfMet &&= r.value.minRfMet;
  });
  if (failed.length > 0) {
    const first = failed.find((f) => isShardexError(f.error) && !f.error.retryable) ?? failed[0]!;
    const written = Object.keys(versions).length;
    const unsure = failed.filter((f) => f.indeterminate).map((f) => f.shard);
    throw new ShardexError(
      isShardexError(first.error) ? first.error.code : 'SHX_INTERNAL',
      `${written} of ${total} document(s) written; shard(s) ${failed.map((f) => f.shard).join(', ')} failed: ${failed.map((f) => (f.error as Error).message).join('; ')}` +
        (unsure.length > 0 ? `; the documents of shard(s) ${unsure.join(', ')} may have been written all the same (indeterminate): retry them` : ''),
      { cause: first.error, details: { written, versions, failedShards: failed.map((f) => f.shard), indeterminate: unsure.length > 0, indeterminateShards: unsure } },
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
