// The one way to make a logger (every part uses it): pino JSON to a destination (stdout, stderr or a file).
// Every line logged while a request's work runs carries its id as `reqId` (src/request-id.ts).
import { pino, type Logger } from 'pino';
import { currentRequestId } from './request-id.js';

/** Marks a logger whose bindings already hold the request id (fastify's per-request loggers). */
const BOUND = Symbol('shardex.reqIdBound');

/** `logger` (a request's child logger that already binds `reqId`), marked so the id is not written twice. */
export function requestBoundLogger<L extends object>(logger: L): L {
  (logger as Record<symbol, unknown>)[BOUND] = true;
  return logger;
}

// pino merges (and mutates) what this returns: a fresh object every time.
function requestIdMixin(_obj: object, _level: number, logger: Logger): Record<string, unknown> {
  if ((logger as unknown as Record<symbol, unknown>)[BOUND]) return {};
  const reqId = currentRequestId();
  return reqId === undefined ? {} : { reqId };
}

export function createLogger(opts: { level?: string; file?: string; fd?: 1 | 2; name?: string } = {}): Logger {
  const dest = opts.file ? pino.destination({ dest: opts.file, mkdir: true, sync: false }) : pino.destination({ fd: opts.fd ?? 1, sync: false });
  return pino({ level: opts.level ?? process.env.SHARDEX_LOG_LEVEL ?? 'info', mixin: requestIdMixin, ...(opts.name && { name: opts.name }) }, dest);
}

/**
 * Writes every line logged so far before it returns. The destination writes asynchronously, so lines
 * logged while a write is in flight wait in its buffer: a worker thread that is terminated right after
 * its last lines would drop them (pino writes the buffer out at a process's exit, not a thread's).
 * Call this as the last step before a thread or a process ends.
 */
export function flushLoggerSync(logger: Logger): void {
  const dest = (logger as unknown as Record<symbol, { flushSync?: () => void } | undefined>)[pino.symbols.streamSym];
  try {
    dest?.flushSync?.();
  } catch {
    // Not open yet, or already closed: there is nothing this call could still write.
  }
}

/** A logger that drops everything (tests, benchmarks). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
