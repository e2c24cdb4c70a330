// MurmurHash3 x86_32 over the UTF-8 bytes of a string, as a signed 32-bit int: the hash
// Solr routes documents with (`Hash.murmurhash3_x86_32(id, 0, id.length(), 0)`). For
// well-formed strings Solr's on-the-fly UTF-16 -> UTF-8 walk yields standard UTF-8, so
// hashing TextEncoder's bytes is bit-identical. For a lone surrogate the two disagree
// (Solr swallows the next code unit, TextEncoder writes U+FFFD), so such ids are refused
// rather than routed to a shard Solr would not pick.

import { ShardexError } from '../errors.js';

const C1 = 0xcc9e2d51;
const C2 = 0x1b873593;

/** Scratch kept between calls; a larger one-off input gets a buffer of its own. */
const MAX_RETAINED_SCRATCH = 64 * 1024;

const encoder = new TextEncoder();

/**
 * The UTF-8 bytes of the last id passed to `encodeId`, in `bytes[0..length)`. Reused: valid
 * only until the next `encodeId` (or `murmur3`) call.
 */
export interface EncodedId {
  bytes: Uint8Array;
  length: number;
}

const encoded: EncodedId = { bytes: new Uint8Array(256), length: 0 };

/**
 * Encodes `id` as UTF-8 into the shared scratch buffer, refusing ids that are not
 * well-formed UTF-16. The result is reused by the next call: read it before encoding again.
 */
export function encodeId(id: string): EncodedId {
  // Every UTF-16 code unit becomes at most 3 bytes (a pair: 2 units -> 4 bytes).
  const needed = id.length * 3;
  let out = encoded;
  if (needed > encoded.bytes.length) {
    if (needed <= MAX_RETAINED_SCRATCH) {
      encoded.bytes = new Uint8Array(Math.min(MAX_RETAINED_SCRATCH, Math.max(needed, encoded.bytes.length * 2)));
    } else {
      out = { bytes: new Uint8Array(utf8Length(id)), length: 0 };
    }
  }
  const written = encoder.encodeInto(id, out.bytes).written;
  // As many bytes as code units means every unit was ASCII: nothing to check.
  if (written !== id.length) assertWellFormed(id);
  out.length = written;
  return out;
}

/** MurmurHash3 x86_32 of the UTF-8 bytes of `id`, as a signed 32-bit int (Solr's routing hash). */
export function murmur3(id: string, seed = 0): number {
  const ascii = murmur3Ascii(id, seed);
  if (ascii === ascii) return ascii; // not NaN
  const { bytes, length } = encodeId(id);
  return murmur3Range(bytes, 0, length, seed);
}

/**
 * The hash of an all-ASCII string read straight from its code units (an ASCII string is its
 * own UTF-8), or NaN at the first non-ASCII unit. Twice as fast as encoding short ids.
 */
function murmur3Ascii(s: string, seed: number): number {
  const length = s.length;
  const blocksEnd = length & ~3;
  let h1 = seed | 0;
  let i = 0;
  for (; i < blocksEnd; i += 4) {
    const b0 = s.charCodeAt(i);
    const b1 = s.charCodeAt(i + 1);
    const b2 = s.charCodeAt(i + 2);
    const b3 = s.charCodeAt(i + 3);
    if ((b0 | b1 | b2 | b3) > 0x7f) return NaN;
    h1 = mixBlock(h1, b0 | (b1 << 8) | (b2 << 16) | (b3 << 24));
  }
  let k1 = 0;
  let tail = 0;
  switch (length & 3) {
    case 3:
      tail |= s.charCodeAt(i + 2);
      k1 ^= s.charCodeAt(i + 2) << 16;
    // falls through
    case 2:
      tail |= s.charCodeAt(i + 1);
      k1 ^= s.charCodeAt(i + 1) << 8;
    // falls through
    case 1:
      tail |= s.charCodeAt(i);
      if (tail > 0x7f) return NaN;
      k1 ^= s.charCodeAt(i);
      k1 = Math.imul(k1, C1);
      k1 = (k1 << 15) | (k1 >>> 17);
      k1 = Math.imul(k1, C2);
      h1 ^= k1;
  }
  return fmix(h1, length);
}

