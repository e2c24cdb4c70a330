// Validation of the client's and its jobs' options, when they are set (DMSDK's setters throw
// at once): unknown keys, and values of the wrong kind, are refused with SHX_BAD_CONFIG naming
// the option and saying what it takes.
import { ShardexError } from '../errors.js';

/** `v`, or `fallback` when absent; SHX_BAD_CONFIG naming `name` unless an integer >= `min`. */
export function intOption(name: string, v: number | undefined, fallback: number, min = 1): number {
  if (v === undefined) return fallback;
  if (!Number.isInteger(v) || v < min) throw new ShardexError('SHX_BAD_CONFIG', `${name} must be an integer >= ${min}, got ${show(v)}`);
  return v;
}

/** A duration in whole milliseconds >= 0 (null, negative, fractional and non-numbers refused). */
export function durationOption(name: string, v: unknown, fallback: number): number {
  if (v === undefined) return fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
    throw new ShardexError('SHX_BAD_CONFIG', `${name} must be a duration in whole milliseconds >= 0 (e.g. 600000 for 10 minutes), got ${show(v)}`);
  }
  return v;
}

/** An API key: non-empty printable ASCII without spaces (it travels in a header). Never shown in a message. */
export function apiKeyOption(v: unknown): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw new ShardexError('SHX_BAD_CONFIG', `apiKey must be a string (a key of the nodes' --api-keys file), got ${v === null ? 'null' : typeof v}`);
  if (!/^[\x21-\x7e]+$/.test(v)) {
    throw new ShardexError('SHX_BAD_CONFIG', `apiKey must be non-empty printable ASCII without spaces or line breaks (got ${v.length} characters that are not); check how the key was copied`);
  }
  return v;
}

/** The `tls` option as PEM bytes: only ca, cert and key, each PEM text or bytes, cert and key together. */
export function tlsOption(v: unknown): { ca?: Buffer; cert?: Buffer; key?: Buffer } | undefined {
  if (v === undefined) return undefined;
  checkKeys('tls', v as object, ['ca', 'cert', 'key']);
  const o = v as Record<string, unknown>;
  const out: { ca?: Buffer; cert?: Buffer; key?: Buffer } = {};
  for (const k of ['ca', 'cert', 'key'] as const) {
    const pem = o[k];
    if (pem === undefined) continue;
    if (typeof pem !== 'string' && !(pem instanceof Uint8Array)) throw new ShardexError('SHX_BAD_CONFIG', `tls.${k} must be PEM text or its bytes (e.g. readFileSync('${k}.pem')), got ${show(pem)}`);
    out[k] = Buffer.from(pem);
  }
  if ((out.cert === undefined) !== (out.key === undefined)) throw new ShardexError('SHX_BAD_CONFIG', `tls.${out.cert === undefined ? 'key' : 'cert'} needs tls.${out.cert === undefined ? 'cert' : 'key'}: give the certificate and its private key together`);
  return out;
}

export function functionOption<F>(name: string, v: unknown): F | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'function') throw new ShardexError('SHX_BAD_CONFIG', `${name} must be a function, got ${show(v)}`);
  return v as F;
}

export function oneOf<T extends string>(name: string, v: unknown, allowed: readonly T[], fallback: T): T {
  if (v === undefined) return fallback;
  if (typeof v !== 'string' || !(allowed as readonly string[]).includes(v)) {
    throw new ShardexError('SHX_BAD_CONFIG', `${name} must be one of ${allowed.map((a) => JSON.stringify(a)).join(', ')}, got ${show(v)}`);
  }
  return v as T;
}

/** Error codes: a list of non-empty strings (an entry ending in `*` matches a prefix). */
export function codeListOption(name: string, v: unknown): readonly string[] | undefined {
  if (v === undefined) return undefined;
  if (!Array.isArray(v) || v.some((c) => typeof c !== 'string' || c.trim() === '')) {
    throw new ShardexError('SHX_BAD_CONFIG', `${name} must be an array of error codes such as ["ECONNREFUSED", "ERR_SSL_*"], got ${show(v)}`);
  }
  return v.map((c: string) => c.trim());
}

/**
 * Refuses keys `opts` has that `known` does not list, suggesting the nearest known name.
 * A key whose value is undefined counts as absent (spreading optional values is common).
 */
export function checkKeys(what: string, opts: object, known: readonly string[]): void {
  if (typeof opts !== 'object' || opts === null) throw new ShardexError('SHX_BAD_CONFIG', `${what} must be an object, got ${show(opts)}`);
  for (const [key, value] of Object.entries(opts)) {
    if (value === undefined || known.includes(key)) continue;
    const near = nearest(key, known);
    throw new ShardexError(
      'SHX_BAD_CONFIG',
      `unknown ${what} option '${key}'${near ? `; did you mean '${near}'?` : ''} Known options: ${[...known].sort().join(', ')}`,
    );
  }
}

function nearest(key: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestD = Infinity;
  for (const k of known) {
    const d = distance(key.toLowerCase(), k.toLowerCase());
    if (d < bestD) [best, bestD] = [k, d];
  }
  return bestD <= Math.max(2, Math.floor(key.length / 4)) ? best : undefined;
}

/** Levenshtein distance (short option names only). */
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = cur;
  }
  return prev[b.length]!;
}

function show(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v === 'number') return String(v);
  if (typeof v === 'function') return 'a function';
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}
