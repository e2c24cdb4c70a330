// The best k matches of a union of terms and phrases by score, without scoring what cannot make
// the page: MaxScore (Turtle and Flood, 1995) over windows of documents, as Lucene's
// MaxScoreBulkScorer.
//
// Each term's postings carry per-block bounds (the greatest tf and the shortest field of every
// BLOCK postings), so a block's best possible BM25 score is known without reading it. In a window
// of documents, the clauses whose bounds sum below the k-th best score so far (the threshold) are
// non-essential: a document only they match cannot make the page, so only the other (essential)
// clauses are scored. A candidate's partial score plus the non-essential clauses' bounds must
// still reach the threshold as each bound, largest first, is replaced by that term's own score at
// the candidate (a look into its postings); only then is the candidate scored in full. A window
// where even all the bounds together fall short is skipped, and so, within a window, is a block
// of an essential clause whose own bound plus the other clauses' cannot reach it (block-max, as
// Lucene's impacts).
//
// A phrase is bounded by its words' blocks (it occurs at most as often as its rarest word, in a
// field at least as long as the shortest that holds them all), jumps over postings with the
// blocks' position starts, and once the total is counted reads a document's positions only when
// its bound can still reach the threshold.
//
// What stays exact:
// - Scores: a hit's score is summed clause by clause in their order, as the accumulator and the
//   cursors of execute.ts sum it, so a page is bit for bit the page of scoring every match.
// - Ties: a document scoring exactly the threshold may still enter (by its id), so only bounds
//   strictly below it prune, with a margin for the rounding of sums taken in another order.
// - The total: every document of the union is counted (marked, not scored) until `countUpTo` is
//   reached; past it the total is a lower bound (Elasticsearch's track_total_hits).

import { gallop } from './cursors.js';
import { compareIds } from './sort.js';
import { bm25 } from './stats.js';
import type { Accumulator } from './matches.js';

/** Postings per block of bounds. */
export const BLOCK = 64;
/** Documents per window (a parameter of topOfUnion for tests). */
export const WINDOW = 4096;
/** A window cut to the rest of the count holds at least the window's size over 2 to this power (256 documents of 4,096). */
const MIN_COUNT_WINDOW_SHIFT = 4;
/** How much more than the density met so far predicts a window cut to the rest of the count takes, so that one window usually ends the count. */
const COUNT_MARGIN = 1.1;
/** Bounds are compared with this much room for the rounding of sums taken in another order. */
const MARGIN = 1 + 1e-9;

/** Per block of BLOCK postings: the greatest tf and the shortest field length (whatever the statistics), and where its positions start. */
export interface BlockBounds {
  readonly maxTf: Int32Array;
  readonly minLength: Int32Array;
  /** Index of the block's first position (the sum of the tfs before it): skip data for phrases. */
  readonly posStart: Int32Array;
}

/** The bounds of postings `p` ([doc, tf, ...], `length` ints) over the field lengths `lengths`. */
export function blockBounds(p: Int32Array, length: number, lengths: Int32Array): BlockBounds {
  const n = length >> 1;
  const blocks = Math.ceil(n / BLOCK);
  const maxTf = new Int32Array(blocks);
  const minLength = new Int32Array(blocks);
  const posStart = new Int32Array(blocks);
  let positions = 0;
  for (let b = 0; b < blocks; b++) {
    let tf = 0;
    let len = 0x7fffffff;
    posStart[b] = positions;
    const end = Math.min(n, (b + 1) * BLOCK) * 2;
    for (let i = b * BLOCK * 2; i < end; i += 2) {
      positions += p[i + 1];
      if (p[i + 1] > tf) tf = p[i + 1];
      const l = lengths[p[i]];
      if (l < len) len = l;
    }
    maxTf[b] = tf;
    minLength[b] = len;
  }
  return { maxTf, minLength, posStart };
}

