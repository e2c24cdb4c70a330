// The query engine (leapfrogging cursors, cached filter bitsets, sorts that score only their
// page) answers exactly as a straightforward evaluation does, document by document: the same
// hits, scores bit for bit, totals and sort values, across segments, deletes and shards.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AllCursor, BitsetCursor, ConjunctionCursor, DisjunctionCursor, drainCursor, MatchesCursor, NO_MORE_DOCS, PostingsCursor } from '../src/index/cursors.js';
import { FilterCache } from '../src/index/filter-cache.js';
import { compareHits, mergeHitLists, mergeStats, parseSchema, SegmentedIndex, ShardIndex, type SearchHit, type SearchRequest, type SortValue, type StoredDoc } from '../src/index/index.js';
import type { Query } from '../src/index/query.js';
import { parseSort } from '../src/index/sort.js';
import { bm25, bm25Idf } from '../src/index/stats.js';

const schema = parseSchema({ title: 'text', body: 'text', category: 'keyword', price: 'number' });
const TEXT_FIELDS = ['body', 'title']; // name order: the order unfielded words sum in
const WORDS = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'omega'];
const CATEGORIES = ['red', 'green', 'blue'];

// ---- documents, writes, queries ----

const arbText = (max: number) => fc.array(fc.constantFrom(...WORDS), { minLength: 0, maxLength: max }).map((w) => w.join(' '));
const arbDoc: fc.Arbitrary<StoredDoc> = fc.record(
  { title: arbText(4), body: arbText(12), category: fc.constantFrom(...CATEGORIES), price: fc.integer({ min: 0, max: 20 }) },
  { requiredKeys: [] },
);

type Op = { kind: 'add'; id: string; doc: StoredDoc } | { kind: 'delete'; id: string } | { kind: 'seal' };
const arbId = fc.integer({ min: 0, max: 40 }).map((n) => `d${n}`);
const arbOp: fc.Arbitrary<Op> = fc.oneof(
  { weight: 8, arbitrary: fc.record({ kind: fc.constant('add' as const), id: arbId, doc: arbDoc }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('delete' as const), id: arbId }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'seal' as const }) },
);

const arbBoost = fc.constantFrom(1, 1, 2, 0.5);
const arbField = fc.constantFrom<string | null>(null, null, 'title', 'body');
const arbTerm: fc.Arbitrary<Query> = fc.record({ kind: fc.constant('term' as const), field: arbField, term: fc.constantFrom(...WORDS, 'missing'), boost: arbBoost });
const arbLeaf: fc.Arbitrary<Query> = fc.oneof(
  { weight: 6, arbitrary: arbTerm },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('term' as const), field: fc.constant('category'), term: fc.constantFrom(...CATEGORIES), boost: arbBoost }) },
  {
    weight: 2,
    arbitrary: fc
      .tuple(arbField, fc.constantFrom(...WORDS), fc.constantFrom(...WORDS), arbBoost)
      .map(([field, a, b, boost]): Query => ({ kind: 'phrase', field, terms: [a, b], positions: [0, 1], boost })),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('prefix' as const), field: arbField, prefix: fc.constantFrom('al', 'ze', 'e'), boost: arbBoost }) },
  { weight: 1, arbitrary: fc.tuple(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 0, max: 20 }), arbBoost).map(([a, b, boost]) => numberRange(a, b, boost)) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('all' as const), boost: arbBoost }) },
);
const arbQuery: fc.Arbitrary<Query> = fc.letrec<{ q: Query }>((tie) => ({
  q: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    arbLeaf,
    fc.record({
      kind: fc.constant('bool' as const),
      must: fc.array(tie('q'), { maxLength: 3 }),
      should: fc.array(tie('q'), { maxLength: 3 }),
      mustNot: fc.array(tie('q'), { maxLength: 2 }),
      boost: arbBoost,
    }),
  ),
})).q;
const arbFilter: fc.Arbitrary<Query> = fc.oneof(
  fc.record({ kind: fc.constant('term' as const), field: fc.constant('category'), term: fc.constantFrom(...CATEGORIES), boost: fc.constant(1) }),
  fc.tuple(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 0, max: 20 })).map(([a, b]) => numberRange(a, b, 1)),
  arbTerm,
  fc.record({ kind: fc.constant('bool' as const), must: fc.constant([]), should: fc.array(arbTerm, { minLength: 1, maxLength: 2 }), mustNot: fc.array(arbTerm, { maxLength: 1 }), boost: fc.constant(1) }),
);
const arbSort = fc.constantFrom(undefined, 'price desc', 'price asc', 'category asc,score desc', 'score asc', 'id desc');
const arbRequest: fc.Arbitrary<SearchRequest> = fc.record({
  q: arbQuery,
  filters: fc.array(arbFilter, { maxLength: 2 }),
  sort: arbSort,
  limit: fc.integer({ min: 0, max: 12 }),
});

