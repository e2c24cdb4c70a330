// A reader's bounded pool of concurrent scans. A request waits for a free slot at most its
// busy timeout; one that cannot start by then is refused as BUSY without doing any work
// (Accumulo's scan servers answer ScanServerBusyException the same way). A pool that is
// draining (its reader is stopping) answers BUSY at once, to the queued requests too, and
// lets the running scans finish (ScanServer.startScan refuses new scans once shutdown was
// requested).
import { ShardexError } from '../errors.js';

interface Waiter {
  start(): void;
  refuse(err: ShardexError): void;
  timer: NodeJS.Timeout | undefined;
}

export class ScanPool {
  private active = 0;
  private readonly queue: Waiter[] = [];
  busy = 0;
  served = 0;
  private drainReason: string | undefined;
  private idle: (() => void) | undefined;

  constructor(private readonly max: number) {
    if (!Number.isInteger(max) || max < 1) throw new ShardexError('SHX_BAD_CONFIG', `the scan pool needs at least 1 slot, got ${max}`);
  }

  get running(): number {
    return this.active;
  }

  get waiting(): number {
    return this.queue.length;
  }

  get draining(): boolean {
    return this.drainReason !== undefined;
  }

  /** Runs `scan` once a slot is free; BUSY if none frees within `busyTimeoutMs` (0 = wait as long as it takes). */
  async run<T>(busyTimeoutMs: number, scan: () => Promise<T>): Promise<T> {
    if (this.drainReason !== undefined) throw this.refusal();
    if (this.active >= this.max) await this.wait(busyTimeoutMs);
    else this.active++;
    try {
      this.served++;
      return await scan();
    } finally {
      const next = this.queue.shift();
      if (next) next.start();
      else if (--this.active === 0) this.idle?.();
    }
  }

  /**
   * Refuses every scan not yet started (queued ones and new ones) as BUSY, saying `reason`;
   * resolves once the running scans have finished.
   */
  drain(reason: string): Promise<void> {
    this.drainReason = reason;
    for (const w of this.queue.splice(0)) w.refuse(this.refusal());
    if (this.active === 0) return Promise.resolve();
    return new Promise((resolve) => (this.idle = resolve));
  }

  private refusal(): ShardexError {
    this.busy++;
    return new ShardexError('SHX_BUSY', `reader busy: ${this.drainReason}; another reader will serve`);
  }

  private wait(busyTimeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const w: Waiter = {
        start: () => {
          if (w.timer) clearTimeout(w.timer);
          resolve();
        },
        refuse: (err) => {
          if (w.timer) clearTimeout(w.timer);
          reject(err);
        },
        timer: undefined,
      };
      if (busyTimeoutMs > 0) {
        w.timer = setTimeout(() => {
          const i = this.queue.indexOf(w);
          if (i >= 0) this.queue.splice(i, 1);
          this.busy++;
          reject(new ShardexError('SHX_BUSY', `reader busy: no scan slot within the busy timeout of ${busyTimeoutMs} ms`));
        }, busyTimeoutMs);
      }
      this.queue.push(w);
    });
  }
}
