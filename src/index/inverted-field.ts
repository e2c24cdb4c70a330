// One inverted field (a text field, a keyword field, or the text or keyword view of an undeclared
// field): a term dictionary, per-term postings, exact per-document lengths and the live
// statistics BM25 needs.
//
// Layout, chosen for the write path (one call per token, no allocation but for new terms and
// amortized growth of shared pages):
//   - terms get dense ids from a TermTable, which finds a token by its range in the field value
//     (no substring per token); per-term data lives in parallel typed arrays indexed by term id;
//   - a term's postings are [doc, tf, doc, tf, ...] in increasing doc order (documents get
//     increasing numbers and are never renumbered but by ShardIndex.compact), and for text its
//     positions tf entries per posting, in the same order;
//   - a term still being added to keeps them as lists in two SlicePools (slice-pool.ts: chains of
//     slices in shared pages, so that growing costs no allocation); postingsOf()/positionsOf() read
//     such a term into one Int32Array, kept until the term is appended to again. A term of a
//     restored segment, or one rewritten by deletes or renumber(), holds one Int32Array of each
//     instead, and moves back into the pools if it is appended to; trim() (a sealed buffer) turns
//     every term into exact-size arrays and drops the pools;
//   - postings are appended a batch at a time: endDoc records (term, doc, tf, positions) entries,
//     flush() groups them by term and appends each term's run once, so a term that many documents
//     of a batch share is touched once per batch rather than once per document (the write path's
//     cost is the first touch of each term's arrays); statistics (docFreq, lengths) are updated
//     by endDoc at once, and ShardIndex flushes before anything reads postings;
//   - a deleted document's postings stay until the term has more dead entries than live ones,
//     then that term alone is rewritten (amortized O(1) per removed posting); docFreq, docCount and
//     sumLength count live documents only, so statistics are exact at every moment;
//   - a document whose terms are not known (one of a restored segment, whose file keeps no
//     forward index: which terms each document holds cost a quarter of a segment's bytes) is
//     removed "late" (removeLateDoc): docCount and sumLength follow at once (from its length),
//     and each term's docFreq when the term is next read (docFreqOf), by looking the late
//     documents up in its postings. Lucene instead counts deleted documents in its statistics
//     until a merge; here they stay exact, as a sharded collection's ranking must.

import type { TokenSink } from './analyzer.js';
import { unpackPositions, unpackPostings, type FlatPostings, type PackedPostings } from './postings-codec.js';
import { SlicePool } from './slice-pool.js';
import { exactKey, hashRange, TermTable } from './term-table.js';
import { blockBounds, type BlockBounds } from './top-union.js';

/** Collects the term ids a document holds, per field, so that deleting it can undo them. */
export interface ForwardSink {
  beginField(slot: number, termCount: number): void;
  termId(id: number): void;
}

const EMPTY = new Int32Array(0);
/** Dead postings a term tolerates before it is rewritten, however small its live list. */
const MIN_DEAD_TO_COMPACT = 8;
/**
 * Pending entries that make endDoc flush by itself, however long the batch: ~160 documents of
 * 100 distinct terms. The scratch (~0.5 MiB) then stays in a core's L2 cache; 4x more entries
 * (fewer touches per term, scratch past L2) measured slightly slower and noisier in the ingest
 * benchmark.
 */
const MAX_PENDING = 1 << 14;

export class InvertedField implements TokenSink {
  readonly kind = 'inverted' as const;
  private dict = new TermTable();
  /** Term by id. */
  /** Term by id (a segment file's field makes these strings when first asked: a term lookup does not need them). */
  get terms(): string[] {
    return this.dict.terms;
  }
  termCount = 0;

  // ---- per term ----
  /** Live documents holding each term, but for late removals not yet settled: read through docFreqOf(). */
  private docFreq = new Int32Array(16);
  deadCount = new Int32Array(16);
  /** Documents removed without their terms, and per term how many of them its docFreq counts (see settle()). */
  private late: LateRemovals | null = null;
  /**
   * Term by id: its postings, read through postingsOf(): for a term in the pools a copy read from
   * them (undefined until read, and again once appended to); else its own array, made on first
   * use for a restored field.
   */
  postings: (Int32Array | undefined)[] = [];
  postingsLength = new Int32Array(16);
  /** Term by id: the per-block bounds of its postings (blockBoundsOf()), dropped whenever they change. */
  private bounds: (BlockBounds | undefined)[] = [];
  /** Term by id: its positions, read through positionsOf() (kept as postings are). */
  positions: (Int32Array | undefined)[] = [];
  /** A restored field's postings and positions, flat or packed, made into per-term arrays on first use (then kept in postings/positions). */
  private restored: RestoredPostings | null = null;
  positionsLength = new Int32Array(16);
  /** Postings of the terms being added to, by term id (postingLists.has(t) says a term is in the pools). */
  private postingLists = new SlicePool();
  /** Their positions (text fields), by term id. */
  private positionLists = new SlicePool();

