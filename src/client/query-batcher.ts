// A job visiting every id that matches a query, after MarkLogic DMSDK's QueryBatcher: one
// stable cursor per shard (ids ascending, `after` = the last id seen, served by the shard's
// leader), never deep paging. A page is handed to the listeners only once it has arrived, and a
// failed page is asked again from the same cursor through the client's failover (another host,
// the new leader), so each id is visited exactly once even when a node is lost mid-walk.
// - A shard without a leader (or whose hosts are all suspended) is parked: its walk waits for
//   the cluster state to list a leader, then resumes after the last id seen; only the job's own
//   deadline (`timeoutMs`) or a stop ends the wait.
// - A listener whose own request failed because its host is unavailable is re-applied to the
//   batch, with the batch's `host` resolved afresh (DMSDK's RetryListener), once per
//   registration: each onBatch registration has its one retry, and only it is re-run.
// - retry / retryWithFailureListeners resume a shard whose page failed for good (or re-apply
//   the listener that failed), as DMSDK's do; on a stopped job they log a warning and return.
import pLimit from 'p-limit';
import { ShardexError, isShardexError } from '../errors.js';
import { Deadline } from '../distrib/deadline.js';
import { causeChain } from '../distrib/retry.js';
import { PriorityName } from '../read/balance-settings.js';
import type { ShardexClient } from './client.js';
import type { AttemptFailure, JobContext, Outcome } from './failover.js';
import { isMinHostsError } from './host-availability.js';
import { checkKeys, intOption } from './options.js';
import type { RetryInfo } from './types.js';
import type { ExportPage } from './client.js';

export interface QueryBatcherOptions {
  /** Ids per page (the export's limit). Default 1000. */
  readonly batchSize?: number;
  /** Shards walked at once. Default: all. */
  readonly concurrency?: number;
  /** Fields to return with each id (default: whatever the export returns). */
  readonly fields?: readonly string[];
  /** Read-balancer priority of every page: each node holds the pages it serves to the priority's slots. */
  readonly priority?: string;
  readonly minHosts?: number;
  readonly maxRetries?: number;
  /** The job's deadline (ms from its start): parked shards wait for a leader until then. Default: none. */
  readonly timeoutMs?: number;
  /** Aborting stops the job. */
  readonly signal?: AbortSignal;
}

const OPTION_KEYS = ['batchSize', 'concurrency', 'fields', 'priority', 'minHosts', 'maxRetries', 'timeoutMs', 'signal'];

export interface QueryBatch {
  readonly jobBatchNumber: number;
  readonly collection: string;
  readonly shard: string;
  /** 1, 2, ... within the shard. */
  readonly shardBatchNumber: number;
  /** The host that served the page; for a re-applied listener, the shard's host now. */
  readonly host: string;
  readonly ids: readonly string[];
  readonly docs: ReadonlyArray<Record<string, unknown>>;
  /** The cursor this page started after (undefined for the first page). */
  readonly after: string | undefined;
}

export interface QueryBatchListenerOptions {
  /**
   * Re-apply this listener to the batch when it fails because a host is unavailable (an error
   * naming the host: the client's own, or a socket error to `batch.host`). Default true.
   */
  readonly retryOnHostUnavailable?: boolean;
}

/** A failed attempt: a page that could not be read, or a listener that failed on a delivered batch. */
export interface QueryBatchFailureEvent {
  readonly shard: string;
  readonly error: unknown;
  /** Present when a listener failed on a delivered batch; absent when the page could not be read. */
  readonly batch?: QueryBatch;
  /** The cursor from which the shard could not be read further. */
  readonly after?: string | undefined;
  /** The host the attempt went to ('' when none was tried). */
  readonly host: string;
  readonly attempt: number;
  /** Another attempt follows (failover, the retry policy, or the listener's retry). */
  readonly retrying: boolean;
}

export interface QueryBatchRetryEvent extends RetryInfo {
  readonly shard: string;
  readonly after: string | undefined;
}

