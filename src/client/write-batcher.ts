// A bulk write job after MarkLogic DMSDK's WriteBatcher: documents go into one buffer per
// shard; a full buffer becomes a batch, sent to the shard's leader by the client with
// failover. The destination is resolved when a batch is sent, not when it is made, so batches
// queued for a host that has since been suspended go to the new leader (or any live node).
// A host failure that would leave fewer than minHosts hosts stops the job.
import pLimit, { type LimitFunction } from 'p-limit';
import { admissionError } from '../distrib/documents.js';
import type { CollectionSchema } from '../index/index.js';
import { ShardexError, isShardexError } from '../errors.js';
import type { ShardRouter } from '../hashrange/index.js';
import type { ShardexClient, JobContext } from './client.js';
import { isMinHostsError } from './host-availability.js';
import { intOption } from './options.js';
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

export interface WriteBatch {
  /** Numbers batches in the order they were made; a retried batch keeps its number. */
  readonly jobBatchNumber: number;
  readonly collection: string;
  readonly shard: string;
  readonly docs: ReadonlyArray<Record<string, unknown>>;
  readonly ids: readonly string[];
}

export interface BatchSuccessEvent {
  readonly batch: WriteBatch;
  readonly host: string;
  readonly rf: number;
  readonly versions: Record<string, number>;
  readonly minRfMet: boolean;
}

export interface BatchFailureEvent {
  readonly batch: WriteBatch;
  readonly error: unknown;
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
}

export class WriteBatcher {
  readonly collection: string;
  readonly batchSize: number;
  readonly concurrency: number;
  private readonly client: ShardexClient;
  private readonly o: WriteBatcherOptions;
  private readonly limit: LimitFunction;
  private readonly job: JobContext;
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
  private readonly successListeners: Array<Listener<BatchSuccessEvent>> = [];
  private readonly failureListeners: Array<Listener<BatchFailureEvent>> = [];
  private readonly retryListeners: Array<Listener<BatchRetryEvent>> = [];
  private readonly rejectedListeners: Array<Listener<DocumentRejectedEvent>> = [];

  constructor(client: ShardexClient, opts: WriteBatcherOptions) {
    this.client = client;
    this.o = opts;
    this.collection = opts.collection;
    this.batchSize = intOption('batchSize', opts.batchSize, 500);
    this.concurrency = intOption('concurrency', opts.concurrency, 4);
    this.limit = pLimit(this.concurrency);
    const minHosts = intOption('minHosts', opts.minHosts, client.minHosts);
    const maxRetries = intOption('maxRetries', opts.maxRetries, client.maxRetries, 0);
    this.job = {
      minHosts,
      maxRetries,
      stopReason: () => this.stopReason,
      stop: (reason) => this.stop(reason),
    };
    if (opts.signal) {
      if (opts.signal.aborted) this.stop(opts.signal.reason);
      else opts.signal.addEventListener('abort', () => this.stop(opts.signal!.reason), { once: true });
    }
    const every = intOption('flushIntervalMs', opts.flushIntervalMs, 0, 0);
    if (every > 0) {
      this.flushTimer = setInterval(() => this.dispatchAll(), every);
      this.flushTimer.unref();
    }
  }

  // ---- listeners (chainable, as DMSDK's) -----------------------------------------------

  onBatchSuccess(fn: Listener<BatchSuccessEvent>): this {
    this.successListeners.push(fn);
    return this;
  }

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
    const router = this.router ?? (await this.loadRouter());
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
    if (!buf) this.buffers.set(shard, (buf = { docs: [], ids: [] }));
    buf.docs.push(checked.doc);
    buf.ids.push(checked.id);
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

  private async loadRouter(): Promise<ShardRouter> {
    const s = await this.client.collectionState(this.collection);
    if (this.router) return this.router;
    const live = this.client.liveHosts.length;
    if (this.job.minHosts > live) {
      const err = new ShardexError('SHX_BAD_CONFIG', `minHosts ${this.job.minHosts} is more than the ${live} live host(s) of the cluster`);
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
    const batch: WriteBatch = { jobBatchNumber: ++this.batchNumber, collection: this.collection, shard, docs: buf.docs, ids: buf.ids };
    this.enqueue(batch);
  }

  private dispatchAll(): void {
    for (const shard of [...this.buffers.keys()]) this.dispatch(shard);
  }

  private enqueue(batch: WriteBatch): Promise<void> {
    const p: Promise<void> = this.limit(() => this.send(batch)).finally(() => {
      this.inFlight.delete(p);
      const waiting = this.waiters;
      this.waiters = [];
      for (const w of waiting) w();
    });
    this.inFlight.add(p);
    return p;
  }

  private async send(batch: WriteBatch): Promise<void> {
    const n = batch.docs.length;
    this.counts.queued -= n;
    if (this.stopReason !== undefined) {
      this.counts.notSent += n;
      return;
    }
    this.counts.sending += n;
    try {
      const res = await this.client.postShard(this.job, this.collection, batch.shard, batch.docs, {
        ...(this.o.minRf !== undefined && { minRf: this.o.minRf }),
        spread: batch.jobBatchNumber,
        signal: this.o.signal,
        onRetry: (info) => {
          this.counts.retries++;
          void this.emit(this.retryListeners, { ...info, batch });
        },
      });
      this.counts.sending -= n;
      this.counts.written += n;
      this.counts.batchesSucceeded++;
      await this.emit(this.successListeners, { batch, host: res.host, rf: res.rf, versions: res.versions, minRfMet: res.minRfMet });
    } catch (err) {
      this.counts.sending -= n;
      this.counts.failed += n;
      this.counts.batchesFailed++;
      if (isMinHostsError(err)) this.stop(err);
      await this.emit(this.failureListeners, { batch, error: err });
    }
  }

  /**
   * Sends a failed batch again (DMSDK's retryWithFailureListeners): same batch number, the
   * destination resolved afresh; its outcome reaches the listeners again.
   */
  retry(batch: WriteBatch): Promise<void> {
    this.throwIfStopped();
    this.counts.failed -= batch.docs.length;
    this.counts.batchesFailed--;
    this.counts.queued += batch.docs.length;
    return this.enqueue(batch);
  }

  private async emit<E>(listeners: ReadonlyArray<Listener<E>>, e: E): Promise<void> {
    for (const fn of listeners) {
      try {
        await fn(e);
      } catch {
        // A listener's failure is its own; it must not fail the job (DMSDK logs it).
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
      this.counts.notSent += buf.docs.length;
      this.counts.queued -= buf.docs.length;
    }
    this.buffers.clear();
    const report = this.report();
    if (report.error !== undefined) {
      const e = report.error;
      throw new ShardexError(
        isShardexError(e) ? e.code : 'SHX_INTERNAL',
        `write job stopped: ${(e as Error)?.message ?? String(e)}; ${report.written} document(s) written, ${report.failed} failed, ${report.notSent} not sent`,
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
    };
  }
}
