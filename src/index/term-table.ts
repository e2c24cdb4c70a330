// A term dictionary that finds a term by a range of a larger string, so that the write path looks
// tokens up without cutting each one out as a new string (a Map would need the substring and
// would hash it again); only a term seen for the first time becomes a string. Open addressing,
// linear probing, FNV-1a over UTF-16 code units, load factor at most 1/2.
//
// A lookup is the write path's most frequent step (one per token), and its cost was cache misses,
// not compares: the slot, then the term's hash, then the term's string object, each in its own
// place in the heap. So each slot holds the hash beside the id, and the characters of every term
// are copied, in id order, into one dense pool that lookups compare against: a slot pair, one
// offset and the characters, all in a few small typed arrays. The strings stay, for readers.
// Most tokens are short runs of ASCII letters and digits; those also have an exact numeric key
// (exactKey), which the analyzer computes while scanning, and a lookup then compares one number
// instead of the characters (such terms are not copied to the pool at all).

export const FNV_BASIS = 0x811c9dc5;
export const FNV_PRIME = 0x01000193;

/** FNV-1a of text[start, end) as a signed 32-bit int. */
export function hashRange(text: string, start: number, end: number): number {
  let h = FNV_BASIS;
  for (let i = start; i < end; i++) h = Math.imul(h ^ text.charCodeAt(i), FNV_PRIME);
  return h;
}

/** Longest token with an exact numeric key: 37^10 < 2^53, so keys stay exact doubles. */
export const MAX_KEY_LENGTH = 10;
export const KEY_BASE = 37;

/** The key digit of a lower-case ASCII letter or digit (1-36); 0 for any other code unit. */
export function keyDigit(c: number): number {
  return c >= 0x61 && c <= 0x7a ? c - 0x56 : c >= 0x30 && c <= 0x39 ? c - 0x2f : 0;
}

/**
 * text[start, end) as one number when it is 1 to MAX_KEY_LENGTH lower-case ASCII letters and
 * digits (base 37, digits 1-36: distinct strings get distinct keys), else -1.
 */
export function exactKey(text: string, start: number, end: number): number {
  if (end <= start || end - start > MAX_KEY_LENGTH) return -1;
  let key = 0;
  for (let i = start; i < end; i++) {
    const d = keyDigit(text.charCodeAt(i));
    if (d === 0) return -1;
    key = key * KEY_BASE + d;
  }
  return key;
}

/**
 * A table's arrays as a segment file holds them (TermTable.arrays(), TermTable.fromArrays()). The
 * hashes in `slots` are hashRange()'s and the keys exactKey()'s: changing either changes the
 * segment format.
 */
export interface TermTableArrays {
  /** A power-of-two number of (id + 1, hash) pairs, at most half of them taken. */
  readonly slots: Int32Array<ArrayBuffer>;
  readonly chars: Uint16Array<ArrayBuffer>;
  /** One more than the terms. */
  readonly starts: Int32Array<ArrayBuffer>;
  /** One per term. */
  readonly keys: Float64Array<ArrayBuffer>;
}

/** Why a file's arrays do not make a term table. */
export class TermTableProblem extends Error {}

/** The term whose exactKey() is `key` (> 0): its base-37 digits, most significant first. */
function keyText(key: number): string {
  let s = '';
  while (key > 0) {
    const d = key % KEY_BASE;
    key = (key - d) / KEY_BASE;
    s = String.fromCharCode(d <= 10 ? d + 0x2f : d + 0x56) + s;
  }
  return s;
}

export class TermTable {
  /** Term by id, up to `count`; a table read from a segment file makes these strings when they are first asked for. */
  private list: string[] = [];
  private count = 0;
  /**
   * Terms with an id below this are in the slots and the pool; those above were adopted (a
   * merged segment) and are indexed at the first lookup or add.
   */
  private indexed = 0;
  /** The arrays are views of a segment file's buffer: copied before the table changes. */
  private borrowed = false;
  /** Per slot: id + 1 (0 = empty), then the term's hash. */
  private slots = new Int32Array(64);
  private mask = 31;
  /** UTF-16 code units of every term, in id order: term id spans chars[starts[id], starts[id + 1]). */
  private chars = new Uint16Array(256);
  private starts = new Int32Array(17);
  /** exactKey() of each term (-1: none; its characters are in the pool instead). */
  private keys = new Float64Array(16);

