// A segment's document ids as its file holds them: their UTF-16 code units end to end, a table
// of where each starts, and an open-addressing hash table from id to document number (linear
// probing, FNV-1a over the code units). A loaded segment uses the three arrays as views into its
// file's buffer: nothing is decoded or indexed at open, an id is decoded when it is read and a
// lookup hashes the id and compares code units in place, so opening a segment costs nothing per
// document and its ids live outside the JS heap. Pure: no I/O.
import { hashRange } from './term-table.js';

/** The table's hash of an id: FNV-1a over its UTF-16 code units, as the term dictionary hashes terms (part of the segment format). */
export function hashId(id: string): number {
  return hashRange(id, 0, id.length);
}

/** The arrays of an IdTable. */
export interface IdTableArrays {
  /** Every id's code units, in document order. */
  readonly chars: Uint16Array;
  /** Document d's id is chars[starts[d], starts[d + 1]); '' for a document deleted when the table was made. */
  readonly starts: Int32Array;
  /** A power-of-two number of slots, each a document number + 1 (0: empty). */
  readonly slots: Int32Array;
}

/** Why a table's arrays do not make a table (a damaged or foreign file). */
export class IdTableProblem extends Error {}

const DECODE_CHUNK = 4096;

export class IdTable {
  private readonly chars: Uint16Array;
  private readonly starts: Int32Array;
  private readonly slots: Int32Array;
  private readonly mask: number;

  /** Checks the arrays' shapes (not every entry: the file's checksums vouch for its bytes). */
  constructor({ chars, starts, slots }: IdTableArrays) {
    if (starts.length === 0 || starts[0] !== 0 || starts[starts.length - 1] !== chars.length) {
      throw new IdTableProblem(`its id table's starts (${starts.length}) do not span its ${chars.length} characters`);
    }
    if (slots.length === 0 || (slots.length & (slots.length - 1)) !== 0 || slots.length < starts.length - 1) {
      throw new IdTableProblem(`its id table has ${slots.length} slots for ${starts.length - 1} documents (a power of two at least as large is needed)`);
    }
    this.chars = chars;
    this.starts = starts;
    this.slots = slots;
    this.mask = slots.length - 1;
  }

  /** The arrays for `ids` (by document number, '' for a deleted document): about twice as many slots as ids. */
  static build(ids: readonly string[]): IdTableArrays {
    const starts = new Int32Array(ids.length + 1);
    let live = 0;
    for (let d = 0; d < ids.length; d++) {
      const id = ids[d]!;
      starts[d + 1] = starts[d]! + id.length;
      if (id.length > 0) live++;
    }
    const chars = new Uint16Array(starts[ids.length]!);
    for (let d = 0; d < ids.length; d++) {
      const id = ids[d]!;
      const at = starts[d]!;
      for (let i = 0; i < id.length; i++) chars[at + i] = id.charCodeAt(i);
    }
    let size = 2;
    while (size < Math.max(ids.length, live * 2)) size *= 2;
    const slots = new Int32Array(size);
    const mask = size - 1;
    for (let d = 0; d < ids.length; d++) {
      const id = ids[d]!;
      if (id.length === 0) continue;
      let i = hashId(id) & mask;
      while (slots[i] !== 0) i = (i + 1) & mask;
      slots[i] = d + 1;
    }
    return { chars, starts, slots };
  }

  /** Documents in the table (live or not). */
  get count(): number {
    return this.starts.length - 1;
  }

  /** Document d's id ('' for one deleted when the table was made). */
  idOf(d: number): string {
    const from = this.starts[d]!;
    const to = this.starts[d + 1]!;
    if (to - from <= DECODE_CHUNK) return String.fromCharCode.apply(null, this.chars.subarray(from, to) as unknown as number[]);
    let s = '';
    for (let at = from; at < to; at += DECODE_CHUNK) s += String.fromCharCode.apply(null, this.chars.subarray(at, Math.min(to, at + DECODE_CHUNK)) as unknown as number[]);
    return s;
  }

  /** The document whose id is `id`, or -1 (whether it is still live is the caller's to check). */
  find(id: string): number {
    if (id.length === 0) return -1;
    const { chars, starts, slots, mask } = this;
    let i = hashId(id) & mask;
    for (let probes = 0; probes <= mask; probes++) {
      const s = slots[i]!;
      if (s === 0) return -1;
      const d = s - 1;
      const from = starts[d]!;
      if (starts[d + 1]! - from === id.length) {
        let k = 0;
        while (k < id.length && chars[from + k] === id.charCodeAt(k)) k++;
        if (k === id.length) return d;
      }
      i = (i + 1) & mask;
    }
    return -1;
  }
}
