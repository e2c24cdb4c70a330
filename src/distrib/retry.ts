// The one retry policy of Shardex: which failures are transient, how long to pause (with
// jitter), how many retries, and one deadline that bounds them all. `retry` runs an async
// attempt under it (forwards to a leader, recovery); `nextPause` gives the same decision to loops
// driven by timers (the command distributor); the smart client's executor takes the same
// decision (decideRetry) with its host suspension and parking around it. The deadline they
// all share is deadline.ts's.
import { ShardexError, isShardexError } from '../errors.js';
import { sleep, type Deadline } from './deadline.js';

export { Deadline, sleep } from './deadline.js';

/** The details of an error that proves its request was never sent (so nothing of it was applied). */
export const NOT_SENT: Readonly<Record<string, unknown>> = Object.freeze({ sent: false });

/** True when `err` says its request was never sent. */
export const wasNotSent = (err: unknown): boolean => isShardexError(err) && err.details?.sent === false;

/**
 * The one host-unavailable list of the house (the node's retries and the smart client's host
 * failover): socket-level codes that mean "the host did not answer", not "the request was bad" --
 * DMSDK's SocketException, SSLException and UnknownHostException as Node and undici name them.
 * An entry ending in `*` matches every code with that prefix.
 */
export const HOST_UNAVAILABLE_CODES: readonly string[] = [
  'ECONNREFUSED',
  'ECONNRESET', // also Node's "socket hang up"
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'UND_ERR_SOCKET', // undici's socket hang-up: "other side closed"
  'UND_ERR_CONNECT_TIMEOUT',
  'ERR_SSL_*', // TLS handshake failures (OpenSSL: wrong version number, handshake failure, ...)
  'ERR_TLS_*',
];

/** Errors that carry no code, and the code their message stands for. */
const MESSAGE_CODES: ReadonlyArray<readonly [RegExp, string]> = [
  [/socket hang up/i, 'ECONNRESET'],
  [/other side closed/i, 'UND_ERR_SOCKET'],
  [/before secure TLS connection was established/i, 'ECONNRESET'],
];

const GRPC_UNAVAILABLE = 14;
const GRPC_DEADLINE_EXCEEDED = 4;

/** Walks an error and its `cause` chain. */
export function* causeChain(err: unknown): Generator<unknown> {
  const seen = new Set<unknown>();
  let e: unknown = err;
  while (e !== undefined && e !== null && !seen.has(e)) {
    seen.add(e);
    yield e;
    e = (e as { cause?: unknown }).cause;
  }
}

/** True when `code` is on the list (an entry ending in `*` is a prefix). */
export function codeMatches(code: string, codes: readonly string[]): boolean {
  return codes.some((c) => (c.endsWith('*') ? code.startsWith(c.slice(0, -1)) : c === code));
}

/** The socket codes an error stands for, through its whole cause chain (a known message stands for its code). */
export function errorCodes(err: unknown): string[] {
  const out: string[] = [];
  for (const e of causeChain(err)) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && code !== '') out.push(code);
    else if (e instanceof Error) for (const [re, c] of MESSAGE_CODES) if (re.test(e.message)) out.push(c);
  }
  return out;
}

/**
 * True when the error (or one of its causes) says the host could not be reached: a code on the
 * list (a message counts only when the code it stands for is listed), or gRPC's UNAVAILABLE.
 */
export function isHostUnavailable(err: unknown, codes: readonly string[] = HOST_UNAVAILABLE_CODES): boolean {
  for (const e of causeChain(err)) if ((e as { code?: unknown }).code === GRPC_UNAVAILABLE) return true;
  return errorCodes(err).some((c) => codeMatches(c, codes));
}

/**
 * A transient failure: retrying the same request later may succeed. Rejected input never is.
 * A stale leadership epoch is not retried by the sender: it means the sender was deposed.
 */
export function isTransient(err: unknown): boolean {
  for (const e of causeChain(err)) {
    if (isShardexError(e)) return e.retryable && e.code !== 'SHX_STALE_EPOCH';
    const code = (e as { code?: unknown }).code;
    if (code === GRPC_UNAVAILABLE || code === GRPC_DEADLINE_EXCEEDED) return true;
  }
  return isHostUnavailable(err);
}

