// The best k matches of a union of terms by score, without scoring what cannot make the page:
// MaxScore (Turtle and Flood, 1995) over windows of documents, as Lucene's MaxScoreBulkScorer.
//
// Each term's postings carry per-block bounds (the greatest tf and the shortest field of every
// BLOCK postings), so a block's best possible BM25 score is known without reading it. In a window
// of documents, the terms whose bounds sum below the k-th best score so far (the threshold) are
// non-essential: a document only they match cannot make the page, so only the other (essential)
// terms' postings are scored. A candidate is then scored in full only when its partial score plus
// the non-essential terms' bounds can still reach the threshold. A window where even all the
// bounds together fall short is skipped.
//
// What stays exact:
// - Scores: a hit's score is summed term by term in the clauses' order, as the accumulator of
//   execute.ts sums it, so a page is bit for bit the page of scoring every match.
// - Ties: a document scoring exactly the threshold may still enter (by its id), so only bounds
//   strictly below it prune, with a margin for the rounding of sums taken in another order.
// - The total: every document of the union is counted (marked, not scored) until `countUpTo` is
//   reached; past it the total is a lower bound (Elasticsearch's track_total_hits).

import { compareIds } from './sort.js';
import { bm25 } from './stats.js';
import type { Accumulator } from './matches.js';

/** Postings per block of bounds. */
export const BLOCK = 64;
/** Documents per window (a parameter of topOfUnion for tests). */
export const WINDOW = 4096;
/** Bounds are compared with this much room for the rounding of sums taken in another order. */
const MARGIN = 1 + 1e-9;

/** Per block of BLOCK postings: the greatest tf and the shortest field length (whatever the statistics). */
export interface BlockBounds {
  readonly maxTf: Int32Array;
  readonly minLength: Int32Array;
}

/** The bounds of postings `p` ([doc, tf, ...], `length` ints) over the field lengths `lengths`. */
export function blockBounds(p: Int32Array, length: number, lengths: Int32Array): BlockBounds {
  const n = length >> 1;
  const blocks = Math.ceil(n / BLOCK);
  const maxTf = new Int32Array(blocks);
  const minLength = new Int32Array(blocks);
  for (let b = 0; b < blocks; b++) {
    let tf = 0;
    let len = 0x7fffffff;
    const end = Math.min(n, (b + 1) * BLOCK) * 2;
    for (let i = b * BLOCK * 2; i < end; i += 2) {
      if (p[i + 1] > tf) tf = p[i + 1];
      const l = lengths[p[i]];
      if (l < len) len = l;
    }
    maxTf[b] = tf;
    minLength[b] = len;
  }
  return { maxTf, minLength };
}

/** One term of the union on one field, with what BM25 scores it with. */
export interface UnionTerm {
  readonly postings: Int32Array;
  /** Ints of `postings` in use. */
  readonly length: number;
  readonly bounds: BlockBounds;
  readonly boost: number;
  readonly idf: number;
  readonly avgdl: number;
  readonly lengths: Int32Array;
}

export interface TopUnion {
  /** Documents of the union (live, in the mask); a lower bound when `exact` is false. */
  readonly total: number;
  readonly exact: boolean;
  /** The best k documents, best first (score descending, then id ascending), with their scores. */
  readonly docs: Int32Array;
  readonly scores: Float64Array;
  /** Postings scored (of essential terms), beside the full scoring of candidates: what was not skipped. */
  readonly scored: number;
}

/**
 * The best `k` documents of the union of `terms` (listed in the order their scores are summed)
 * among the live ones (and those set in `mask`), and how many match, counted exactly up to
 * `countUpTo` (Infinity: exactly). `acc` is scratch of at least `maxDoc` documents, left empty.
 * `window`: documents per window (tests make it small).
 */
