// A bulk write job after MarkLogic DMSDK's WriteBatcher: documents go into one buffer per
// shard; a full buffer becomes a batch, sent to the shard's leader by the client with
// failover. The destination is resolved when a batch is sent, not when it is made, so batches
// queued for a host that has since been suspended go to the new leader (or any live node).
// A host failure that would leave fewer than minHosts hosts stops the job; its report lists the
// documents that were never sent. Failure listeners see every failed attempt (DMSDK).
import pLimit, { type LimitFunction } from 'p-limit';
import { Deadline } from '../distrib/deadline.js';
import { admissionError } from '../distrib/documents.js';
import type { CollectionSchema } from '../index/index.js';
import { ShardexError, isShardexError } from '../errors.js';
import type { ShardRouter } from '../hashrange/index.js';
import type { ShardexClient } from './client.js';
import type { AttemptFailure, JobContext, Outcome } from './failover.js';
import { isMinHostsError } from './host-availability.js';
import { checkKeys, intOption } from './options.js';
import type { RetryInfo } from './types.js';

export interface WriteBatcherOptions {
  readonly collection: string;
  /** Documents per batch (per shard). Default 500. */
  readonly batchSize?: number;
  /** Batches in flight at once. Default 4. */
  readonly concurrency?: number;
  readonly minRf?: number;
  /** Overrides the client's minHosts for this job. */
  readonly minHosts?: number;
  /** Overrides the client's maxRetries for this job. */
  readonly maxRetries?: number;
  /** Also send partial batches this often (ms); 0 = only when full or flushed (default). */
  readonly flushIntervalMs?: number;
  /** Aborting stops the job. */
  readonly signal?: AbortSignal;
}

const OPTION_KEYS = ['collection', 'batchSize', 'concurrency', 'minRf', 'minHosts', 'maxRetries', 'flushIntervalMs', 'signal'];

export interface WriteBatch {
  /** Numbers batches in the order they were made; a retried batch keeps its number. */
  readonly jobBatchNumber: number;
  readonly collection: string;
  readonly shard: string;
  readonly docs: ReadonlyArray<Record<string, unknown>>;
  readonly ids: readonly string[];
  /** Position of each document in the job's input (add() order, or the addAll source). */
  readonly positions: readonly number[];
}

export interface BatchSuccessEvent {
  readonly batch: WriteBatch;
  readonly host: string;
  readonly rf: number;
  readonly versions: Record<string, number>;
  readonly minRfMet: boolean;
}

/** One failed attempt of a batch (DMSDK calls every failure listener for every failure). */
export interface BatchFailureEvent {
  readonly batch: WriteBatch;
  readonly error: unknown;
  /** The host the attempt went to ('' when none was tried). */
  readonly host: string;
  /** The attempt that failed (1 = the first; 0 when none was made). */
  readonly attempt: number;
  /** Failover or the retry policy sends the batch again: not a final failure. */
  readonly retrying: boolean;
  /**
   * The batch may have been written all the same: an attempt so far ended without a definite
   * answer (503 SHX_INDETERMINATE, another 5xx, a timeout, a reset). Adds are idempotent: retry it.
   */
  readonly indeterminate: boolean;
}

export interface BatchRetryEvent extends RetryInfo {
  readonly batch: WriteBatch;
}

export interface DocumentRejectedEvent {
  readonly doc: unknown;
  /** Index of the document in the `addAll` source. */
  readonly position: number;
  readonly error: ShardexError;
}

export interface WriteProgress {
  /** Documents accepted by add(). */
  readonly submitted: number;
  /** Documents acknowledged by their leader. */
  readonly written: number;
  /** Documents in batches that failed for good. */
  readonly failed: number;
  /** Documents accepted but never sent because the job stopped. */
  readonly notSent: number;
  /** Documents refused by add() as invalid. */
  readonly rejected: number;
  /** Documents waiting in buffers or queued batches. */
  readonly pending: number;
  /** Documents in batches being sent (or retried). */
  readonly inFlight: number;
  readonly batchesSucceeded: number;
  readonly batchesFailed: number;
  readonly retries: number;
  readonly elapsedMs: number;
  readonly docsPerSecond: number;
}

