// Runs a parsed query over one index. Every clause is a cursor over its matching documents in
// increasing document order (cursors.ts): conjunctions and filters leapfrog from their rarest
// clause, filters are bitsets cached per index (filter-cache.ts), and clauses that need all their
// matches at once (phrases, prefixes, ranges, exists, ids) are materialized and read back. A
// union of terms alone reads every posting anyway, so it sums into a dense accumulator instead,
// its filters as one mask. Scores are summed in the order the clauses appear in the query and
// fields in name order (never in an order that depends on a shard's data), so every shard adds
// the same numbers in the same order as a single index would, and a sharded collection scores
// bit for bit like one index.

import { ShardexError } from '../errors.js';
import type { InvertedField } from './inverted-field.js';
import type { NumericField } from './numeric-field.js';
import type { BoolQuery, NumberRangeQuery, KeywordRangeQuery, PhraseQuery, Query, TermQuery } from './query.js';
import { NO_MATCHES, type Accumulator, type AccumulatorPool, type Matches } from './matches.js';
import { bm25, bm25Idf, type StatsLookup } from './stats.js';
import {
  AllCursor,
  BitsetCursor,
  BoostedCursor,
  ConjunctionCursor,
  DisjunctionCursor,
  drainCursor,
  EMPTY_CURSOR,
  ExclusionCursor,
  MatchesCursor,
  OptionalCursor,
  PostingsCursor,
  type DocCursor,
} from './cursors.js';
import type { CachedFilter, FilterCache } from './filter-cache.js';
import { phraseFreq, TopK, topOfUnion, type TopUnion, type UnionClause } from './top-union.js';

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
  /** Filter clauses' bitsets, kept across queries (cleared when documents are renumbered). */
  readonly filterCache: FilterCache;
}

export class QueryExecutor {
  /** The last query cachedQuery() was asked about (an executor serves one search), and its answer. */
  private asked: { readonly q: Query; readonly maxDoc: number; readonly cached: CachedFilter | null } | undefined;

  constructor(
    private readonly ix: IndexView,
    private readonly stats: StatsLookup | null,
    private readonly boosts: Readonly<Record<string, number>> | undefined,
  ) {}

  /** A clause materialized: a fielded phrase or prefix, a range, exists or ids. */
  private leaf(q: Query, scoring: boolean): Matches {
    switch (q.kind) {
      case 'phrase':
        return this.perField(q.field, (f) => this.phrase(f, q.terms, q.positions, q.boost * this.fieldBoost(f.key), scoring));
      case 'prefix':
        return this.perField(q.field, (f) => this.prefix(f, q.prefix, q.boost * this.fieldBoost(f.key), scoring));
      case 'range':
        return q.target === 'number' ? this.numberRange(q, scoring) : this.keywordRange(q, scoring);
      case 'exists':
        return this.exists(q.target, q.field, q.boost, scoring);
      case 'ids':
        return this.ids(q.ids, q.boost, scoring);
      default:
        throw new ShardexError('SHX_INTERNAL', `a ${q.kind} query is not evaluated as a leaf`);
    }
  }

  /**
   * The matches of `q` among those of every filter (scored when `scoring`; filters never add to
   * scores): a conjunction led by its rarest clause, each filter a cached bitset.
   */
  matches(q: Query, filters: readonly Query[], scoring: boolean): Matches {
    const cached = scoring ? null : this.cachedQuery(q);
    if (cached !== null) {
      const mask = filters.length === 0 ? null : this.filterMask(filters);
      return cached.count === 0 || (filters.length > 0 && mask === null) ? NO_MATCHES : bitsetDocs(cached.bits, mask, this.ix.live);
    }
    const all = conjunctionOfTerms(q);
    if (all !== null) {
      const m = this.termConjunction(all, scoring, filters);
      if (m !== null) return m;
    }
    // A union of terms reads every posting anyway: it is summed in a dense accumulator (Lucene's
    // BooleanScorer), the filters as one mask, rather than merged posting by posting.
    const terms = unionOfTerms(q);
    if (terms !== null) {
      if (filters.length === 0) return this.termUnion(terms, scoring, null);
      const mask = this.filterMask(filters);
      return mask === null ? NO_MATCHES : this.termUnion(terms, scoring, mask);
    }
    const c = this.filteredCursor(q, filters, scoring);
    return c === EMPTY_CURSOR ? NO_MATCHES : drainCursor(c, this.ix.maxDoc, scoring);
  }

