// Document routing, bit-identical to Solr's CompositeIdRouter and PlainIdRouter: how the hash
// space is cut into shard ranges at collection creation, how an id becomes a hash, and which
// shard's range holds that hash.

import { ShardexError } from '../errors.js';
import { encodeId, murmur3, murmur3Range } from './murmur3.js';
import { formatRange, HASH_MAX, HASH_MIN, type HashRange, type ShardRange } from './range.js';

/** `compositeId` (Solr's default) or `hash` (Solr's `plain`). */
export type RouterName = 'compositeId' | 'hash';

/** What callers may pass as a router name: `plain` is Solr's name for `hash`. */
export type RouterNameInput = RouterName | 'plain';

export const DEFAULT_ROUTER: RouterName = 'compositeId';

export const MAX_SHARDS = 256;

export interface RouteResult {
  readonly hash: number;
  readonly shard: string;
}

/** Normalizes a router name (`plain` -> `hash`); anything else is a bad request. */
export function parseRouterName(name: unknown): RouterName {
  if (name === 'compositeId' || name === 'hash') return name;
  if (name === 'plain') return 'hash';
  throw new ShardexError(
    'SHX_BAD_REQUEST',
    `unknown router ${JSON.stringify(name)}: use "compositeId" (the default) or "hash" (alias "plain")`,
  );
}

function assertNumShards(numShards: unknown): asserts numShards is number {
  if (typeof numShards !== 'number' || !Number.isInteger(numShards) || numShards < 1 || numShards > MAX_SHARDS) {
    throw new ShardexError(
      'SHX_BAD_REQUEST',
      `numShards must be an integer from 1 to ${MAX_SHARDS}, got ${typeof numShards === 'number' ? numShards : JSON.stringify(numShards)}`,
    );
  }
}

// --- Ranges -------------------------------------------------------------------------------

/** A long's `x | 0xffff`, for values well inside ±2^53 (JS bit operators are 32-bit). */
function orLow16(x: number): number {
  return Math.floor(x / 0x10000) * 0x10000 + 0xffff;
}

/**
 * Splits `range` into `parts` contiguous ranges exactly as Solr does (long arithmetic, last
 * range forced to end at `range.max`). `hash` is DocRouter's plain division. `compositeId`
 * is CompositeIdRouter's override: when a step spans at least 16 blocks of 2^16 hashes, each
 * boundary moves to a block end (`....ffff`) so that no `tenant!` block of 16 hash bits is
 * split across shards; the target boundaries stay the unrounded ones, so errors don't
 * accumulate. Solr picks between the block end one below and one above the block holding the
 * target (never the holding block's own end), whichever is nearer, preferring the upper one on
 * a tie or when the lower one would not lie past the range's start.
 */
export function splitRange(range: HashRange, parts: number, router: RouterName): HashRange[] {
  const { min, max } = range;
  const out: HashRange[] = [];
  if (parts <= 0) return out;
  const step = Math.max(1, Math.floor((max - min) / parts));
  const round = router === 'compositeId' && step >= 0x10000 * 16;
  let start = min;
  let end = start;
  let targetStart = min;
  while (end < max) {
    const targetEnd = targetStart + step;
    end = targetEnd;
    if (round && orLow16(end) !== end) {
      const roundDown = orLow16(end) - 0x10000;
      const roundUp = orLow16(end) + 0x10000;
      end = end - roundDown < roundUp - end && roundDown > start ? roundDown : roundUp;
    }
    if (out.length === parts - 1) end = max;
    // Java's (int) narrowing: keep the low 32 bits.
    out.push({ min: start | 0, max: end | 0 });
    start = end + 1;
    targetStart = router === 'compositeId' ? targetEnd + 1 : end + 1;
  }
  return out;
}

/**
 * The shard ranges of a new collection of `numShards` shards: the full signed 32-bit space,
 * cut as Solr's `router.partitionRange(n, fullRange())`; `shardK` owns the K-th range in
 * ascending order.
 */
export function partitionRange(numShards: number, router: RouterNameInput = DEFAULT_ROUTER): ShardRange[] {
  assertNumShards(numShards);
  const name = parseRouterName(router);
  return splitRange({ min: HASH_MIN, max: HASH_MAX }, numShards, name).map((r, i) => ({
    min: r.min,
    max: r.max,
    name: `shard${i + 1}`,
  }));
}

// --- Hashing ids --------------------------------------------------------------------------

const BANG = 0x21; // '!', CompositeIdRouter.SEPARATOR
const SLASH = 0x2f; // '/', the bits separator in `tenant/B!doc`
const DIGIT_0 = 0x30;
const DIGIT_9 = 0x39;

function indexOfByte(bytes: Uint8Array, b: number, from: number, to: number): number {
  for (let i = from; i < to; i++) if (bytes[i] === b) return i;
  return -1;
}