/** One term of the union on one field, with what BM25 scores it with. */
export interface UnionTerm {
  readonly kind?: 'term';
  readonly postings: Int32Array;
  /** Ints of `postings` in use. */
  readonly length: number;
  readonly bounds: BlockBounds;
  readonly boost: number;
  readonly idf: number;
  readonly avgdl: number;
  readonly lengths: Int32Array;
}

/** One term of a phrase: its postings, their positions and bounds. */
export interface PhraseTerm {
  readonly postings: Int32Array;
  readonly length: number;
  readonly positions: Int32Array;
  readonly bounds: BlockBounds;
}

/** An exact phrase on one field: its tf in a document is how often every term sits at its offset. */
export interface UnionPhrase {
  readonly kind: 'phrase';
  readonly terms: readonly PhraseTerm[];
  /** Each term's position in the phrase. */
  readonly offsets: Int32Array;
  /** The term read first (the rarest). */
  readonly lead: number;
  readonly boost: number;
  /** The sum of the terms' idfs (Lucene's PhraseWeight). */
  readonly idf: number;
  readonly avgdl: number;
  readonly lengths: Int32Array;
}

export type UnionClause = UnionTerm | UnionPhrase;

export interface TopUnion {
  /** Documents of the union (live, in the mask); a lower bound when `exact` is false. */
  readonly total: number;
  readonly exact: boolean;
  /** The best k documents, best first (score descending, then id ascending), with their scores. */
  readonly docs: Int32Array;
  readonly scores: Float64Array;
  /** Postings scored (of essential terms) and documents whose phrase positions were read, beside the full scoring of candidates: what was not skipped. */
  readonly scored: number;
  /** Candidates scored again over every clause after their essential clauses' sum could reach the page (0 when every clause was scored at once). */
  readonly full: number;
}

/**
 * The best `k` documents of the union of `clauses` (terms and phrases, listed in the order their
 * scores are summed) among the live ones (and those set in `mask`), and how many match, counted
 * exactly up to `countUpTo` (Infinity: exactly). `acc` is scratch of at least `maxDoc` documents,
 * left empty. `window`: documents per window (tests make it small). `floor`: a score the page
 * already has k documents at or above (other segments' hits, searched before: Lucene's minimum
 * competitive score carried from leaf to leaf): a document scoring below it is neither scored in
 * full nor returned; one scoring exactly it may still enter by its id.
 */