  // ---- per document ----
  /** Tokens (text) or values (keyword) of this field in each document; 0 = absent. */
  lengths = new Int32Array(0);
  /** Keyword sort values: term id of the least and greatest value of each document, -1 = none. */
  minValue = EMPTY;
  maxValue = EMPTY;

  /** Live documents with at least one token in the field (BM25's N for this field). */
  docCount = 0;
  /** Tokens of the field over the live documents. */
  sumLength = 0;

  private sortedCache: Int32Array | null = null;
  private rankCache: Int32Array | null = null;

  // ---- one document being built ----
  private generation = 0;
  private stamp = new Int32Array(16);
  private localSlot = new Int32Array(16);
  private nLocal = 0;
  private localTerm = new Int32Array(64);
  private localTf = new Int32Array(64);
  private localHead = new Int32Array(64);
  private localTail = new Int32Array(64);
  private nPos = 0;
  private posNext = new Int32Array(256);
  private posValue = new Int32Array(256);
  private tokens = 0;

  // ---- entries waiting for flush(), in document order (scratch: small until used, see trim()) ----
  private nPending = 0;
  private pendTerm = EMPTY;
  private pendDoc = EMPTY;
  private pendTf = EMPTY;
  /** Start of each entry's positions in pendPos (text fields only). */
  private pendPosStart = EMPTY;
  private nPendPos = 0;
  private pendPos = EMPTY;
  /** Per term: its pending entries (then, in flush, the end of its run in `order`). */
  private termPending = new Int32Array(16);
  /** Terms with pending entries, in order of first appearance. */
  private touched = new Int32Array(16);
  private nTouched = 0;
  private order = EMPTY;
  /** One term's postings and positions while flush() appends them. */
  private run = EMPTY;
  private runPos = EMPTY;

  constructor(
    readonly key: string,
    readonly slot: number,
    /** Text fields keep positions (phrases); keyword fields keep sort values instead. */
    readonly withPositions: boolean,
  ) {
    if (!withPositions) {
      this.minValue = new Int32Array(0);
      this.maxValue = new Int32Array(0);
    }
  }

  /** Term `t`'s postings ([doc, tf, ...], postingsLength[t] of them in use). */
  postingsOf(t: number): Int32Array {
    return (this.postings[t] ??= this.postingLists.has(t) ? this.postingLists.read(t, this.postingsLength[t]) : this.restored!.postings(t));
  }

  /** Term `t`'s positions (text fields; positionsLength[t] in use). */
  positionsOf(t: number): Int32Array {
    if (!this.withPositions) return EMPTY;
    return (this.positions[t] ??= this.postingLists.has(t) ? this.positionLists.read(t, this.positionsLength[t]) : this.restored!.positions(t));
  }

  /** Term `t`'s postings' block bounds (top-union.ts), made on first use and kept until its postings change. */
  blockBoundsOf(t: number): BlockBounds {
    return (this.bounds[t] ??= blockBounds(this.postingsOf(t), this.postingsLength[t], this.lengths));
  }

  termId(term: string): number {
    return this.dict.get(term);
  }

  lengthOf(doc: number): number {
    return doc < this.lengths.length ? this.lengths[doc] : 0;
  }

  /** Live documents holding term `t` (exact: late removals are settled first). */
  docFreqOf(t: number): number {
    const late = this.late;
    if (late !== null && t < late.seen.length && late.seen[t] < late.count) this.settle(t);
    return this.docFreq[t];
  }

  /**
   * Takes the late removals term `t` has not seen out of its docFreq: each is looked up in its
   * postings (which still hold them: a term is rewritten only once settled), or, when they
   * outnumber its postings, each posting among them (sorted once for every term that reads them).
   */
  private settle(t: number): void {
    const late = this.late!;
    const from = late.seen[t];
    late.seen[t] = late.count;
    const p = this.postingsOf(t);
    const pairs = this.postingsLength[t] >> 1;
    let found = 0;
    if (late.count - from <= pairs) {
      for (let k = from; k < late.count; k++) if (findDoc(p, 2, pairs, late.docs[k]) >= 0) found++;
    } else {
      const sorted = sortedLate(late, from);
      for (let i = 0; i < pairs; i++) if (findDoc(sorted, 1, sorted.length, p[2 * i]) >= 0) found++;
    }
    this.docFreq[t] -= found;
    this.deadCount[t] += found;
  }