  get size(): number {
    return this.count;
  }

  /** Term by id (a segment file's table makes its strings now, the first time). */
  get terms(): string[] {
    if (this.list.length !== this.count) this.makeStrings();
    return this.list;
  }

  /** Takes `terms` (distinct, into an empty table) as ids 0.., to be indexed when first needed. */
  adopt(terms: readonly string[]): void {
    if (this.count > 0) throw new Error('TermTable.adopt() needs an empty table');
    for (const term of terms) this.list.push(term);
    this.count = this.list.length;
  }

  /** The table over a segment file's arrays (not copied: nothing is made per term until a term's string is asked for). */
  static fromArrays({ slots, chars, starts, keys }: TermTableArrays): TermTable {
    const n = keys.length;
    const cap = slots.length / 2;
    if (starts.length !== n + 1 || starts[0] !== 0 || starts[n]! > chars.length) throw new TermTableProblem(`its term table's starts (${starts.length}) do not fit its ${n} terms and ${chars.length} characters`);
    if (cap < 2 || (cap & (cap - 1)) !== 0 || n * 2 > cap) throw new TermTableProblem(`its term table has ${cap} slots for ${n} terms (a power of two at least twice as large is needed)`);
    const t = new TermTable();
    t.slots = slots;
    t.mask = cap - 1;
    t.chars = chars;
    t.starts = starts;
    t.keys = keys;
    t.count = t.indexed = n;
    t.borrowed = true;
    return t;
  }

  /** The table's arrays, cut to its terms (views, not copies), for a segment file. */
  arrays(): TermTableArrays {
    if (this.indexed !== this.count) this.indexAdopted();
    const n = this.count;
    return { slots: this.slots, chars: this.chars.subarray(0, this.starts[n]), starts: this.starts.subarray(0, n + 1), keys: this.keys.subarray(0, n) };
  }

  /** Term `id`'s string, from its key or its characters in the pool. */
  private textOf(id: number): string {
    const key = this.keys[id]!;
    return key >= 0 ? keyText(key) : String.fromCharCode.apply(null, this.chars.subarray(this.starts[id], this.starts[id + 1]) as unknown as number[]);
  }

  private makeStrings(): void {
    for (let id = this.list.length; id < this.count; id++) this.list.push(this.textOf(id));
  }

  /** Copies a segment file's arrays before the table changes them. */
  private own(): void {
    if (!this.borrowed) return;
    this.slots = this.slots.slice();
    this.chars = this.chars.slice();
    this.starts = this.starts.slice();
    this.keys = this.keys.slice();
    this.borrowed = false;
  }

  /** The id of text[start, end) (whose hashRange is `hash` and exactKey is `key`), or -1. */
  find(text: string, start: number, end: number, hash: number, key: number): number {
    if (this.indexed !== this.count) this.indexAdopted();
    const len = end - start;
    const slots = this.slots;
    const mask = this.mask;
    let i = hash & mask;
    for (;;) {
      const s = slots[2 * i];
      if (s === 0) return -1;
      if (slots[2 * i + 1] === hash) {
        const id = s - 1;
        if (key >= 0) {
          if (this.keys[id] === key) return id;
        } else if (this.keys[id] < 0 && this.starts[id + 1] - this.starts[id] === len) {
          const from = this.starts[id];
          const chars = this.chars;
          let k = 0;
          while (k < len && chars[from + k] === text.charCodeAt(start + k)) k++;
          if (k === len) return id;
        }
      }
      i = (i + 1) & mask;
    }
  }