export interface QueryJobReport {
  readonly batches: number;
  readonly ids: number;
  readonly shardsDone: readonly string[];
  /** Shards whose walk ended early, with the cursor they reached. */
  readonly shardsFailed: ReadonlyArray<{ shard: string; after: string | undefined; error: unknown }>;
  /** Shards neither done nor failed when the job stopped: resume after `after`. */
  readonly shardsNotDone: ReadonlyArray<{ shard: string; after: string | undefined; waitingForLeader: boolean }>;
  readonly listenerFailures: number;
  readonly retries: number;
  readonly stopped: boolean;
  readonly error?: unknown;
}

type Listener<E> = (e: E) => void | Promise<void>;

interface Registration {
  readonly fn: Listener<QueryBatch>;
  readonly retry: boolean;
}

type FailureOrigin =
  | { readonly kind: 'read'; readonly shard: string; readonly after: string | undefined; readonly shardBatch: number }
  | { readonly kind: 'listener'; readonly registration: Registration; readonly batch: QueryBatch };

interface ShardWalk {
  after: string | undefined;
  state: 'walking' | 'done' | 'failed';
  parked: boolean;
}

export class QueryBatcher {
  readonly collection: string;
  readonly query: string;
  readonly batchSize: number;
  private readonly client: ShardexClient;
  private readonly o: QueryBatcherOptions;
  private readonly job: JobContext;
  private readonly stopped$ = new AbortController();
  private readonly deadline$ = new AbortController();
  /** Every request's deadline: the caller's signal and the job's own timeoutMs (deadline$). */
  private readonly requestDeadline: Deadline;
  private readonly registrations: Registration[] = [];
  private readonly failureListeners: Array<Listener<QueryBatchFailureEvent>> = [];
  private readonly retryListeners: Array<Listener<QueryBatchRetryEvent>> = [];
  /** Final failure events -> what retry() resumes. */
  private readonly origins = new WeakMap<QueryBatchFailureEvent, FailureOrigin>();
  private readonly walks = new Map<string, ShardWalk>();
  private readonly active = new Set<Promise<void>>();
  private running: Promise<QueryJobReport> | undefined;
  private stopReason: unknown;
  private stoppedByUser = false;
  private batchNumber = 0;
  private readonly counts = { ids: 0, listenerFailures: 0, retries: 0 };
  private readonly shardsDone: string[] = [];
  private readonly shardsFailed: Array<{ shard: string; after: string | undefined; error: unknown }> = [];

  constructor(client: ShardexClient, collection: string, query: string, opts: QueryBatcherOptions) {
    checkKeys('query batcher', opts, OPTION_KEYS);
    this.client = client;
    this.collection = collection;
    this.query = query;
    this.o = opts;
    this.batchSize = intOption('batchSize', opts.batchSize, 1000);
    intOption('concurrency', opts.concurrency, 1);
    intOption('timeoutMs', opts.timeoutMs, 1);
    if (opts.priority !== undefined && !PriorityName.safeParse(opts.priority).success) {
      throw new ShardexError('SHX_BAD_CONFIG', `priority must be a name matching [A-Za-z0-9_.-]{1,64}, got ${JSON.stringify(opts.priority)}`);
    }
    const minHosts = intOption('minHosts', opts.minHosts, client.minHosts);
    if (client.gateway !== undefined && minHosts !== 1) throw new ShardexError('SHX_BAD_CONFIG', `minHosts must be 1 with connection "gateway", got ${minHosts}`);
    this.job = {
      minHosts,
      maxRetries: intOption('maxRetries', opts.maxRetries, client.maxRetries, 0),
      stopReason: () => this.stopReason,
      stop: (reason) => this.stop(reason),
      signal: this.stopped$.signal,
    };
    this.requestDeadline = new Deadline({ what: `the query job on ${collection}`, signal: opts.signal ? AbortSignal.any([opts.signal, this.deadline$.signal]) : this.deadline$.signal });
    if (opts.signal) {
      if (opts.signal.aborted) this.stop(opts.signal.reason);
      else opts.signal.addEventListener('abort', () => this.stop(opts.signal!.reason), { once: true });
    }
  }

  /** Called with each page of ids (DMSDK's onUrisReady); awaited before the shard's next page. */
  onBatch(fn: Listener<QueryBatch>, opts: QueryBatchListenerOptions = {}): this {
    checkKeys('onBatch', opts, ['retryOnHostUnavailable']);
    this.registrations.push({ fn, retry: opts.retryOnHostUnavailable !== false });
    return this;
  }