  /** A cursor over the matches of `q` among those of every filter (filters never add to scores). */
  filteredCursor(q: Query, filters: readonly Query[], scoring: boolean): DocCursor {
    const cached = scoring ? null : this.cachedQuery(q);
    if (cached !== null && filters.length > 0) {
      // Every part a cached bitset: one AND of the words, read by one cursor, rather than a
      // conjunction that leapfrogs from match to match.
      const mask = cached.count === 0 ? null : this.filterMask(filters);
      return mask === null ? EMPTY_CURSOR : new BitsetCursor(andOf(cached.bits, mask), cached.count, this.ix.live);
    }
    const main = cached === null ? this.cursor(q, scoring) : cached.count === 0 ? EMPTY_CURSOR : new BitsetCursor(cached.bits, cached.count, this.ix.live);
    if (main === EMPTY_CURSOR || filters.length === 0) return main;
    const parts: DocCursor[] = [main];
    for (const f of filters) {
      const c = this.filterCursor(f);
      if (c === EMPTY_CURSOR) return EMPTY_CURSOR;
      parts.push(c);
    }
    return new ConjunctionCursor(parts, 1);
  }

  /**
   * The best `k` matches of `q` by score (ties by id) and their total, counted exactly up to
   * `countUpTo`, when `q` is a union of terms and phrases: only what can make the page is scored
   * (top-union.ts), and nothing scoring below `floor`. Null for any other query, which matches() serves.
   */
  topByScore(q: Query, filters: readonly Query[], k: number, countUpTo: number, idOf: (doc: number) => string, floor = -Infinity): TopUnion | null {
    const union = unionOfTermsAndPhrases(q);
    if (union === null) {
      const all = conjunctionOfTerms(q);
      return all === null ? null : this.topTermConjunction(all, filters, k, idOf, floor);
    }
    // Counted exactly, phrases read every match's positions anyway: matches() does that faster.
    if (countUpTo === Infinity && union.every((c) => c.kind === 'phrase')) return null;
    const mask = filters.length === 0 ? null : this.filterMask(filters);
    if (filters.length > 0 && mask === null) return { total: 0, exact: true, docs: new Int32Array(0), scores: new Float64Array(0), scored: 0, full: 0 };
    const clauses: UnionClause[] = [];
    for (const c of union) {
      const fields = this.fieldsOf(c.field);
      for (const f of fields) {
        if (f === undefined) continue;
        const boost = c.boost * this.fieldBoost(f.key);
        // Bounds hold for scores that grow with tf: a negative boost (never parsed) is left to matches().
        if (!(boost >= 0)) return null;
        const { docCount, avgdl } = this.fieldStats(f);
        if (c.kind === 'term') {
          const id = f.termId(c.term);
          if (id < 0 || f.docFreqOf(id) === 0) continue;
          clauses.push({ postings: f.postingsOf(id), length: f.postingsLength[id], bounds: f.blockBoundsOf(id), boost, idf: bm25Idf(docCount, this.docFreq(f, c.term, id)), avgdl, lengths: f.lengths });
          continue;
        }
        // A phrase on a field without positions is left to matches().
        if (!f.withPositions) return null;
        const ids = c.terms.map((t) => f.termId(t));
        if (ids.some((id) => id < 0 || f.docFreqOf(id) === 0)) continue;
        const terms = ids.map((id) => ({ postings: f.postingsOf(id), length: f.postingsLength[id], positions: f.positionsOf(id), bounds: f.blockBoundsOf(id) }));
        clauses.push({ kind: 'phrase', terms, offsets: Int32Array.from(c.positions), lead: rarest(f, ids), boost, idf: this.phraseIdf(f, c.terms, ids), avgdl, lengths: f.lengths });
      }
    }
    const acc = this.ix.accumulators.acquire(this.ix.maxDoc);
    try {
      return topOfUnion(clauses, this.ix.live, mask, this.ix.maxDoc, k, countUpTo, idOf, acc, undefined, floor);
    } finally {
      this.ix.accumulators.release(acc);
    }
  }

