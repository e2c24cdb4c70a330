// Matching documents as cursors over increasing document numbers, Lucene's DocIdSetIterator and
// Scorer: a conjunction leapfrogs from its rarest clause (the others are advanced to its
// candidate, and a clause that overshoots becomes the next target) instead of listing every match
// of every clause and intersecting afterwards. Postings are arrays in memory, so advancing gallops
// (doubling steps, then a binary search) over them: the skip data of an array.
//
// A cursor's score() sums its children's scores in the order the query lists them, whatever order
// they are advanced in, so that every clause adds the same numbers in the same order as the
// materializing evaluation of execute.ts and as every shard of a sharded collection does.

import type { Matches } from './matches.js';
import { bm25 } from './stats.js';

/** A cursor's document once it is exhausted (greater than any document number). */
export const NO_MORE_DOCS = 0x7fffffff;

export interface DocCursor {
  /** The current document: -1 before the first next()/advance(), NO_MORE_DOCS at the end. */
  readonly doc: number;
  /** At least as many documents as the cursor yields: what a conjunction leads with. */
  readonly cost: number;
  /** Moves to the next matching document and returns it. */
  next(): number;
  /** Moves to the first matching document at or after `target` (no move if already there) and returns it. */
  advance(target: number): number;
  /** The current document's score (cursors made for scoring only). */
  score(): number;
}

/**
 * The first index from `from` on, in steps of `stride` (up to `end`, a multiple of it past
 * `from`), whose entry is at least `target`, or `end`: doubling steps from `from`, then a binary
 * search of the last step.
 */
export function gallop(a: Int32Array, from: number, end: number, stride: number, target: number): number {
  let lo = from;
  if (lo >= end || a[lo] >= target) return lo;
  let step = stride;
  let hi = lo + step;
  while (hi < end && a[hi] < target) {
    lo = hi;
    step <<= 1;
    hi = lo + step;
  }
  if (hi > end) hi = end;
  // a[lo] < target; the answer is in (lo, hi].
  while (hi - lo > stride) {
    const mid = lo + Math.floor((hi - lo) / stride / 2) * stride;
    if (a[mid] < target) lo = mid;
    else hi = mid;
  }
  return hi;
}

/** One term's postings ([doc, tf, ...]) of live documents, scored with BM25 when `idf` is given. */
export class PostingsCursor implements DocCursor {
  doc = -1;
  private at = -2;
  readonly cost: number;

  constructor(
    private readonly postings: Int32Array,
    private readonly length: number,
    private readonly live: Uint8Array,
    private readonly scoring: { readonly boost: number; readonly idf: number; readonly avgdl: number; readonly lengths: Int32Array } | null,
  ) {
    this.cost = length >> 1;
  }

  next(): number {
    return this.settle(this.at + 2);
  }

  advance(target: number): number {
    if (this.doc >= target) return this.doc;
    return this.settle(gallop(this.postings, this.at + 2, this.length, 2, target));
  }

  /** The first live posting at or after index `i`. */
  private settle(i: number): number {
    const p = this.postings;
    const len = this.length;
    const live = this.live;
    while (i < len && live[p[i]] !== 1) i += 2;
    this.at = i;
    return (this.doc = i < len ? p[i] : NO_MORE_DOCS);
  }

  score(): number {
    const s = this.scoring!;
    return s.boost * bm25(this.postings[this.at + 1], s.lengths[this.doc], s.avgdl, s.idf);
  }
}

/** A materialized list of matches (live documents only, as execute.ts returns them). */
export class MatchesCursor implements DocCursor {
  doc = -1;
  private at = -1;
  readonly cost: number;

  constructor(private readonly m: Matches) {
    this.cost = m.size;
  }

  next(): number {
    const i = ++this.at;
    return (this.doc = i < this.m.size ? this.m.docs[i] : NO_MORE_DOCS);
  }

