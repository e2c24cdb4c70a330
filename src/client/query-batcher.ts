// A job visiting every id that matches a query, after MarkLogic DMSDK's QueryBatcher: one
// stable cursor per shard (ids ascending, `after` = the last id seen, served by the shard's
// leader), never deep paging. A page is handed to the listeners only once it has arrived, and a
// failed page is asked again from the same cursor through the client's failover (another host,
// the new leader), so each id is visited exactly once even when a node is lost mid-walk.
import pLimit from 'p-limit';
import { ShardexError, isShardexError } from '../errors.js';
import type { JobContext, ShardexClient } from './client.js';
import { isMinHostsError } from './host-availability.js';
import { intOption } from './options.js';
import type { RetryInfo } from './types.js';

export interface QueryBatcherOptions {
  /** Ids per page (the export's limit). Default 1000. */
  readonly batchSize?: number;
  /** Shards walked at once. Default: all. */
  readonly concurrency?: number;
  /** Fields to return with each id (default: whatever the export returns). */
  readonly fields?: readonly string[];
  readonly minHosts?: number;
  readonly maxRetries?: number;
  readonly signal?: AbortSignal;
}

export interface QueryBatch {
  readonly jobBatchNumber: number;
  readonly collection: string;
  readonly shard: string;
  /** 1, 2, ... within the shard. */
  readonly shardBatchNumber: number;
  readonly host: string;
  readonly ids: readonly string[];
  readonly docs: ReadonlyArray<Record<string, unknown>>;
  /** The cursor this page started after (undefined for the first page). */
  readonly after: string | undefined;
}

export interface QueryBatchFailureEvent {
  readonly shard: string;
  readonly error: unknown;
  /** Present when a listener failed on a delivered batch; absent when the page could not be read. */
  readonly batch?: QueryBatch;
  /** The cursor from which the shard could not be read further. */
  readonly after?: string | undefined;
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
  readonly listenerFailures: number;
  readonly retries: number;
  readonly stopped: boolean;
  readonly error?: unknown;
}

type Listener<E> = (e: E) => void | Promise<void>;

export class QueryBatcher {
  readonly collection: string;
  readonly query: string;
  readonly batchSize: number;
  private readonly client: ShardexClient;
  private readonly o: QueryBatcherOptions;
  private readonly job: JobContext;
  private readonly batchListeners: Array<Listener<QueryBatch>> = [];
  private readonly failureListeners: Array<Listener<QueryBatchFailureEvent>> = [];
  private readonly retryListeners: Array<Listener<QueryBatchRetryEvent>> = [];
  private running: Promise<QueryJobReport> | undefined;
  private stopReason: unknown;
  private stoppedByUser = false;
  private batchNumber = 0;
  private readonly counts = { ids: 0, listenerFailures: 0, retries: 0 };
  private readonly shardsDone: string[] = [];
  private readonly shardsFailed: Array<{ shard: string; after: string | undefined; error: unknown }> = [];

  constructor(client: ShardexClient, collection: string, query: string, opts: QueryBatcherOptions) {
    this.client = client;
    this.collection = collection;
    this.query = query;
    this.o = opts;
    this.batchSize = intOption('batchSize', opts.batchSize, 1000);
    this.job = {
      minHosts: intOption('minHosts', opts.minHosts, client.minHosts),
      maxRetries: intOption('maxRetries', opts.maxRetries, client.maxRetries, 0),
      stopReason: () => this.stopReason,
      stop: (reason) => this.stop(reason),
    };
    if (opts.signal) {
      if (opts.signal.aborted) this.stop(opts.signal.reason);
      else opts.signal.addEventListener('abort', () => this.stop(opts.signal!.reason), { once: true });
    }
  }

  /** Called with each page of ids (DMSDK's onUrisReady); awaited before the shard's next page. */
  onBatch(fn: Listener<QueryBatch>): this {
    this.batchListeners.push(fn);
    return this;
  }

  /** A listener failed on a batch, or a shard's page could not be read for good. */
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
    const shards = state.collection(this.collection)!.shards.map((s) => s.name);
    const limit = pLimit(intOption('concurrency', this.o.concurrency, Math.max(1, shards.length)));
    await Promise.all(shards.map((shard) => limit(() => this.walk(shard))));
    const report = this.report();
    if (report.error !== undefined) {
      const e = report.error;
      throw new ShardexError(
        isShardexError(e) ? e.code : 'SHX_INTERNAL',
        `query job stopped: ${(e as Error)?.message ?? String(e)}; ${report.ids} id(s) visited in ${report.batches} batch(es), shards done: ${report.shardsDone.join(', ') || 'none'}`,
        { cause: e, details: { report } },
      );
    }
    return report;
  }

  private async walk(shard: string): Promise<void> {
    let after: string | undefined;
    for (let shardBatch = 1; ; shardBatch++) {
      if (this.stopReason !== undefined) return;
      let page: Awaited<ReturnType<ShardexClient['exportPage']>>;
      try {
        page = await this.client.exportPage(
          this.job,
          this.collection,
          shard,
          { q: this.query, after, limit: this.batchSize, ...(this.o.fields && { fields: this.o.fields }) },
          {
            spread: shardBatch,
            signal: this.o.signal,
            onRetry: (info) => {
              this.counts.retries++;
              void this.emit(this.retryListeners, { ...info, shard, after });
            },
          },
        );
      } catch (err) {
        if (isMinHostsError(err)) this.stop(err);
        if (this.stopReason !== undefined && err === this.stopReason) return;
        this.shardsFailed.push({ shard, after, error: err });
        await this.emit(this.failureListeners, { shard, error: err, after });
        return;
      }
      if (page.docs.length > 0) {
        const ids = page.docs.map((d) => String(d.id));
        const batch: QueryBatch = { jobBatchNumber: ++this.batchNumber, collection: this.collection, shard, shardBatchNumber: shardBatch, host: page.host, ids, docs: page.docs, after };
        this.counts.ids += ids.length;
        for (const fn of this.batchListeners) {
          try {
            await fn(batch);
          } catch (err) {
            this.counts.listenerFailures++;
            await this.emit(this.failureListeners, { shard, error: err, batch });
          }
        }
        after = ids[ids.length - 1];
      }
      if (page.docs.length === 0 || page.next === null) {
        this.shardsDone.push(shard);
        return;
      }
      after = page.next;
    }
  }

  private async emit<E>(listeners: ReadonlyArray<Listener<E>>, e: E): Promise<void> {
    for (const fn of listeners) {
      try {
        await fn(e);
      } catch {
        // A failure listener's own failure must not end the walk.
      }
    }
  }

  /** Stops the walk after the pages in progress. With a reason, the job failed with it. */
  stop(reason?: unknown): void {
    if (this.stopReason !== undefined) return;
    this.stoppedByUser = reason === undefined;
    this.stopReason = reason ?? new ShardexError('SHX_UNAVAILABLE', 'the query job was stopped');
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
      listenerFailures: this.counts.listenerFailures,
      retries: this.counts.retries,
      stopped: this.stopReason !== undefined,
      ...(this.stopReason !== undefined && !this.stoppedByUser && { error: this.stopReason }),
    };
  }
}
