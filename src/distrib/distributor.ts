// The command distributor: per-destination buffers flushed by count and by a short linger,
// a semaphore bounding requests in flight, retries of transient failures with a pause, and
// one final outcome per submitted update. Like Solr's SolrCmdDistributor, a forward to a
// leader may re-resolve its destination before each retry.
import pLimit, { type LimitFunction } from 'p-limit';
import type { Logger } from 'pino';
import { ShardexError } from '../errors.js';
import type { ShardUpdate, ShardUpdateResult } from '../transport/index.js';
import { NOT_SENT, isTransient, nextPause, nodeRetryBackoff, type BackoffPolicy, type Deadline } from './retry.js';

export type UpdateOutcome = { ok: true; result: ShardUpdateResult } | { ok: false; error: ShardexError };

/** Sends one frame of updates to a node; resolves with one outcome per update, in order. */
export interface UpdateTransport {
  send(dest: string, updates: readonly ShardUpdate[]): Promise<UpdateOutcome[]>;
}

export interface SubmitOptions {
  /** Retries after the first attempt (Solr: 25 for forwards to a leader, 3 to replicas). */
  readonly maxRetries: number;
  /** Looks the destination up again before a retry (a forward follows a new leader). */
  readonly resolveDest?: () => string | undefined;
  /** No retry is scheduled past it, and an update still waiting when it passes is not sent. */
  readonly deadline?: Deadline | undefined;
}

/** Requests in flight at once from one node to its peers, by default. */
export const DEFAULT_MAX_IN_FLIGHT = 16;

export interface DistributorOptions {
  readonly transport: UpdateTransport;
  readonly logger?: Logger;
  /** Requests in flight at most, over all destinations. */
  readonly maxInFlight?: number;
  /** A destination's buffer is sent once it holds this many ops... */
  readonly flushOps?: number;
  /** ...or once its oldest update has waited this long. */
  readonly lingerMs?: number;
  readonly backoff?: BackoffPolicy;
  /** Told of every frame sent, retry scheduled and final failure, per destination (metrics). */
  readonly onOutcome?: (dest: string, outcome: 'sent' | 'retried' | 'failed') => void;
}

interface Pending {
  readonly update: ShardUpdate;
  readonly opts: SubmitOptions;
  dest: string;
  attempts: number;
  resolve(r: ShardUpdateResult): void;
  reject(e: ShardexError): void;
}

interface Buffer {
  items: Pending[];
  ops: number;
  timer?: NodeJS.Timeout;
}

export interface DistributorStats {
  sent: number;
  retried: number;
  failed: number;
  inFlight: number;
  maxInFlightSeen: number;
}

export class CommandDistributor {
  private readonly transport: UpdateTransport;
  private readonly log: Logger | undefined;
  private readonly limit: LimitFunction;
  private readonly flushOps: number;
  private readonly lingerMs: number;
  private readonly backoff: BackoffPolicy;
  private readonly buffers = new Map<string, Buffer>();
  /** Updates pausing before a retry, by their timer: close() rejects them at once. */
  private readonly retrying = new Map<NodeJS.Timeout, Pending>();
  private closed = false;
  readonly stats: DistributorStats = { sent: 0, retried: 0, failed: 0, inFlight: 0, maxInFlightSeen: 0 };
  private readonly onOutcome: DistributorOptions['onOutcome'];

  constructor(opts: DistributorOptions) {
    this.transport = opts.transport;
    this.log = opts.logger;
    this.limit = pLimit(opts.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT);
    this.flushOps = opts.flushOps ?? 1000;
    this.lingerMs = opts.lingerMs ?? 2;
    this.backoff = opts.backoff ?? nodeRetryBackoff();
    this.onOutcome = opts.onOutcome;
  }

  /** Updates buffered or waiting for a free slot (not yet sent). */
  get queued(): number {
    let n = 0;
    for (const b of this.buffers.values()) n += b.items.length;
    return n + this.limit.pendingCount + this.retrying.size;
  }

  /** Queues an update for `dest`; settles with its final result or its final error. */
  submit(dest: string, update: ShardUpdate, opts: SubmitOptions): Promise<ShardUpdateResult> {
    if (this.closed) return Promise.reject(shuttingDown());
    return new Promise((resolve, reject) => {
      this.enqueue({ update, opts, dest, attempts: 0, resolve, reject });
    });
  }