  // ---- write path ----

  beginDoc(): void {
    // A restored field starts without the write path's per-term scratch (most never take a document).
    if (this.stamp.length < this.docFreq.length) {
      this.stamp = grow(this.stamp, this.docFreq.length);
      this.localSlot = grow(this.localSlot, this.docFreq.length);
      this.termPending = grow(this.termPending, this.docFreq.length);
    }
    this.generation++;
    if (this.generation === 0x7fffffff) {
      this.stamp.fill(0);
      this.generation = 1;
    }
    this.nLocal = 0;
    this.nPos = 0;
    this.tokens = 0;
  }

  /** A whole value of a keyword field. */
  value(value: string): void {
    this.token(value, 0, value.length, hashRange(value, 0, value.length), 0, exactKey(value, 0, value.length));
  }

  /** A token of a text value (TokenSink): text[start, end). */
  token(text: string, start: number, end: number, hash: number, position: number, key: number): void {
    let id = this.dict.find(text, start, end, hash, key);
    if (id < 0) id = this.newTerm(text, start, end, hash, key);
    let s: number;
    if (this.stamp[id] === this.generation) {
      s = this.localSlot[id];
      this.localTf[s]++;
    } else {
      s = this.nLocal++;
      if (s === this.localTerm.length) this.growLocal();
      this.stamp[id] = this.generation;
      this.localSlot[id] = s;
      this.localTerm[s] = id;
      this.localTf[s] = 1;
      this.localHead[s] = -1;
    }
    if (this.withPositions) {
      const k = this.nPos++;
      if (k === this.posValue.length) {
        this.posValue = grow(this.posValue, k * 2);
        this.posNext = grow(this.posNext, k * 2);
      }
      this.posValue[k] = position;
      this.posNext[k] = -1;
      if (this.localHead[s] < 0) this.localHead[s] = k;
      else this.posNext[this.localTail[s]] = k;
      this.localTail[s] = k;
    }
    this.tokens++;
  }

  /**
   * Records the document built since beginDoc (no-op if it had no tokens): its statistics at once,
   * its postings as pending entries that flush() appends.
   */
  endDoc(doc: number, forward: ForwardSink): void {
    const n = this.nLocal;
    if (n === 0) return;
    if (doc >= this.lengths.length) this.growDocs(doc);
    this.lengths[doc] = this.tokens;
    this.docCount++;
    this.sumLength += this.tokens;
    forward.beginField(this.slot, n);
    if (this.nPending + n > this.pendTerm.length) this.growPending(this.nPending + n);
    if (this.withPositions && this.nPendPos + this.tokens > this.pendPos.length) {
      this.pendPos = grow(this.pendPos, Math.max(this.pendPos.length * 2, this.nPendPos + this.tokens, 256));
    }
    let minId = -1;
    let maxId = -1;
    let e = this.nPending;
    let q = this.nPendPos;
    for (let s = 0; s < n; s++) {
      const id = this.localTerm[s];
      const tf = this.localTf[s];
      this.pendTerm[e] = id;
      this.pendDoc[e] = doc;
      this.pendTf[e] = tf;
      if (this.termPending[id]++ === 0) {
        if (this.nTouched === this.touched.length) this.touched = grow(this.touched, this.nTouched * 2);
        this.touched[this.nTouched++] = id;
      }
      if (this.withPositions) {
        this.pendPosStart[e] = q;
        for (let k = this.localHead[s]; k >= 0; k = this.posNext[k]) this.pendPos[q++] = this.posValue[k];
      } else {
        const t = this.terms[id];
        if (minId < 0 || t < this.terms[minId]) minId = id;
        if (maxId < 0 || t > this.terms[maxId]) maxId = id;
      }
      this.docFreq[id]++;
      forward.termId(id);
      e++;
    }
    this.nPending = e;
    this.nPendPos = q;
    if (!this.withPositions) {
      this.minValue[doc] = minId;
      this.maxValue[doc] = maxId;
    }
    if (e >= MAX_PENDING) this.flush();
  }