  /** The documents every filter matches, as one bitset (null when none does); deleted documents may be set. */
  private filterMask(filters: readonly Query[]): Uint32Array | null {
    let mask: Uint32Array | null = null;
    for (const f of filters) {
      const c = this.cachedFilter(f);
      if (c.count === 0) return null;
      mask = mask === null ? c.bits : andOf(mask, c.bits);
    }
    return mask;
  }

  /** The scores of `docs` (increasing, each a match of `q`): what a sort not by score reports for its page. */
  scoresOf(q: Query, docs: Int32Array): Float64Array {
    const scores = new Float64Array(docs.length);
    const c = this.cursor(q, true);
    for (let i = 0; i < docs.length; i++) {
      if (c.advance(docs[i]) !== docs[i]) throw new ShardexError('SHX_INTERNAL', `document ${docs[i]} does not match the query it was found by`);
      scores[i] = c.score();
    }
    return scores;
  }

  private filterCursor(f: Query): DocCursor {
    const cached = this.cachedFilter(f);
    return cached.count === 0 ? EMPTY_CURSOR : new BitsetCursor(cached.bits, cached.count, this.ix.live);
  }

  private cachedFilter(f: Query, key = JSON.stringify(f)): CachedFilter {
    const ix = this.ix;
    return ix.filterCache.get(key, ix.maxDoc, () => drainCursor(this.cursor(f, false), ix.maxDoc, false));
  }

  /**
   * The matches of `q`, whose scores are not needed, as a cached bitset once `q` recurs (as a
   * filter is); null for a query seen once, and for those that cost nothing to run (all, none).
   */
  private cachedQuery(q: Query): CachedFilter | null {
    if (q.kind === 'all' || q.kind === 'none') return null;
    // Once per search: a sort that gives up skipping asks again, and that is not a second use.
    const maxDoc = this.ix.maxDoc;
    if (this.asked?.q === q && this.asked.maxDoc === maxDoc) return this.asked.cached;
    const key = JSON.stringify(q);
    const cached = this.ix.filterCache.repeated(key, maxDoc) ? this.cachedFilter(q, key) : null;
    this.asked = { q, maxDoc, cached };
    return cached;
  }

  /**
   * A cursor over the matches of `q`: terms read their postings, conjunctions leapfrog, and the
   * clauses that need every match at once (phrases, prefixes, ranges, exists, ids) are run() and
   * read back. Disjunctions flatten as disjunction() does, so the scores are its scores bit for bit.
   */
  cursor(q: Query, scoring: boolean): DocCursor {
    switch (q.kind) {
      case 'none':
        return EMPTY_CURSOR;
      case 'all':
        return new AllCursor(this.ix.live, this.ix.maxDoc, q.boost);
      case 'term': {
        if (q.field === null) return this.disjunctionCursor([q], scoring);
        const f = this.ix.inverted(q.field);
        return f === undefined ? EMPTY_CURSOR : this.termCursor(f, q.term, q.boost * this.fieldBoost(f.key), scoring);
      }
      case 'phrase':
      case 'prefix':
        if (q.field === null) return this.disjunctionCursor([q], scoring);
        return matchesCursor(this.leaf(q, scoring));
      case 'bool':
        return this.boolCursor(q, scoring);
      default:
        return matchesCursor(this.leaf(q, scoring));
    }
  }