function numberRange(a: number, b: number, boost: number): Query {
  return { kind: 'range', target: 'number', field: 'price', lower: Math.min(a, b), upper: Math.max(a, b), includeLower: true, includeUpper: a !== b, boost };
}

// ---- the reference: every query evaluated on every document ----

interface Stats {
  docCount(field: string): number;
  sumLength(field: string): number;
  docFreq(field: string, term: string): number;
}

const tokens = (doc: StoredDoc, field: string): string[] => {
  const v = doc[field];
  return typeof v === 'string' && v !== '' ? v.split(' ') : [];
};

function statsOf(docs: readonly StoredDoc[]): Stats {
  return {
    docCount: (field) => docs.filter((d) => tokens(d, field).length > 0).length,
    sumLength: (field) => docs.reduce((n, d) => n + tokens(d, field).length, 0),
    docFreq: (field, term) => docs.filter((d) => tokens(d, field).includes(term)).length,
  };
}

/** A score, or undefined where the document does not match. */
type Eval = number | undefined;

/** The numbers a clause adds to a sum, one per leaf where the engine sums leaves flat (unfielded words, per field). */
function leaves(q: Query, doc: StoredDoc, s: Stats): Eval[] {
  const fields = (field: string | null): string[] => (field === null ? TEXT_FIELDS : [field]);
  switch (q.kind) {
    case 'term':
      return fields(q.field).map((f) => {
        if (f === 'category') return doc.category === q.term ? 1 * q.boost * bm25(1, 1, s.sumLength('category') / s.docCount('category'), bm25Idf(s.docCount('category'), s.docFreq('category', q.term))) : undefined;
        const t = tokens(doc, f);
        const tf = t.filter((w) => w === q.term).length;
        if (tf === 0) return undefined;
        return q.boost * bm25(tf, t.length, s.sumLength(f) / s.docCount(f), bm25Idf(s.docCount(f), s.docFreq(f, q.term)));
      });
    case 'phrase':
      return fields(q.field).map((f) => {
        const t = tokens(doc, f);
        let tf = 0;
        for (let p = 0; p < t.length; p++) if (q.terms.every((w, j) => t[p + q.positions[j]!] === w)) tf++;
        if (tf === 0) return undefined;
        let idf = 0;
        for (const w of q.terms) idf += bm25Idf(s.docCount(f), s.docFreq(f, w));
        return q.boost * bm25(tf, t.length, s.sumLength(f) / s.docCount(f), idf);
      });
    case 'prefix':
      return fields(q.field).map((f) => (tokens(doc, f).some((w) => w.startsWith(q.prefix)) ? q.boost : undefined));
    default:
      return [evaluate(q, doc, s)];
  }
}

function sum(values: readonly Eval[]): Eval {
  let total: Eval;
  for (const v of values) if (v !== undefined) total = total === undefined ? v : total + v;
  return total;
}

function evaluate(q: Query, doc: StoredDoc, s: Stats): Eval {
  switch (q.kind) {
    case 'none':
      return undefined;
    case 'all':
      return q.boost;
    case 'term':
    case 'phrase':
    case 'prefix':
      return sum(leaves(q, doc, s));
    case 'range': {
      if (q.target !== 'number') throw new Error('not generated');
      const v = doc[q.field];
      if (typeof v !== 'number') return undefined;
      const ok = (q.lower === null || (q.includeLower ? v >= q.lower : v > q.lower)) && (q.upper === null || (q.includeUpper ? v <= q.upper : v < q.upper));
      return ok ? q.boost : undefined;
    }
    case 'exists':
    case 'ids':
      throw new Error('not generated');
    case 'bool': {
      let score: Eval;
      if (q.must.length > 0) {
        const musts = q.must.map((m) => evaluate(m, doc, s));
        if (musts.some((m) => m === undefined)) return undefined;
        score = sum([...musts, ...q.should.map((o) => evaluate(o, doc, s))]);
      } else if (q.should.length === 1) {
        score = evaluate(q.should[0]!, doc, s);
      } else if (q.should.length > 1) {
        score = sum(q.should.flatMap((o) => leaves(o, doc, s)));
      } else {
        score = 1;
      }
      if (score === undefined || q.mustNot.some((n) => evaluate(n, doc, s) !== undefined)) return undefined;
      return q.boost === 1 ? score : score * q.boost;
    }
  }
}