export function topOfUnion(
  terms: readonly UnionTerm[],
  live: Uint8Array,
  mask: Uint32Array | null,
  maxDoc: number,
  k: number,
  countUpTo: number,
  idOf: (doc: number) => string,
  acc: Accumulator,
  window = WINDOW,
): TopUnion {
  const n = terms.length;
  const top = new TopK(k, idOf);
  // Per term: each block's best score, the read position (ints), and its window bound.
  const blockMax = terms.map(blockScores);
  const at = new Int32Array(n);
  const windowStart = new Int32Array(n);
  const cursor = new Int32Array(n);
  /** The window's documents an essential term matched. */
  const candidates = new Int32Array(Math.min(window, maxDoc));
  const bound = new Float64Array(n);
  const order = Array.from({ length: n }, (_, i) => i);
  const essential = new Uint8Array(n);
  const marks = acc.marks;
  const sums = acc.scores;
  const touched = acc.touched;
  let total = 0;
  let scored = 0;
  let counting = countUpTo > 0;

  for (let lo = 0; lo < maxDoc; lo += window) {
    const hi = Math.min(maxDoc, lo + window);
    let any = false;
    for (let i = 0; i < n; i++) {
      windowStart[i] = at[i];
      bound[i] = windowBound(terms[i], blockMax[i], at[i], hi);
      if (bound[i] > 0 || (at[i] < terms[i].length && terms[i].postings[at[i]] < hi)) any = true;
    }
    if (!any) continue;
    // The non-essential terms: the smallest bounds, as many as sum below the threshold.
    const threshold = top.threshold();
    order.sort((a, b) => bound[a] - bound[b]);
    let rest = 0;
    let split = 0;
    while (split < n && (rest + bound[order[split]]) * MARGIN < threshold) rest += bound[order[split++]];
    essential.fill(1);
    for (let j = 0; j < split; j++) essential[order[j]] = 0;
    if (split === n && !counting) {
      for (let i = 0; i < n; i++) at[i] = seek(terms[i], at[i], hi);
      continue;
    }

    // Essential terms are scored in the clauses' order, so that with none left out a partial
    // score is the score (mark 1, a candidate); the others are only counted (mark 2) while counting.
    let count = 0;
    let found = 0;
    for (let i = 0; i < n; i++) {
      const t = terms[i];
      const p = t.postings;
      const end = t.length;
      let j = at[i];
      if (essential[i] === 1) {
        const { boost, idf, avgdl, lengths } = t;
        const first = j;
        for (; j < end; j += 2) {
          const d = p[j];
          if (d >= hi) break;
          if (live[d] !== 1 || (mask !== null && (mask[d >>> 5] & (1 << (d & 31))) === 0)) continue;
          const s = boost * bm25(p[j + 1], lengths[d], avgdl, idf);
          if (marks[d] === 1) sums[d] += s;
          else {
            if (marks[d] === 0) touched[count++] = d;
            marks[d] = 1;
            sums[d] = s;
            candidates[found++] = d;
          }
        }
        scored += (j - first) >> 1;
      } else if (counting) {
        for (; j < end; j += 2) {
          const d = p[j];
          if (d >= hi) break;
          if (marks[d] !== 0 || live[d] !== 1 || (mask !== null && (mask[d >>> 5] & (1 << (d & 31))) === 0)) continue;
          marks[d] = 2;
          touched[count++] = d;
        }
      } else {
        j = seek(t, j, hi);
      }
      at[i] = j;
    }
    if (counting) {
      total += count;
      if (total >= countUpTo) counting = false;
    }

    if (split === 0) {
      // Every term was scored: the sums are the scores.
      for (let c = 0; c < found; c++) top.offer(candidates[c], sums[candidates[c]]);
    } else {
      // Candidates in document order, so that the full scores read each term's postings in the
      // window once, from windowStart on.
      cursor.set(windowStart);
      const list = candidates.subarray(0, found).sort();
      for (let c = 0; c < found; c++) {
        const d = list[c];
        if ((sums[d] + rest) * MARGIN >= top.threshold()) top.offer(d, fullScore(terms, cursor, at, d));
      }
    }
    for (let c = 0; c < count; c++) marks[touched[c]] = 0;
  }
  const exact = counting || total < countUpTo;
  const { docs, scores } = top.sorted();
  return { total, exact, docs, scores, scored };
}

/** Each block's best score: BM25 of its greatest tf in its shortest field. */
function blockScores(t: UnionTerm): Float64Array {
  const { maxTf, minLength } = t.bounds;
  const out = new Float64Array(maxTf.length);
  for (let b = 0; b < out.length; b++) out[b] = t.boost * bm25(maxTf[b], minLength[b], t.avgdl, t.idf);
  return out;
}

