// Waiting for a condition in tests: the probe runs until it returns a value (not undefined), and
// the wait fails after `ms`, naming what it waited for (and the probe's last error, when errors
// are retried).
import { setTimeout as sleep } from 'node:timers/promises';

export interface PollOptions {
  readonly ms: number;
  /** Pause between probes; default 100 ms. */
  readonly everyMs?: number;
  /** A probe that throws is tried again (the last error is in the timeout's message); default: the error fails the wait. */
  readonly retryErrors?: boolean;
}

export async function pollUntil<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, o: PollOptions): Promise<T> {
  const deadline = Date.now() + o.ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      if (!o.retryErrors) throw err;
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${o.ms} ms waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await sleep(o.everyMs ?? 100);
  }
}