  advance(target: number): number {
    if (this.doc >= target) return this.doc;
    return this.moveTo(gallop(this.m.docs, this.at + 1, this.m.size, 1, target));
  }

  private moveTo(i: number): number {
    this.at = i;
    return (this.doc = i < this.m.size ? this.m.docs[i] : NO_MORE_DOCS);
  }

  score(): number {
    return this.m.scores![this.at];
  }
}

/** Every live document below maxDoc, with a constant score. */
export class AllCursor implements DocCursor {
  doc = -1;
  readonly cost: number;

  constructor(
    private readonly live: Uint8Array,
    private readonly maxDoc: number,
    private readonly boost: number,
  ) {
    this.cost = maxDoc;
  }

  next(): number {
    return this.advance(this.doc + 1);
  }

  advance(target: number): number {
    if (this.doc >= target) return this.doc;
    let d = target;
    while (d < this.maxDoc && this.live[d] !== 1) d++;
    return (this.doc = d < this.maxDoc ? d : NO_MORE_DOCS);
  }

  score(): number {
    return this.boost;
  }
}

/** The live documents of a bitset (a cached filter, see filter-cache.ts). */
export class BitsetCursor implements DocCursor {
  doc = -1;

  constructor(
    private readonly bits: Uint32Array,
    readonly cost: number,
    private readonly live: Uint8Array,
  ) {}

  next(): number {
    return this.advance(this.doc + 1);
  }

  advance(target: number): number {
    if (this.doc >= target) return this.doc;
    const bits = this.bits;
    const live = this.live;
    let w = target >>> 5;
    if (w >= bits.length) return (this.doc = NO_MORE_DOCS);
    // The word of `target`, its bits below target cleared.
    let word = bits[w] & (0xffffffff << (target & 31));
    for (;;) {
      while (word === 0) {
        if (++w >= bits.length) return (this.doc = NO_MORE_DOCS);
        word = bits[w];
      }
      const low = word & -word;
      const d = (w << 5) + 31 - Math.clz32(low);
      if (live[d] === 1) return (this.doc = d);
      word ^= low;
    }
  }

  score(): number {
    return 0;
  }
}

/** Documents matching any child; the score sums the matching children's scores in the children's order. */
export class DisjunctionCursor implements DocCursor {
  doc = -1;
  readonly cost: number;

  constructor(private readonly children: readonly DocCursor[]) {
    let cost = 0;
    for (const c of children) cost += c.cost;
    this.cost = cost;
  }

  next(): number {
    const d = this.doc;
    let min = NO_MORE_DOCS;
    for (const c of this.children) {
      const cd = c.doc === d ? c.next() : c.doc;
      if (cd < min) min = cd;
    }
    return (this.doc = min);
  }

  advance(target: number): number {
    if (this.doc >= target) return this.doc;
    let min = NO_MORE_DOCS;
    for (const c of this.children) {
      const cd = c.doc < target ? c.advance(target) : c.doc;
      if (cd < min) min = cd;
    }
    return (this.doc = min);
  }

  score(): number {
    const d = this.doc;
    let sum = 0;
    let any = false;
    for (const c of this.children) {
      if (c.doc !== d) continue;
      // The first term as it is, then added: the accumulator's arithmetic exactly.
      if (any) sum += c.score();
      else {
        sum = c.score();
        any = true;
      }
    }
    return sum;
  }
}

/**
 * Documents matching every child: the cheapest leads, the others are advanced to its candidate
 * (leapfrog). The score sums the scores of the first `scored` children (the others are filters),
 * in the children's order.
 */
export class ConjunctionCursor implements DocCursor {
  doc = -1;
  readonly cost: number;
  /** Children by cost, cheapest first. */
  private readonly byCost: DocCursor[];

  constructor(
    private readonly children: readonly DocCursor[],
    private readonly scored: number = children.length,
  ) {
    this.byCost = [...children].sort((a, b) => a.cost - b.cost);
    this.cost = this.byCost[0].cost;
  }