  private enqueue(p: Pending): void {
    let buf = this.buffers.get(p.dest);
    if (!buf) {
      buf = { items: [], ops: 0 };
      this.buffers.set(p.dest, buf);
    }
    buf.items.push(p);
    buf.ops += p.update.ops.length;
    if (buf.ops >= this.flushOps) this.flush(p.dest);
    else buf.timer ??= setTimeout(() => this.flush(p.dest), this.lingerMs);
  }

  private flush(dest: string): void {
    const buf = this.buffers.get(dest);
    if (!buf || buf.items.length === 0) return;
    this.buffers.delete(dest);
    if (buf.timer) clearTimeout(buf.timer);
    const items = buf.items;
    void this.limit(() => this.sendFrame(dest, items));
  }

  private async sendFrame(dest: string, items: Pending[]): Promise<void> {
    // A frame that waited for a free slot while the distributor closed is never sent.
    if (this.closed) {
      for (const item of items) item.reject(shuttingDown());
      return;
    }
    // An update whose deadline passed while it waited for a slot is not sent: its sender gave up.
    const expired = items.filter((i) => i.opts.deadline?.passed);
    if (expired.length > 0) {
      for (const item of expired) this.failed(item, new ShardexError('SHX_TIMEOUT', `the update to ${dest} waited past its deadline and was not sent`, { details: NOT_SENT }));
      items = items.filter((i) => !i.opts.deadline?.passed);
      if (items.length === 0) return;
    }
    this.stats.inFlight++;
    this.stats.maxInFlightSeen = Math.max(this.stats.maxInFlightSeen, this.stats.inFlight);
    this.stats.sent++;
    this.onOutcome?.(dest, 'sent');
    let outcomes: UpdateOutcome[];
    try {
      outcomes = await this.transport.send(
        dest,
        items.map((i) => i.update),
      );
    } catch (err) {
      const error = toShardexError(err, dest);
      outcomes = items.map(() => ({ ok: false as const, error }));
    } finally {
      this.stats.inFlight--;
    }
    items.forEach((item, i) => {
      const o = outcomes[i] ?? { ok: false as const, error: new ShardexError('SHX_INTERNAL', `no result from ${dest} for an update`) };
      if (o.ok) return item.resolve(o.result);
      this.failed(item, o.error);
    });
  }

  private failed(item: Pending, error: ShardexError): void {
    const pause = this.closed ? undefined : nextPause({ maxRetries: item.opts.maxRetries, backoff: this.backoff }, error, item.attempts + 1, item.opts.deadline);
    if (pause !== undefined) {
      item.attempts++;
      this.stats.retried++;
      this.onOutcome?.(item.dest, 'retried');
      this.log?.warn({ dest: item.dest, attempt: item.attempts, err: error.message, pauseMs: pause }, 'retrying update');
      const timer = setTimeout(() => {
        this.retrying.delete(timer);
        const next = item.opts.resolveDest?.();
        if (next !== undefined) item.dest = next;
        if (this.closed) return item.reject(shuttingDown());
        this.enqueue(item);
      }, pause);
      this.retrying.set(timer, item);
      return;
    }
    this.stats.failed++;
    this.onOutcome?.(item.dest, 'failed');
    item.reject(error);
  }

  /** Sends everything buffered now. */
  flushAll(): void {
    for (const dest of [...this.buffers.keys()]) this.flush(dest);
  }

  close(): void {
    this.closed = true;
    for (const [, buf] of this.buffers) {
      if (buf.timer) clearTimeout(buf.timer);
      for (const p of buf.items) p.reject(shuttingDown());
    }
    this.buffers.clear();
    for (const [timer, p] of this.retrying) {
      clearTimeout(timer);
      p.reject(shuttingDown());
    }
    this.retrying.clear();
  }
}

const shuttingDown = (): ShardexError => new ShardexError('SHX_UNAVAILABLE', 'node is shutting down');

export function toShardexError(err: unknown, dest: string): ShardexError {
  if (err instanceof ShardexError) return err;
  // A gRPC status object is not an Error: its text is in `details`.
  const details = (err as { details?: unknown } | null)?.details;
  const message = err instanceof Error ? err.message : typeof details === 'string' ? details : String(err);
  return new ShardexError(isTransient(err) ? 'SHX_UNAVAILABLE' : 'SHX_INTERNAL', `request to ${dest} failed: ${message}`, { cause: err });
}