  /** Every failed attempt: a page that could not be read, or a listener that failed on a batch. */
  onBatchFailure(fn: Listener<QueryBatchFailureEvent>): this {
    this.failureListeners.push(fn);
    return this;
  }

  onBatchRetry(fn: Listener<QueryBatchRetryEvent>): this {
    this.retryListeners.push(fn);
    return this;
  }

  /** Starts the walk (once) and resolves when every shard is done. Rejects if the job stopped on an error. */
  awaitCompletion(): Promise<QueryJobReport> {
    this.running ??= this.run();
    return this.running;
  }

  /** Same as awaitCompletion: starts the job. */
  start(): Promise<QueryJobReport> {
    return this.awaitCompletion();
  }

  private async run(): Promise<QueryJobReport> {
    const state = await this.client.collectionState(this.collection);
    const known = this.client.gateway !== undefined ? [this.client.gateway] : state.dataHosts();
    if (this.job.minHosts > known.length) {
      const err = new ShardexError(
        'SHX_BAD_CONFIG',
        `minHosts ${this.job.minHosts} is more than the ${known.length} host(s) the cluster lists (${known.join(', ') || 'none'}); set minHosts to at most ${known.length}, or start more nodes`,
        { details: { minHosts: this.job.minHosts, hosts: known.length } },
      );
      this.stop(err);
      throw err;
    }
    const scheduler = this.client.scheduler;
    const deadline = this.o.timeoutMs !== undefined ? scheduler.setTimeout(() => this.onDeadline(), this.o.timeoutMs) : undefined;
    (deadline as { unref?: () => void } | undefined)?.unref?.();
    try {
      const shards = state.collection(this.collection)!.shards.map((s) => s.name);
      for (const shard of shards) this.walks.set(shard, { after: undefined, state: 'walking', parked: false });
      const limit = pLimit(intOption('concurrency', this.o.concurrency, Math.max(1, shards.length)));
      for (const shard of shards) this.track(limit(() => this.walk(shard, undefined, 1, true)));
      while (this.active.size > 0) await Promise.all([...this.active]);
    } finally {
      if (deadline !== undefined) scheduler.clearTimeout(deadline);
    }
    const report = this.report();
    if (report.error !== undefined) {
      const e = report.error;
      throw new ShardexError(
        isShardexError(e) ? e.code : 'SHX_INTERNAL',
        `query job stopped: ${(e as Error)?.message ?? String(e)}; ${report.ids} id(s) visited in ${report.batches} batch(es), shards done: ${report.shardsDone.join(', ') || 'none'}` +
          (report.shardsNotDone.length > 0 ? `; not done: ${report.shardsNotDone.map((s) => `${s.shard} (after ${JSON.stringify(s.after ?? null)})`).join(', ')}` : ''),
        { cause: e, details: { report } },
      );
    }
    return report;
  }

  private onDeadline(): void {
    if (this.stopReason !== undefined) return;
    const waiting = [...this.walks].filter(([, w]) => w.state === 'walking' && w.parked).map(([s]) => s);
    const err = new ShardexError(
      'SHX_TIMEOUT',
      `the query job did not complete within its timeoutMs ${this.o.timeoutMs}` + (waiting.length > 0 ? `; shard(s) ${waiting.join(', ')} were waiting for a leader` : ''),
      { details: { waitingForLeader: waiting } },
    );
    this.stop(err);
    this.deadline$.abort(err);
  }

  private track(p: Promise<void>): Promise<void> {
    const t: Promise<void> = p.catch(() => undefined).finally(() => this.active.delete(t));
    this.active.add(t);
    return p;
  }

