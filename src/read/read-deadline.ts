// A read's deadline: the one Deadline (distrib/deadline.ts), with the default a read gets when
// it names neither a timeout nor a signal.
import { Deadline, type Clock, type DeadlineOptions } from '../distrib/deadline.js';

/** A read that names no timeout and no signal ends after this long (the node's default too). */
export const DEFAULT_READ_TIMEOUT_MS = 30_000;

export type ReadDeadlineOptions = Pick<DeadlineOptions, 'timeoutMs' | 'signal'>;

/**
 * The deadline of a read named `what` ("eventual get of c/shard1"). A read with neither a
 * timeout nor a signal gets DEFAULT_READ_TIMEOUT_MS.
 */
export function readDeadline(what: string, opts: ReadDeadlineOptions = {}, clock?: Clock): Deadline {
  const timeoutMs = opts.timeoutMs ?? (opts.signal ? undefined : DEFAULT_READ_TIMEOUT_MS);
  return new Deadline({ what, timeoutMs, signal: opts.signal }, clock);
}