export function topOfUnion(
  clauses: readonly UnionClause[],
  live: Uint8Array,
  mask: Uint32Array | null,
  maxDoc: number,
  k: number,
  countUpTo: number,
  idOf: (doc: number) => string,
  acc: Accumulator,
  window = WINDOW,
  floor = -Infinity,
): TopUnion {
  const n = clauses.length;
  const top = new TopK(k, idOf, floor);
  const room = Math.min(window, maxDoc);
  // Per term: each block's best score and its read position (ints); per phrase, its reader.
  const blockMax = clauses.map((c) => (c.kind === 'phrase' ? null : blockScores(c)));
  const phrases = clauses.map((c) => (c.kind === 'phrase' ? new PhraseReader(c, room) : null));
  const at = new Int32Array(n);
  const windowStart = new Int32Array(n);
  const cursor = new Int32Array(n);
  const win = new WindowSums(acc, room);
  const marks = acc.marks;
  const bound = new Float64Array(n);
  const order = Int32Array.from({ length: n }, (_, i) => i);
  const essential = new Uint8Array(n);
  let total = 0;
  let scored = 0;
  let full = 0;
  let counting = countUpTo > 0;

  // Matches per document before any window is read: at least the largest term's (but for
  // deletes and filters); a phrase's are not known before its positions are read.
  let density = 0;
  for (const c of clauses) if (c.kind !== 'phrase') density = Math.max(density, c.length / 2 / maxDoc);
  let hi = 0;
  for (let lo = 0; lo < maxDoc; lo = hi) {
    // While counting, every match of a window is scored (and a phrase's positions read), where
    // past the count most are skipped: a window that would count far past countUpTo is cut to
    // about the documents the rest of the count needs, at the density of matches met so far.
    let size = window;
    if (counting && countUpTo !== Infinity) {
      if (lo > 0 && total > 0) density = total / lo;
      const need = density > 0 ? Math.ceil(((countUpTo - total) * COUNT_MARGIN) / density) : size;
      if (need < size) size = Math.max(need, window >> MIN_COUNT_WINDOW_SHIFT, 1);
    }
    hi = Math.min(maxDoc, lo + size);
    let any = false;
    let bounds = 0;
    for (let i = 0; i < n; i++) {
      const c = clauses[i];
      const ph = phrases[i];
      if (ph !== null) {
        ph.moveTo(lo);
        bound[i] = ph.windowBound(hi);
        if (ph.hasBefore(hi)) any = true;
      } else {
        const t = c as UnionTerm;
        windowStart[i] = at[i];
        bound[i] = windowBound(t, blockMax[i]!, at[i], hi);
        if (at[i] < t.length && t.postings[at[i]] < hi) any = true;
      }
      bounds += bound[i];
    }
    if (!any) continue;
    // The non-essential clauses: the smallest bounds, as many as sum below the threshold.
    const threshold = top.threshold();
    sortByBound(order, bound);
    let rest = 0;
    let split = 0;
    while (split < n && (rest + bound[order[split]]) * MARGIN < threshold) rest += bound[order[split++]];
    essential.fill(1);
    for (let j = 0; j < split; j++) essential[order[j]] = 0;
    if (split === n && !counting) {
      for (let i = 0; i < n; i++) {
        const ph = phrases[i];
        if (ph !== null) ph.skipTo(hi);
        else {
          const t = clauses[i] as UnionTerm;
          at[i] = gallop(t.postings, at[i], t.length, 2, hi);
        }
      }
      continue;
    }

    // Essential clauses are scored in the clauses' order, so that with none left out a partial
    // score is the score; the others are only counted while counting.
    win.clear();
    for (let i = 0; i < n; i++) {
      const ph = phrases[i];
      if (ph !== null) {
        if (essential[i] === 0 && !counting) {
          ph.skipTo(hi);
          continue;
        }
        // A phrase match costs a look at positions: while the total is not counted, every one is
        // needed; past it, only those whose bound (with the other clauses') can reach the page.
        const matched = ph.matches(hi, live, mask, counting ? -Infinity : threshold, bounds - bound[i]);
        if (essential[i] === 1) for (let m = 0; m < matched; m++) win.add(ph.docs[m], ph.scores[m]);
        else for (let m = 0; m < matched; m++) win.count(ph.docs[m]);
        continue;
      }
      const t = clauses[i] as UnionTerm;
      const p = t.postings;
      const end = t.length;
      let j = at[i];
      if (essential[i] === 1) {
        const { boost, idf, avgdl, lengths } = t;
        const first = j;
        let skipped = 0;
        // Past the count, a whole block whose best score plus the other clauses' bounds cannot
        // reach the page is stepped over (block-max, as Lucene's impacts): a document it holds
        // that another clause scores gets a sum short of its score, still below the threshold.
        const others = bounds - bound[i];
        const max = blockMax[i]!;
        // Block by block (a block's postings start at a multiple of 2 * BLOCK ints).
        while (j < end && p[j] < hi) {
          const b = Math.floor(j / (2 * BLOCK));
          const stop = Math.min(end, (b + 1) * 2 * BLOCK);
          if (!counting && j === b * 2 * BLOCK && p[stop - 2] < hi && (max[b] + others) * MARGIN < top.threshold()) {
            skipped += (stop - j) >> 1;
            j = stop;
            continue;
          }
          for (; j < stop; j += 2) {
            const d = p[j];
            if (d >= hi) break;
            if (live[d] !== 1 || (mask !== null && (mask[d >>> 5] & (1 << (d & 31))) === 0)) continue;
            win.add(d, boost * bm25(p[j + 1], lengths[d], avgdl, idf));
          }
        }
        scored += ((j - first) >> 1) - skipped;
      } else if (counting) {
        for (; j < end; j += 2) {
          const d = p[j];
          if (d >= hi) break;
          if (marks[d] !== 0 || live[d] !== 1 || (mask !== null && (mask[d >>> 5] & (1 << (d & 31))) === 0)) continue;
          win.count(d);
        }
      } else {
        j = gallop(p, j, end, 2, hi);
      }
      at[i] = j;
    }
    const found = win.found;
    const candidates = win.candidates;
    const sums = win.sums;
    if (counting) {
      total += win.touched;
      if (total >= countUpTo) counting = false;
    }

    if (split === 0) {
      // Every clause was scored: the sums are the scores. (A phrase may have left out a document
      // whose bound could not reach the threshold, and a term a block of them: a sum then falls
      // short of its score, which is below the threshold anyway, so the page takes it neither way.)
      for (let c = 0; c < found; c++) top.offer(candidates[c], sums[candidates[c]]);
    } else {
      // Candidates in document order, so that the full scores read each clause's postings in the
      // window once, from the window's start on.
      cursor.set(windowStart);
      for (const ph of phrases) ph?.rewind();
      const list = win.ordered ? candidates.subarray(0, found) : candidates.subarray(0, found).sort();
      for (let c = 0; c < found; c++) {
        const d = list[c];
        const threshold = top.threshold();
        // What d can reach: its essential clauses' sum plus the bounds of the others, each bound
        // replaced by the term's own score at d, largest bound first, until it falls short (as
        // Lucene's MaxScore does): most candidates lack the rarest non-essential term.
        let reach = sums[d] + rest;
        for (let j = split - 1; j >= 0 && reach * MARGIN >= threshold; j--) {
          const i = order[j];
          if (phrases[i] === null) reach += termScoreAt(clauses[i] as UnionTerm, cursor, at, i, d) - bound[i];
        }
        if (reach * MARGIN < threshold) continue;
        full++;
        top.offer(d, fullScore(clauses, phrases, cursor, at, d));
      }
    }
    win.reset();
  }
  const exact = counting || total < countUpTo;
  for (const ph of phrases) scored += ph?.read ?? 0;
  const { docs, scores } = top.sorted();
  return { total, exact, docs, scores, scored, full };
}

