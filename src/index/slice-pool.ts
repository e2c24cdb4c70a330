// Many growable int lists in a few large pages: how InvertedField keeps the postings and positions
// of the terms it is still adding to, as Lucene's ByteSlicePool/IntBlockPool keep those of the
// segment being built.
//
// One typed array per list, grown by copying, made indexing allocation-bound: V8 gives each
// Int32Array of more than 64 bytes its own off-heap store, and a 20,000-document load grew some
// 46,000 of them (growing was a third of the CPU in a profile of the write path, plus the GC it
// caused). Here a list is a chain of slices
// bump-allocated from shared pages: each slice is twice the size of the one before (up to
// MAX_SLICE), and its last int links to the next. Appending copies the values once and allocates
// only a new page now and then; reading a list whole gathers its slices into one array.
//
// Layout:
//   - an address is `page << PAGE_BITS | offset`; a slice never spans two pages (a page's unused
//     tail is left when the next slice does not fit);
//   - a list's first slice has FIRST_SLICE ints, each next one twice as many up to MAX_SLICE, so a
//     reader walking a chain from its head knows every slice's size without storing it;
//   - the last int of a list's newest slice holds that slice's size until a next slice is linked
//     (then it holds the next slice's address): an append reaching it knows how large the next
//     slice must be. A list's length is its owner's to keep (InvertedField.postingsLength).
// Slices of a dropped list are not reused: the owner drops the whole pool when it seals (trim) or
// renumbers, and a list is dropped only when its term's postings are rewritten after deletes.

const PAGE_BITS = 16;
const OFFSET_MASK = (1 << PAGE_BITS) - 1;
/** Ints in the largest page (256 KiB); the first pages are smaller, so that a small field stays small. */
const MAX_PAGE = 1 << PAGE_BITS;
const FIRST_PAGE = 1 << 10;
/** A list of one posting (doc, tf) fits its first slice (with the link). */
const FIRST_SLICE = 4;
const MAX_SLICE = 1 << 12;

export class SlicePool {
  private readonly pages: Int32Array[] = [];
  /** Ints handed out of the newest page. */
  private used = 0;

  // ---- per list ----
  /** Address of the list's first slice; -1 = the list has none (empty, or dropped). */
  private head = new Int32Array(0);
  /** Address where the list's next int goes. */
  private upto = new Int32Array(0);
  /** Address of the link (last int) of the list's newest slice. */
  private end = new Int32Array(0);

  /** Whether list `id` holds slices. */
  has(id: number): boolean {
    return id < this.head.length && this.head[id] >= 0;
  }

  /** Appends values[from, from + count) to list `id` (a list without slices gets its first one). */
  append(id: number, values: Int32Array, from: number, count: number): void {
    if (id >= this.head.length) this.growLists(id + 1);
    let address: number;
    let linkAddress: number;
    if (this.head[id] < 0) {
      address = this.allocate(FIRST_SLICE);
      linkAddress = address + FIRST_SLICE - 1;
      this.pages[address >>> PAGE_BITS][linkAddress & OFFSET_MASK] = FIRST_SLICE;
      this.head[id] = address;
    } else {
      address = this.upto[id];
      linkAddress = this.end[id];
    }
    // Offsets within the page of the slice being filled; the page changes only with the slice.
    let page = this.pages[address >>> PAGE_BITS];
    let base = address & ~OFFSET_MASK;
    let at = address & OFFSET_MASK;
    let linkAt = linkAddress & OFFSET_MASK;
    let i = from;
    const stop = from + count;
    for (;;) {
      const n = Math.min(stop - i, linkAt - at);
      copyInts(values, i, page, at, n);
      at += n;
      i += n;
      if (i === stop) break;
      const size = Math.min(page[linkAt] * 2, MAX_SLICE);
      const next = this.allocate(size);
      page[linkAt] = next;
      page = this.pages[next >>> PAGE_BITS];
      base = next & ~OFFSET_MASK;
      at = next & OFFSET_MASK;
      linkAt = at + size - 1;
      page[linkAt] = size;
    }
    this.upto[id] = base | at;
    this.end[id] = base | linkAt;
  }

  /** Copies the first `length` ints of list `id` to target[targetAt, targetAt + length). */
  copyTo(id: number, length: number, target: Int32Array, targetAt: number): void {
    let address = this.head[id];
    let size = FIRST_SLICE;
    let t = targetAt;
    let left = length;
    while (left > 0) {
      const page = this.pages[address >>> PAGE_BITS];
      const from = address & OFFSET_MASK;
      const n = Math.min(left, size - 1);
      copyInts(page, from, target, t, n);
      t += n;
      left -= n;
      address = page[from + size - 1];
      size = Math.min(size * 2, MAX_SLICE);
    }
  }

  /** The first `length` ints of list `id`, as one new array. */
  read(id: number, length: number): Int32Array {
    const out = new Int32Array(length);
    if (length > 0) this.copyTo(id, length, out, 0);
    return out;
  }

  /** Forgets list `id` (its slices stay unused until the pool goes). */
  drop(id: number): void {
    if (id < this.head.length) this.head[id] = -1;
  }

  /** The address of `size` fresh ints in one page. */
  private allocate(size: number): number {
    let last = this.pages.length - 1;
    if (last < 0 || this.used + size > this.pages[last].length) {
      const grown = last < 0 ? FIRST_PAGE : Math.min(this.pages[last].length * 2, MAX_PAGE);
      this.pages.push(new Int32Array(Math.max(grown, size)));
      this.used = 0;
      last++;
    }
    const address = (last << PAGE_BITS) | this.used;
    this.used += size;
    return address;
  }

  private growLists(min: number): void {
    const cap = Math.max(min, this.head.length * 2, 16);
    const head = new Int32Array(cap).fill(-1);
    head.set(this.head);
    this.head = head;
    const upto = new Int32Array(cap);
    upto.set(this.upto);
    this.upto = upto;
    const end = new Int32Array(cap);
    end.set(this.end);
    this.end = end;
  }
}

/** target[to, to + n) = source[from, from + n): a loop for the many short runs, a block copy (worth its view) for long ones. */
function copyInts(source: Int32Array, from: number, target: Int32Array, to: number, n: number): void {
  if (n < 64) {
    for (let i = 0; i < n; i++) target[to + i] = source[from + i];
  } else {
    target.set(source.subarray(from, from + n), to);
  }
}
