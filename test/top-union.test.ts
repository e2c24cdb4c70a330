// The top of a union of terms by score, skipping what cannot make the page (top-union.ts), gives
// exactly the page of scoring every match: the same documents, the same scores bit for bit, ties
// by id, and a total that is exact or, past trackTotalHits, a lower bound that says so.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ShardexError } from '../src/errors.js';
import { parseSchema, ShardIndex } from '../src/index/index.js';
import { Accumulator } from '../src/index/matches.js';
import { compareIds } from '../src/index/sort.js';
import { bm25 } from '../src/index/stats.js';
import { blockBounds, BLOCK, phraseFreq, topOfUnion, twoWordFreq, type UnionClause, type UnionTerm } from '../src/index/top-union.js';

interface Case {
  readonly maxDoc: number;
  readonly terms: UnionClause[];
  readonly live: Uint8Array;
  readonly mask: Uint32Array | null;
  readonly ids: string[];
}

const VOCABULARY = 4;

/** Postings ([doc, tf, ...]) and positions of one word in one field of token sequences. */
function postingsOf(fields: number[][], word: number): { postings: Int32Array; positions: Int32Array } {
  const p: number[] = [];
  const pos: number[] = [];
  fields.forEach((tokens, d) => {
    const at = tokens.flatMap((w, q) => (w === word ? [q] : []));
    if (at.length === 0) return;
    p.push(d, at.length);
    pos.push(...at);
  });
  return { postings: Int32Array.from(p), positions: Int32Array.from(pos) };
}

/**
 * Documents of two fields, each a short random sequence of a few words (so that many documents
 * tie on their score), and a union of term and phrase clauses over them.
 */
const arbCase: fc.Arbitrary<Case> = fc
  .record({
    maxDoc: fc.integer({ min: 1, max: 700 }),
    seed: fc.integer(),
    clauses: fc.array(
      fc.record({
        phrase: fc.array(fc.integer({ min: 0, max: VOCABULARY - 1 }), { minLength: 1, maxLength: 3 }),
        isPhrase: fc.boolean(),
        // Positions apart: 2 is a phrase whose middle word the analyzer dropped (a stop word).
        gap: fc.constantFrom(1, 2),
        lead: fc.nat(),
        field: fc.integer({ min: 0, max: 1 }),
        boost: fc.constantFrom(0, 0.5, 1, 2),
        idf: fc.constantFrom(0.2, 1.3, 4.1),
        avgdl: fc.constantFrom(4, 11.5),
      }),
      { minLength: 0, maxLength: 4 },
    ),
    skew: fc.constantFrom(0.05, 0.5, 0.9),
    deleted: fc.constantFrom(0, 0.1, 0.5),
    masked: fc.constantFrom(0, 0.3, 0.8),
  })
  .map(({ maxDoc, seed, clauses, skew, deleted, masked }) => {
    let s = seed >>> 0 || 1;
    const rand = (): number => {
      s ^= s << 13;
      s ^= s >>> 17;
      s ^= s << 5;
      return (s >>> 0) / 0x100000000;
    };
    // Word 0 is common, the others rarer (skew: how often a token is word 0).
    const word = (): number => (rand() < skew ? 0 : 1 + Math.floor(rand() * (VOCABULARY - 1)));
    const fields = [0, 1].map(() => Array.from({ length: maxDoc }, () => Array.from({ length: Math.floor(rand() * 7) }, word)));
    const lengths = fields.map((docs) => Int32Array.from(docs, (tokens) => tokens.length));
    const words = fields.map((docs) => Array.from({ length: VOCABULARY }, (_, w) => postingsOf(docs, w)));
    const terms: UnionClause[] = clauses.map((c) => {
      const parts = (c.isPhrase ? c.phrase : c.phrase.slice(0, 1)).map((w) => {
        const { postings, positions } = words[c.field]![w]!;
        return { postings, length: postings.length, positions, bounds: blockBounds(postings, postings.length, lengths[c.field]!) };
      });
      const scoring = { boost: c.boost, idf: c.idf, avgdl: c.avgdl, lengths: lengths[c.field]! };
      if (!c.isPhrase) return { ...parts[0]!, ...scoring };
      return { kind: 'phrase' as const, terms: parts, offsets: Int32Array.from(parts, (_, j) => j * c.gap), lead: c.lead % parts.length, ...scoring };
    });
    const live = Uint8Array.from({ length: maxDoc }, () => (rand() < deleted ? 0 : 1));
    let mask: Uint32Array | null = null;
    if (masked > 0) {
      mask = new Uint32Array(Math.ceil(maxDoc / 32));
      for (let d = 0; d < maxDoc; d++) if (rand() >= masked) mask[d >>> 5] |= 1 << (d & 31);
    }
    // Ids in another order than the documents, so that ties are broken by id, not by number.
    const ids = Array.from({ length: maxDoc }, (_, d) => `id-${(d * 7919) % 1009}-${d}`);
    return { maxDoc, terms, live, mask, ids };
  });

