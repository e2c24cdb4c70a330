// Runs a parsed query over one index: every clause yields its matching documents in increasing
// document order with their scores; conjunctions, exclusions and filters merge those lists,
// disjunctions (OR, unfielded words over several fields) sum into a dense accumulator. Scores are
// summed in the order the clauses appear in the query and fields in name order (never in an
// order that depends on a shard's data), so every shard adds the same numbers in the same order
// as a single index would, and a sharded collection scores bit for bit like one index.

import type { InvertedField } from './inverted-field.js';
import type { NumericField } from './numeric-field.js';
import type { BoolQuery, NumberRangeQuery, KeywordRangeQuery, Query } from './query.js';
import { addOptional, intersect, NO_MATCHES, subtract, type Accumulator, type AccumulatorPool, type Matches } from './matches.js';
import { bm25, bm25Idf, type StatsLookup } from './stats.js';

/** What the executor reads of an index. */
export interface IndexView {
  /** One past the greatest document number in use. */
  readonly maxDoc: number;
  /** 1 for a live document number, 0 for a deleted one. */
  readonly live: Uint8Array;
  inverted(key: string): InvertedField | undefined;
  numeric(key: string): NumericField | undefined;
  /** The fields unfielded words search: every text field, ordered by name. */
  defaultTextFields(): readonly InvertedField[];
  docOf(id: string): number;
  /** The schema's boost for a field key (1 when none). */
  schemaBoost(key: string): number;
  /** Scratch score accumulators, reused across queries. */
  readonly accumulators: AccumulatorPool;
}

export class QueryExecutor {
  constructor(
    private readonly ix: IndexView,
    private readonly stats: StatsLookup | null,
    private readonly boosts: Readonly<Record<string, number>> | undefined,
  ) {}

  run(q: Query, scoring: boolean): Matches {
    switch (q.kind) {
      case 'none':
        return NO_MATCHES;
      case 'all':
        return this.all(q.boost, scoring);
      case 'term':
        if (q.field === null) return this.disjunction([q], scoring);
        return this.perField(q.field, scoring, (f, s) => this.term(f, q.term, q.boost * this.fieldBoost(f.key), s));
      case 'phrase':
        if (q.field === null) return this.disjunction([q], scoring);
        return this.perField(q.field, scoring, (f, s) => this.phrase(f, q.terms, q.positions, q.boost * this.fieldBoost(f.key), s));
      case 'prefix':
        if (q.field === null) return this.disjunction([q], scoring);
        return this.perField(q.field, scoring, (f, s) => this.prefix(f, q.prefix, q.boost * this.fieldBoost(f.key), s));
      case 'range':
        return q.target === 'number' ? this.numberRange(q, scoring) : this.keywordRange(q, scoring);
      case 'exists':
        return this.exists(q.target, q.field, q.boost, scoring);
      case 'ids':
        return this.ids(q.ids, q.boost, scoring);
      case 'bool':
        return this.bool(q, scoring);
    }
  }

  private fieldBoost(key: string): number {
    const b = this.boosts;
    if (b !== undefined && Object.hasOwn(b, key)) return b[key];
    return this.ix.schemaBoost(key);
  }

  /** A clause on one field. */
  private perField(field: string, scoring: boolean, fn: (f: InvertedField, scoring: boolean) => Matches): Matches {
    const f = this.ix.inverted(field);
    return f === undefined ? NO_MATCHES : fn(f, scoring);
  }

  /**
   * Documents matching any of `clauses`, scores summed clause by clause (and, for unfielded
   * clauses, field by field in name order) into one dense accumulator: no intermediate lists.
   * A field a shard lacks adds nothing, so every shard sums the same numbers in the same order.
   */
  private disjunction(clauses: readonly Query[], scoring: boolean): Matches {
    const acc = this.ix.accumulators.acquire(this.ix.maxDoc);
    try {
      for (const c of clauses) {
        if (c.kind === 'none') continue;
        if (c.kind === 'term') {
          const fields = c.field === null ? this.ix.defaultTextFields() : [this.ix.inverted(c.field)];
          for (const f of fields) if (f !== undefined) this.termInto(acc, f, c.term, c.boost * this.fieldBoost(f.key), scoring);
        } else if (c.kind === 'phrase' && c.field === null) {
          for (const f of this.ix.defaultTextFields()) acc.addAll(this.phrase(f, c.terms, c.positions, c.boost * this.fieldBoost(f.key), scoring), scoring);
        } else if (c.kind === 'prefix' && c.field === null) {
          for (const f of this.ix.defaultTextFields()) acc.addAll(this.prefix(f, c.prefix, c.boost * this.fieldBoost(f.key), scoring), scoring);
        } else {
          acc.addAll(this.run(c, scoring), scoring);
        }
      }
      return acc.drain(this.ix.maxDoc, scoring);
    } finally {
      this.ix.accumulators.release(acc);
    }
  }

