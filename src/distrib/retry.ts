// The one retry policy of Shardex: which failures are transient, and how long to pause.
// Used by the command distributor (node to node) and by the smart client (client to node).
import { isShardexError } from '../errors.js';

/** Socket-level error codes that mean "the host did not answer", not "the request was bad". */
export const HOST_UNAVAILABLE_CODES: readonly string[] = [
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
  'ECONNABORTED',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
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

/** True when the error (or one of its causes) says the host could not be reached. */
export function isHostUnavailable(err: unknown, codes: readonly string[] = HOST_UNAVAILABLE_CODES): boolean {
  for (const e of causeChain(err)) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && codes.includes(code)) return true;
    if (code === GRPC_UNAVAILABLE) return true;
    if (e instanceof Error && /socket hang up/i.test(e.message)) return true;
  }
  return false;
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
export function linearBackoff(stepMs = 500, maxMs = 2000): BackoffPolicy {
  return (attempt) => Math.min(stepMs * attempt, maxMs);
}

/** Doubling pause with a cap: base x 2^(attempt-1). */
export function exponentialBackoff(baseMs = 100, maxMs = 30_000): BackoffPolicy {
  return (attempt) => Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1));
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