  private termCursor(f: InvertedField, term: string, boost: number, scoring: boolean): DocCursor {
    const id = f.termId(term);
    if (id < 0 || f.docFreqOf(id) === 0) return EMPTY_CURSOR;
    let params = null;
    if (scoring) {
      const { docCount, avgdl } = this.fieldStats(f);
      params = { boost, idf: bm25Idf(docCount, this.docFreq(f, term, id)), avgdl, lengths: f.lengths };
    }
    return new PostingsCursor(f.postingsOf(id), f.postingsLength[id], this.ix.live, params);
  }

  /** The cursor of disjunction(clauses): its leaves in its order. */
  private disjunctionCursor(clauses: readonly Query[], scoring: boolean): DocCursor {
    const children: DocCursor[] = [];
    const add = (c: DocCursor): void => {
      if (c !== EMPTY_CURSOR) children.push(c);
    };
    for (const c of clauses) {
      if (c.kind === 'term') {
        const fields = this.fieldsOf(c.field);
        for (const f of fields) if (f !== undefined) add(this.termCursor(f, c.term, c.boost * this.fieldBoost(f.key), scoring));
      } else if (c.kind === 'phrase' && c.field === null) {
        for (const f of this.ix.defaultTextFields()) add(matchesCursor(this.phrase(f, c.terms, c.positions, c.boost * this.fieldBoost(f.key), scoring)));
      } else if (c.kind === 'prefix' && c.field === null) {
        for (const f of this.ix.defaultTextFields()) add(matchesCursor(this.prefix(f, c.prefix, c.boost * this.fieldBoost(f.key), scoring)));
      } else {
        add(this.cursor(c, scoring));
      }
    }
    if (children.length === 0) return EMPTY_CURSOR;
    return children.length === 1 ? children[0] : new DisjunctionCursor(children);
  }

  /** The cursor of bool(): musts leapfrog, shoulds add to their scores, mustNots are skipped. */
  private boolCursor(q: BoolQuery, scoring: boolean): DocCursor {
    let c: DocCursor;
    if (q.must.length > 0) {
      const musts: DocCursor[] = [];
      for (const m of q.must) {
        const mc = this.cursor(m, scoring);
        if (mc === EMPTY_CURSOR) return EMPTY_CURSOR;
        musts.push(mc);
      }
      c = musts.length === 1 ? musts[0] : new ConjunctionCursor(musts);
      if (scoring) {
        const optional = q.should.map((s) => this.cursor(s, true)).filter((o) => o !== EMPTY_CURSOR);
        if (optional.length > 0) c = new OptionalCursor(c, optional);
      }
    } else if (q.should.length > 0) {
      c = q.should.length === 1 ? this.cursor(q.should[0], scoring) : this.disjunctionCursor(q.should, scoring);
    } else {
      // Only exclusions: everything else, scored 1 (Solr's `*:* -x`).
      c = new AllCursor(this.ix.live, this.ix.maxDoc, 1);
    }
    if (c === EMPTY_CURSOR) return c;
    const excluded = q.mustNot.map((n) => this.cursor(n, false)).filter((e) => e !== EMPTY_CURSOR);
    if (excluded.length > 0) c = new ExclusionCursor(c, excluded);
    return scoring && q.boost !== 1 ? new BoostedCursor(c, q.boost) : c;
  }

  /** The fields a clause reads: every default text field when it names none (undefined where a named field does not exist). */
  private fieldsOf(field: string | null): readonly (InvertedField | undefined)[] {
    return field === null ? this.ix.defaultTextFields() : [this.ix.inverted(field)];
  }

  private fieldBoost(key: string): number {
    const b = this.boosts;
    if (b !== undefined && Object.hasOwn(b, key)) return b[key];
    return this.ix.schemaBoost(key);
  }

  /** A clause on one field. */
  private perField(field: string | null, fn: (f: InvertedField) => Matches): Matches {
    const f = field === null ? undefined : this.ix.inverted(field);
    return f === undefined ? NO_MATCHES : fn(f);
  }

