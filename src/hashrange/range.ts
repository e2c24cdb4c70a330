// Hash ranges over the signed 32-bit hash space, written as Solr writes them into
// state.json: `Integer.toHexString(min) + "-" + Integer.toHexString(max)`, i.e. the two's
// complement bits in lowercase hex without zero padding (`80000000-ffffffff`, `0-7fffffff`).

import { ShardexError } from '../errors.js';

export const HASH_MIN = -0x80000000;
export const HASH_MAX = 0x7fffffff;

/** An inclusive range of signed 32-bit hashes. Ranges never wrap: `min <= max`. */
export interface HashRange {
  readonly min: number;
  readonly max: number;
}

/** The hash range a shard owns; `name` is `shardK`, K counting ranges in ascending order from 1. */
export interface ShardRange extends HashRange {
  readonly name: string;
}

/** `lo-hi` as unsigned lowercase hex without padding, e.g. `80000000-d554ffff`. */
export function formatRange(range: HashRange): string {
  return `${(range.min >>> 0).toString(16)}-${(range.max >>> 0).toString(16)}`;
}

const RANGE_TEXT = /^([0-9a-fA-F]{1,8})-([0-9a-fA-F]{1,8})$/;

/**
 * Parses `lo-hi` (each 1..8 hex digits, the two's complement bits of a signed int, as
 * `formatRange` writes them). With `name`, returns the shard's range.
 */
export function parseRange(text: string): HashRange;
export function parseRange(text: string, name: string): ShardRange;
export function parseRange(text: string, name?: string): HashRange | ShardRange {
  const m = typeof text === 'string' ? RANGE_TEXT.exec(text) : null;
  if (m === null) {
    throw new ShardexError(
      'SHX_BAD_REQUEST',
      `hash range ${JSON.stringify(text)} is not "min-max" with 1 to 8 hex digits each (e.g. "80000000-ffffffff")`,
    );
  }
  const min = parseInt(m[1], 16) | 0;
  const max = parseInt(m[2], 16) | 0;
  if (min > max) {
    throw new ShardexError(
      'SHX_BAD_REQUEST',
      `hash range ${JSON.stringify(text)} is empty: its min ${min} is above its max ${max} (signed 32-bit)`,
    );
  }
  return name === undefined ? { min, max } : { min, max, name };
}