/** A clause's tf in each document: a term's tf, or how often a phrase's words sit one after another. */
function tfs(c: UnionClause): Map<number, number> {
  const out = new Map<number, number>();
  if (c.kind !== 'phrase') {
    for (let i = 0; i < c.length; i += 2) out.set(c.postings[i], c.postings[i + 1]);
    return out;
  }
  const at = c.terms.map((t) => {
    const byDoc = new Map<number, Set<number>>();
    let q = 0;
    for (let i = 0; i < t.length; i += 2) {
      byDoc.set(t.postings[i], new Set(t.positions.subarray(q, q + t.postings[i + 1])));
      q += t.postings[i + 1];
    }
    return byDoc;
  });
  for (const [d, first] of at[0]!) {
    let freq = 0;
    for (const q of first) if (c.terms.every((_, j) => at[j]!.get(d)?.has(q - c.offsets[0] + c.offsets[j]))) freq++;
    if (freq > 0) out.set(d, freq);
  }
  return out;
}

/** Every match scored, clause by clause in their order; sorted by score, then id. */
function reference(c: Case): { total: number; ranked: Array<{ doc: number; score: number }> } {
  const ranked: Array<{ doc: number; score: number }> = [];
  const freqs = c.terms.map(tfs);
  for (let d = 0; d < c.maxDoc; d++) {
    if (c.live[d] !== 1 || (c.mask !== null && (c.mask[d >>> 5] & (1 << (d & 31))) === 0)) continue;
    let score = 0;
    let matched = false;
    c.terms.forEach((t, i) => {
      const tf = freqs[i]!.get(d);
      if (tf === undefined) return;
      score += t.boost * bm25(tf, t.lengths[d]!, t.avgdl, t.idf);
      matched = true;
    });
    if (matched) ranked.push({ doc: d, score });
  }
  ranked.sort((a, b) => b.score - a.score || compareIds(c.ids[a.doc]!, c.ids[b.doc]!));
  return { total: ranked.length, ranked };
}

/** A term with tf 1 in every `every`th of `maxDoc` documents, all of length 10 (the average). */
function everyNth(maxDoc: number, every: number, idf: number): UnionTerm {
  const lengths = new Int32Array(maxDoc).fill(10);
  const p: number[] = [];
  for (let d = 0; d < maxDoc; d += every) p.push(d, 1);
  const postings = Int32Array.from(p);
  return { postings, length: postings.length, bounds: blockBounds(postings, postings.length, lengths), boost: 1, idf, avgdl: 10, lengths };
}

