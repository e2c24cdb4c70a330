// A term dictionary that finds a term by a range of a larger string, so that the write path looks
// tokens up without cutting each one out as a new string (a Map would need the substring and
// would hash it again); only a term seen for the first time becomes a string. Open addressing,
// linear probing, FNV-1a over UTF-16 code units, load factor at most 1/2.

/** FNV-1a of text[start, end) as a signed 32-bit int. */
export function hashRange(text: string, start: number, end: number): number {
  let h = 0x811c9dc5;
  for (let i = start; i < end; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h;
}

export class TermTable {
  /** Term by id. */
  readonly terms: string[] = [];
  private hashes = new Int32Array(16);
  /** id + 1 per slot, 0 = empty. */
  private slots = new Int32Array(32);
  private mask = 31;

  get size(): number {
    return this.terms.length;
  }

  /** The id of text[start, end) (whose hash is `hash`), or -1. */
  find(text: string, start: number, end: number, hash: number): number {
    const len = end - start;
    const slots = this.slots;
    let i = hash & this.mask;
    for (;;) {
      const s = slots[i];
      if (s === 0) return -1;
      const id = s - 1;
      if (this.hashes[id] === hash) {
        const t = this.terms[id];
        if (t.length === len) {
          let k = 0;
          while (k < len && t.charCodeAt(k) === text.charCodeAt(start + k)) k++;
          if (k === len) return id;
        }
      }
      i = (i + 1) & this.mask;
    }
  }

  get(term: string): number {
    return this.find(term, 0, term.length, hashRange(term, 0, term.length));
  }

  /** Adds a term known to be absent; returns its id. */
  add(term: string, hash: number): number {
    const id = this.terms.length;
    this.terms.push(term);
    if (id === this.hashes.length) {
      const hashes = new Int32Array(id * 2);
      hashes.set(this.hashes);
      this.hashes = hashes;
    }
    this.hashes[id] = hash;
    if ((id + 1) * 2 > this.slots.length) this.rehash(this.slots.length * 2);
    else this.place(id);
    return id;
  }

  /** Keeps only the terms whose `keep[id]` is >= 0, renumbered to that value (increasing). */
  retain(keep: Int32Array): void {
    let n = 0;
    for (let id = 0; id < this.terms.length; id++) {
      const to = keep[id];
      if (to < 0) continue;
      this.terms[to] = this.terms[id];
      this.hashes[to] = this.hashes[id];
      n++;
    }
    this.terms.length = n;
    let cap = 32;
    while (n * 2 > cap) cap *= 2;
    this.rehash(cap);
  }

  private place(id: number): void {
    let i = this.hashes[id] & this.mask;
    while (this.slots[i] !== 0) i = (i + 1) & this.mask;
    this.slots[i] = id + 1;
  }

  private rehash(capacity: number): void {
    this.slots = new Int32Array(capacity);
    this.mask = capacity - 1;
    for (let id = 0; id < this.terms.length; id++) this.place(id);
  }
}