export interface BackoffPolicy {
  /** Pause after the n-th failed attempt (n >= 1). */
  (attempt: number): number;
}

/** Solr's pause between distributor retries: min(500 ms x attempt, 2 s). */
export const DEFAULT_RETRY_PAUSE_MS = 500;
export const DEFAULT_RETRY_PAUSE_MAX_MS = 2000;

export function linearBackoff(stepMs = DEFAULT_RETRY_PAUSE_MS, maxMs = DEFAULT_RETRY_PAUSE_MAX_MS): BackoffPolicy {
  return (attempt) => Math.min(stepMs * attempt, maxMs);
}

/** Doubling pause with a cap: base x 2^(attempt-1). */
export function exponentialBackoff(baseMs = 100, maxMs = 30_000): BackoffPolicy {
  return (attempt) => Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1));
}

/** Scales each pause down by up to `fraction` at random, so that retries started together spread out. */
export function withJitter(backoff: BackoffPolicy, fraction = 0.2, random: () => number = Math.random): BackoffPolicy {
  return (attempt) => Math.round(backoff(attempt) * (1 - fraction * random()));
}

/** The node's pause between tries of a forward or a replica update: linear, capped, jittered. */
export function nodeRetryBackoff(stepMs = DEFAULT_RETRY_PAUSE_MS, maxMs = DEFAULT_RETRY_PAUSE_MAX_MS): BackoffPolicy {
  return withJitter(linearBackoff(stepMs, maxMs));
}

export interface RetryPolicy {
  /** Retries after the first attempt (Infinity: until the deadline). */
  readonly maxRetries: number;
  readonly backoff: BackoffPolicy;
  /** Failures another attempt may cure; default `isTransient`. */
  readonly retryable?: (err: unknown) => boolean;
}

/** Whether another attempt follows a failure, and why not when none does. */
export type RetryDecision =
  | { readonly retry: true; readonly pauseMs: number }
  /** `final`: not retryable; `exhausted`: no retry left; `deadline`: the pause would end past it. */
  | { readonly retry: false; readonly why: 'final' | 'exhausted' | 'deadline' };

/** After the n-th failed attempt (n >= 1): another attempt after a pause, or the failure is final. */
export function decideRetry(policy: RetryPolicy, err: unknown, failures: number, deadline?: Deadline): RetryDecision {
  if (!(policy.retryable ?? isTransient)(err)) return { retry: false, why: 'final' };
  if (failures > policy.maxRetries) return { retry: false, why: 'exhausted' };
  const pauseMs = policy.backoff(failures);
  if (deadline !== undefined && pauseMs >= deadline.remainingMs()) return { retry: false, why: 'deadline' };
  return { retry: true, pauseMs };
}

/** decideRetry's pause, or undefined when the failure is final (for loops that need only that). */
export function nextPause(policy: RetryPolicy, err: unknown, failures: number, deadline?: Deadline): number | undefined {
  const d = decideRetry(policy, err, failures, deadline);
  return d.retry ? d.pauseMs : undefined;
}

export interface RetryOptions {
  /** The time the retries must end by, and the caller's cancellation (its signal). */
  readonly deadline?: Deadline | undefined;
  /** Told of each failure another attempt follows, with the pause before it. */
  readonly onRetry?: (err: unknown, failures: number, pauseMs: number) => void;
}

/**
 * Runs `attempt` (given its number, from 1) until it succeeds or fails for good; throws the last
 * failure. A deadline already passed fails with SHX_TIMEOUT before any attempt (nothing was done);
 * a cancelled one with its reason.
 */
export async function retry<T>(attempt: (n: number) => Promise<T>, policy: RetryPolicy, o: RetryOptions = {}): Promise<T> {
  if (o.deadline?.expired) throw new ShardexError('SHX_TIMEOUT', 'the deadline passed before the first attempt; nothing was done', { details: NOT_SENT });
  const cancelled = o.deadline?.ended();
  if (cancelled !== undefined) throw cancelled;
  for (let n = 1; ; n++) {
    try {
      return await attempt(n);
    } catch (err) {
      const pause = nextPause(policy, err, n, o.deadline);
      if (pause === undefined) throw err;
      o.onRetry?.(err, n, pause);
      await sleep(pause, o.deadline?.signal);
    }
  }
}