  /** Appends the pending entries to the postings, term by term (documents stay in increasing order). */
  flush(): void {
    const n = this.nPending;
    if (n === 0) return;
    const touched = this.touched;
    const nTouched = this.nTouched;
    const count = this.termPending;
    // Counting sort of the entries by term, stable: each term's run keeps document order.
    let end = 0;
    for (let i = 0; i < nTouched; i++) {
      const t = touched[i];
      end += count[t];
      count[t] = end - count[t];
    }
    if (this.order.length < n) this.order = new Int32Array(this.pendTerm.length);
    const order = this.order;
    for (let e = 0; e < n; e++) order[count[this.pendTerm[e]]++] = e;
    // Each term's run is gathered here, then appended to its lists in one go.
    if (this.run.length < 2 * n) this.run = new Int32Array(2 * this.pendTerm.length);
    if (this.withPositions && this.runPos.length < this.nPendPos) this.runPos = new Int32Array(this.pendPos.length);
    const run = this.run;
    const runPos = this.runPos;
    let k = 0;
    for (let i = 0; i < nTouched; i++) {
      const t = touched[i];
      const stop = count[t];
      if (!this.postingLists.has(t)) this.moveToPools(t);
      let len = 0;
      let plen = 0;
      for (; k < stop; k++) {
        const e = order[k];
        const tf = this.pendTf[e];
        run[len++] = this.pendDoc[e];
        run[len++] = tf;
        if (this.withPositions) {
          const from = this.pendPosStart[e];
          for (let j = 0; j < tf; j++) runPos[plen++] = this.pendPos[from + j];
        }
      }
      this.postingLists.append(t, run, 0, len);
      this.postingsLength[t] += len;
      // A copy read before is stale from here on.
      this.postings[t] = undefined;
      this.bounds[t] = undefined;
      if (this.withPositions) {
        this.positionLists.append(t, runPos, 0, plen);
        this.positionsLength[t] += plen;
        this.positions[t] = undefined;
      }
      count[t] = 0;
    }
    this.nPending = 0;
    this.nPendPos = 0;
    this.nTouched = 0;
  }

  /** Copies into the pools what term `t` holds in arrays (a restored term, or one rewritten since), so it can be appended to. */
  private moveToPools(t: number): void {
    // Both read before either list starts: postingLists.has(t) makes positionsOf read the pool.
    const len = this.postingsLength[t];
    const p = this.postingsOf(t);
    const plen = this.positionsLength[t];
    const pp = this.positionsOf(t);
    if (len > 0) this.postingLists.append(t, p, 0, len);
    if (plen > 0) this.positionLists.append(t, pp, 0, plen);
  }

  /** Undoes a document whose term ids are `fwd[start .. start+count)`; `live[doc]` is already 0. */
  removeDoc(doc: number, fwd: Int32Array, start: number, count: number, live: Uint8Array): void {
    // Its own entries must be in the postings so that deadCount counts what they hold; removing
    // an older document leaves the batch pending (pending entries are all of newer documents).
    if (this.nPending > 0 && doc >= this.pendDoc[0]) this.flush();
    this.removeStats(doc);
    for (let k = start; k < start + count; k++) {
      const id = fwd[k];
      // Rewriting the term drops every dead posting: the late ones must be counted first.
      this.docFreqOf(id);
      this.docFreq[id]--;
      const dead = ++this.deadCount[id];
      if (dead >= MIN_DEAD_TO_COMPACT && dead > this.docFreq[id]) this.compactTerm(id, live);
    }
  }

  /** Undoes a document whose terms are not known (a restored one); `live[doc]` is already 0. Its terms' docFreq follows when each is read. */
  removeLateDoc(doc: number): void {
    // A document without tokens in this field has no postings in it.
    if (this.lengthOf(doc) === 0) return;
    this.removeStats(doc);
    const late = (this.late ??= { docs: new Int32Array(64), count: 0, seen: new Int32Array(this.termCount) });
    if (late.count === late.docs.length) late.docs = grow(late.docs, late.count * 2);
    late.docs[late.count++] = doc;
  }

  /** Takes document `doc` out of the field's per-document statistics and sort values. */
  private removeStats(doc: number): void {
    const len = this.lengthOf(doc);
    if (len > 0) {
      this.docCount--;
      this.sumLength -= len;
      this.lengths[doc] = 0;
    }
    if (!this.withPositions && doc < this.minValue.length) {
      this.minValue[doc] = -1;
      this.maxValue[doc] = -1;
    }
  }