  /** A term's postings streamed into an accumulator. */
  private termInto(acc: Accumulator, f: InvertedField, term: string, boost: number, scoring: boolean): void {
    const id = f.termId(term);
    if (id < 0 || f.docFreq[id] === 0) return;
    const p = f.postingsOf(id);
    const len = f.postingsLength[id];
    const live = this.ix.live;
    const marks = acc.marks;
    const sums = acc.scores;
    const touched = acc.touched;
    let count = acc.count;
    if (!scoring) {
      for (let i = 0; i < len; i += 2) {
        const d = p[i];
        if (live[d] !== 1 || marks[d] === 1) continue;
        marks[d] = 1;
        touched[count++] = d;
      }
      acc.count = count;
      return;
    }
    const { docCount, avgdl } = this.fieldStats(f);
    const idf = bm25Idf(docCount, this.docFreq(f, term, id));
    const lengths = f.lengths;
    for (let i = 0; i < len; i += 2) {
      const d = p[i];
      if (live[d] !== 1) continue;
      const s = boost * bm25(p[i + 1], lengths[d], avgdl, idf);
      if (marks[d] === 0) {
        marks[d] = 1;
        sums[d] = s;
        touched[count++] = d;
      } else {
        sums[d] += s;
      }
    }
    acc.count = count;
  }

  /** N and avgdl of a field: the collection's when global statistics are given. */
  private fieldStats(f: InvertedField): { docCount: number; avgdl: number } {
    const g = this.stats?.field(f.key);
    if (g !== undefined) return { docCount: g.docCount, avgdl: g.sumLength / g.docCount };
    return { docCount: f.docCount, avgdl: f.sumLength / f.docCount };
  }

  private docFreq(f: InvertedField, term: string, id: number): number {
    return this.stats?.docFreq(f.key, term) ?? f.docFreq[id];
  }

  private term(f: InvertedField, term: string, boost: number, scoring: boolean): Matches {
    const id = f.termId(term);
    if (id < 0 || f.docFreq[id] === 0) return NO_MATCHES;
    const p = f.postingsOf(id);
    const len = f.postingsLength[id];
    const live = this.ix.live;
    const size = f.docFreq[id];
    const docs = new Int32Array(size);
    let k = 0;
    if (!scoring) {
      for (let i = 0; i < len; i += 2) if (live[p[i]] === 1) docs[k++] = p[i];
      return { docs, scores: null, size: k };
    }
    const { docCount, avgdl } = this.fieldStats(f);
    const idf = bm25Idf(docCount, this.docFreq(f, term, id));
    const lengths = f.lengths;
    const scores = new Float64Array(size);
    for (let i = 0; i < len; i += 2) {
      const d = p[i];
      if (live[d] !== 1) continue;
      docs[k] = d;
      scores[k] = boost * bm25(p[i + 1], lengths[d], avgdl, idf);
      k++;
    }
    return { docs, scores, size: k };
  }