/**
 * One window's matches in the accumulator's arrays: a document an essential clause scored is
 * marked 1 and summed (a candidate); one only counted is marked 2.
 */
class WindowSums {
  readonly marks: Uint8Array;
  readonly sums: Float64Array;
  private readonly list: Int32Array;
  /** The documents scored, in the order first scored. */
  readonly candidates: Int32Array;
  /** Documents marked (scored or counted). */
  touched = 0;
  found = 0;
  /** Whether the candidates came in increasing order (one clause scored them): no sort needed. */
  ordered = true;

  constructor(acc: Accumulator, room: number) {
    this.marks = acc.marks;
    this.sums = acc.scores;
    this.list = acc.touched;
    this.candidates = acc.windowScratch(room);
  }

  clear(): void {
    this.touched = 0;
    this.found = 0;
    this.ordered = true;
  }

  add(d: number, s: number): void {
    const mark = this.marks[d];
    if (mark === 1) {
      this.sums[d] += s;
      return;
    }
    if (mark === 0) this.list[this.touched++] = d;
    this.marks[d] = 1;
    this.sums[d] = s;
    if (this.found > 0 && d < this.candidates[this.found - 1]) this.ordered = false;
    this.candidates[this.found++] = d;
  }

  count(d: number): void {
    if (this.marks[d] !== 0) return;
    this.marks[d] = 2;
    this.list[this.touched++] = d;
  }

  /** Unmarks every document of the window. */
  reset(): void {
    for (let c = 0; c < this.touched; c++) this.marks[this.list[c]] = 0;
    this.touched = 0;
  }
}