  /** Drops the postings of deleted documents from one term (whose arrays are then its own, out of the pools). */
  private compactTerm(id: number, live: Uint8Array): void {
    const p = this.postingsOf(id);
    const len = this.postingsLength[id];
    const pp = this.positionsOf(id);
    // A term in the pools was read into fresh arrays, which become its postings: its slices stay
    // unused until the pools go (they held more dead entries than live ones).
    this.postingLists.drop(id);
    this.positionLists.drop(id);
    let w = 0;
    let pr = 0;
    let pw = 0;
    for (let r = 0; r < len; r += 2) {
      const doc = p[r];
      const tf = p[r + 1];
      if (live[doc] === 1) {
        p[w] = doc;
        p[w + 1] = tf;
        w += 2;
        if (this.withPositions) {
          if (pw !== pr) pp.copyWithin(pw, pr, pr + tf);
          pw += tf;
        }
      }
      pr += tf;
    }
    this.postingsLength[id] = w;
    this.bounds[id] = undefined;
    if (w * 4 < p.length) this.postings[id] = p.slice(0, Math.max(4, w * 2));
    if (this.withPositions) {
      this.positionsLength[id] = pw;
      if (pw * 4 < pp.length) this.positions[id] = pp.slice(0, Math.max(4, pw * 2));
    }
    this.deadCount[id] = 0;
  }

  /**
   * Renumbers documents (`newDoc[old]`, -1 = deleted; increasing, so lists stay sorted) and
   * drops terms no live document holds; returns the new id of each old term id (-1 = dropped)
   * so the forward index can follow. Works in place: new numbers and ids are never greater than
   * old ones, so every write lands on an entry already read.
   */
  renumber(newDoc: Int32Array, newMaxDoc: number): Int32Array {
    this.flush();
    this.restored?.readAll();
    const count = this.termCount;
    const termMap = new Int32Array(count).fill(-1);
    let next = 0;
    for (let t = 0; t < count; t++) {
      const p = this.postingsOf(t);
      const len = this.postingsLength[t];
      const pp = this.positionsOf(t);
      let w = 0;
      let pr = 0;
      let pw = 0;
      for (let r = 0; r < len; r += 2) {
        const nd = newDoc[p[r]];
        const tf = p[r + 1];
        if (nd >= 0) {
          p[w] = nd;
          p[w + 1] = tf;
          w += 2;
          if (this.withPositions && pw !== pr) pp.copyWithin(pw, pr, pr + tf);
          pw += tf;
        }
        pr += tf;
      }
      // Kept when a live document holds it; its live postings are its docFreq (late removals included).
      if (w === 0) continue;
      const id = next++;
      termMap[t] = id;
      if (id !== t) {
        this.postings[id] = p;
        this.positions[id] = pp;
      }
      this.docFreq[id] = w >> 1;
      this.postingsLength[id] = w;
      this.positionsLength[id] = this.withPositions ? pw : 0;
      this.deadCount[id] = 0;
    }
    this.dict.retain(termMap);
    // Every kept term is in postings/positions now, under its new id: the restored source and the
    // pools (by old id) are stale.
    this.restored = null;
    this.late = null;
    this.postingLists = new SlicePool();
    this.positionLists = new SlicePool();
    this.termCount = next;
    this.postings.length = next;
    this.positions.length = next;
    this.bounds = [];
    this.docFreq.fill(0, next);
    this.deadCount.fill(0, next);
    this.postingsLength.fill(0, next);
    this.positionsLength.fill(0, next);

    const limit = Math.min(this.lengths.length, newDoc.length);
    for (let d = 0; d < limit; d++) {
      const nd = newDoc[d];
      if (nd < 0) continue;
      this.lengths[nd] = this.lengths[d];
      if (!this.withPositions) {
        const lo = this.minValue[d];
        const hi = this.maxValue[d];
        this.minValue[nd] = lo < 0 ? -1 : termMap[lo];
        this.maxValue[nd] = hi < 0 ? -1 : termMap[hi];
      }
    }
    this.lengths.fill(0, Math.min(newMaxDoc, this.lengths.length));
    if (!this.withPositions) {
      this.minValue.fill(-1, Math.min(newMaxDoc, this.minValue.length));
      this.maxValue.fill(-1, Math.min(newMaxDoc, this.maxValue.length));
    }
    this.sortedCache = null;
    this.rankCache = null;
    return termMap;
  }