  get(term: string): number {
    return this.find(term, 0, term.length, hashRange(term, 0, term.length), exactKey(term, 0, term.length));
  }

  /** Adds a term known to be absent (its hashRange and exactKey given); returns its id. */
  add(term: string, hash: number, key: number): number {
    if (this.indexed !== this.count) this.indexAdopted();
    this.own();
    const id = this.count;
    this.terms.push(term);
    this.count++;
    if (id === this.keys.length) {
      // A segment file's table of no terms has no keys at all.
      const keys = new Float64Array(Math.max(16, id * 2));
      keys.set(this.keys);
      this.keys = keys;
    }
    this.keys[id] = key;
    this.append(id, key < 0 ? term : '');
    if ((id + 1) * 2 > this.slots.length / 2) this.rehash(this.slots.length);
    this.place(id, hash);
    this.indexed = id + 1;
    return id;
  }

  /** Indexes the adopted terms not indexed yet (slots sized once for all of them). */
  private indexAdopted(): void {
    const n = this.count;
    if (n > this.keys.length) {
      const keys = new Float64Array(n);
      keys.set(this.keys);
      this.keys = keys;
    }
    let cap = this.slots.length / 2;
    while (n * 2 > cap) cap *= 2;
    if (cap * 2 !== this.slots.length) this.rehash(cap);
    for (let id = this.indexed; id < n; id++) {
      const term = this.list[id]!;
      const key = exactKey(term, 0, term.length);
      this.keys[id] = key;
      this.append(id, key < 0 ? term : '');
      this.place(id, hashRange(term, 0, term.length));
    }
    this.indexed = n;
  }

  /** Keeps only the terms whose `keep[id]` is >= 0, renumbered to that value (increasing). */
  retain(keep: Int32Array): void {
    if (this.indexed !== this.count) this.indexAdopted();
    this.own();
    const terms = this.terms;
    let n = 0;
    for (let id = 0; id < this.count; id++) {
      const to = keep[id];
      if (to < 0) continue;
      terms[to] = terms[id];
      this.keys[to] = this.keys[id];
      n++;
    }
    terms.length = n;
    this.count = n;
    this.chars = new Uint16Array(256);
    this.starts = new Int32Array(n + 1);
    for (let id = 0; id < n; id++) this.append(id, this.keys[id] < 0 ? this.terms[id] : '');
    let cap = 32;
    while (n * 2 > cap) cap *= 2;
    this.slots = new Int32Array(cap * 2);
    this.mask = cap - 1;
    for (let id = 0; id < n; id++) this.place(id, hashRange(this.terms[id], 0, this.terms[id].length));
    this.indexed = n;
  }

  /** Copies the characters of term `id` (the newest; `term` is '' for a keyed term) to the end of the pool. */
  private append(id: number, term: string): void {
    if (id + 2 > this.starts.length) {
      const starts = new Int32Array(Math.max(id + 2, this.starts.length * 2));
      starts.set(this.starts);
      this.starts = starts;
    }
    const from = this.starts[id];
    const to = from + term.length;
    if (to > this.chars.length) {
      const chars = new Uint16Array(Math.max(to, this.chars.length * 2));
      chars.set(this.chars.subarray(0, from));
      this.chars = chars;
    }
    for (let k = 0; k < term.length; k++) this.chars[from + k] = term.charCodeAt(k);
    this.starts[id + 1] = to;
  }

  private place(id: number, hash: number): void {
    let i = hash & this.mask;
    while (this.slots[2 * i] !== 0) i = (i + 1) & this.mask;
    this.slots[2 * i] = id + 1;
    this.slots[2 * i + 1] = hash;
  }

  /** Rebuilds the slots for `capacity` entries (a power of two), moving each (id, hash) pair. */
  private rehash(capacity: number): void {
    const old = this.slots;
    this.slots = new Int32Array(capacity * 2);
    this.mask = capacity - 1;
    for (let i = 0; i < old.length; i += 2) if (old[i] !== 0) this.place(old[i] - 1, old[i + 1]);
  }
}