/** Sorts clause numbers `order` by `bound` ascending (stable; a handful of clauses: insertion sort, no closure). */
function sortByBound(order: Int32Array, bound: Float64Array): void {
  for (let i = 1; i < order.length; i++) {
    const c = order[i];
    let j = i - 1;
    while (j >= 0 && bound[order[j]] > bound[c]) {
      order[j + 1] = order[j];
      j--;
    }
    order[j + 1] = c;
  }
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

/**
 * Document `d`'s score, summed clause by clause in their order. `cursor[i]` is where term i's
 * postings of the window are read from (moved up to `d`; documents come in increasing order),
 * `end[i]` where they end; a phrase reads with its own cursor.
 */
function fullScore(clauses: readonly UnionClause[], phrases: readonly (PhraseReader | null)[], cursor: Int32Array, end: Int32Array, d: number): number {
  let score = 0;
  for (let i = 0; i < clauses.length; i++) {
    const ph = phrases[i];
    if (ph !== null) {
      const s = ph.scoreAt(d);
      if (s >= 0) score += s;
      continue;
    }
    score += termScoreAt(clauses[i] as UnionTerm, cursor, end, i, d);
  }
  return score;
}

/**
 * Term `t`'s score at document `d` (0 if it lacks d), read from `cursor[i]` on (moved up to `d`;
 * documents come in increasing order) up to `end[i]`.
 */
function termScoreAt(t: UnionTerm, cursor: Int32Array, end: Int32Array, i: number, d: number): number {
  const p = t.postings;
  const e = end[i];
  let j = cursor[i];
  // The next posting or two step; farther, a gallop (the clause's matches may be far apart).
  if (j < e && p[j] < d) {
    j += 2;
    if (j < e && p[j] < d) j = gallop(p, j, e, 2, d);
  }
  cursor[i] = j;
  return j < e && p[j] === d ? t.boost * bm25(p[j + 1], t.lengths[d], t.avgdl, t.idf) : 0;
}

/**
 * How often the phrase's terms sit at their offsets in one document: `from[j]`..`to[j]` are term
 * j's positions there (in `positions[j]`), `ptr` scratch. Counted over the first term's positions;
 * two terms' lists are walked together (twoWordFreq).
 */
export function phraseFreq(positions: readonly Int32Array[], from: Int32Array, to: Int32Array, offsets: Int32Array, ptr: Int32Array): number {
  const m = positions.length;
  if (m === 2) return twoWordFreq(positions[0]!, from[0], to[0], positions[1]!, from[1], to[1], offsets[0] - offsets[1]);
  for (let j = 1; j < m; j++) ptr[j] = from[j];
  const p0 = positions[0];
  let freq = 0;
  scan: for (let q = from[0]; q < to[0]; q++) {
    const base = p0[q] - offsets[0];
    for (let j = 1; j < m; j++) {
      const pj = positions[j];
      const end = to[j];
      const target = base + offsets[j];
      let r = ptr[j];
      while (r < end && pj[r] < target) r++;
      ptr[j] = r;
      if (r >= end) break scan;
      if (pj[r] !== target) continue scan;
    }
    freq++;
  }
  return freq;
}

/**
 * How often two words sit as a phrase wants them in one document: positions `a[i..iEnd)` of one
 * and `b[j..jEnd)` of the other (each ascending), a match being a position q of the first with the
 * second at q - delta, walking the two lists together.
 */
export function twoWordFreq(a: Int32Array, i: number, iEnd: number, b: Int32Array, j: number, jEnd: number, delta: number): number {
  let freq = 0;
  while (i < iEnd && j < jEnd) {
    const want = a[i] - delta;
    const have = b[j];
    if (have < want) j++;
    else {
      if (have === want) {
        freq++;
        j++;
      }
      i++;
    }
  }
  return freq;
}

/**
 * Reads one phrase clause window by window: each term's position in its postings (`at`, ints)
 * and in its positions (`pos`), moved forward with the blocks' skip data; a second cursor from
 * the window's start scores candidates.
 */
class PhraseReader {
  private readonly m: number;
  private readonly at: Int32Array;
  private readonly pos: Int32Array;
  private readonly startAt: Int32Array;
  private readonly startPos: Int32Array;
  private readonly curAt: Int32Array;
  private readonly curPos: Int32Array;
  private readonly from: Int32Array;
  private readonly to: Int32Array;
  private readonly ptr: Int32Array;
  private readonly positions: Int32Array[];
  /** Documents whose positions matches() read. */
  read = 0;
  /** The matches of the last matches() call, with their scores. */
  readonly docs: Int32Array;
  readonly scores: Float64Array;

  constructor(
    private readonly c: UnionPhrase,
    room: number,
  ) {
    const m = (this.m = c.terms.length);
    this.at = new Int32Array(m);
    this.pos = new Int32Array(m);
    this.startAt = new Int32Array(m);
    this.startPos = new Int32Array(m);
    this.curAt = new Int32Array(m);
    this.curPos = new Int32Array(m);
    this.from = new Int32Array(m);
    this.to = new Int32Array(m);
    this.ptr = new Int32Array(m);
    this.positions = c.terms.map((t) => t.positions);
    this.docs = new Int32Array(room);
    this.scores = new Float64Array(room);
  }

  /** Every term to its first posting at or after `lo`; remembered as the window's start. */
  moveTo(lo: number): void {
    for (let j = 0; j < this.m; j++) advance(this.c.terms[j], this.at, this.pos, j, lo);
    this.startAt.set(this.at);
    this.startPos.set(this.pos);
  }

  /** Whether the lead term has a posting below `hi` (from where it is). */
  hasBefore(hi: number): boolean {
    const t = this.c.terms[this.c.lead];
    const a = this.at[this.c.lead];
    return a < t.length && t.postings[a] < hi;
  }

  skipTo(hi: number): void {
    advance(this.c.terms[this.c.lead], this.at, this.pos, this.c.lead, hi);
  }

  /**
   * The best score a document below `hi` can get: its tf is at most every term's, its field at
   * least as long as the shortest holding all of them (0 when a term has no posting there).
   */
  windowBound(hi: number): number {
    let tf = 0x7fffffff;
    let length = 0;
    for (let j = 0; j < this.m; j++) {
      const t = this.c.terms[j];
      const { maxTf, minLength } = t.bounds;
      let best = 0;
      let shortest = 0x7fffffff;
      for (let b = Math.floor(this.at[j] / (2 * BLOCK)); b < maxTf.length; b++) {
        const first = b * BLOCK * 2;
        if (first >= t.length || t.postings[first] >= hi) break;
        if (maxTf[b] > best) best = maxTf[b];
        if (minLength[b] < shortest) shortest = minLength[b];
      }
      if (best === 0) return 0;
      if (best < tf) tf = best;
      if (shortest > length) length = shortest;
    }
    const c = this.c;
    return c.boost * bm25(tf, length, c.avgdl, c.idf);
  }

  /**
   * The phrase's matches below `hi`, in docs/scores; returns how many. With a finite `threshold`,
   * a document whose bound plus `others` (the other clauses' bounds) cannot reach it is left out
   * without reading its positions.
   */
  matches(hi: number, live: Uint8Array, mask: Uint32Array | null, threshold: number, others: number): number {
    if (this.m === 2) return this.matchesOfTwo(hi, live, mask, threshold, others);
    const { terms, lead, boost, idf, avgdl, lengths, offsets } = this.c;
    const lt = terms[lead];
    const lp = lt.postings;
    const m = this.m;
    let a = this.at[lead];
    let ps = this.pos[lead];
    let n = 0;
    for (; a < lt.length; ps += lp[a + 1], a += 2) {
      const d = lp[a];
      if (d >= hi) break;
      if (live[d] !== 1 || (mask !== null && (mask[d >>> 5] & (1 << (d & 31))) === 0)) continue;
      let tf = lp[a + 1];
      let all = true;
      for (let j = 0; j < m; j++) {
        if (j === lead) continue;
        const t = terms[j];
        const p = t.postings;
        let aj = this.at[j];
        if (aj < t.length && p[aj] < d) {
          // Near: step posting by posting here; farther than a block: through the skip data.
          if (aj + 2 * BLOCK < t.length && p[aj + 2 * BLOCK] < d) {
            advance(t, this.at, this.pos, j, d);
            aj = this.at[j];
          } else {
            let pj = this.pos[j];
            while (aj < t.length && p[aj] < d) {
              pj += p[aj + 1];
              aj += 2;
            }
            this.at[j] = aj;
            this.pos[j] = pj;
          }
        }
        if (aj >= t.length || p[aj] !== d) {
          all = false;
          break;
        }
        if (p[aj + 1] < tf) tf = p[aj + 1];
      }
      if (!all) continue;
      if (threshold !== -Infinity && (boost * bm25(tf, lengths[d], avgdl, idf) + others) * MARGIN < threshold) continue;
      for (let j = 0; j < m; j++) {
        const from = j === lead ? ps : this.pos[j];
        this.from[j] = from;
        this.to[j] = from + (j === lead ? lp[a + 1] : terms[j].postings[this.at[j] + 1]);
      }
      this.read++;
      const freq = phraseFreq(this.positions, this.from, this.to, offsets, this.ptr);
      if (freq === 0) continue;
      this.docs[n] = d;
      this.scores[n++] = boost * bm25(freq, lengths[d], avgdl, idf);
    }
    this.at[lead] = a;
    this.pos[lead] = ps;
    return n;
  }

  /**
   * matches() for a phrase of two words (most phrases): the same steps, with the other word's
   * place in its postings and positions kept in locals, and its positions compared in place.
   */
  private matchesOfTwo(hi: number, live: Uint8Array, mask: Uint32Array | null, threshold: number, others: number): number {
    const { terms, lead, boost, idf, avgdl, lengths, offsets } = this.c;
    const o = 1 - lead;
    const lt = terms[lead];
    const ot = terms[o];
    const lp = lt.postings;
    const op = ot.postings;
    const llen = lt.length;
    const olen = ot.length;
    const lpos = lt.positions;
    const opos = ot.positions;
    // The lead's position in the phrase minus the other's: a match is a lead position q with the other at q - delta.
    const delta = offsets[lead] - offsets[o];
    const far = 2 * BLOCK;
    const docs = this.docs;
    const scores = this.scores;
    let a = this.at[lead];
    let ps = this.pos[lead];
    let b = this.at[o];
    let pb = this.pos[o];
    let n = 0;
    let read = 0;
    for (; a < llen; ps += lp[a + 1], a += 2) {
      const d = lp[a];
      if (d >= hi) break;
      if (live[d] !== 1 || (mask !== null && (mask[d >>> 5] & (1 << (d & 31))) === 0)) continue;
      if (b < olen && op[b] < d) {
        if (b + far < olen && op[b + far] < d) {
          this.at[o] = b;
          this.pos[o] = pb;
          advance(ot, this.at, this.pos, o, d);
          b = this.at[o];
          pb = this.pos[o];
        } else {
          while (b < olen && op[b] < d) {
            pb += op[b + 1];
            b += 2;
          }
        }
      }
      if (b >= olen) break;
      if (op[b] !== d) continue;
      const ltf = lp[a + 1];
      const otf = op[b + 1];
      if (threshold !== -Infinity && (boost * bm25(ltf < otf ? ltf : otf, lengths[d], avgdl, idf) + others) * MARGIN < threshold) continue;
      read++;
      const freq = twoWordFreq(lpos, ps, ps + ltf, opos, pb, pb + otf, delta);
      if (freq === 0) continue;
      docs[n] = d;
      scores[n++] = boost * bm25(freq, lengths[d], avgdl, idf);
    }
    this.at[lead] = a;
    this.pos[lead] = ps;
    this.at[o] = b;
    this.pos[o] = pb;
    this.read += read;
    return n;
  }

  /** Back to the window's start for scoreAt(). */
  rewind(): void {
    this.curAt.set(this.startAt);
    this.curPos.set(this.startPos);
  }

  /** The phrase's score in document `d` (documents in increasing order after rewind()), or -1 if it does not match. */
  scoreAt(d: number): number {
    const { terms, boost, idf, avgdl, lengths, offsets } = this.c;
    for (let j = 0; j < this.m; j++) {
      const t = terms[j];
      advance(t, this.curAt, this.curPos, j, d);
      const aj = this.curAt[j];
      if (aj >= t.length || t.postings[aj] !== d) return -1;
      this.from[j] = this.curPos[j];
      this.to[j] = this.curPos[j] + t.postings[aj + 1];
    }
    const freq = phraseFreq(this.positions, this.from, this.to, offsets, this.ptr);
    return freq === 0 ? -1 : boost * bm25(freq, lengths[d], avgdl, idf);
  }
}

/**
 * Moves term `t`'s cursor (`at[j]` in its postings, `pos[j]` in its positions) to its first
 * posting at or after `target`: whole blocks at once through their skip data, then posting by
 * posting, adding up the positions stepped over.
 */
function advance(t: PhraseTerm, at: Int32Array, pos: Int32Array, j: number, target: number): void {
  const p = t.postings;
  let a = at[j];
  if (a >= t.length || p[a] >= target) return;
  let ps = pos[j];
  const starts = t.bounds.posStart;
  const blocks = starts.length;
  const b = Math.floor(a / (2 * BLOCK));
  if (b + 1 < blocks && p[(b + 1) * 2 * BLOCK] <= target) {
    // The last block starting at or before the target.
    let lo = b + 1;
    let hi = blocks - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (p[mid * 2 * BLOCK] <= target) lo = mid;
      else hi = mid - 1;
    }
    a = lo * 2 * BLOCK;
    ps = starts[lo];
  }
  while (a < t.length && p[a] < target) {
    ps += p[a + 1];
    a += 2;
  }
  at[j] = a;
  pos[j] = ps;
}