export interface WriteJobReport extends WriteProgress {
  readonly stopped: boolean;
  /** Why the job stopped, when it stopped on an error. */
  readonly error?: unknown;
  /** The documents accepted but never sent (the job stopped first): id and input position. */
  readonly notSentDocs: ReadonlyArray<{ readonly id: string; readonly position: number }>;
}

type Listener<E> = (e: E) => void | Promise<void>;

/**
 * A document, admitted by the nodes' own checker (with the collection's schema, when known);
 * SHX_BAD_DOCUMENT naming `position` otherwise.
 */
export function checkDocument(doc: unknown, schema?: CollectionSchema, position = 0): { id: string; doc: Record<string, unknown> } {
  const refused = admissionError(schema, doc, position);
  if (refused) throw refused;
  const d = doc as Record<string, unknown>;
  return { id: d.id as string, doc: d };
}

interface ShardBuffer {
  docs: Array<Record<string, unknown>>;
  ids: string[];
  positions: number[];
}

export class WriteBatcher {
  readonly collection: string;
  readonly batchSize: number;
  readonly concurrency: number;
  private readonly client: ShardexClient;
  private readonly o: WriteBatcherOptions;
  private readonly limit: LimitFunction;
  private readonly job: JobContext;
  /** The caller's signal as every request's deadline (the job itself has no timeout). */
  private readonly deadline: Deadline | undefined;
  private readonly stopped$ = new AbortController();
  private router: ShardRouter | undefined;
  private schema: CollectionSchema | undefined;
  private readonly buffers = new Map<string, ShardBuffer>();
  private readonly inFlight = new Set<Promise<void>>();
  private waiters: Array<() => void> = [];
  private batchNumber = 0;
  private stopReason: unknown;
  private stoppedByUser = false;
  private readonly startedAt = Date.now();
  private flushTimer: NodeJS.Timeout | undefined;
  private readonly counts = { submitted: 0, written: 0, failed: 0, notSent: 0, rejected: 0, queued: 0, sending: 0, batchesSucceeded: 0, batchesFailed: 0, retries: 0 };
  private readonly notSentDocs: Array<{ id: string; position: number }> = [];
  /** Batches that failed for good, by number: the ones retry() may send again. */
  private readonly failedBatches = new Map<number, WriteBatch>();
  private readonly successListeners: Array<Listener<BatchSuccessEvent>> = [];
  private readonly failureListeners: Array<Listener<BatchFailureEvent>> = [];
  private readonly retryListeners: Array<Listener<BatchRetryEvent>> = [];
  private readonly rejectedListeners: Array<Listener<DocumentRejectedEvent>> = [];

  constructor(client: ShardexClient, opts: WriteBatcherOptions) {
    checkKeys('write batcher', opts, OPTION_KEYS);
    if (typeof opts.collection !== 'string' || opts.collection === '') {
      throw new ShardexError('SHX_BAD_CONFIG', `a write batcher needs the collection's name (collection), got ${JSON.stringify(opts.collection) ?? 'nothing'}`);
    }
    this.client = client;
    this.o = opts;
    this.collection = opts.collection;
    this.batchSize = intOption('batchSize', opts.batchSize, 500);
    this.concurrency = intOption('concurrency', opts.concurrency, 4);
    intOption('minRf', opts.minRf, 1);
    this.limit = pLimit(this.concurrency);
    const minHosts = intOption('minHosts', opts.minHosts, client.minHosts);
    if (client.gateway !== undefined && minHosts !== 1) throw new ShardexError('SHX_BAD_CONFIG', `minHosts must be 1 with connection "gateway", got ${minHosts}`);
    const maxRetries = intOption('maxRetries', opts.maxRetries, client.maxRetries, 0);
    this.job = {
      minHosts,
      maxRetries,
      stopReason: () => this.stopReason,
      stop: (reason) => this.stop(reason),
      signal: this.stopped$.signal,
    };
    const every = intOption('flushIntervalMs', opts.flushIntervalMs, 0, 0);
    this.deadline = opts.signal ? new Deadline({ what: `the write job on ${opts.collection}`, signal: opts.signal }) : undefined;
    if (opts.signal) {
      if (opts.signal.aborted) this.stop(opts.signal.reason);
      else opts.signal.addEventListener('abort', () => this.stop(opts.signal!.reason), { once: true });
    }
    if (every > 0 && this.stopReason === undefined) {
      this.flushTimer = setInterval(() => this.dispatchAll(), every);
      this.flushTimer.unref();
    }
  }