/**
 * Bits requested after a '/': decimal digits with Java int overflow; more than 32, or any
 * non-digit, gives -1 (which Solr then uses as a shift count, see `compositeKeyHash`); no
 * digits at all gives 0.
 */
function parseBits(bytes: Uint8Array, from: number, to: number): number {
  let v = 0;
  for (let i = from; i < to; i++) {
    const ch = bytes[i];
    if (ch < DIGIT_0 || ch > DIGIT_9) return -1;
    v = (Math.imul(v, 10) + (ch - DIGIT_0)) | 0;
  }
  return v > 32 ? -1 : v;
}

/**
 * CompositeIdRouter's hash of an id holding a '!' (its KeyParser), computed on the UTF-8
 * bytes of the whole id: '!' and '/' are ASCII, so splitting bytes splits exactly where
 * Solr splits chars. Semantics kept, odd ones included:
 * - only the first two '!' split; `a!b!c!d` has the parts `a`, `b`, `c!d`;
 * - a key ending in '!' gets an extra empty part (hash 0) unless it already has 3, but
 *   `a!!` (two trailing '!') has the parts `a`, `` like `a!`;
 * - 2 parts take 16/16 bits, 3 parts 8/8/16; `part/B` (a '/' not first in a part that is
 *   not the last) takes B bits and hashes only the text before the '/';
 * - a bad B (`/x`, `/33`) is -1, which Java shift counts turn into a 31-bit mask from the
 *   first part and 1 bit from the next.
 */
function compositeKeyHash(bytes: Uint8Array, length: number, first: number): number {
  const last = length - 1;
  let parts = 1;
  let e0 = first;
  let s1 = 0;
  let e1 = 0;
  let s2 = 0;
  let e2 = 0;
  if (first < last) {
    const second = indexOfByte(bytes, BANG, first + 1, length);
    if (second < 0) {
      parts = 2;
      s1 = first + 1;
      e1 = length;
    } else if (second === last) {
      if (first < second - 1) {
        parts = 2;
        s1 = first + 1;
        e1 = second;
      }
    } else {
      parts = 3;
      s1 = first + 1;
      e1 = second;
      s2 = second + 1;
      e2 = length;
    }
  }
  // A part beyond `parts` is the empty string: the empty ranges s=e=0 above hash it.
  const pieces = bytes[last] === BANG && parts < 3 ? parts + 1 : parts;
  const triLevel = pieces === 3;

  let bits0 = triLevel ? 8 : 16;
  let bits1 = 8;
  const slash0 = indexOfByte(bytes, SLASH, 0, e0);
  if (slash0 > 0) {
    bits0 = parseBits(bytes, slash0 + 1, e0);
    e0 = slash0;
  }
  if (triLevel) {
    const slash1 = indexOfByte(bytes, SLASH, s1, e1);
    if (slash1 > s1) {
      bits1 = parseBits(bytes, slash1 + 1, e1);
      e1 = slash1;
    }
  }

  const h0 = murmur3Range(bytes, 0, e0, 0);
  const h1 = murmur3Range(bytes, s1, e1, 0);
  // Java shifts use the count's low 5 bits, as JS shifts do.
  const m0 = bits0 === 0 ? 0 : -1 << (32 - bits0);
  if (!triLevel) {
    const m1 = bits0 === 32 ? 0 : (-1 >>> bits0) | 0;
    return (h0 & m0) | (h1 & m1);
  }
  const h2 = murmur3Range(bytes, s2, e2, 0);
  const bits01 = (bits0 + bits1) | 0; // Java int addition
  const m1 = (bits01 === 0 ? 0 : -1 << (32 - bits01)) ^ m0;
  const m2 = bits01 === 32 ? 0 : ~(m0 | m1);
  return (h0 & m0) | (h1 & m1) | (h2 & m2);
}

function compositeIdHash(id: string): number {
  if (id.indexOf('!') < 0) return murmur3(id);
  const { bytes, length } = encodeId(id);
  return compositeKeyHash(bytes, length, indexOfByte(bytes, BANG, 0, length));
}

/**
 * The routing hash of a document id: `hash` hashes the whole id; `compositeId` hashes an id
 * without '!' the same way and combines the hashes of the parts of `tenant!doc`,
 * `app!tenant!doc` and `tenant/B!doc` as Solr does, so that a tenant's documents share a
 * slice of the hash space. Throws SHX_BAD_ID for an id with a lone surrogate.
 */
export function hashId(id: string, router: RouterNameInput = DEFAULT_ROUTER): number {
  if (router === 'compositeId') return compositeIdHash(id);
  if (router === 'hash' || router === 'plain') return murmur3(id);
  return hashId(id, parseRouterName(router));
}

// --- Lookup -------------------------------------------------------------------------------

/**
 * Routes hashes and ids to the shards of one collection: ranges sorted by `min` (never by
 * name), contiguous, covering the whole signed 32-bit space; lookup is a binary search.
 */
