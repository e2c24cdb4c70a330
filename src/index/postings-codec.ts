// Compact postings for segment files: each term's postings and positions as LEB128 varints, so
// that a restored field keeps only these bytes (a view of the file's buffer, outside the JS heap)
// and decodes a term into Int32Arrays when the term is first read.
//
// Per term, two byte runs, postings then positions (packedStarts[2t], [2t + 1], [2t + 2]):
//   - postings: per posting varint(docDelta * 2 + (tf === 1 ? 1 : 0)), then varint(tf) when tf is
//     not 1 (Lucene's doc/freq trick: most postings have tf 1, and they then cost one varint);
//     the first delta is from 0;
//   - positions (text fields): per posting, tf varints, each the gap from the posting's previous
//     position (the first from 0); positions within a posting never decrease (the analyzer counts
//     them up), so the gaps are unsigned.
// Why varints per term rather than 128-document blocks (FOR/PFOR with skip data, as Lucene): the
// query engine reads a term's postings whole (postingsOf), so a term is decoded once and then
// served from its arrays; blocks pay off once the engine skips inside a list (issue 15), and can
// then replace these runs behind the same per-term offsets. Positions are a run of their own so
// that a term queried without phrases never decodes (nor keeps) its positions.
//
// Each term's bytes (postings and positions) have a CRC-32 of their own (termCrcs): a term read
// from its file long after the file was loaded and checked whole is checked again on its own.
//
// Every value is below 2^32 (documents, tfs and positions are int32 >= 0; docDelta * 2 + 1 < 2^32),
// so a varint has at most 5 bytes.
import { crc32 } from 'node:zlib';
import { ShardexError } from '../errors.js';

/** The postings and positions of an inverted field, one array each, term after term (what a live field exports and a merge makes). */
export interface FlatPostings {
  /** Term t's postings are postings[postingStarts[t], postingStarts[t + 1]) as [doc, tf, doc, tf, ...]. */
  readonly postingStarts: Int32Array<ArrayBuffer>;
  readonly postings: Int32Array<ArrayBuffer>;
  readonly positionStarts: Int32Array<ArrayBuffer>;
  readonly positions: Int32Array<ArrayBuffer>;
}

/** Packed bytes left in their file until read (segment-file.ts): a term's run is read when the term is first decoded. */
export interface ByteSource {
  /** Bytes [from, to) of the run; read from the file, they are checked against `crc` (their CRC-32 as an int32). */
  read(from: number, to: number, crc: number): Uint8Array;
  /** Reads the whole run into memory now and serves every later read from it (before reading most terms: a merge, a compaction). */
  load(): void;
}

/** The same postings packed (see the layout above); the starts still give each term's decoded lengths. */
export interface PackedPostings {
  readonly postingStarts: Int32Array<ArrayBuffer>;
  readonly positionStarts: Int32Array<ArrayBuffer>;
  /** Term t's postings are packed[packedStarts[2t], packedStarts[2t + 1]), its positions up to packedStarts[2t + 2]. */
  readonly packedStarts: Int32Array<ArrayBuffer>;
  readonly packed: Uint8Array<ArrayBuffer> | ByteSource;
  /** Term t's bytes, [packedStarts[2t], packedStarts[2t + 2]), have the CRC-32 termCrcs[t] (as an int32). */
  readonly termCrcs: Int32Array<ArrayBuffer>;
}

/** The bytes holding term t's postings and positions, and the offset in `packed` of their first byte. */
function termBytes(p: PackedPostings, t: number): { bytes: Uint8Array; base: number } {
  if (p.packed instanceof Uint8Array) return { bytes: p.packed, base: 0 };
  const base = p.packedStarts[2 * t];
  return { bytes: p.packed.read(base, p.packedStarts[2 * t + 2], p.termCrcs[t]), base };
}

const MAX_VARINT = 5;

/**
 * `flat` packed, in one pass. The output is sized for the worst case (5 bytes a value) and cut to
 * what was written: the untouched tail of a large unsafe allocation is never paged in.
 */