/** The best score of term `t`'s postings from int `from` on below document `hi` (0 if none). */
function windowBound(t: UnionTerm, blockMax: Float64Array, from: number, hi: number): number {
  const p = t.postings;
  let best = 0;
  for (let b = Math.floor(from / (2 * BLOCK)); b < blockMax.length; b++) {
    const first = b * BLOCK * 2;
    if (first >= t.length || p[first] >= hi) break;
    if (blockMax[b] > best) best = blockMax[b];
  }
  return best;
}

/** The first int index from `from` whose document is at least `target` (t.length if none). */
function seek(t: UnionTerm, from: number, target: number): number {
  const p = t.postings;
  let lo = from;
  let hi = t.length;
  if (lo >= hi || p[lo] >= target) return lo;
  // p[lo] < target: binary search over postings (2 ints each).
  while (hi - lo > 2) {
    const mid = lo + (((hi - lo) >> 2) << 1);
    if (p[mid] < target) lo = mid;
    else hi = mid;
  }
  return hi;
}

/**
 * Document `d`'s score, summed term by term in the clauses' order. `cursor[i]` is where term i's
 * postings of the window are read from (moved up to `d`; documents come in increasing order),
 * `end[i]` where they end.
 */
function fullScore(terms: readonly UnionTerm[], cursor: Int32Array, end: Int32Array, d: number): number {
  let score = 0;
  for (let i = 0; i < terms.length; i++) {
    const t = terms[i];
    const p = t.postings;
    const e = end[i];
    let j = cursor[i];
    while (j < e && p[j] < d) j += 2;
    cursor[i] = j;
    if (j < e && p[j] === d) score += t.boost * bm25(p[j + 1], t.lengths[d], t.avgdl, t.idf);
  }
  return score;
}

/** The best k (document, score) pairs seen: a bounded heap with the worst at its root. */
class TopK {
  private readonly docs: Int32Array;
  private readonly scores: Float64Array;
  private size = 0;

  constructor(
    private readonly k: number,
    private readonly idOf: (doc: number) => string,
  ) {
    this.docs = new Int32Array(k);
    this.scores = new Float64Array(k);
  }

  /** The score a document must reach to enter (-Infinity until k are held; Infinity when k is 0). */
  threshold(): number {
    if (this.k === 0) return Infinity;
    return this.size < this.k ? -Infinity : this.scores[0];
  }

  /** Whether (a, sa) ranks after (b, sb): lower score, or the same score and a greater id. */
  private worse(a: number, sa: number, b: number, sb: number): boolean {
    if (sa !== sb) return sa < sb;
    return compareIds(this.idOf(a), this.idOf(b)) > 0;
  }

  offer(doc: number, score: number): void {
    const { docs, scores, k } = this;
    if (k === 0) return;
    if (this.size < k) {
      let c = this.size++;
      while (c > 0) {
        const parent = (c - 1) >> 1;
        if (!this.worse(doc, score, docs[parent], scores[parent])) break;
        docs[c] = docs[parent];
        scores[c] = scores[parent];
        c = parent;
      }
      docs[c] = doc;
      scores[c] = score;
      return;
    }
    if (!this.worse(docs[0], scores[0], doc, score)) return;
    let c = 0;
    for (;;) {
      const l = 2 * c + 1;
      if (l >= k) break;
      const r = l + 1;
      const w = r < k && this.worse(docs[r], scores[r], docs[l], scores[l]) ? r : l;
      if (!this.worse(docs[w], scores[w], doc, score)) break;
      docs[c] = docs[w];
      scores[c] = scores[w];
      c = w;
    }
    docs[c] = doc;
    scores[c] = score;
  }

  /** The documents held, best first. */
  sorted(): { docs: Int32Array; scores: Float64Array } {
    const idx = Array.from({ length: this.size }, (_, i) => i);
    idx.sort((a, b) => (this.worse(this.docs[a], this.scores[a], this.docs[b], this.scores[b]) ? 1 : -1));
    return { docs: Int32Array.from(idx, (i) => this.docs[i]), scores: Float64Array.from(idx, (i) => this.scores[i]) };
  }
}