describe('top of a union of terms and phrases', () => {
  it('is the page of scoring every match, whatever the windows, ties, deletes, filters and phrase leads', () => {
    fc.assert(
      fc.property(arbCase, fc.integer({ min: 0, max: 15 }), fc.constantFrom(Infinity, 0, 1, 5, 50), fc.constantFrom(8, 64, 100, 4096), (c, k, countUpTo, window) => {
        const want = reference(c);
        const got = topOfUnion(c.terms, c.live, c.mask, c.maxDoc, k, countUpTo, (d) => c.ids[d], new Accumulator(c.maxDoc), window);
        const page = want.ranked.slice(0, k);
        expect(Array.from(got.docs)).toEqual(page.map((h) => h.doc));
        expect(Array.from(got.scores)).toEqual(page.map((h) => h.score));
        if (got.exact) expect(got.total).toBe(want.total);
        else {
          // A lower bound, given only once the count passed what was asked.
          expect(got.total).toBeGreaterThanOrEqual(countUpTo);
          expect(got.total).toBeLessThanOrEqual(want.total);
        }
        if (countUpTo === Infinity || countUpTo > want.total) expect(got.exact).toBe(true);
      }),
      { numRuns: 600 },
    );
  });

  it('with a floor (k better hits known elsewhere), is the page of the matches scoring at least it', () => {
    fc.assert(
      fc.property(arbCase, fc.integer({ min: 1, max: 15 }), fc.constantFrom(Infinity, 0, 5), fc.constantFrom(8, 4096), fc.nat(), (c, k, countUpTo, window, pick) => {
        const want = reference(c);
        // A floor that is one of the matches' scores (so ties at it are tried), or none.
        const floor = want.ranked.length === 0 ? 0 : want.ranked[pick % want.ranked.length]!.score;
        const got = topOfUnion(c.terms, c.live, c.mask, c.maxDoc, k, countUpTo, (d) => c.ids[d], new Accumulator(c.maxDoc), window, floor);
        const page = want.ranked.filter((h) => h.score >= floor).slice(0, k);
        expect(Array.from(got.docs)).toEqual(page.map((h) => h.doc));
        expect(Array.from(got.scores)).toEqual(page.map((h) => h.score));
        if (got.exact) expect(got.total).toBe(want.total);
      }),
      { numRuns: 400 },
    );
  });

  it('leaves the scratch accumulator empty', () => {
    fc.assert(
      fc.property(arbCase, fc.integer({ min: 0, max: 5 }), (c, k) => {
        const acc = new Accumulator(c.maxDoc);
        topOfUnion(c.terms, c.live, c.mask, c.maxDoc, k, Infinity, (d) => c.ids[d], acc, 64);
        expect(acc.marks.every((m) => m === 0)).toBe(true);
        expect(acc.count).toBe(0);
      }),
      { numRuns: 100 },
    );
  });

  it('skips the postings of a common term that cannot lift a document into the page', () => {
    // A rare term with a high idf and a common one with a low idf: once the page holds ten
    // documents of the rare term, the common term alone cannot compete.
    const maxDoc = 20_000;
    const term = (every: number, idf: number): UnionTerm => everyNth(maxDoc, every, idf);
    const rare = term(97, 5);
    const common = term(1, 0.1);
    const ids = Array.from({ length: maxDoc }, (_, d) => `d${d}`);
    const live = new Uint8Array(maxDoc).fill(1);
    const counted = topOfUnion([common, rare], live, null, maxDoc, 10, Infinity, (d) => ids[d], new Accumulator(maxDoc));
    const lowerBound = topOfUnion([common, rare], live, null, maxDoc, 10, 1000, (d) => ids[d], new Accumulator(maxDoc));
    const want = reference({ maxDoc, terms: [common, rare], live, mask: null, ids });
    for (const got of [counted, lowerBound]) {
      expect(Array.from(got.docs)).toEqual(want.ranked.slice(0, 10).map((h) => h.doc));
      expect(Array.from(got.scores)).toEqual(want.ranked.slice(0, 10).map((h) => h.score));
    }
    expect(counted).toMatchObject({ total: maxDoc, exact: true });
    expect(lowerBound.exact).toBe(false);
    expect(lowerBound.total).toBeGreaterThanOrEqual(1000);
    // Scoring every match would score every posting of both terms.
    const all = (common.length + rare.length) / 2;
    expect(counted.scored).toBeLessThan(all / 2);
    expect(lowerBound.scored).toBeLessThan(all / 4);
  });

  it('ends the count near countUpTo, not a whole window past it, and still at or past it with a filter', () => {
    // A term in every third document: a window of 4,096 documents holds 1,366 of its matches, each
    // scored while counting. The first window is cut to the documents 1,000 matches need (with a
    // margin); with a filter passing a quarter of them, to the density the windows met.
    const maxDoc = 60_000;
    const term = everyNth(maxDoc, 3, 1);
    const ids = Array.from({ length: maxDoc }, (_, d) => `d${String(d).padStart(5, '0')}`);
    const live = new Uint8Array(maxDoc).fill(1);
    const mask = new Uint32Array(Math.ceil(maxDoc / 32));
    for (let d = 0; d < maxDoc; d += 4) mask[d >>> 5]! |= 1 << (d & 31);
    for (const filter of [null, mask]) {
      const want = reference({ maxDoc, terms: [term], live, mask: filter, ids });
      const got = topOfUnion([term], live, filter, maxDoc, 10, 1000, (d) => ids[d]!, new Accumulator(maxDoc));
      expect(Array.from(got.docs)).toEqual(want.ranked.slice(0, 10).map((h) => h.doc));
      expect(got.exact).toBe(false);
      expect(got.total).toBeGreaterThanOrEqual(1000);
      expect(got.total).toBeLessThan(1150);
    }
  });

  it('scores a candidate in full only when the non-essential terms it holds can lift it into the page', () => {
    // The page is the documents holding a, b and c. Past the first window, b and c are
    // non-essential: a's documents are the candidates, and each could reach the page by its
    // bounds alone. Most lack b, the rarer of the two: once b's score at a document (none) replaces
    // b's bound, it falls short, and neither c's postings nor a full score are read for it.
    const maxDoc = 20_000;
    const term = (every: number, idf: number): UnionTerm => everyNth(maxDoc, every, idf);
    const a = term(3, 5);
    const b = term(101, 4);
    const c = term(1, 0.2);
    const ids = Array.from({ length: maxDoc }, (_, d) => `d${String(d).padStart(5, '0')}`);
    const live = new Uint8Array(maxDoc).fill(1);
    const want = reference({ maxDoc, terms: [a, b, c], live, mask: null, ids });
    for (const countUpTo of [Infinity, 1000]) {
      const got = topOfUnion([a, b, c], live, null, maxDoc, 10, countUpTo, (d) => ids[d]!, new Accumulator(maxDoc), 1024);
      expect(Array.from(got.docs)).toEqual(want.ranked.slice(0, 10).map((h) => h.doc));
      expect(Array.from(got.scores)).toEqual(want.ranked.slice(0, 10).map((h) => h.score));
      // a's documents number 6,667, of which 67 hold b. Scored in full: those, and at most a's
      // documents up to the end of the window in which the page fills with a, b and c (the tenth
      // such document is 3,030; windows of 1,024).
      expect(got.full).toBeLessThan(3072 / 3 + 67);
    }
  });

  it('past the count, steps over the blocks of a term whose best score cannot make the page', () => {
    // One term in every document, tf 1 but in a short field every 500th document: those score
    // highest, and every block of plain documents (tf 1 in a long field) is below the page.
    const maxDoc = 40_000;
    const lengths = Int32Array.from({ length: maxDoc }, (_, d) => (d % 500 === 0 ? 2 : 30));
    const postings = Int32Array.from({ length: 2 * maxDoc }, (_, i) => (i % 2 === 0 ? i / 2 : 1));
    const term: UnionTerm = { postings, length: postings.length, bounds: blockBounds(postings, postings.length, lengths), boost: 1, idf: 1.5, avgdl: 20, lengths };
    const ids = Array.from({ length: maxDoc }, (_, d) => `d${String(d).padStart(5, '0')}`);
    const live = new Uint8Array(maxDoc).fill(1);
    const want = reference({ maxDoc, terms: [term], live, mask: null, ids });
    const counted = topOfUnion([term], live, null, maxDoc, 10, Infinity, (d) => ids[d]!, new Accumulator(maxDoc));
    const bounded = topOfUnion([term], live, null, maxDoc, 10, 100, (d) => ids[d]!, new Accumulator(maxDoc));
    for (const got of [counted, bounded]) {
      expect(Array.from(got.docs)).toEqual(want.ranked.slice(0, 10).map((h) => h.doc));
      expect(Array.from(got.scores)).toEqual(want.ranked.slice(0, 10).map((h) => h.score));
    }
    expect(counted).toMatchObject({ total: maxDoc, exact: true, scored: maxDoc });
    expect(bounded.exact).toBe(false);
    // The first two windows of 4,096 documents are read whole: the first counts and fills the
    // page, which holds only short-field documents once the second is in. Past them only the
    // blocks holding a short-field document (one in 500: at most 80 blocks of 64) are scored.
    expect(bounded.scored).toBeLessThan(2 * 4096 + 81 * BLOCK);
    // With the page's bar known from the start (other segments searched first), no window is
    // read whole: only the blocks holding a short-field document are scored.
    const floor = want.ranked[9]!.score;
    const floored = topOfUnion([term], live, null, maxDoc, 10, 0, (d) => ids[d]!, new Accumulator(maxDoc), undefined, floor);
    expect(Array.from(floored.docs)).toEqual(want.ranked.slice(0, 10).map((h) => h.doc));
    expect(floored.scored).toBeLessThanOrEqual(81 * BLOCK);
  });

  it('reads the positions of a common phrase only where the document can still make the page', () => {
    // Every document holds the phrase "a b" once in a long field; one in 97 holds the rare word c.
    const maxDoc = 20_000;
    const lengths = new Int32Array(maxDoc).fill(40);
    const everyDoc = (position: number) => {
      const postings = new Int32Array(2 * maxDoc);
      for (let d = 0; d < maxDoc; d++) postings.set([d, 1], 2 * d);
      return { postings, length: postings.length, positions: new Int32Array(maxDoc).fill(position), bounds: blockBounds(postings, postings.length, lengths) };
    };
    const phrase: UnionClause = { kind: 'phrase', terms: [everyDoc(3), everyDoc(4)], offsets: Int32Array.of(0, 1), lead: 0, boost: 1, idf: 0.2, avgdl: 40, lengths };
    const c: number[] = [];
    for (let d = 0; d < maxDoc; d += 97) c.push(d, 1);
    const rare = Int32Array.from(c);
    const short = new Int32Array(maxDoc).fill(5);
    const word: UnionClause = { postings: rare, length: rare.length, bounds: blockBounds(rare, rare.length, short), boost: 1, idf: 5, avgdl: 5, lengths: short };
    const ids = Array.from({ length: maxDoc }, (_, d) => `d${d}`);
    const live = new Uint8Array(maxDoc).fill(1);
    const want = reference({ maxDoc, terms: [phrase, word], live, mask: null, ids });
    const counted = topOfUnion([phrase, word], live, null, maxDoc, 10, Infinity, (d) => ids[d]!, new Accumulator(maxDoc));
    const bounded = topOfUnion([phrase, word], live, null, maxDoc, 10, 1000, (d) => ids[d]!, new Accumulator(maxDoc));
    for (const got of [counted, bounded]) {
      expect(Array.from(got.docs)).toEqual(want.ranked.slice(0, 10).map((h) => h.doc));
      expect(Array.from(got.scores)).toEqual(want.ranked.slice(0, 10).map((h) => h.score));
    }
    expect(counted).toMatchObject({ total: maxDoc, exact: true });
    // Counting every match reads every document's positions; past 1,000 only the rare word's are.
    expect(counted.scored).toBeGreaterThanOrEqual(maxDoc);
    expect(bounded.exact).toBe(false);
    expect(bounded.scored).toBeLessThan(maxDoc / 3);
  });

  it('keeps per-block bounds of the greatest tf and the shortest field', () => {
    const postings = Int32Array.from({ length: 2 * (BLOCK + 3) }, (_, i) => (i % 2 === 0 ? i / 2 : i === 2 * 5 + 1 ? 4 : 1));
    const lengths = Int32Array.from({ length: BLOCK + 3 }, (_, d) => (d === BLOCK + 1 ? 2 : 9));
    const b = blockBounds(postings, postings.length, lengths);
    expect(Array.from(b.maxTf)).toEqual([4, 1]);
    expect(Array.from(b.minLength)).toEqual([9, 2]);
    // Where each block's positions start: the tfs before it (63 of 1 and one of 4).
    expect(Array.from(b.posStart)).toEqual([0, 67]);
  });
});