  /**
   * Gives every term exact-size arrays and drops the pools (whose pages have spare room and the
   * unused slices of terms rewritten by deletes), as an index that takes no more adds should.
   */
  trim(): void {
    this.flush();
    this.releaseScratch();
    for (let id = 0; id < this.termCount; id++) {
      // A term in the pools is read into exact-size arrays; one with its own arrays may have room left by compactTerm.
      const len = this.postingsLength[id];
      const p = this.postingsOf(id);
      if (p.length > len + 2) this.postings[id] = p.slice(0, Math.max(2, len));
      if (this.withPositions) {
        const plen = this.positionsLength[id];
        const pp = this.positionsOf(id);
        if (pp.length > plen + 2) this.positions[id] = pp.slice(0, Math.max(2, plen));
      }
    }
    this.postingLists = new SlicePool();
    this.positionLists = new SlicePool();
  }

  // ---- persistence (segment-file.ts) ----

  /** Everything a restore needs, as compact typed arrays (after flush(); postings of deleted documents included); `live` marks the live documents. */
  exportState(maxDoc: number, live: Uint8Array): InvertedState {
    this.flush();
    const n = this.termCount;
    const postingStarts = new Int32Array(n + 1);
    const positionStarts = new Int32Array(n + 1);
    for (let t = 0; t < n; t++) {
      postingStarts[t + 1] = postingStarts[t] + this.postingsLength[t];
      positionStarts[t + 1] = positionStarts[t] + (this.withPositions ? this.positionsLength[t] : 0);
    }
    const postings = new Int32Array(postingStarts[n]);
    const positions = new Int32Array(positionStarts[n]);
    // A term never read is decoded for the copy only, not kept: exporting a restored segment (to
    // merge it) must not pull all of it onto the heap. A term in the pools is copied from them.
    this.restored?.readAll();
    for (let t = 0; t < n; t++) {
      if (this.postingLists.has(t)) {
        this.postingLists.copyTo(t, this.postingsLength[t], postings, postingStarts[t]);
        if (this.withPositions) this.positionLists.copyTo(t, this.positionsLength[t], positions, positionStarts[t]);
        continue;
      }
      // A term not read since the restore is decoded straight into the copy, not into an array of its own first.
      const p = this.postings[t];
      if (p !== undefined) postings.set(p.subarray(0, this.postingsLength[t]), postingStarts[t]);
      else this.restored!.postings(t, postings, postingStarts[t]);
      if (!this.withPositions) continue;
      const pp = this.positions[t];
      if (pp !== undefined) positions.set(pp.subarray(0, this.positionsLength[t]), positionStarts[t]);
      else this.restored!.positions(t, positions, positionStarts[t]);
    }
    const docFreq = this.docFreq.slice(0, n);
    const deadCount = this.deadCount.slice(0, n);
    // Late removals are counted from the copy: one walk, where settling every term would look each one up again.
    if (this.late !== null) {
      for (let t = 0; t < n; t++) {
        let alive = 0;
        for (let r = postingStarts[t]; r < postingStarts[t + 1]; r += 2) alive += live[postings[r]];
        docFreq[t] = alive;
        deadCount[t] = ((postingStarts[t + 1] - postingStarts[t]) >> 1) - alive;
      }
    }
    return {
      terms: this.terms.slice(0, n),
      docFreq,
      deadCount,
      postingStarts,
      postings,
      positionStarts,
      positions,
      lengths: fit(this.lengths, maxDoc, 0),
      minValue: this.withPositions ? null : fit(this.minValue, maxDoc, -1),
      maxValue: this.withPositions ? null : fit(this.maxValue, maxDoc, -1),
      docCount: this.docCount,
      sumLength: this.sumLength,
    };
  }