  /**
   * Documents matching any of the term clauses `terms` (and the mask, when given), scores summed
   * clause by clause (and, for unfielded clauses, field by field in name order) into one dense
   * accumulator: the sums disjunctionCursor() makes, without a merge per posting. A field a shard
   * lacks adds nothing, so every shard sums the same numbers in the same order.
   */
  private termUnion(terms: readonly TermQuery[], scoring: boolean, mask: Uint32Array | null): Matches {
    if (!scoring) {
      // Unscored, one or two lists of postings (a word in the default fields) merge faster than they accumulate.
      const lists: Array<{ p: Int32Array; len: number }> = [];
      for (const c of terms) {
        const fields = this.fieldsOf(c.field);
        for (const f of fields) {
          const id = f === undefined ? -1 : f.termId(c.term);
          if (f !== undefined && id >= 0 && f.docFreqOf(id) > 0) lists.push({ p: f.postingsOf(id), len: f.postingsLength[id] });
        }
      }
      if (lists.length <= 2) return mergedDocs(lists[0] ?? { p: EMPTY_POSTINGS, len: 0 }, lists[1] ?? { p: EMPTY_POSTINGS, len: 0 }, this.ix.live, mask);
    }
    const acc = this.ix.accumulators.acquire(this.ix.maxDoc);
    try {
      for (const c of terms) {
        const fields = this.fieldsOf(c.field);
        for (const f of fields) if (f !== undefined) this.termInto(acc, f, c.term, c.boost * this.fieldBoost(f.key), scoring, mask);
      }
      return acc.drain(this.ix.maxDoc, scoring);
    } finally {
      this.ix.accumulators.release(acc);
    }
  }

  /**
   * The documents matching every one of `clauses` (each a term, over the default fields when it
   * names none), when their postings are dense enough that reading them beats leapfrogging: the
   * clause with the fewest postings is summed into an accumulator (the candidates), then each
   * clause in the query's order into a scratch one, only where a candidate is (a look at a byte
   * per posting, no score computed elsewhere), dropping the candidates it lacks. A match's score
   * adds the clauses' sums in the query's order, each summed over its fields in name order: the
   * conjunction cursor's arithmetic exactly. Null when leapfrogging is cheaper (one clause far
   * rarer than the others).
   */
  private termConjunction(clauses: readonly TermQuery[], scoring: boolean, filters: readonly Query[]): Matches | null {
    return this.conjunctionCandidates(clauses, scoring, filters, (touched, total, marks, n) => {
      if (n === 0) return NO_MATCHES;
      const maxDoc = this.ix.maxDoc;
      const docs = new Int32Array(n);
      const scores = scoring ? new Float64Array(n) : null;
      if (n * 8 < maxDoc) {
        docs.set(touched.subarray(0, n));
        docs.sort();
        if (scores !== null) for (let k = 0; k < n; k++) scores[k] = total[docs[k]];
      } else {
        // Many: a pass over the marks gives them in order (and reads the sums in order).
        for (let d = 0, k = 0; k < n; d++) {
          if (marks[d] !== 1) continue;
          docs[k] = d;
          if (scores !== null) scores[k] = total[d];
          k++;
        }
      }
      return { docs, scores, size: n };
    });
  }

  /**
   * The best `k` of termConjunction()'s matches by score (ties by id), and their exact count,
   * taken from its candidates as they are: no list of every match is made in document order.
   * Null when termConjunction() would be.
   */
  private topTermConjunction(clauses: readonly TermQuery[], filters: readonly Query[], k: number, idOf: (doc: number) => string, floor: number): TopUnion | null {
    return this.conjunctionCandidates(clauses, true, filters, (touched, total, _marks, n) => {
      const top = new TopK(k, idOf, floor);
      for (let i = 0; i < n; i++) top.offer(touched[i], total[touched[i]]);
      const { docs, scores } = top.sorted();
      return { total: n, exact: true, docs, scores, scored: n, full: 0 };
    });
  }