describe('twoWordFreq (a two-word phrase in one document)', () => {
  it('counts each position of the first word whose second word sits at its offset, whatever the positions, their gap and which word comes first', () => {
    const positions = fc.uniqueArray(fc.integer({ min: 0, max: 40 }), { maxLength: 12 }).map((xs) => Int32Array.from(xs.sort((a, b) => a - b)));
    fc.assert(
      fc.property(positions, positions, fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 3 }), (a, b, o0, o1) => {
        // Padding around each list: the counts read only their own slice.
        const pa = Int32Array.of(-5, ...a, 99);
        const pb = Int32Array.of(-7, -6, ...b, 98);
        // phraseFreq hands two words to twoWordFreq: the count is checked against the positions themselves.
        const inB = new Set(b);
        const want = [...a].filter((q) => inB.has(q - o0 + o1)).length;
        expect(phraseFreq([pa, pb], Int32Array.of(1, 2), Int32Array.of(1 + a.length, 2 + b.length), Int32Array.of(o0, o1), new Int32Array(2))).toBe(want);
        expect(twoWordFreq(pa, 1, 1 + a.length, pb, 2, 2 + b.length, o0 - o1)).toBe(want);
        // Led by the second word, as when it is the rarer.
        expect(twoWordFreq(pb, 2, 2 + b.length, pa, 1, 1 + a.length, o1 - o0)).toBe(want);
      }),
      { numRuns: 500 },
    );
  });
});