  // ---- listeners (chainable, as DMSDK's) -----------------------------------------------

  onBatchSuccess(fn: Listener<BatchSuccessEvent>): this {
    this.successListeners.push(fn);
    return this;
  }

  /** Called for every failed attempt of a batch; `retrying` says whether another attempt follows. */
  onBatchFailure(fn: Listener<BatchFailureEvent>): this {
    this.failureListeners.push(fn);
    return this;
  }

  /** Called for each failed attempt that will be retried. */
  onBatchRetry(fn: Listener<BatchRetryEvent>): this {
    this.retryListeners.push(fn);
    return this;
  }

  /** Called for each invalid document of an `addAll` source (the job goes on). */
  onDocumentRejected(fn: Listener<DocumentRejectedEvent>): this {
    this.rejectedListeners.push(fn);
    return this;
  }

  // ---- input ----------------------------------------------------------------------------

  /**
   * Accepts one document; resolves once there is room for more (back-pressure). Rejects with
   * SHX_BAD_DOCUMENT for an invalid document (nothing of the job changes), or with the
   * job's error once it has stopped.
   */
  async add(doc: unknown, position = this.counts.submitted + this.counts.rejected): Promise<void> {
    this.throwIfStopped();
    const router = this.router ?? (await this.start());
    this.throwIfStopped();
    let checked: { id: string; doc: Record<string, unknown> };
    try {
      checked = checkDocument(doc, this.schema, position);
    } catch (err) {
      this.counts.rejected++;
      throw err;
    }
    const shard = router.route(checked.id).shard;
    let buf = this.buffers.get(shard);
    if (!buf) this.buffers.set(shard, (buf = { docs: [], ids: [], positions: [] }));
    buf.docs.push(checked.doc);
    buf.ids.push(checked.id);
    buf.positions.push(position);
    this.counts.submitted++;
    this.counts.queued++;
    if (buf.docs.length >= this.batchSize) this.dispatch(shard);
    while (this.limit.pendingCount >= this.concurrency && this.stopReason === undefined) await new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  /** Adds every document of a (async) iterable; invalid ones go to onDocumentRejected. Resolves with the count accepted. */
  async addAll(source: AsyncIterable<unknown> | Iterable<unknown>): Promise<number> {
    let position = 0;
    let accepted = 0;
    for await (const doc of source) {
      try {
        await this.add(doc, position);
        accepted++;
      } catch (err) {
        if (!(isShardexError(err) && err.code === 'SHX_BAD_DOCUMENT')) throw err;
        await this.emit(this.rejectedListeners, { doc, position, error: err });
      }
      position++;
    }
    return accepted;
  }

  /** The job's start (first document): the collection's router and schema; minHosts against the hosts the cluster lists. */
  private async start(): Promise<ShardRouter> {
    const s = await this.client.collectionState(this.collection);
    if (this.router) return this.router;
    const known = this.client.gateway !== undefined ? [this.client.gateway] : s.dataHosts();
    if (this.job.minHosts > known.length) {
      const err = new ShardexError(
        'SHX_BAD_CONFIG',
        `minHosts ${this.job.minHosts} is more than the ${known.length} host(s) the cluster lists (${known.join(', ') || 'none'}); set minHosts to at most ${known.length}, or start more nodes`,
        { details: { minHosts: this.job.minHosts, hosts: known.length } },
      );
      this.stop(err);
      throw err;
    }
    this.schema = s.schema(this.collection);
    this.router = s.router(this.collection);
    return this.router;
  }

  // ---- sending ----------------------------------------------------------------------------

  private dispatch(shard: string): void {
    const buf = this.buffers.get(shard);
    if (!buf || buf.docs.length === 0) return;
    this.buffers.delete(shard);
    const batch: WriteBatch = { jobBatchNumber: ++this.batchNumber, collection: this.collection, shard, docs: buf.docs, ids: buf.ids, positions: buf.positions };
    void this.enqueue(batch, true);
  }

  private dispatchAll(): void {
    for (const shard of [...this.buffers.keys()]) this.dispatch(shard);
  }

  /** Queues a batch; the promise settles with its outcome (rejects only when `toListeners` is false). */
  private enqueue(batch: WriteBatch, toListeners: boolean): Promise<void> {
    const p = this.limit(() => this.send(batch, toListeners));
    const tracked: Promise<void> = p
      .catch(() => undefined)
      .finally(() => {
        this.inFlight.delete(tracked);
        const waiting = this.waiters;
        this.waiters = [];
        for (const w of waiting) w();
      });
    this.inFlight.add(tracked);
    return p;
  }

  private markNotSent(batch: WriteBatch): void {
    this.counts.notSent += batch.docs.length;
    batch.ids.forEach((id, i) => this.notSentDocs.push({ id, position: batch.positions[i]! }));
  }

  private async send(batch: WriteBatch, toListeners: boolean): Promise<void> {
    const n = batch.docs.length;
    this.counts.queued -= n;
    if (this.stopReason !== undefined) return this.markNotSent(batch);
    this.counts.sending += n;
    let last: AttemptFailure | undefined;
    let out: Outcome<{ host: string; rf: number; versions: Record<string, number>; minRfMet: boolean }>;
    try {
      out = await this.client.postShard(this.job, this.collection, batch.shard, batch.docs, {
        ...(this.o.minRf !== undefined && { minRf: this.o.minRf }),
        spread: batch.jobBatchNumber,
        deadline: this.deadline,
        onFailure: (f) => {
          last = f;
          if (!f.retrying) return;
          this.counts.retries++;
          void this.emit(this.retryListeners, { ...f, batch });
          if (toListeners) void this.emit(this.failureListeners, { batch, error: f.error, host: f.host, attempt: f.attempt, retrying: true, indeterminate: f.indeterminate });
        },
      });
    } catch (err) {
      // The retry loop ends a deadline or an abort as a failed outcome (with its attempts and
      // whether one may have been applied); only an unexpected error lands here.
      out = { ok: false, error: err, host: last?.host, attempts: last?.attempt ?? 0, indeterminate: last?.indeterminate ?? false };
    }
    this.counts.sending -= n;
    if (out.ok) {
      this.counts.written += n;
      this.counts.batchesSucceeded++;
      await this.emit(this.successListeners, { batch, host: out.value.host, rf: out.value.rf, versions: out.value.versions, minRfMet: out.value.minRfMet });
      return;
    }
    if (out.attempts === 0 && this.stopReason !== undefined) return this.markNotSent(batch);
    this.counts.failed += n;
    this.counts.batchesFailed++;
    this.failedBatches.set(batch.jobBatchNumber, batch);
    if (isMinHostsError(out.error)) this.stop(out.error);
    if (!toListeners) throw out.error;
    await this.emit(this.failureListeners, { batch, error: out.error, host: last?.host ?? '', attempt: last?.attempt ?? 0, retrying: false, indeterminate: out.indeterminate });
  }

  /**
   * Sends a batch that failed for good again (DMSDK's retry): same batch number, the destination
   * resolved afresh. Resolves when it is written (success listeners are told); rejects with the
   * error if it fails again, without calling the failure listeners. On a stopped job, or for a
   * batch that has not failed, it logs a warning and does nothing.
   */
  retry(batch: WriteBatch): Promise<void> {
    return this.resend(batch, false);
  }

  /** As retry(), but a new failure goes to the failure listeners (DMSDK's retryWithFailureListeners). */
  retryWithFailureListeners(batch: WriteBatch): Promise<void> {
    return this.resend(batch, true);
  }

  private resend(batch: WriteBatch, toListeners: boolean): Promise<void> {
    const log = this.client.logger;
    if (this.stopReason !== undefined) {
      log.warn({ collection: this.collection, batch: batch.jobBatchNumber }, 'retry of a batch of a stopped write job: nothing sent');
      return Promise.resolve();
    }
    if (this.failedBatches.get(batch.jobBatchNumber) !== batch) {
      log.warn({ collection: this.collection, batch: batch.jobBatchNumber }, 'retry of a batch that has not failed for good (it is written, or still being retried): nothing sent');
      return Promise.resolve();
    }
    this.failedBatches.delete(batch.jobBatchNumber);
    this.counts.failed -= batch.docs.length;
    this.counts.batchesFailed--;
    this.counts.queued += batch.docs.length;
    return this.enqueue(batch, toListeners);
  }

  private async emit<E>(listeners: ReadonlyArray<Listener<E>>, e: E): Promise<void> {
    for (const fn of listeners) {
      try {
        await fn(e);
      } catch (err) {
        // A listener's failure is its own; it must not fail the job (DMSDK logs it).
        this.client.logger.error({ err }, 'write job listener failed');
      }
    }
  }

  // ---- completion -----------------------------------------------------------------------

  /** Sends every partial batch and waits until nothing is in flight. Rejects if the job stopped on an error. */
  async flush(): Promise<void> {
    this.dispatchAll();
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
    this.throwIfStopped();
  }

  /** Flushes, ends the job and reports. Rejects, saying what was and was not written, if it stopped on an error. */
  async awaitCompletion(): Promise<WriteJobReport> {
    try {
      await this.flush();
    } catch {
      /* reported below */
    }
    if (this.flushTimer) clearInterval(this.flushTimer);
    for (const buf of this.buffers.values()) {
      this.counts.queued -= buf.docs.length;
      this.markNotSent({ jobBatchNumber: 0, collection: this.collection, shard: '', docs: buf.docs, ids: buf.ids, positions: buf.positions });
    }
    this.buffers.clear();
    const report = this.report();
    if (report.error !== undefined) {
      const e = report.error;
      throw new ShardexError(
        isShardexError(e) ? e.code : 'SHX_INTERNAL',
        `write job stopped: ${(e as Error)?.message ?? String(e)}; ${report.written} document(s) written, ${report.failed} failed, ${report.notSent} not sent` +
          (report.notSentDocs.length > 0 ? ` (positions ${positionList(report.notSentDocs.map((d) => d.position))}; details.report.notSentDocs lists their ids)` : ''),
        { cause: e, details: { report } },
      );
    }
    return report;
  }

  /**
   * Stops the job: batches not yet sent are not sent. With a reason, the job failed with it
   * (awaitCompletion rejects); without, it was stopped on purpose.
   */
  stop(reason?: unknown): void {
    if (this.stopReason !== undefined) return;
    this.stoppedByUser = reason === undefined;
    this.stopReason = reason ?? new ShardexError('SHX_UNAVAILABLE', 'the write job was stopped');
    this.stopped$.abort(this.stopReason);
    if (this.flushTimer) clearInterval(this.flushTimer);
    const waiting = this.waiters;
    this.waiters = [];
    for (const w of waiting) w();
  }

  get stopped(): boolean {
    return this.stopReason !== undefined;
  }

  private throwIfStopped(): void {
    if (this.stopReason !== undefined && !this.stoppedByUser) throw this.stopReason;
    if (this.stoppedByUser) throw new ShardexError('SHX_BAD_REQUEST', 'the write job was stopped; start a new one');
  }

  get progress(): WriteProgress {
    const elapsedMs = Date.now() - this.startedAt;
    return {
      submitted: this.counts.submitted,
      written: this.counts.written,
      failed: this.counts.failed,
      notSent: this.counts.notSent,
      rejected: this.counts.rejected,
      pending: this.counts.queued,
      inFlight: this.counts.sending,
      batchesSucceeded: this.counts.batchesSucceeded,
      batchesFailed: this.counts.batchesFailed,
      retries: this.counts.retries,
      elapsedMs,
      docsPerSecond: elapsedMs > 0 ? (this.counts.written * 1000) / elapsedMs : 0,
    };
  }

  report(): WriteJobReport {
    return {
      ...this.progress,
      stopped: this.stopReason !== undefined,
      ...(this.stopReason !== undefined && !this.stoppedByUser && { error: this.stopReason }),
      notSentDocs: [...this.notSentDocs],
    };
  }
}

/** Positions as "3, 7, 12" (at most 10, then "and N more"). */
function positionList(positions: readonly number[]): string {
  const shown = positions.slice(0, 10).join(', ');
  return positions.length > 10 ? `${shown} and ${positions.length - 10} more` : shown;
}