/** The best k (document, score) pairs seen: a bounded heap with the worst at its root. */
export class TopK {
  private readonly docs: Int32Array;
  private readonly scores: Float64Array;
  private size = 0;

  constructor(
    private readonly k: number,
    private readonly idOf: (doc: number) => string,
    /** No document scoring below it enters (k better ones are known elsewhere). */
    private readonly floor = -Infinity,
  ) {
    this.docs = new Int32Array(k);
    this.scores = new Float64Array(k);
  }

  /** The score a document must reach to enter (the floor until k are held; Infinity when k is 0). */
  threshold(): number {
    if (this.k === 0) return Infinity;
    return this.size < this.k ? this.floor : Math.max(this.floor, this.scores[0]);
  }

  /** Whether (a, sa) ranks after (b, sb): lower score, or the same score and a greater id. */
  private worse(a: number, sa: number, b: number, sb: number): boolean {
    if (sa !== sb) return sa < sb;
    return compareIds(this.idOf(a), this.idOf(b)) > 0;
  }

  offer(doc: number, score: number): void {
    const { docs, scores, k } = this;
    if (k === 0 || score < this.floor) return;
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
    const n = this.size;
    const docs = this.docs.slice(0, n);
    const scores = this.scores.slice(0, n);
    if (n <= 32) {
      // A page's few: insertion sort, in place.
      for (let i = 1; i < n; i++) {
        const d = docs[i];
        const s = scores[i];
        let j = i - 1;
        while (j >= 0 && this.worse(docs[j], scores[j], d, s)) {
          docs[j + 1] = docs[j];
          scores[j + 1] = scores[j];
          j--;
        }
        docs[j + 1] = d;
        scores[j + 1] = s;
      }
      return { docs, scores };
    }
    const idx = Array.from({ length: n }, (_, i) => i);
    idx.sort((a, b) => (this.worse(docs[a], scores[a], docs[b], scores[b]) ? 1 : -1));
    return { docs: Int32Array.from(idx, (i) => docs[i]), scores: Float64Array.from(idx, (i) => scores[i]) };
  }
}