  /** Walks `shard` from `after`. `toListeners` false: the first page's failure is thrown (retry()). */
  private async walk(shard: string, from: string | undefined, firstBatch: number, toListeners: boolean): Promise<void> {
    const w = this.walks.get(shard)!;
    w.state = 'walking';
    w.after = from;
    for (let shardBatch = firstBatch; ; shardBatch++) {
      if (this.stopReason !== undefined) return;
      const after = w.after;
      const out = await this.readPage(shard, after, shardBatch, toListeners, w);
      if (!out.ok) {
        if (isMinHostsError(out.error)) this.stop(out.error);
        if (this.stopReason !== undefined && (out.error === this.stopReason || out.attempts === 0)) return;
        w.state = 'failed';
        this.shardsFailed.push({ shard, after, error: out.error });
        if (!toListeners) throw out.error;
        const event: QueryBatchFailureEvent = { shard, error: out.error, after, host: out.host ?? '', attempt: out.attempts, retrying: false };
        this.origins.set(event, { kind: 'read', shard, after, shardBatch });
        await this.emit(this.failureListeners, event);
        return;
      }
      toListeners = true;
      const page = out.value;
      if (page.docs.length > 0) {
        const ids = page.docs.map((d) => String(d.id));
        const batch: QueryBatch = { jobBatchNumber: ++this.batchNumber, collection: this.collection, shard, shardBatchNumber: shardBatch, host: page.host, ids, docs: page.docs, after };
        this.counts.ids += ids.length;
        for (const r of this.registrations) await this.apply(r, batch);
        w.after = ids[ids.length - 1];
      }
      if (page.docs.length === 0 || page.next === null) {
        w.state = 'done';
        this.shardsDone.push(shard);
        return;
      }
      w.after = page.next;
    }
  }

  private async readPage(shard: string, after: string | undefined, shardBatch: number, toListeners: boolean, w: ShardWalk): Promise<Outcome<ExportPage & { host: string }>> {
    let last: AttemptFailure | undefined;
    try {
      return await this.client.exportPage(
        this.job,
        this.collection,
        shard,
        { q: this.query, after, limit: this.batchSize, ...(this.o.fields && { fields: this.o.fields }), ...(this.o.priority !== undefined && { priority: this.o.priority }) },
        {
          spread: shardBatch,
          deadline: this.requestDeadline,
          onParked: (parked) => (w.parked = parked),
          onFailure: (f) => {
            last = f;
            if (!f.retrying) return;
            this.counts.retries++;
            void this.emit(this.retryListeners, { ...f, shard, after });
            if (toListeners) void this.emit(this.failureListeners, { shard, error: f.error, after, host: f.host, attempt: f.attempt, retrying: true });
          },
        },
      );
    } catch (err) {
      // The caller's abort or the job's deadline: the job has stopped.
      return { ok: false, error: this.stopReason ?? err, host: last?.host, attempts: 0, indeterminate: false };
    }
  }

  /**
   * Runs one listener on a batch, through the client's retry loop: a failure of its own work
   * that makes a host unavailable re-applies it with `host` resolved afresh (RetryListener);
   * any other failure is final.
   */
  private async apply(r: Registration, first: QueryBatch): Promise<void> {
    let batch = first;
    const out = await this.client.runForJob(this.job, {
      route: { to: 'leader', collection: this.collection, shard: first.shard, spread: first.jobBatchNumber },
      firstHost: first.host,
      onlyHostUnavailable: true,
      hostOf: (err) => (r.retry ? failedHost(err, batch) : undefined),
      send: async (host) => {
        batch = host === undefined || host === first.host ? first : { ...first, host };
        await r.fn(batch);
      },
      onFailure: (f) => {
        if (!f.retrying) return;
        this.counts.retries++;
        void this.emit(this.failureListeners, { shard: first.shard, error: f.error, batch, after: first.after, host: f.host, attempt: f.attempt, retrying: true });
      },
    });
    if (out.ok) return;
    if (out.attempts === 0 && this.stopReason !== undefined) return; // stopped before it ran: nothing failed
    this.counts.listenerFailures++;
    const event: QueryBatchFailureEvent = { shard: first.shard, error: out.error, batch, after: first.after, host: out.host ?? batch.host, attempt: out.attempts, retrying: false };
    this.origins.set(event, { kind: 'listener', registration: r, batch: first });
    await this.emit(this.failureListeners, event);
  }

  /**
   * Tries a failure again (DMSDK's retry): a page that could not be read resumes its shard's walk
   * from the same cursor (awaitCompletion waits for it); a listener that failed is re-applied to
   * its batch. Rejects with the error if that fails again, without calling the failure
   * listeners. On a stopped job, or for an event that is not a final failure of this job, it
   * logs a warning and does nothing.
   */
  retry(event: QueryBatchFailureEvent): Promise<void> {
    return this.retryFailure(event, false);
  }