export class ShardRouter {
  readonly router: RouterName;
  /** The ranges in ascending order. */
  readonly ranges: readonly ShardRange[];
  private readonly mins: Int32Array;
  private readonly names: readonly string[];

  constructor(ranges: readonly ShardRange[], router: RouterNameInput = DEFAULT_ROUTER) {
    this.router = parseRouterName(router);
    const sorted = checkRanges(ranges);
    this.ranges = Object.freeze(sorted);
    this.mins = Int32Array.from(sorted, (r) => r.min);
    this.names = Object.freeze(sorted.map((r) => r.name));
  }

  get numShards(): number {
    return this.ranges.length;
  }

  /** Index into `ranges` of the range holding the signed 32-bit `hash`. */
  indexFor(hash: number): number {
    const mins = this.mins;
    let lo = 0;
    let hi = mins.length - 1;
    // The last range whose min is <= hash; ranges are contiguous, so it holds the hash.
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (mins[mid] <= hash) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  /** Name of the shard whose range holds `hash`. */
  shardFor(hash: number): string {
    return this.names[this.indexFor(hash | 0)];
  }

  /** The routing hash of `id` under this collection's router. */
  hash(id: string): number {
    return this.router === 'compositeId' ? compositeIdHash(id) : murmur3(id);
  }

  /** The hash of `id` and the shard that owns it. */
  route(id: string): RouteResult {
    const hash = this.hash(id);
    return { hash, shard: this.names[this.indexFor(hash)] };
  }
}

function isInt32(v: unknown): v is number {
  return typeof v === 'number' && (v | 0) === v;
}

function checkRanges(ranges: readonly ShardRange[]): ShardRange[] {
  if (!Array.isArray(ranges) || ranges.length === 0) {
    throw new ShardexError('SHX_BAD_REQUEST', 'a shard router needs at least one shard range');
  }
  const names = new Set<string>();
  for (const r of ranges) {
    if (!isInt32(r.min) || !isInt32(r.max) || r.min > r.max) {
      throw new ShardexError(
        'SHX_BAD_REQUEST',
        `shard ${JSON.stringify(r.name)} has a bad range (min ${r.min}, max ${r.max}): both must be signed 32-bit ints with min <= max`,
      );
    }
    if (typeof r.name !== 'string' || r.name === '') {
      throw new ShardexError('SHX_BAD_REQUEST', `the shard with range ${formatRange(r)} has no name`);
    }
    if (names.has(r.name)) {
      throw new ShardexError('SHX_BAD_REQUEST', `shard name ${JSON.stringify(r.name)} is used by two ranges`);
    }
    names.add(r.name);
  }
  const sorted = ranges.map((r) => ({ min: r.min, max: r.max, name: r.name })).sort((a, b) => a.min - b.min);
  if (sorted[0].min !== HASH_MIN) {
    throw new ShardexError(
      'SHX_BAD_REQUEST',
      `shard ranges must start at 80000000, but the lowest is ${formatRange(sorted[0])} (${sorted[0].name})`,
    );
  }
  for (let i = 1; i < sorted.length; i++) {
    const prev = sorted[i - 1];
    const cur = sorted[i];
    if (cur.min !== prev.max + 1) {
      const what = cur.min <= prev.max ? 'overlap' : 'leave a gap';
      throw new ShardexError(
        'SHX_BAD_REQUEST',
        `shard ranges ${formatRange(prev)} (${prev.name}) and ${formatRange(cur)} (${cur.name}) ${what}; ranges must be contiguous`,
      );
    }
  }
  const top = sorted[sorted.length - 1];
  if (top.max !== HASH_MAX) {
    throw new ShardexError(
      'SHX_BAD_REQUEST',
      `shard ranges must end at 7fffffff, but the highest is ${formatRange(top)} (${top.name})`,
    );
  }
  return sorted;
}

// --- Convenience --------------------------------------------------------------------------

// At most MAX_SHARDS routers per router name, built on first use.
const compositeRouters: (ShardRouter | undefined)[] = [];
const hashRouters: (ShardRouter | undefined)[] = [];

/** The router of a collection created with `partitionRange(numShards, router)`, cached. */
export function routerFor(numShards: number, router: RouterNameInput = DEFAULT_ROUTER): ShardRouter {
  assertNumShards(numShards);
  const name = parseRouterName(router);
  const cache = name === 'compositeId' ? compositeRouters : hashRouters;
  let r = cache[numShards];
  if (r === undefined) {
    r = new ShardRouter(partitionRange(numShards, name), name);
    cache[numShards] = r;
  }
  return r;
}

/** Hash and shard of `id` in a collection of `numShards` shards created with `router`. */
export function routeId(id: string, numShards: number, router: RouterNameInput = DEFAULT_ROUTER): RouteResult {
  return routerFor(numShards, router).route(id);
}