function referenceSearch(docs: ReadonlyMap<string, StoredDoc>, req: SearchRequest): { total: number; hits: SearchHit[] } {
  const s = statsOf([...docs.values()]);
  const sort = parseSort(req.sort as string | undefined, schema);
  const all: SearchHit[] = [];
  for (const [id, doc] of docs) {
    const score = evaluate(req.q as Query, doc, s);
    if (score === undefined || (req.filters ?? []).some((f) => evaluate(f as Query, doc, s) === undefined)) continue;
    const sortValues: SortValue[] = sort.map((k) => (k.type === 'score' ? score : k.type === 'id' ? id : ((doc[k.field] as SortValue | undefined) ?? null)));
    all.push({ id, score, sortValues });
  }
  all.sort((a, b) => compareHits(sort, a, b));
  return { total: all.length, hits: all.slice(0, req.limit ?? 10) };
}

// ---- the engine under test, as one index, as segments and as two shards ----

function applyOps(ops: readonly Op[], shards: number): { docs: Map<string, StoredDoc>; single: ShardIndex; segmented: SegmentedIndex[] } {
  const docs = new Map<string, StoredDoc>();
  const single = new ShardIndex(schema);
  const segmented = Array.from({ length: shards }, () => new SegmentedIndex(schema));
  const shardOf = (id: string): SegmentedIndex => segmented[Number(id.slice(1)) % shards]!;
  let seals = 0;
  for (const op of ops) {
    if (op.kind === 'add') {
      docs.set(op.id, op.doc);
      single.add(op.id, op.doc);
      shardOf(op.id).add(op.id, op.doc);
    } else if (op.kind === 'delete') {
      docs.delete(op.id);
      single.delete(op.id);
      shardOf(op.id).delete(op.id);
    } else {
      for (const s of segmented) s.seal(`s${seals++}`);
    }
  }
  return { docs, single, segmented };
}

function shardedSearch(shards: readonly SegmentedIndex[], req: SearchRequest): { total: number; hits: SearchHit[] } {
  const stats = mergeStats(shards.map((s) => s.collectStats(req)));
  const results = shards.map((s) => s.search(req, stats));
  const sort = parseSort(req.sort as string | undefined, schema);
  return { total: results.reduce((n, r) => n + r.total, 0), hits: mergeHitLists(results.map((r) => r.hits), sort, 0, req.limit ?? 10).hits };
}