  /** As retry(), but a new failure goes to the failure listeners (DMSDK's retryWithFailureListeners). */
  retryWithFailureListeners(event: QueryBatchFailureEvent): Promise<void> {
    return this.retryFailure(event, true);
  }

  private retryFailure(event: QueryBatchFailureEvent, toListeners: boolean): Promise<void> {
    const log = this.client.logger;
    if (this.stopReason !== undefined) {
      log.warn({ collection: this.collection, shard: event.shard }, 'retry on a stopped query job: nothing sent');
      return Promise.resolve();
    }
    const origin = this.origins.get(event);
    if (!origin) {
      log.warn({ collection: this.collection, shard: event.shard }, 'retry of an event that is not a final failure of this query job: nothing sent');
      return Promise.resolve();
    }
    this.origins.delete(event);
    // A retry() that fails again leaves the event retryable (its failure went to no listener).
    const again = (err: unknown): never => {
      this.origins.set(event, origin);
      throw err;
    };
    if (origin.kind === 'listener') {
      this.counts.listenerFailures--;
      if (toListeners) return this.track(this.apply(origin.registration, origin.batch));
      return this.track(
        (async () => origin.registration.fn(origin.batch))().then(
          () => undefined,
          (err: unknown) => {
            this.counts.listenerFailures++;
            again(err);
          },
        ),
      );
    }
    const i = this.shardsFailed.findIndex((f) => f.shard === origin.shard && f.after === origin.after);
    if (i >= 0) this.shardsFailed.splice(i, 1);
    const walking = this.walk(origin.shard, origin.after, origin.shardBatch, toListeners);
    return this.track(toListeners ? walking : walking.catch(again));
  }

  private async emit<E>(listeners: ReadonlyArray<Listener<E>>, e: E): Promise<void> {
    for (const fn of listeners) {
      try {
        await fn(e);
      } catch (err) {
        // A failure listener's own failure must not end the walk.
        this.client.logger.error({ err }, 'query job failure listener failed');
      }
    }
  }

  /** Stops the walk after the pages in progress. With a reason, the job failed with it. */
  stop(reason?: unknown): void {
    if (this.stopReason !== undefined) return;
    this.stoppedByUser = reason === undefined;
    this.stopReason = reason ?? new ShardexError('SHX_UNAVAILABLE', 'the query job was stopped');
    this.stopped$.abort(this.stopReason);
  }

  get stopped(): boolean {
    return this.stopReason !== undefined;
  }

  report(): QueryJobReport {
    return {
      batches: this.batchNumber,
      ids: this.counts.ids,
      shardsDone: [...this.shardsDone],
      shardsFailed: [...this.shardsFailed],
      shardsNotDone: [...this.walks].filter(([, w]) => w.state === 'walking').map(([shard, w]) => ({ shard, after: w.after, waitingForLeader: w.parked })),
      listenerFailures: this.counts.listenerFailures,
      retries: this.counts.retries,
      stopped: this.stopReason !== undefined,
      ...(this.stopReason !== undefined && !this.stoppedByUser && { error: this.stopReason }),
    };
  }
}

/**
 * The host a listener's failed work was aimed at: one the client's error names, or `batch.host`
 * when a socket error of the chain was a connection to it. Anything else (a local pipe, a file)
 * is not a host of the cluster.
 */
function failedHost(err: unknown, batch: QueryBatch): string | undefined {
  let url: URL | undefined;
  try {
    url = new URL(batch.host);
  } catch {
    url = undefined;
  }
  const port = url && (url.port || (url.protocol === 'https:' ? '443' : '80'));
  const hostname = url?.hostname.replace(/^\[|\]$/g, '');
  for (const e of causeChain(err)) {
    if (isShardexError(e) && typeof e.details?.host === 'string') return e.details.host;
    const s = e as { address?: unknown; port?: unknown };
    if (url && typeof s.address === 'string' && String(s.port) === port && s.address === hostname) return batch.host;
  }
  return undefined;
}