  next(): number {
    return this.align(this.byCost[0].next());
  }

  advance(target: number): number {
    if (this.doc >= target) return this.doc;
    return this.align(this.byCost[0].advance(target));
  }

  private align(d: number): number {
    const lead = this.byCost[0];
    const others = this.byCost;
    outer: while (d !== NO_MORE_DOCS) {
      for (let i = 1; i < others.length; i++) {
        const o = others[i];
        const od = o.doc < d ? o.advance(d) : o.doc;
        if (od > d) {
          d = lead.advance(od);
          continue outer;
        }
      }
      break;
    }
    return (this.doc = d);
  }

  score(): number {
    const children = this.children;
    let sum = children[0].score();
    for (let i = 1; i < this.scored; i++) sum += children[i].score();
    return sum;
  }
}

/** Another cursor's documents, scored otherwise. */
abstract class RescoredCursor implements DocCursor {
  constructor(protected readonly inner: DocCursor) {}

  get doc(): number {
    return this.inner.doc;
  }

  get cost(): number {
    return this.inner.cost;
  }

  next(): number {
    return this.inner.next();
  }

  advance(target: number): number {
    return this.inner.advance(target);
  }

  abstract score(): number;
}

/** The required cursor's documents; the score adds, in order, the scores of the optional cursors matching there. */
export class OptionalCursor extends RescoredCursor {
  constructor(
    required: DocCursor,
    private readonly optional: readonly DocCursor[],
  ) {
    super(required);
  }

  score(): number {
    const d = this.inner.doc;
    let sum = this.inner.score();
    for (const o of this.optional) {
      const od = o.doc < d ? o.advance(d) : o.doc;
      if (od === d) sum += o.score();
    }
    return sum;
  }
}

/** The required cursor's documents that no excluded cursor matches; its scores. */
export class ExclusionCursor implements DocCursor {
  doc = -1;

  constructor(
    private readonly required: DocCursor,
    private readonly excluded: readonly DocCursor[],
  ) {}

  get cost(): number {
    return this.required.cost;
  }

  next(): number {
    return this.skipExcluded(this.required.next());
  }

  advance(target: number): number {
    if (this.doc >= target) return this.doc;
    return this.skipExcluded(this.required.advance(target));
  }

  private skipExcluded(d: number): number {
    outer: while (d !== NO_MORE_DOCS) {
      for (const e of this.excluded) {
        const ed = e.doc < d ? e.advance(d) : e.doc;
        if (ed === d) {
          d = this.required.next();
          continue outer;
        }
      }
      break;
    }
    return (this.doc = d);
  }

  score(): number {
    return this.required.score();
  }
}

/** A cursor whose scores are multiplied by `boost` (a bool's boost). */
export class BoostedCursor extends RescoredCursor {
  constructor(
    inner: DocCursor,
    private readonly boost: number,
  ) {
    super(inner);
  }

  score(): number {
    return this.inner.score() * this.boost;
  }
}

/** A cursor matching nothing. */
export const EMPTY_CURSOR: DocCursor = {
  doc: NO_MORE_DOCS,
  cost: 0,
  next: () => NO_MORE_DOCS,
  advance: () => NO_MORE_DOCS,
  score: () => 0,
};

/** Every document of `c` (from its current position on), with scores when `scoring`; a cursor's cost bounds its matches. */
export function drainCursor(c: DocCursor, maxDoc: number, scoring: boolean): Matches {
  const cap = Math.min(c.cost, maxDoc);
  const docs = new Int32Array(cap);
  const scores = scoring ? new Float64Array(cap) : null;
  let k = 0;
  for (let d = c.next(); d !== NO_MORE_DOCS; d = c.next()) {
    docs[k] = d;
    if (scores !== null) scores[k] = c.score();
    k++;
  }
  return { docs, scores, size: k };
}
