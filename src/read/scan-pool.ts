// A reader's bounded pool of concurrent scans. A request waits for a free slot at most its
// busy timeout; one that cannot start by then is refused as BUSY without doing any work
// (Accumulo's scan servers answer ScanServerBusyException the same way).
import { ShardexError } from '../errors.js';

interface Waiter {
  start(): void;
  timer: NodeJS.Timeout | undefined;
}

export class ScanPool {
  private active = 0;
  private readonly queue: Waiter[] = [];
  busy = 0;
  served = 0;

  constructor(private readonly max: number) {
    if (!Number.isInteger(max) || max < 1) throw new ShardexError('SHX_BAD_CONFIG', `the scan pool needs at least 1 slot, got ${max}`);
  }

  get running(): number {
    return this.active;
  }

  get waiting(): number {
    return this.queue.length;
  }

  /** Runs `scan` once a slot is free; BUSY if none frees within `busyTimeoutMs` (0 = wait as long as it takes). */
  async run<T>(busyTimeoutMs: number, scan: () => Promise<T>): Promise<T> {
    if (this.active >= this.max) await this.wait(busyTimeoutMs);
    else this.active++;
    try {
      this.served++;
      return await scan();
    } finally {
      const next = this.queue.shift();
      if (next) next.start();
      else this.active--;
    }
  }

  private wait(busyTimeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const w: Waiter = {
        start: () => {
          if (w.timer) clearTimeout(w.timer);
          resolve();
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