  /** A field holding `state` (its arrays are used as they are, not copied: views into a segment file's buffer; packed postings are decoded per term when first read). */
  static restore(key: string, slot: number, withPositions: boolean, state: InvertedState | PackedInvertedState): InvertedField {
    const f = new InvertedField(key, slot, withPositions);
    // A segment file's dictionary is used as it is; a merge's terms are indexed at the first lookup.
    if (state.terms instanceof TermTable) f.dict = state.terms;
    else f.dict.adopt(state.terms);
    const n = f.dict.size;
    f.termCount = n;
    const cap = Math.max(16, n);
    f.docFreq = grow(state.docFreq, cap);
    f.deadCount = grow(state.deadCount, cap);
    f.postingsLength = new Int32Array(cap);
    f.positionsLength = new Int32Array(cap);
    f.stamp = f.localSlot = f.termPending = new Int32Array(0);
    // Views per term are made when a term is first read (most never are between two restarts).
    f.restored = 'packed' in state ? packedSource(state) : flatSource(state);
    f.postings = new Array<Int32Array | undefined>(n);
    f.positions = new Array<Int32Array | undefined>(n);
    for (let t = 0; t < n; t++) {
      f.postingsLength[t] = state.postingStarts[t + 1] - state.postingStarts[t];
      f.positionsLength[t] = withPositions ? state.positionStarts[t + 1] - state.positionStarts[t] : 0;
    }
    f.lengths = state.lengths;
    if (!withPositions) {
      f.minValue = state.minValue ?? new Int32Array(0);
      f.maxValue = state.maxValue ?? new Int32Array(0);
    }
    f.docCount = state.docCount;
    f.sumLength = state.sumLength;
    return f;
  }

  // ---- read path ----

  /** Term ids ordered by term (UTF-16 code units), for prefix and keyword range queries. */
  sortedTermIds(): Int32Array {
    if (this.sortedCache !== null && this.sortedCache.length === this.termCount) return this.sortedCache;
    const ids = Array.from({ length: this.termCount }, (_, i) => i);
    const terms = this.terms;
    ids.sort((a, b) => (terms[a] < terms[b] ? -1 : terms[a] > terms[b] ? 1 : 0));
    this.sortedCache = Int32Array.from(ids);
    this.rankCache = null;
    return this.sortedCache;
  }

  /** The rank of each term id in term order: sorting documents by rank sorts them by value. */
  termRanks(): Int32Array {
    const sorted = this.sortedTermIds();
    if (this.rankCache === null) {
      const ranks = new Int32Array(sorted.length);
      for (let r = 0; r < sorted.length; r++) ranks[sorted[r]] = r;
      this.rankCache = ranks;
    }
    return this.rankCache;
  }

