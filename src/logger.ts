// The one way to make a logger (every part uses it): pino JSON to a destination (stdout, stderr or a file).
import { pino, type Logger } from 'pino';

export function createLogger(opts: { level?: string; file?: string; fd?: 1 | 2; name?: string } = {}): Logger {
  const dest = opts.file ? pino.destination({ dest: opts.file, mkdir: true, sync: false }) : pino.destination({ fd: opts.fd ?? 1, sync: false });
  return pino({ level: opts.level ?? process.env.SHARDEX_LOG_LEVEL ?? 'info', ...(opts.name && { name: opts.name }) }, dest);
}

/** A logger that drops everything (tests, benchmarks). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