  /**
   * termConjunction()'s work: calls `use` with the matches (the first `n` of `touched`, in no
   * particular order, marked in `marks`, their scores in `total` by document) before the scratch
   * goes back to the pool.
   */
  private conjunctionCandidates<R>(
    clauses: readonly TermQuery[],
    scoring: boolean,
    filters: readonly Query[],
    use: (touched: Int32Array, total: Float64Array, marks: Uint8Array, n: number) => R,
  ): R | null {
    const none = (): R => use(new Int32Array(0), new Float64Array(0), new Uint8Array(0), 0);
    const postings = clauses.map((c) => {
      let n = 0;
      for (const f of this.fieldsOf(c.field)) {
        const id = f === undefined ? -1 : f.termId(c.term);
        if (id >= 0) n += f!.docFreqOf(id);
      }
      return n;
    });
    let lead = 0;
    for (let i = 1; i < clauses.length; i++) if (postings[i] < postings[lead]) lead = i;
    if (postings[lead] === 0) return none();
    let others = 0;
    for (let i = 0; i < clauses.length; i++) if (i !== lead) others += postings[i];
    if (others > DENSE_CONJUNCTION_RATIO * postings[lead]) return null;
    const mask = filters.length === 0 ? null : this.filterMask(filters);
    if (filters.length > 0 && mask === null) return none();
    const pool = this.ix.accumulators;
    const maxDoc = this.ix.maxDoc;
    const into = (acc: Accumulator, c: TermQuery, only: Uint8Array | null): void => {
      for (const f of this.fieldsOf(c.field)) if (f !== undefined) this.termInto(acc, f, c.term, c.boost * this.fieldBoost(f.key), scoring, mask, only);
    };
    // The candidates are cand's marked documents, listed in cand.touched: one a clause lacks is
    // unmarked and leaves the list, so that reset() still clears exactly what is marked. Their
    // running sums are kept in cand.scores; the lead clause's own sums, when it is not the first
    // clause, wait aside, aligned with the list.
    const cand = pool.acquire(maxDoc);
    const scratch = pool.acquire(maxDoc);
    try {
      into(cand, clauses[lead], null);
      const marks = cand.marks;
      const touched = cand.touched;
      const total = cand.scores;
      let leadSums: Float64Array | null = null;
      if (scoring && lead !== 0) {
        leadSums = new Float64Array(cand.count);
        for (let k = 0; k < cand.count; k++) leadSums[k] = total[touched[k]];
      }
      for (let i = 0; i < clauses.length; i++) {
        if (i === lead) {
          // The first clause's sums are in place; a later lead's are added (it drops no candidate).
          if (leadSums !== null) for (let k = 0; k < cand.count; k++) total[touched[k]] += leadSums[k];
          continue;
        }
        scratch.reset();
        into(scratch, clauses[i], marks);
        const sums = scratch.scores;
        const has = scratch.marks;
        let kept = 0;
        for (let k = 0; k < cand.count; k++) {
          const d = touched[k];
          if (has[d] !== 1) {
            marks[d] = 0;
            continue;
          }
          if (scoring) total[d] = i === 0 ? sums[d] : total[d] + sums[d];
          if (leadSums !== null) leadSums[kept] = leadSums[k];
          touched[kept++] = d;
        }
        cand.count = kept;
      }
      return use(touched, total, marks, cand.count);
    } finally {
      pool.release(cand);
      pool.release(scratch);
    }
  }