describe('query engine against a document-by-document evaluation', () => {
  it('one index: same hits, scores, totals and sort values', () => {
    fc.assert(
      fc.property(fc.array(arbOp, { minLength: 1, maxLength: 60 }), fc.array(arbRequest, { minLength: 1, maxLength: 4 }), (ops, reqs) => {
        const { docs, single } = applyOps(ops, 1);
        // Several requests on one index: the filter cache serves the later ones, and a query
        // whose scores a sort does not need is cached too once it recurs (the third search reads it).
        for (const req of reqs) {
          const expected = referenceSearch(docs, req);
          for (let i = 0; i < 3; i++) expect(single.search(req)).toEqual(expected);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('conjunctions of terms, read densely or leapfrogged: same hits, scores bit for bit, totals', () => {
    const conjunction: fc.Arbitrary<Query> = fc.record({
      kind: fc.constant('bool' as const),
      must: fc.array(arbTerm, { minLength: 2, maxLength: 3 }),
      should: fc.constant([]),
      mustNot: fc.constant([]),
      boost: fc.constant(1),
    });
    // The page by score is taken from the candidates as they come (ties by id), also across
    // segments, where each one after the first skips what scores below the page so far.
    const limit = fc.constantFrom(0, 1, 3, 10);
    fc.assert(
      fc.property(fc.array(arbOp, { minLength: 1, maxLength: 80 }), conjunction, fc.array(arbFilter, { maxLength: 1 }), arbSort, limit, (ops, q, filters, sort, limit) => {
        const { docs, single, segmented } = applyOps(ops, 1);
        const req: SearchRequest = { q, filters, sort, limit };
        const expected = referenceSearch(docs, req);
        expect(single.search(req)).toEqual(expected);
        expect(segmented[0]!.search(req)).toEqual(expected);
      }),
      { numRuns: 400 },
    );
  });

  it('segments and two shards with global statistics: the same as one index', () => {
    fc.assert(
      fc.property(fc.array(arbOp, { minLength: 1, maxLength: 60 }), arbRequest, (ops, req) => {
        const { docs, segmented } = applyOps(ops, 2);
        const expected = referenceSearch(docs, req);
        expect(shardedSearch(segmented, req)).toEqual(expected);
        const oneShard = applyOps(ops, 1).segmented[0]!;
        expect(oneShard.search(req)).toEqual(expected);
      }),
      { numRuns: 200 },
    );
  });

  it('a cached filter stays exact through deletes, adds and a compaction between searches', () => {
    fc.assert(
      fc.property(fc.array(arbOp, { minLength: 1, maxLength: 40 }), fc.array(arbOp, { minLength: 1, maxLength: 40 }), arbRequest, (before, after, req) => {
        const { docs, single } = applyOps(before, 1);
        expect(single.search(req)).toEqual(referenceSearch(docs, req));
        for (const op of after) {
          if (op.kind === 'add') {
            docs.set(op.id, op.doc);
            single.add(op.id, op.doc);
          } else if (op.kind === 'delete') {
            docs.delete(op.id);
            single.delete(op.id);
          } else {
            single.compact();
          }
          expect(single.search(req)).toEqual(referenceSearch(docs, req));
        }
      }),
      { numRuns: 100 },
    );
  });
});

describe('query engine on the benchmark corpus', () => {
  it('scores and totals of sorted, filtered and conjunctive queries match the reference', async () => {
    const { generateDocs } = await import('../src/corpus.js');
    const docs = new Map<string, StoredDoc>();
    const index = new ShardIndex(schema);
    for (const d of generateDocs({ count: 400, words: 30 })) {
      const doc = { title: d.title, body: d.body, category: d.category, price: d.price };
      docs.set(d.id, doc);
      index.add(d.id, doc);
    }
    const words = [...new Set([...docs.values()].flatMap((d) => (d.title as string).split(' ')))].slice(0, 6);
    const term = (w: string): Query => ({ kind: 'term', field: null, term: w, boost: 1 });
    const category: Query = { kind: 'term', field: 'category', term: 'cat-c', boost: 1 };
    const reqs: SearchRequest[] = [
      { q: term(words[0]!), filters: [category], limit: 10 },
      { q: term(words[0]!), sort: 'price desc', limit: 10 },
      { q: { kind: 'bool', must: [], should: [term(words[1]!), term(words[2]!)], mustNot: [], boost: 1 }, filters: [category], sort: 'price desc', limit: 10 },
      { q: { kind: 'bool', must: [term(words[3]!), term(words[4]!)], should: [], mustNot: [], boost: 1 }, limit: 10 },
    ];
    for (const req of reqs) expect(index.search(req)).toEqual(referenceSearch(docs, req));
  });
});

describe('cursors', () => {
  const live = new Uint8Array(64).fill(1);

  it('a postings cursor skips deleted documents and advances past the end to NO_MORE_DOCS', () => {
    const l = live.slice();
    l[5] = 0;
    const c = new PostingsCursor(Int32Array.from([1, 1, 5, 1, 9, 2, 40, 1]), 8, l, null);
    expect(c.advance(2)).toBe(9);
    expect(c.advance(9)).toBe(9);
    expect(c.next()).toBe(40);
    expect(c.advance(41)).toBe(NO_MORE_DOCS);
    expect(c.next()).toBe(NO_MORE_DOCS);
  });

  it('a postings cursor gallops to every target exactly', () => {
    fc.assert(
      fc.property(fc.uniqueArray(fc.integer({ min: 0, max: 63 }), { maxLength: 40 }), fc.array(fc.integer({ min: 0, max: 70 }), { maxLength: 10 }), (docsIn, targets) => {
        const docs = [...docsIn].sort((a, b) => a - b);
        const p = Int32Array.from(docs.flatMap((d) => [d, 1]));
        const c = new PostingsCursor(p, p.length, live, null);
        let at = -1;
        for (const t of [...targets].sort((a, b) => a - b)) {
          const want = docs.find((d) => d >= Math.max(t, at)) ?? NO_MORE_DOCS;
          at = c.advance(t);
          expect(at).toBe(want);
        }
      }),
    );
  });

  it('a bitset cursor reads bit 31 of a word and skips deleted documents', () => {
    const bits = new Uint32Array(2);
    for (const d of [0, 31, 32, 63]) bits[d >>> 5] |= 1 << (d & 31);
    const l = live.slice();
    l[32] = 0;
    expect(drainCursor(new BitsetCursor(bits, 4, l), 64, false).docs).toEqual(Int32Array.from([0, 31, 63, 0]));
    expect(new BitsetCursor(bits, 4, l).advance(64)).toBe(NO_MORE_DOCS);
  });

  it('a conjunction leads with its cheapest clause and scores its scored clauses in their order', () => {
    const a = new MatchesCursor({ docs: Int32Array.from([1, 2, 3, 4, 5, 6]), scores: Float64Array.from([1, 2, 3, 4, 5, 6]), size: 6 });
    const b = new MatchesCursor({ docs: Int32Array.from([2, 6]), scores: Float64Array.from([10, 60]), size: 2 });
    const filter = new AllCursor(live, 64, 1000);
    const m = drainCursor(new ConjunctionCursor([a, b, filter], 2), 64, true);
    expect([...m.docs.subarray(0, m.size)]).toEqual([2, 6]);
    expect([...m.scores!.subarray(0, m.size)]).toEqual([12, 66]);
  });

  it('a disjunction of nothing but exhausted cursors ends at once', () => {
    const empty = new MatchesCursor({ docs: new Int32Array(0), scores: null, size: 0 });
    expect(new DisjunctionCursor([empty]).next()).toBe(NO_MORE_DOCS);
  });
});

describe('FilterCache', () => {
  const matches = (...docs: number[]) => () => ({ docs: Int32Array.from(docs), scores: null, size: docs.length });

  it('builds a filter once per maxDoc and again when documents were added', () => {
    const cache = new FilterCache();
    let built = 0;
    const evaluate = () => {
      built++;
      return matches(1, 33)();
    };
    const first = cache.get('f', 40, evaluate);
    expect(cache.get('f', 40, evaluate)).toBe(first);
    expect(built).toBe(1);
    expect(cache.get('f', 41, evaluate).count).toBe(2);
    expect(built).toBe(2);
    expect(cache.size).toBe(1);
  });

  it('drops the least recently used entries beyond its entry and bit budgets', () => {
    const cache = new FilterCache(2, 4);
    cache.get('a', 32, matches(1));
    cache.get('b', 32, matches(2));
    cache.get('a', 32, matches(1)); // a is now the most recent
    cache.get('c', 32, matches(3));
    expect(cache.size).toBe(2);
    let rebuilt = false;
    cache.get('b', 32, () => {
      rebuilt = true;
      return matches(2)();
    });
    expect(rebuilt).toBe(true);
    // A bitset larger than the whole budget is answered, not kept.
    const big = cache.get('big', 32 * 5, matches(150));
    expect(big.count).toBe(1);
    expect(cache.size).toBe(2);
  });

  it('caches a query whose scores are not needed only once it recurs among the last 256 searches', () => {
    const cache = new FilterCache();
    expect(cache.repeated('q1', 32)).toBe(false);
    expect(cache.repeated('q1', 32)).toBe(true);
    for (let i = 0; i < 256; i++) cache.repeated(`other${i}`, 32);
    // Its uses fell out of the history: seen once again, it is not repeated.
    expect(cache.repeated('q1', 32)).toBe(false);
    // Uses count at one maxDoc: on an index taking adds, a query is never repeated.
    expect(cache.repeated('q2', 32)).toBe(false);
    expect(cache.repeated('q2', 33)).toBe(false);
    // A key cached for this maxDoc is always repeated; one cached for another is not.
    cache.get('f', 32, matches(1));
    expect(cache.repeated('f', 32)).toBe(true);
    expect(cache.repeated('f', 64)).toBe(false);
    // A very long query is never remembered, so never cached.
    const long = 'x'.repeat(5000);
    expect(cache.repeated(long, 32)).toBe(false);
    expect(cache.repeated(long, 32)).toBe(false);
    const index = new ShardIndex(schema);
    for (let i = 0; i < 100; i++) index.add(`d${i}`, { title: i % 2 === 0 ? 'alpha' : 'beta', price: i });
    const sorted: SearchRequest = { q: 'alpha', sort: 'price desc', limit: 3 };
    const first = index.search(sorted);
    expect(index.filterCache.size).toBe(0);
    expect(index.search(sorted)).toEqual(first);
    expect(index.filterCache.size).toBe(1);
    expect(index.search(sorted)).toEqual(first);
    // Sorted by score, a query is never cached.
    for (let i = 0; i < 3; i++) index.search({ q: 'beta' });
    expect(index.filterCache.size).toBe(1);
    // A dense conjunction holds two scratch accumulators, and gives them back clean.
    const dense = new ShardIndex(schema);
    for (let i = 0; i < 200; i++) dense.add(`d${i}`, { title: i % 3 === 0 ? 'alpha beta' : 'alpha', body: i % 2 === 0 ? 'beta' : 'gamma' });
    const and = dense.search({ q: 'alpha AND beta', limit: 5 });
    expect(and.total).toBe(133);
    const free = (dense.accumulators as unknown as { free: Array<{ count: number; marks: Uint8Array }> }).free;
    expect(free.length).toBe(2);
    for (const acc of free) expect({ count: acc.count, marked: acc.marks.some((m) => m !== 0) }).toEqual({ count: 0, marked: false });
    expect(dense.search({ q: 'alpha AND beta', limit: 5 })).toEqual(and);
    // A word far rarer than the other (more than 8 times fewer postings) leapfrogs: no accumulator.
    const sparse = new ShardIndex(schema);
    for (let i = 0; i < 200; i++) sparse.add(`d${i}`, { title: i % 50 === 0 ? 'alpha rare' : 'alpha' });
    expect(sparse.search({ q: 'alpha AND rare', limit: 5 }).total).toBe(4);
    expect((sparse.accumulators as unknown as { free: unknown[] }).free).toHaveLength(0);
    // One search is one use, also when a sort that skips gives up and reads every match.
    const other = new ShardIndex(schema);
    for (let i = 0; i < 100; i++) other.add(`d${i}`, i % 2 === 0 ? { title: 'alpha' } : { title: 'beta', price: i });
    const noPrices: SearchRequest = { q: 'alpha', sort: 'price desc', limit: 3, trackTotalHits: 5 };
    const once = other.search(noPrices);
    expect(other.filterCache.size).toBe(0);
    expect(other.search(noPrices)).toEqual(once);
    expect(other.filterCache.size).toBe(1);
  });

  it('an index clears its cache when compaction renumbers documents', () => {
    const index = new ShardIndex(schema);
    for (let i = 0; i < 3000; i++) index.add(`d${i}`, { category: i % 2 === 0 ? 'red' : 'blue', price: i });
    const req: SearchRequest = { filters: ['category:red'], sort: 'price asc', limit: 3 };
    expect(index.search(req).hits.map((h) => h.id)).toEqual(['d0', 'd2', 'd4']);
    expect(index.filterCache.size).toBe(1);
    // Deleting most documents compacts the index (renumbering what is left).
    for (let i = 0; i < 2500; i++) index.delete(`d${i}`);
    expect(index.filterCache.size).toBe(0);
    for (let i = 0; i < 2500; i++) index.add(`e${i}`, { category: 'blue', price: i });
    const r = index.search(req);
    expect(r.total).toBe(250);
    expect(r.hits.map((h) => h.id)).toEqual(['d2500', 'd2502', 'd2504']);
  });
});

describe('bad input', () => {
  const index = new ShardIndex(schema);
  index.add('d1', { title: 'alpha', category: 'red', price: 3 });

  it('refuses a malformed filter as a bad request, before anything is cached', () => {
    expect(() => index.search({ q: 'alpha', filters: ['price:[1 TO'] })).toThrow(expect.objectContaining({ code: 'SHX_BAD_QUERY', status: 400 }));
    expect(index.filterCache.size).toBe(0);
  });

  it('a filter on an unknown field matches nothing, with or without a sort', () => {
    expect(index.search({ q: 'alpha', filters: ['nosuch:x'] })).toEqual({ total: 0, hits: [] });
    expect(index.search({ q: 'alpha', filters: ['nosuch:x'], sort: 'price desc' })).toEqual({ total: 0, hits: [] });
  });

  it('a sort not by score still reports each hit its score', () => {
    const [hit] = index.search({ q: 'alpha', sort: 'price desc' }).hits;
    expect(hit!.score).toBe(index.search({ q: 'alpha' }).hits[0]!.score);
  });
});