  /** Exact phrase: tf is the number of positions where every term sits at its offset. */
  private phrase(f: InvertedField, terms: readonly string[], offsets: readonly number[], boost: number, scoring: boolean): Matches {
    const m = terms.length;
    const ids = new Int32Array(m);
    let lead = 0;
    for (let j = 0; j < m; j++) {
      ids[j] = f.termId(terms[j]);
      if (ids[j] < 0 || f.docFreq[ids[j]] === 0) return NO_MATCHES;
      if (f.docFreq[ids[j]] < f.docFreq[ids[lead]]) lead = j;
    }
    const live = this.ix.live;
    const ps: Int32Array[] = [];
    const pps: Int32Array[] = [];
    const lens = new Int32Array(m);
    const offs = Int32Array.from(offsets);
    for (let j = 0; j < m; j++) {
      ps.push(f.postingsOf(ids[j]));
      pps.push(f.positionsOf(ids[j]));
      lens[j] = f.postingsLength[ids[j]];
    }
    const at = new Int32Array(m); // each term's current posting (index in ints)
    const posAt = new Int32Array(m); // where that posting's positions start
    const posEnd = new Int32Array(m);
    const ptr = new Int32Array(m);
    const cap = f.docFreq[ids[lead]];
    const docs = new Int32Array(cap);
    const freqs = new Int32Array(cap);
    let k = 0;
    const lp = ps[lead];
    const llen = lens[lead];
    outer: for (let i = 0; i < llen; i += 2) {
      const d = lp[i];
      if (live[d] !== 1) continue;
      // Every cursor (the lead's too: its positions are needed) moves to d.
      for (let j = 0; j < m; j++) {
        const p = ps[j];
        const len = lens[j];
        let a = at[j];
        let pa = posAt[j];
        while (a < len && p[a] < d) {
          pa += p[a + 1];
          a += 2;
        }
        at[j] = a;
        posAt[j] = pa;
        if (a >= len) break outer;
        if (p[a] !== d) continue outer;
        posEnd[j] = pa + p[a + 1];
        ptr[j] = pa;
      }
      // Count the first term's positions where every other term sits at its offset.
      const p0 = pps[0];
      let freq = 0;
      scan: for (let q = posAt[0]; q < posEnd[0]; q++) {
        const base = p0[q] - offs[0];
        for (let j = 1; j < m; j++) {
          const pj = pps[j];
          const end = posEnd[j];
          const target = base + offs[j];
          let r = ptr[j];
          while (r < end && pj[r] < target) r++;
          ptr[j] = r;
          if (r >= end) break scan;
          if (pj[r] !== target) continue scan;
        }
        freq++;
      }
      if (freq > 0) {
        docs[k] = d;
        freqs[k] = freq;
        k++;
      }
    }
    if (!scoring) return { docs, scores: null, size: k };
    const { docCount, avgdl } = this.fieldStats(f);
    // Lucene's PhraseWeight: the idf of a phrase is the sum of its terms' idfs.
    let idf = 0;
    for (let j = 0; j < m; j++) idf += bm25Idf(docCount, this.docFreq(f, terms[j], ids[j]));
    const scores = new Float64Array(k);
    const lengths = f.lengths;
    for (let i = 0; i < k; i++) scores[i] = boost * bm25(freqs[i], lengths[docs[i]], avgdl, idf);
    return { docs, scores, size: k };
  }

  private prefix(f: InvertedField, prefix: string, boost: number, scoring: boolean): Matches {
    const sorted = f.sortedTermIds();
    const marks = new Uint8Array(this.ix.maxDoc);
    let any = false;
    for (let i = f.seek(prefix, false); i < sorted.length; i++) {
      const id = sorted[i];
      if (!f.terms[id].startsWith(prefix)) break;
      any = markPostings(f, id, marks) || any;
    }
    return any ? this.collect(marks, boost, scoring) : NO_MATCHES;
  }

  private keywordRange(q: KeywordRangeQuery, scoring: boolean): Matches {
    const f = this.ix.inverted(q.field);
    if (f === undefined) return NO_MATCHES;
    const sorted = f.sortedTermIds();
    const marks = new Uint8Array(this.ix.maxDoc);
    let any = false;
    const from = q.lower === null ? 0 : f.seek(q.lower, !q.includeLower);
    for (let i = from; i < sorted.length; i++) {
      const id = sorted[i];
      const t = f.terms[id];
      if (q.upper !== null && (t > q.upper || (t === q.upper && !q.includeUpper))) break;
      any = markPostings(f, id, marks) || any;
    }
    return any ? this.collect(marks, q.boost * this.fieldBoost(q.field), scoring) : NO_MATCHES;
  }

  private numberRange(q: NumberRangeQuery, scoring: boolean): Matches {
    const f = this.ix.numeric(q.field);
    if (f === undefined || f.docCount === 0) return NO_MATCHES;
    const lo = q.lower ?? -Infinity;
    const hi = q.upper ?? Infinity;
    const incL = q.includeLower || q.lower === null;
    const incU = q.includeUpper || q.upper === null;
    const values = f.values;
    const live = this.ix.live;
    const multi = f.multi;
    const n = Math.min(values.length, this.ix.maxDoc);
    const docs = new Int32Array(f.docCount);
    let k = 0;
    for (let d = 0; d < n; d++) {
      const v = values[d];
      if (v !== v || live[d] !== 1) continue;
      const all = multi === null ? undefined : multi.get(d);
      if (all === undefined) {
        if ((incL ? v >= lo : v > lo) && (incU ? v <= hi : v < hi)) docs[k++] = d;
      } else {
        for (let i = 0; i < all.length; i++) {
          const w = all[i];
          if ((incL ? w >= lo : w > lo) && (incU ? w <= hi : w < hi)) {
            docs[k++] = d;
            break;
          }
        }
      }
    }
    return constant(docs, k, q.boost * this.fieldBoost(q.field), scoring);
  }