  /** A term's postings streamed into an accumulator (only the documents marked in `only`, when given). */
  private termInto(acc: Accumulator, f: InvertedField, term: string, boost: number, scoring: boolean, mask: Uint32Array | null, only: Uint8Array | null = null): void {
    const id = f.termId(term);
    if (id < 0 || f.docFreqOf(id) === 0) return;
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
        if ((only !== null && only[d] !== 1) || live[d] !== 1 || marks[d] === 1) continue;
        if (mask !== null && (mask[d >>> 5] & (1 << (d & 31))) === 0) continue;
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
      if ((only !== null && only[d] !== 1) || live[d] !== 1) continue;
      if (mask !== null && (mask[d >>> 5] & (1 << (d & 31))) === 0) continue;
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

  /** Lucene's PhraseWeight: the idf of a phrase is the sum of its terms' idfs. */
  private phraseIdf(f: InvertedField, terms: readonly string[], ids: ArrayLike<number>): number {
    const { docCount } = this.fieldStats(f);
    let idf = 0;
    for (let j = 0; j < terms.length; j++) idf += bm25Idf(docCount, this.docFreq(f, terms[j], ids[j]));
    return idf;
  }

  /** N and avgdl of a field: the collection's when global statistics are given. */
  private fieldStats(f: InvertedField): { docCount: number; avgdl: number } {
    const g = this.stats?.field(f.key);
    if (g !== undefined) return { docCount: g.docCount, avgdl: g.sumLength / g.docCount };
    return { docCount: f.docCount, avgdl: f.sumLength / f.docCount };
  }

  private docFreq(f: InvertedField, term: string, id: number): number {
    return this.stats?.docFreq(f.key, term) ?? f.docFreqOf(id);
  }

  /** Exact phrase: tf is the number of positions where every term sits at its offset. */
  private phrase(f: InvertedField, terms: readonly string[], offsets: readonly number[], boost: number, scoring: boolean): Matches {
    const m = terms.length;
    const ids = new Int32Array(m);
    for (let j = 0; j < m; j++) {
      ids[j] = f.termId(terms[j]);
      if (ids[j] < 0 || f.docFreqOf(ids[j]) === 0) return NO_MATCHES;
    }
    const lead = rarest(f, ids);
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
    const cap = f.docFreqOf(ids[lead]);
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
      }
      const freq = phraseFreq(pps, posAt, posEnd, offs, ptr);
      if (freq > 0) {
        docs[k] = d;
        freqs[k] = freq;
        k++;
      }
    }
    if (!scoring) return { docs, scores: null, size: k };
    const { avgdl } = this.fieldStats(f);
    const idf = this.phraseIdf(f, terms, ids);
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