/** MurmurHash3 x86_32 of `bytes[0..length)`, as a signed 32-bit int. */
export function murmur3Bytes(bytes: Uint8Array, length: number, seed = 0): number {
  if (!Number.isInteger(length) || length < 0 || length > bytes.length) {
    throw new ShardexError('SHX_BAD_REQUEST', `murmur3Bytes: length ${length} is outside 0..${bytes.length}`);
  }
  return murmur3Range(bytes, 0, length, seed);
}

/** MurmurHash3 x86_32 of `bytes[start..end)`; no bounds checks (internal hot path). */
export function murmur3Range(bytes: Uint8Array, start: number, end: number, seed: number): number {
  const length = end - start;
  const blocksEnd = start + (length & ~3);
  let h1 = seed | 0;
  let i = start;
  for (; i < blocksEnd; i += 4) {
    h1 = mixBlock(h1, bytes[i] | (bytes[i + 1] << 8) | (bytes[i + 2] << 16) | (bytes[i + 3] << 24));
  }
  let k1 = 0;
  switch (length & 3) {
    case 3:
      k1 ^= bytes[i + 2] << 16;
    // falls through
    case 2:
      k1 ^= bytes[i + 1] << 8;
    // falls through
    case 1:
      k1 ^= bytes[i];
      k1 = Math.imul(k1, C1);
      k1 = (k1 << 15) | (k1 >>> 17);
      k1 = Math.imul(k1, C2);
      h1 ^= k1;
  }
  return fmix(h1, length);
}

/** Mixes one 4-byte block `k1` into the running hash `h1` (small enough for the JIT to inline). */
function mixBlock(h1: number, k1: number): number {
  k1 = Math.imul(k1, C1);
  k1 = (k1 << 15) | (k1 >>> 17);
  k1 = Math.imul(k1, C2);
  h1 ^= k1;
  h1 = (h1 << 13) | (h1 >>> 19);
  return (Math.imul(h1, 5) + 0xe6546b64) | 0;
}

function fmix(h1: number, length: number): number {
  h1 ^= length;
  h1 ^= h1 >>> 16;
  h1 = Math.imul(h1, 0x85ebca6b);
  h1 ^= h1 >>> 13;
  h1 = Math.imul(h1, 0xc2b2ae35);
  h1 ^= h1 >>> 16;
  return h1 | 0;
}

/**
 * Index of the first code unit of `s` that is a surrogate without its partner, or -1 when
 * `s` is well-formed UTF-16.
 */
export function loneSurrogateIndex(s: string): number {
  const n = s.length;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c < 0xd800 || c > 0xdfff) continue;
    if (c <= 0xdbff && i + 1 < n) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        i++;
        continue;
      }
    }
    return i;
  }
  return -1;
}

/** True when `s` has no lone surrogate, i.e. it has an exact UTF-8 encoding. */
export function isWellFormed(s: string): boolean {
  return loneSurrogateIndex(s) === -1;
}

function assertWellFormed(id: string): void {
  const at = loneSurrogateIndex(id);
  if (at === -1) return;
  const unit = id.charCodeAt(at);
  const kind = unit <= 0xdbff ? 'high' : 'low';
  const hex = unit.toString(16).toUpperCase();
  throw new ShardexError(
    'SHX_BAD_ID',
    `id is not well-formed UTF-16: lone ${kind} surrogate U+${hex} at index ${at} (it has no UTF-8 encoding)`,
    { details: { index: at } },
  );
}

/**
 * Exact UTF-8 byte length of `s`. A lone surrogate counts 3 bytes, as TextEncoder and
 * Buffer.byteLength encode it (U+FFFD).
 */
export function utf8Length(s: string): number {
  const n = s.length;
  let bytes = n;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) {
      bytes += 1;
    } else if (c >= 0xd800 && c <= 0xdbff && i + 1 < n && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      // A pair: 2 units, 4 bytes.
      bytes += 2;
      i++;
    } else {
      bytes += 2;
    }
  }
  return bytes;
}