  /** Index in sortedTermIds() of the first term >= `term` (or > `term` when `after`). */
  seek(term: string, after: boolean): number {
    const ids = this.sortedTermIds();
    let lo = 0;
    let hi = ids.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const t = this.terms[ids[mid]];
      if (t < term || (after && t === term)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  // ---- growth ----

  private newTerm(text: string, start: number, end: number, hash: number, key: number): number {
    const id = this.termCount++;
    if (id === this.docFreq.length) {
      const cap = id * 2;
      this.docFreq = grow(this.docFreq, cap);
      this.deadCount = grow(this.deadCount, cap);
      this.postingsLength = grow(this.postingsLength, cap);
      this.positionsLength = grow(this.positionsLength, cap);
      this.stamp = grow(this.stamp, cap);
      this.localSlot = grow(this.localSlot, cap);
      this.termPending = grow(this.termPending, cap);
    }
    // A copy, not a slice: V8 slices of 13+ characters keep the whole field value alive. A token
    // that is the whole value (a keyword value, or a one-word text) is that string itself.
    const term = start === 0 && end === text.length ? text : end - start >= 13 ? (' ' + text.slice(start, end)).slice(1) : text.slice(start, end);
    this.dict.add(term, hash, key);
    // Empty until flush() starts its lists in the pools.
    this.postings.push(EMPTY);
    this.positions.push(EMPTY);
    return id;
  }

  private growLocal(): void {
    const cap = this.localTerm.length * 2;
    this.localTerm = grow(this.localTerm, cap);
    this.localTf = grow(this.localTf, cap);
    this.localHead = grow(this.localHead, cap);
    this.localTail = grow(this.localTail, cap);
  }

  private growPending(min: number): void {
    const cap = Math.max(min, this.pendTerm.length * 2, 64);
    this.pendTerm = grow(this.pendTerm, cap);
    this.pendDoc = grow(this.pendDoc, cap);
    this.pendTf = grow(this.pendTf, cap);
    if (this.withPositions) this.pendPosStart = grow(this.pendPosStart, cap);
  }

  /** Drops the flush scratch (empty after a flush), which a bulk load may have grown large. */
  private releaseScratch(): void {
    this.pendTerm = this.pendDoc = this.pendTf = this.pendPosStart = this.pendPos = this.order = this.run = this.runPos = EMPTY;
    this.touched = new Int32Array(16);
  }

  private growDocs(doc: number): void {
    const cap = Math.max(doc + 1, this.lengths.length * 2, 1024);
    this.lengths = grow(this.lengths, cap);
    if (!this.withPositions) {
      const old = this.minValue.length;
      this.minValue = grow(this.minValue, cap);
      this.maxValue = grow(this.maxValue, cap);
      this.minValue.fill(-1, old);
      this.maxValue.fill(-1, old);
    }
  }
}

/** The persisted state of an InvertedField (per-term arrays by term id; per-document arrays of maxDoc entries). */
export interface InvertedState extends FlatPostings {
  readonly terms: readonly string[];
  readonly docFreq: Int32Array<ArrayBuffer>;
  readonly deadCount: Int32Array<ArrayBuffer>;
  readonly lengths: Int32Array<ArrayBuffer>;
  readonly minValue: Int32Array<ArrayBuffer> | null;
  readonly maxValue: Int32Array<ArrayBuffer> | null;
  readonly docCount: number;
  readonly sumLength: number;
}

/** A segment file's inverted field: its postings packed (postings-codec.ts), the rest as in InvertedState. */
export type PackedInvertedState = Omit<InvertedState, keyof FlatPostings | 'terms'> &
  PackedPostings & {
    /** The terms as a dictionary: a segment file's, ready for lookups (segment-file.ts). */
    readonly terms: readonly string[] | TermTable;
  };

/** Where a restored field's terms come from until they are first read. */
interface RestoredPostings {
  /** Term t's postings: a new array, or written into `out` from `from` on (and `out` returned). */
  postings(t: number, out?: Int32Array, from?: number): Int32Array;
  positions(t: number, out?: Int32Array, from?: number): Int32Array;
  /** About to read most terms (an export, a renumbering): bytes still in their file are read at once. */
  readAll(): void;
}

/** Views of one array each (a state merged in memory): a term costs a subarray. */
function flatSource(f: FlatPostings): RestoredPostings {
  return {
    postings: (t, out, from = 0) => copied(f.postings.subarray(f.postingStarts[t], f.postingStarts[t + 1]), out, from),
    positions: (t, out, from = 0) => copied(f.positions.subarray(f.positionStarts[t], f.positionStarts[t + 1]), out, from),
    readAll: () => undefined,
  };
}

/** Packed bytes (a segment file): a term is decoded when first read. */
function packedSource(p: PackedPostings): RestoredPostings {
  return {
    postings: (t, out, from) => unpackPostings(p, t, out, from),
    positions: (t, out, from) => unpackPositions(p, t, out, from),
    readAll: () => {
      if (!(p.packed instanceof Uint8Array)) p.packed.load();
    },
  };
}

/** `view` itself, or copied into `out` from `from` on (and `out` returned). */
function copied(view: Int32Array, out: Int32Array | undefined, from: number): Int32Array {
  if (out === undefined) return view;
  out.set(view, from);
  return out;
}

/** `a` as exactly `n` entries: cut, or extended with `fill`. */
export function fit(a: Int32Array, n: number, fill: number): Int32Array<ArrayBuffer> {
  if (a.length >= n) return a.slice(0, n);
  const b = new Int32Array(n).fill(fill, a.length);
  b.set(a);
  return b;
}

/** A copy of `a` with room for `capacity` entries (never fewer than `a` holds). */
export function grow(a: Int32Array, capacity: number): Int32Array<ArrayBuffer> {
  const b = new Int32Array(Math.max(capacity, a.length));
  b.set(a);
  return b;
}

/** Documents removed late: the first `count` of `docs`, in order of removal; `seen[t]` of them are out of term t's docFreq. */
interface LateRemovals {
  docs: Int32Array;
  count: number;
  readonly seen: Int32Array;
  /** docs[sortedFrom, count) sorted, for the terms that read them all from there. */
  sorted?: { readonly from: number; readonly count: number; readonly docs: Int32Array };
}

/** The late removals from `from` on, sorted (kept for the next term that reads the same ones). */
function sortedLate(late: LateRemovals, from: number): Int32Array {
  const s = late.sorted;
  if (s !== undefined && s.from === from && s.count === late.count) return s.docs;
  const docs = late.docs.slice(from, late.count).sort();
  late.sorted = { from, count: late.count, docs };
  return docs;
}

/** Index of the entry holding `doc` in a[0], a[stride], ... (n entries, increasing), or -1. */
function findDoc(a: Int32Array, stride: number, n: number, doc: number): number {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const d = a[mid * stride];
    if (d === doc) return mid;
    if (d < doc) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}