export function packPostings(flat: FlatPostings, withPositions: boolean): PackedPostings {
  const { postingStarts, postings, positionStarts, positions } = flat;
  const n = postingStarts.length - 1;
  const out = Buffer.allocUnsafe(MAX_VARINT * (postings.length + (withPositions ? positions.length : 0)));
  const packedStarts = new Int32Array(2 * n + 1);
  const termCrcs = new Int32Array(n);
  let at = 0;
  for (let t = 0; t < n; t++) {
    const end = postingStarts[t + 1];
    let prev = 0;
    for (let i = postingStarts[t]; i < end; i += 2) {
      const doc = postings[i];
      const tf = postings[i + 1];
      at = writeVarint(out, at, (doc - prev) * 2 + (tf === 1 ? 1 : 0));
      if (tf !== 1) at = writeVarint(out, at, tf);
      prev = doc;
    }
    packedStarts[2 * t + 1] = at;
    if (withPositions) {
      let k = positionStarts[t];
      for (let i = postingStarts[t]; i < end; i += 2) {
        let last = 0;
        for (const stop = k + postings[i + 1]; k < stop; k++) {
          const p = positions[k];
          if (p < last) throw new ShardexError('SHX_INTERNAL', `term ${t}'s positions decrease within a posting (${last} then ${p})`);
          at = writeVarint(out, at, p - last);
          last = p;
        }
      }
    }
    packedStarts[2 * t + 2] = at;
    termCrcs[t] = crc32(out.subarray(packedStarts[2 * t], at)) | 0;
  }
  const packed = new Uint8Array(out.buffer, out.byteOffset, at);
  return { postingStarts, positionStarts: withPositions ? positionStarts : new Int32Array(n + 1), packedStarts, packed, termCrcs };
}


/**
 * Term `t`'s postings ([doc, tf, ...]) decoded from `p`: into a new array, or into `out` from
 * `from` on (an export writing every term into one array).
 */
export function unpackPostings(p: PackedPostings, t: number, out: Int32Array = new Int32Array(p.postingStarts[t + 1] - p.postingStarts[t]), from = 0): Int32Array {
  const { bytes, base } = termBytes(p, t);
  let at = p.packedStarts[2 * t] - base;
  let doc = 0;
  for (let k = from, end = from + p.postingStarts[t + 1] - p.postingStarts[t]; k < end; k += 2) {
    const v = readVarint(bytes, at);
    at = varintEnd;
    doc += v >>> 1;
    out[k] = doc;
    if ((v & 1) === 1) out[k + 1] = 1;
    else {
      out[k + 1] = readVarint(bytes, at);
      at = varintEnd;
    }
  }
  return out;
}

/**
 * Term `t`'s positions decoded from `p` (each posting's tf read again from its packed postings,
 * never from arrays a writer may have changed): into a new array, or into `out` from `from` on.
 */
export function unpackPositions(p: PackedPostings, t: number, out: Int32Array = new Int32Array(p.positionStarts[t + 1] - p.positionStarts[t]), from = 0): Int32Array {
  const { bytes, base } = termBytes(p, t);
  let at = p.packedStarts[2 * t] - base;
  let pos = p.packedStarts[2 * t + 1] - base;
  let k = from;
  const end = from + p.positionStarts[t + 1] - p.positionStarts[t];
  while (k < end) {
    const v = readVarint(bytes, at);
    at = varintEnd;
    let tf = 1;
    if ((v & 1) === 0) {
      tf = readVarint(bytes, at);
      at = varintEnd;
    }
    let last = 0;
    for (const stop = k + tf; k < stop; k++) {
      last += readVarint(bytes, pos);
      pos = varintEnd;
      out[k] = last;
    }
  }
  return out;
}

function writeVarint(out: Uint8Array, at: number, v: number): number {
  while (v >= 0x80) {
    out[at++] = (v & 0x7f) | 0x80;
    v >>>= 7;
  }
  out[at++] = v;
  return at;
}

/** Where the last readVarint stopped (a module variable: no result object per value on the decode path). */
let varintEnd = 0;

function readVarint(bytes: Uint8Array, at: number): number {
  let b = bytes[at++];
  let v = b & 0x7f;
  if (b >= 0x80) {
    b = bytes[at++];
    v |= (b & 0x7f) << 7;
    if (b >= 0x80) {
      b = bytes[at++];
      v |= (b & 0x7f) << 14;
      if (b >= 0x80) {
        b = bytes[at++];
        v |= (b & 0x7f) << 21;
        // The fifth byte holds bits 28-31: added as a number, since bit 31 would make an int32 negative.
        if (b >= 0x80) v += (bytes[at++] & 0x0f) * 0x10000000;
      }
    }
  }
  varintEnd = at;
  return v;
}