describe('trackTotalHits', () => {
  const schema = parseSchema({ title: 'text', body: 'text', category: 'keyword' });
  const index = new ShardIndex(schema);
  for (let i = 0; i < 3000; i++) index.add(`doc-${i}`, { title: i % 13 === 0 ? 'river stone' : 'stone', body: `stone ${i % 3 === 0 ? 'river' : 'hill'} ${'word '.repeat(i % 7)}`, category: i % 2 === 0 ? 'even' : 'odd' });

  it('counts exactly by default, and says when the total is a lower bound', () => {
    const exact = index.search({ q: 'river OR stone', limit: 5 });
    expect(exact).toMatchObject({ total: 3000 });
    expect(exact.totalRelation).toBeUndefined();
    const bounded = index.search({ q: 'river OR stone', limit: 5, trackTotalHits: 100 });
    expect(bounded.hits).toEqual(exact.hits);
    expect(bounded.totalRelation).toBe('gte');
    expect(bounded.total).toBeGreaterThanOrEqual(100);
    expect(bounded.total).toBeLessThanOrEqual(3000);
    const none = index.search({ q: 'river', limit: 5, trackTotalHits: false, filters: ['category:even'] });
    expect(none.hits).toEqual(index.search({ q: 'river', limit: 5, filters: ['category:even'] }).hits);
    // A count that reaches every match before the limit is exact.
    expect(index.search({ q: 'river', limit: 5, trackTotalHits: 10_000 })).toMatchObject({ total: 1000 + 231 - 77 });
    expect(index.search({ q: 'river', limit: 5, trackTotalHits: 10_000 }).totalRelation).toBeUndefined();
  });

  it('is exact for queries that are not a union of terms, or not sorted by score alone', () => {
    for (const req of [{ q: 'river -hill' }, { q: 'river AND stone' }, { q: 'river', sort: 'id asc' }, { q: 'stone*' }]) {
      const r = index.search({ ...req, trackTotalHits: 1 });
      expect(r.totalRelation).toBeUndefined();
      expect(r.total).toBe(index.search(req).total);
    }
  });

  it('a sort on a number reads, past the count, only documents that can still make the page', () => {
    const byPrice = new ShardIndex(parseSchema({ title: 'text', price: 'number' }));
    for (let i = 0; i < 20_000; i++) byPrice.add(`p${i}`, { title: 'lamp', price: (i * 7919) % 20_000 });
    for (const sort of ['price desc', 'price asc', 'price desc,id asc']) {
      const exact = byPrice.search({ q: 'lamp', sort, limit: 10 });
      const bounded = byPrice.search({ q: 'lamp', sort, limit: 10, trackTotalHits: 100 });
      expect(bounded.hits).toEqual(exact.hits);
      expect(exact).toMatchObject({ total: 20_000 });
      // Counted: the first 100, then only the documents priced as well as the 10th best so far.
      expect(bounded.totalRelation).toBe('gte');
      expect(bounded.total).toBeGreaterThanOrEqual(100);
      expect(bounded.total).toBeLessThan(1_000);
    }
    // Deletes after the value order was made: the deleted documents are gone from the page.
    const before = byPrice.search({ q: 'lamp', sort: 'price desc', limit: 5, trackTotalHits: 100 });
    for (const h of before.hits) byPrice.delete(h.id);
    const deleted = byPrice.search({ q: 'lamp', sort: 'price desc', limit: 5, trackTotalHits: 100 });
    expect(deleted.hits).toEqual(byPrice.search({ q: 'lamp', sort: 'price desc', limit: 5 }).hits);
    expect(deleted.hits[0]!.sortValues).toEqual([(before.hits[4]!.sortValues[0] as number) - 1]);
    byPrice.add('late', { title: 'lamp', price: 19_999.5 });
    const after = byPrice.search({ q: 'lamp', sort: 'price desc', limit: 5, trackTotalHits: 100 });
    expect(after.hits).toEqual(byPrice.search({ q: 'lamp', sort: 'price desc', limit: 5 }).hits);
    expect(after.hits[0]!.id).toBe('late');
    for (const h of before.hits) expect(after.hits.map((x) => x.id)).not.toContain(h.id);
  });

  it('a sort on a number gives the page of reading every match, whatever ties, gaps, deletes and filters', () => {
    const arbDocs = fc.array(
      fc.record({ w: fc.array(fc.constantFrom('a', 'b', 'c'), { minLength: 1, maxLength: 4 }), price: fc.option(fc.integer({ min: 0, max: 30 }), { freq: 8 }), cat: fc.constantFrom('x', 'y') }),
      { minLength: 1, maxLength: 1500, size: 'max' },
    );
    fc.assert(
      fc.property(
        arbDocs,
        fc.integer({ min: 0, max: 6 }),
        fc.constantFrom('a', 'b', 'a OR c', 'a AND b', '"a b"', '*'),
        fc.constantFrom('price desc', 'price asc', 'price desc,cat asc', 'price asc,id desc'),
        fc.record({ offset: fc.integer({ min: 0, max: 3 }), limit: fc.integer({ min: 0, max: 12 }), track: fc.constantFrom(0, 1, 10, 100), filtered: fc.boolean() }),
        (docs, deleteEvery, q, sort, { offset, limit, track, filtered }) => {
          const ix = new ShardIndex(parseSchema({ w: 'text', price: 'number', cat: 'keyword' }));
          docs.forEach((d, i) => ix.add(`d${i}`, { w: d.w.join(' '), cat: d.cat, ...(d.price !== null && { price: d.price }) }));
          if (deleteEvery > 0) for (let i = 0; i < docs.length; i += deleteEvery + 1) ix.delete(`d${i}`);
          const req = { q, sort, offset, limit, ...(filtered && { filters: ['cat:x'] }) };
          const exact = ix.search(req);
          const bounded = ix.search({ ...req, trackTotalHits: track });
          expect(bounded.hits).toEqual(exact.hits);
          if (bounded.totalRelation === 'gte') {
            expect(bounded.total).toBeGreaterThanOrEqual(track);
            expect(bounded.total).toBeLessThanOrEqual(exact.total);
          } else {
            expect(bounded.total).toBe(exact.total);
          }
        },
      ),
      // Shrinking arrays of a thousand documents takes minutes: report the first failure as found.
      { numRuns: 150, endOnFailure: true },
    );
  });

  it('refuses what is not true, false or a non-negative integer, naming the parameter', () => {
    for (const bad of [-1, 1.5, 'all', null, Number.NaN]) {
      let err: unknown;
      try {
        index.search({ q: 'river', trackTotalHits: bad as never });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ShardexError);
      expect((err as ShardexError).code).toBe('SHX_BAD_REQUEST');
      expect((err as ShardexError).message).toMatch(/trackTotalHits must be true, false or a non-negative integer/);
    }
  });
});
