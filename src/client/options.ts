// Validation of the client's numeric options, with messages that name the option.
import { ShardexError } from '../errors.js';

/** `v`, or `fallback` when absent; SHX_BAD_CONFIG naming `name` unless an integer >= `min`. */
export function intOption(name: string, v: number | undefined, fallback: number, min = 1): number {
  if (v === undefined) return fallback;
  if (!Number.isInteger(v) || v < min) throw new ShardexError('SHX_BAD_CONFIG', `${name} must be an integer >= ${min}, got ${v}`);
  return v;
}