  private exists(target: 'inverted' | 'number', field: string, boost: number, scoring: boolean): Matches {
    const live = this.ix.live;
    if (target === 'number') {
      const f = this.ix.numeric(field);
      if (f === undefined || f.docCount === 0) return NO_MATCHES;
      const docs = new Int32Array(f.docCount);
      let k = 0;
      const n = Math.min(f.values.length, this.ix.maxDoc);
      for (let d = 0; d < n; d++) if (f.values[d] === f.values[d] && live[d] === 1) docs[k++] = d;
      return constant(docs, k, boost * this.fieldBoost(field), scoring);
    }
    const f = this.ix.inverted(field);
    if (f === undefined || f.docCount === 0) return NO_MATCHES;
    const docs = new Int32Array(f.docCount);
    let k = 0;
    const n = Math.min(f.lengths.length, this.ix.maxDoc);
    for (let d = 0; d < n; d++) if (f.lengths[d] > 0 && live[d] === 1) docs[k++] = d;
    return constant(docs, k, boost * this.fieldBoost(field), scoring);
  }

  private all(boost: number, scoring: boolean): Matches {
    const live = this.ix.live;
    const n = this.ix.maxDoc;
    let count = 0;
    for (let d = 0; d < n; d++) count += live[d];
    const docs = new Int32Array(count);
    let k = 0;
    for (let d = 0; d < n; d++) if (live[d] === 1) docs[k++] = d;
    return constant(docs, k, boost, scoring);
  }

  private ids(ids: readonly string[], boost: number, scoring: boolean): Matches {
    const found: number[] = [];
    for (const id of ids) {
      const d = this.ix.docOf(id);
      if (d >= 0 && !found.includes(d)) found.push(d);
    }
    found.sort((a, b) => a - b);
    return constant(Int32Array.from(found), found.length, boost, scoring);
  }

  private bool(q: BoolQuery, scoring: boolean): Matches {
    let acc: Matches;
    if (q.must.length > 0) {
      acc = this.run(q.must[0], scoring);
      for (let i = 1; i < q.must.length && acc.size > 0; i++) acc = intersect(acc, this.run(q.must[i], scoring), scoring);
      for (const s of q.should) if (acc.size > 0) acc = scoring ? addOptional(acc, this.run(s, true)) : acc;
    } else if (q.should.length > 0) {
      acc = q.should.length === 1 ? this.run(q.should[0], scoring) : this.disjunction(q.should, scoring);
    } else {
      // Only exclusions: everything else, scored 1 (Solr's `*:* -x`).
      acc = this.all(1, scoring);
    }
    for (const n of q.mustNot) if (acc.size > 0) acc = subtract(acc, this.run(n, false));
    if (scoring && q.boost !== 1 && acc.scores !== null) {
      const scores = new Float64Array(acc.size);
      for (let i = 0; i < acc.size; i++) scores[i] = acc.scores[i] * q.boost;
      acc = { docs: acc.docs, scores, size: acc.size };
    }
    return acc;
  }

  private collect(marks: Uint8Array, boost: number, scoring: boolean): Matches {
    const live = this.ix.live;
    let count = 0;
    for (let d = 0; d < marks.length; d++) count += marks[d] & live[d];
    const docs = new Int32Array(count);
    let k = 0;
    for (let d = 0; d < marks.length; d++) if ((marks[d] & live[d]) === 1) docs[k++] = d;
    return constant(docs, k, boost, scoring);
  }
}

function markPostings(f: InvertedField, id: number, marks: Uint8Array): boolean {
  if (f.docFreq[id] === 0) return false;
  const p = f.postingsOf(id);
  const len = f.postingsLength[id];
  for (let i = 0; i < len; i += 2) marks[p[i]] = 1;
  return true;
}

function constant(docs: Int32Array, size: number, boost: number, scoring: boolean): Matches {
  if (!scoring) return { docs, scores: null, size };
  return { docs, scores: new Float64Array(size).fill(boost), size };
}

