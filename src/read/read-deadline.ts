// The one deadline of a read, carried from where the read starts (HTTP `timeoutMs`, the
// client's `timeoutMs`/`signal`) through every wait of the read path: waiting for a reader to
// appear, the pause after a failed attempt, the reader's busy timeout, the call itself. No timer
// runs for a read that waits for nothing: each wait is clamped to the time left, and a call is
// raced against it only while it is in flight.
import { ShardexError } from '../errors.js';
import { sleep } from '../distrib/retry.js';

/** A read that names no timeout and no signal ends after this long (the node's default too). */
export const DEFAULT_READ_TIMEOUT_MS = 30_000;

/** The clock a deadline runs on (injected by tests). */
export interface ReadClock {
  now(): number;
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

const REAL_CLOCK: ReadClock = { now: () => performance.now(), sleep };

export interface ReadDeadlineOptions {
  /** Time the read may take from now; absent: the signal alone ends it, or the default. */
  readonly timeoutMs?: number;
  /** The caller's cancellation (or deadline): aborting ends the read with its reason. */
  readonly signal?: AbortSignal;
}

export class ReadDeadline {
  /** When the read's time is up, on the clock of `now` (Infinity: only the signal ends it). */
  readonly at: number;
  readonly signal: AbortSignal | undefined;
  private readonly timeoutMs: number | undefined;

  /**
   * `what` names the read in the timeout message ("eventual get of c/shard1"). A read with
   * neither a timeout nor a signal gets DEFAULT_READ_TIMEOUT_MS.
   */
  constructor(
    private readonly what: string,
    opts: ReadDeadlineOptions = {},
    private readonly clock: ReadClock = REAL_CLOCK,
  ) {
    this.timeoutMs = opts.timeoutMs ?? (opts.signal ? undefined : DEFAULT_READ_TIMEOUT_MS);
    this.at = this.timeoutMs === undefined ? Infinity : clock.now() + this.timeoutMs;
    this.signal = opts.signal;
  }

  /** The deadline's clock. */
  now(): number {
    return this.clock.now();
  }

  /** Milliseconds left (Infinity without a timeout; 0 once passed). */
  remaining(): number {
    return Math.max(0, this.at - this.clock.now());
  }

  /** The error that ends the read now, or undefined while it may go on. */
  ended(doing?: string): unknown {
    const s = this.signal;
    if (s?.aborted) return s.reason instanceof ShardexError || !isTimeoutReason(s.reason) ? s.reason : this.timeout(doing, s.reason);
    return this.remaining() <= 0 ? this.timeout(doing) : undefined;
  }

  /** Throws if the read's time is up or it was cancelled. */
  check(doing?: string): void {
    const e = this.ended(doing);
    if (e !== undefined) throw e;
  }

  /** Pauses `ms`, cut short (with the read's end) by the deadline or the signal. */
  async pause(ms: number, doing?: string): Promise<void> {
    this.check(doing);
    const left = this.remaining();
    try {
      await this.clock.sleep(Math.min(ms, left), this.signal);
    } catch {
      // Only the signal rejects a sleep: its reason, or SHX_TIMEOUT for a deadline signal.
    }
    if (ms >= left || this.signal?.aborted) this.check(doing);
  }

  /**
   * `p`, or the read's end if that comes first. The call itself is not cancelled (a reader's
   * scan, once started, runs to its end), but its caller stops waiting for it.
   */
  within<T>(p: Promise<T>, doing?: string): Promise<T> {
    const left = this.remaining();
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
    const left = this.remaining();
    if (left === Infinity) return ms;
    const whole = Math.max(1, Math.ceil(left));
    return ms === 0 ? whole : Math.min(ms, whole);
  }

  private timeout(doing: string | undefined, cause?: unknown): ShardexError {
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