  private ids(ids: readonly string[], boost: number, scoring: boolean): Matches {
    const found: number[] = [];
    for (const id of ids) {
      const d = this.ix.docOf(id);
      if (d >= 0 && !found.includes(d)) found.push(d);
    }
    found.sort((a, b) => a - b);
    return constant(Int32Array.from(found), found.length, boost, scoring);
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

/** The clauses of `q` when it is a union of terms and phrases and nothing else, or null. */
function unionOfTermsAndPhrases(q: Query): readonly (TermQuery | PhraseQuery)[] | null {
  if (q.kind === 'term' || q.kind === 'phrase') return [q];
  if (q.kind !== 'bool' || q.must.length > 0 || q.mustNot.length > 0 || q.boost !== 1 || q.should.length === 0) return null;
  return q.should.every((c): c is TermQuery | PhraseQuery => c.kind === 'term' || c.kind === 'phrase') ? (q.should as readonly (TermQuery | PhraseQuery)[]) : null;
}

/** The documents set in both bitsets, in a fresh array (the cached bitsets are shared). */
function andOf(a: Uint32Array, b: Uint32Array): Uint32Array {
  const and = new Uint32Array(Math.min(a.length, b.length));
  for (let w = 0; w < and.length; w++) and[w] = a[w] & b[w];
  return and;
}

/** The index in `ids` of the term with the fewest documents (the first of equals): a phrase's lead. */
function rarest(f: InvertedField, ids: ArrayLike<number>): number {
  let lead = 0;
  for (let j = 1; j < ids.length; j++) if (f.docFreqOf(ids[j]) < f.docFreqOf(ids[lead])) lead = j;
  return lead;
}

/**
 * termConjunction() reads every posting of the clauses but the rarest when they hold at most this
 * many times its postings; past that, leapfrogging from the rarest skips most of them.
 */
const DENSE_CONJUNCTION_RATIO = 8;

/** The term clauses of `q` when it is a conjunction of two or more terms and nothing else, or null. */
function conjunctionOfTerms(q: Query): readonly TermQuery[] | null {
  if (q.kind !== 'bool' || q.must.length < 2 || q.should.length > 0 || q.mustNot.length > 0 || q.boost !== 1) return null;
  return q.must.every((c): c is TermQuery => c.kind === 'term') ? (q.must as readonly TermQuery[]) : null;
}

/** The term clauses of `q` when it is a union of terms and nothing else, or null. */
function unionOfTerms(q: Query): readonly TermQuery[] | null {
  if (q.kind === 'term') return [q];
  if (q.kind !== 'bool' || q.must.length > 0 || q.mustNot.length > 0 || q.boost !== 1 || q.should.length === 0) return null;
  return q.should.every((c): c is TermQuery => c.kind === 'term') ? (q.should as readonly TermQuery[]) : null;
}

const EMPTY_POSTINGS = new Int32Array(0);

/** The live documents (in the mask, if any) of two postings lists ([doc, tf, ...]), merged in order, unscored. */
function mergedDocs(a: { p: Int32Array; len: number }, b: { p: Int32Array; len: number }, live: Uint8Array, mask: Uint32Array | null): Matches {
  const pa = a.p;
  const pb = b.p;
  const na = a.len;
  const nb = b.len;
  const docs = new Int32Array((na + nb) >> 1);
  let i = 0;
  let j = 0;
  let k = 0;
  while (i < na || j < nb) {
    let d: number;
    if (j >= nb || (i < na && pa[i] < pb[j])) {
      d = pa[i];
      i += 2;
    } else if (i >= na || pb[j] < pa[i]) {
      d = pb[j];
      j += 2;
    } else {
      d = pa[i];
      i += 2;
      j += 2;
    }
    if (live[d] !== 1 || (mask !== null && (mask[d >>> 5] & (1 << (d & 31))) === 0)) continue;
    docs[k++] = d;
  }
  return k === 0 ? NO_MATCHES : { docs, scores: null, size: k };
}

/** The live documents set in `bits` (and in `mask`, when given), increasing. */
function bitsetDocs(bits: Uint32Array, mask: Uint32Array | null, live: Uint8Array): Matches {
  let n = 0;
  for (let w = 0; w < bits.length; w++) n += popcount(mask === null ? bits[w] : bits[w] & mask[w]);
  if (n === 0) return NO_MATCHES;
  const docs = new Int32Array(n);
  let k = 0;
  for (let w = 0; w < bits.length; w++) {
    let word = mask === null ? bits[w] : bits[w] & mask[w];
    while (word !== 0) {
      const low = word & -word;
      const d = (w << 5) + 31 - Math.clz32(low);
      if (live[d] === 1) docs[k++] = d;
      word ^= low;
    }
  }
  return k === 0 ? NO_MATCHES : { docs: k === n ? docs : docs.subarray(0, k), scores: null, size: k };
}

function popcount(x: number): number {
  x -= (x >>> 1) & 0x55555555;
  x = (x & 0x33333333) + ((x >>> 2) & 0x33333333);
  return (Math.imul((x + (x >>> 4)) & 0x0f0f0f0f, 0x01010101) >>> 24);
}

function matchesCursor(m: Matches): DocCursor {
  return m.size === 0 ? EMPTY_CURSOR : new MatchesCursor(m);
}

function markPostings(f: InvertedField, id: number, marks: Uint8Array): boolean {
  if (f.docFreqOf(id) === 0) return false;
  const p = f.postingsOf(id);
  const len = f.postingsLength[id];
  for (let i = 0; i < len; i += 2) marks[p[i]] = 1;
  return true;
}

function constant(docs: Int32Array, size: number, boost: number, scoring: boolean): Matches {
  if (!scoring) return { docs, scores: null, size };
  return { docs, scores: new Float64Array(size).fill(boost), size };
}

