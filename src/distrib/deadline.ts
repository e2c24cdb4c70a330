// The one deadline of Shardex: the time by which an operation, every retry and wait in it
// included, must be over, and the caller's cancellation. One object is carried from where an
// operation starts (HTTP `timeoutMs`, the client's `timeoutMs`/`signal`) through every nest of
// retries below it: the client's failover loop, a node's forwards to a leader, the distributor's
// retries, an eventual read's waits for readers and BUSY answers. It is a point on this
// process's monotonic clock and crosses processes as the time remaining (`timeoutMs`), so no
// clocks need to agree. No timer runs for an operation that waits for nothing: each wait is
// clamped to the time left, and a call is raced against the deadline only while it is in flight.
import { ShardexError } from '../errors.js';

/** The longest `timeoutMs` a request may carry to a node, read or update (10 minutes). */
export const MAX_REQUEST_TIMEOUT_MS = 600_000;

/** The clock a deadline runs on (injected by tests). */
export interface Clock {
  now(): number;
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });

export const SYSTEM_CLOCK: Clock = { now: () => performance.now(), sleep };

export interface DeadlineOptions {
  /** Time the operation may take from now; absent: only the signal ends it. */
  readonly timeoutMs?: number | undefined;
  /** The caller's cancellation: aborting ends the operation with its reason. */
  readonly signal?: AbortSignal | undefined;
  /** Names the operation in the timeout's message ("eventual get of c/shard1"). */
  readonly what?: string | undefined;
}

export class Deadline {
  /** When the time is up, on the clock's `now` (Infinity: only the signal ends it). */
  readonly at: number;
  readonly signal: AbortSignal | undefined;
  readonly timeoutMs: number | undefined;
  private readonly what: string;
  private timer: { signal: AbortSignal; stop: () => void } | undefined;
  /** abortSignal's timer has fired: the time is up, whatever the clock says to the millisecond. */
  private fired = false;

  constructor(
    opts: DeadlineOptions = {},
    private readonly clock: Clock = SYSTEM_CLOCK,
  ) {
    this.timeoutMs = opts.timeoutMs;
    this.at = opts.timeoutMs === undefined ? Infinity : clock.now() + opts.timeoutMs;
    this.signal = opts.signal;
    this.what = opts.what ?? 'the operation';
  }

  /** `ms` from now. */
  static after(ms: number, opts: Omit<DeadlineOptions, 'timeoutMs'> = {}): Deadline {
    return new Deadline({ ...opts, timeoutMs: ms });
  }

  /** The earlier of two deadlines (either may be absent). */
  static earliest(a: Deadline | undefined, b: Deadline | undefined): Deadline | undefined {
    if (a === undefined) return b;
    if (b === undefined) return a;
    return a.at <= b.at ? a : b;
  }

  /** The deadline's clock. */
  now(): number {
    return this.clock.now();
  }

  /** Milliseconds left (Infinity without a timeout; 0 once passed). */
  remainingMs(): number {
    return this.fired ? 0 : Math.max(0, this.at - this.clock.now());
  }

  /** The time is up or the caller cancelled. */
  get passed(): boolean {
    return this.signal?.aborted === true || this.remainingMs() <= 0;
  }

  /** The time is up (not a cancellation by the caller). */
  get expired(): boolean {
    return this.signal?.aborted !== true && this.remainingMs() <= 0;
  }

  /** The error that ends the operation now (`doing` and `cause` say why), or undefined while it may go on. */
  ended(doing?: string, cause?: unknown): unknown {
    const s = this.signal;
    if (s?.aborted) return s.reason instanceof ShardexError || !isTimeoutReason(s.reason) ? s.reason : this.timeout(doing, cause ?? s.reason);
    return this.remainingMs() <= 0 ? this.timeout(doing, cause) : undefined;
  }

  /** Throws if the time is up or the caller cancelled. */
  check(doing?: string): void {
    const e = this.ended(doing);
    if (e !== undefined) throw e;
  }

  /** Pauses `ms`, cut short (with the operation's end) by the deadline or the signal. */
  async pause(ms: number, doing?: string): Promise<void> {
    this.check(doing);
    const left = this.remainingMs();
    try {
      await this.clock.sleep(Math.min(ms, left), this.signal);
    } catch {
      // Only the signal rejects a sleep: its reason, or SHX_TIMEOUT for a deadline signal.
    }
    if (ms >= left || this.signal?.aborted) this.check(doing);
  }

  /**
   * `p`, or the operation's end if that comes first. The call itself is not cancelled (a
   * reader's scan, once started, runs to its end), but its caller stops waiting for it.
   */
  within<T>(p: Promise<T>, doing?: string): Promise<T> {
    const left = this.remainingMs();
    if (left === Infinity && !this.signal) return p;
    return new Promise<T>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const onAbort = (): void => finish(() => reject(this.ended(doing)));
      const finish = (settle: () => void): void => {
        if (timer) clearTimeout(timer);
        this.signal?.removeEventListener('abort', onAbort);
        settle();
      };
      if (left !== Infinity) timer = setTimeout(() => finish(() => reject(this.timeout(doing))), left);
      if (this.signal?.aborted) return onAbort();
      this.signal?.addEventListener('abort', onAbort, { once: true });
      p.then(
        (v) => finish(() => resolve(v)),
        (err) => finish(() => reject(this.ended(doing) ?? err)),
      );
    });
  }

  /** Caps a wait the callee runs itself (a reader's busy timeout; 0 = no limit) to the time left. */
  cap(ms: number): number {
    const left = this.remainingMs();
    if (left === Infinity) return ms;
    const whole = Math.max(1, Math.ceil(left));
    return ms === 0 ? whole : Math.min(ms, whole);
  }

  /**
   * A signal that aborts when the time is up (with this deadline's SHX_TIMEOUT) or when the
   * caller cancels (with its reason), for calls that take a signal (fetch). One timer, made on
   * first use and stopped by `release`.
   */
  abortSignal(): AbortSignal | undefined {
    if (this.at === Infinity) return this.signal;
    if (!this.timer) {
      const ac = new AbortController();
      const t = setTimeout(() => {
        this.fired = true;
        ac.abort(this.timeout());
      }, this.remainingMs());
      t.unref?.();
      const signal = this.signal ? AbortSignal.any([this.signal, ac.signal]) : ac.signal;
      this.timer = { signal, stop: () => clearTimeout(t) };
    }
    return this.timer.signal;
  }

  /** Stops the timer of `abortSignal` (the operation is over). */
  release(): void {
    this.timer?.stop();
  }

  /** The SHX_TIMEOUT this deadline ends an operation with, naming what it was doing and why. */
  timeout(doing?: string, cause?: unknown): ShardexError {
    const within = this.timeoutMs === undefined ? 'before its deadline' : `within ${this.timeoutMs} ms`;
    return new ShardexError(
      'SHX_TIMEOUT',
      `${this.what} did not complete ${within}${doing ? ` (${doing})` : ''}; give it a longer timeoutMs, or retry`,
      cause === undefined ? undefined : { cause },
    );
  }
}

function isTimeoutReason(reason: unknown): boolean {
  return (reason as { name?: unknown } | undefined)?.name === 'TimeoutError';
}
