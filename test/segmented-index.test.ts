// A SegmentedIndex answers exactly as one ShardIndex holding the same documents: same hits,
// scores, totals, sort values and statistics, whatever the writes, seals and merges in between.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../src/corpus.js';
import { mergeIndexes, parseSchema, pickMerge, SegmentedIndex, ShardIndex, type IndexStats, type SearchRequest, type Segment, type StoredDoc } from '../src/index/index.js';

const schema = parseSchema({ title: 'text', tag: 'keyword', price: 'number' });
const WORDS = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta', 'iota', 'kappa'];

function doc(rand: () => number, i: number): StoredDoc {
  const w = (): string => WORDS[Math.floor(rand() * WORDS.length)]!;
  return {
    title: `${w()} ${w()} ${w()}`,
    tag: rand() < 0.3 ? ['red', w()] : w(),
    price: Math.round(rand() * 1000) / 10,
    // Undeclared fields, some only in some documents (and so only in some segments).
    ...(i % 3 === 0 && { note: `${w()} note ${i}` }),
    ...(i % 4 === 0 && { rank: i % 17 }),
  };
}

const QUERIES: SearchRequest[] = [
  { q: 'alpha' },
  { q: 'alpha beta', limit: 25 },
  { q: 'title:"alpha delta"', limit: 20 },
  { q: 'alpha OR gamma', sort: 'price desc', limit: 15, offset: 5 },
  { q: '*', filters: ['tag:red'], sort: 'tag asc,id asc', limit: 30 },
  { q: 'note:alpha', sort: 'rank desc', limit: 25 },
  { q: 'price:[10 TO 40]', sort: 'price asc', limit: 50, offset: 7 },
  { q: 'zeta -eta', defaultOperator: 'AND', limit: 100 },
  { q: '*', sort: 'rank asc', limit: 40 },
];

const byKey = <T>(key: (x: T) => string) => (a: T, b: T): number => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0);
function normalized(s: IndexStats): IndexStats {
  return {
    fields: [...s.fields].sort(byKey((f) => f.field)),
    terms: [...s.terms].sort(byKey((t) => `${t.field}\u0000${t.term}`)),
    sortFields: [...s.sortFields].sort(byKey((f) => f.field)),
  };
}

function check(seg: SegmentedIndex, one: ShardIndex): void {
  expect(seg.size).toBe(one.size);
  for (const q of QUERIES) {
    expect(seg.search(q), JSON.stringify(q)).toEqual(one.search(q));
    expect(normalized(seg.collectStats(q))).toEqual(normalized(one.collectStats(q)));
  }
  const m1 = seg.matcher({ q: 'alpha', filters: ['tag:red'] });
  const m2 = one.matcher({ q: 'alpha', filters: ['tag:red'] });
  for (let i = 0; i < 400; i++) expect(m1(`d${i}`)).toBe(m2(`d${i}`));
}

describe('SegmentedIndex', () => {
  it('answers as one index under adds, replacements, deletes and seals', () => {
    for (const seed of [1, 2, 3]) {
      const rand = mulberry32(seed);
      const seg = new SegmentedIndex(schema);
      const one = new ShardIndex(schema);
      for (let round = 0; round < 6; round++) {
        for (let k = 0; k < 120; k++) {
          const i = Math.floor(rand() * 400);
          if (rand() < 0.2) {
            expect(seg.delete(`d${i}`)).toBe(one.delete(`d${i}`));
          } else {
            const d = doc(rand, i);
            seg.add(`d${i}`, d);
            one.add(`d${i}`, d);
          }
        }
        seg.seal(`s${seed}-${round}`);
        check(seg, one);
      }
      expect(seg.segments.length).toBeGreaterThan(3);
    }
  });

  it('past trackTotalHits, counts in later segments only what the earlier ones left to count, with the same page', () => {
    const seg = new SegmentedIndex(schema);
    const one = new ShardIndex(schema);
    for (let s = 0; s < 10; s++) {
      for (let i = 0; i < 300; i++) {
        const d = { title: `alpha ${WORDS[(s * 300 + i) % WORDS.length]} ${i % 7 === 0 ? 'alpha' : 'beta'}` };
        seg.add(`s${s}-${i}`, d);
        one.add(`s${s}-${i}`, d);
      }
      seg.seal(`seg${s}`);
    }
    const exact = one.search({ q: 'alpha OR gamma', limit: 10 });
    expect(exact.total).toBe(3000);
    const bounded = seg.search({ q: 'alpha OR gamma', limit: 10, trackTotalHits: 100 });
    expect(bounded.hits).toEqual(exact.hits);
    expect(bounded.totalRelation).toBe('gte');
    expect(bounded.total).toBeGreaterThanOrEqual(100);
    // Each of the 10 segments counting up to 100 on its own would count all 3,000.
    expect(bounded.total).toBeLessThan(3000);
  });

  it('past trackTotalHits, a page sorted by a number column reads in later segments only the documents that can still make it', () => {
    const seg = new SegmentedIndex(schema);
    const one = new ShardIndex(schema);
    // The largest segment (searched first) holds the cheapest and the dearest; the others, prices between.
    const sizes = [400, 300, 200, 100];
    let n = 0;
    sizes.forEach((size, s) => {
      for (let i = 0; i < size; i++) {
        const price = s > 0 ? s * 1000 + ((i * 37) % size) : i % 2 === 0 ? i : 100_000 + i;
        const d = { title: i % 3 === 0 ? 'alpha beta' : 'alpha', price };
        seg.add(`p${n}`, d);
        one.add(`p${n++}`, d);
      }
      seg.seal(`seg${s}`);
    });
    for (const sort of ['price desc', 'price asc']) {
      for (const track of [0, 10, 350]) {
        const req: SearchRequest = { q: 'alpha', sort, limit: 10, trackTotalHits: track };
        const exact = one.search({ ...req, trackTotalHits: true });
        const r = seg.search(req);
        expect(r.hits, `${sort}, trackTotalHits ${track}`).toEqual(exact.hits);
        expect(r.total).toBeGreaterThanOrEqual(Math.min(track, exact.total));
        expect(r.totalRelation).toBe('gte');
        // Once the earlier segments hold ten hits, a later one is read from that bar on, not
        // from its first documents. Here the first segment counts its 400 matches; the second
        // finds that more match (a first match past them: the total is a lower bound from then
        // on); the last two hold no price that reaches the bar and are not read at all.
        expect(r.total).toBeLessThanOrEqual(seg.segments[0]!.index.search(req).total + 1);
      }
    }
    // Counting every hit still counts every hit.
    expect(seg.search({ q: 'alpha', sort: 'price desc', limit: 10 })).toEqual(one.search({ q: 'alpha', sort: 'price desc', limit: 10 }));
  });

  it('remembers the statistics of a query until the next change, and hands them out frozen', () => {
    const seg = new SegmentedIndex(schema);
    seg.add('a', { title: 'alpha beta' });
    seg.seal('one');
    seg.add('b', { title: 'alpha' });
    const first = seg.collectStats({ q: 'alpha' });
    expect(seg.collectStats({ q: 'alpha' })).toBe(first);
    expect(Object.isFrozen(first) && Object.isFrozen(first.terms) && Object.isFrozen(first.terms[0])).toBe(true);
    expect(seg.collectStats({ q: 'alpha', sort: 'price desc' })).not.toBe(first);
    const docFreq = (): number => seg.collectStats({ q: 'alpha' }).terms.find((t) => t.field === 'title')!.docFreq;
    expect(docFreq()).toBe(2);
    seg.add('c', { title: 'alpha gamma' });
    expect(docFreq()).toBe(3);
    seg.seal('two');
    seg.delete('a');
    expect(docFreq()).toBe(2);
    const before = seg.collectStats({ q: 'alpha' });
    seg.replace(seg.segments, { name: 'merged', index: mergeIndexes(schema, seg.segments.map((s) => s.index)), deleted: new Set() });
    expect(seg.collectStats({ q: 'alpha' })).not.toBe(before);
    expect(docFreq()).toBe(2);
    seg.delete('b');
    seg.delete('c');
    seg.add('d', { title: 'beta' });
    seg.seal('three');
    seg.dropEmpty();
    expect(seg.collectStats({ q: 'alpha' }).terms).toEqual([]);
  });

  it('keeps the ids of its parts disjoint: a replaced document is deleted from its older segment and listed there', () => {
    const seg = new SegmentedIndex(schema);
    seg.add('a', { title: 'alpha' });
    seg.add('b', { title: 'beta' });
    const first = seg.seal('one')!;
    seg.add('a', { title: 'gamma' });
    seg.delete('b');
    expect([...first.deleted].sort()).toEqual(['a', 'b']);
    expect(seg.search({ q: 'alpha' }).total).toBe(0);
    expect(seg.search({ q: 'gamma' }).hits.map((h) => h.id)).toEqual(['a']);
    expect(seg.size).toBe(1);
    // Every document of 'one' is gone: it is dropped; 'a' lives in the buffer.
    expect(seg.dropEmpty().map((s) => s.name)).toEqual(['one']);
    seg.seal('two');
    seg.delete('a');
    expect(seg.dropEmpty().map((s) => s.name)).toEqual(['two']);
    expect(seg.segments).toEqual([]);
  });

  it('refuses a bad document without changing anything, and a bad page as one index does', () => {
    const seg = new SegmentedIndex(parseSchema({ price: 'number' }));
    seg.add('a', { price: 1 });
    seg.seal('one');
    expect(() => seg.add('a', { price: 'not a number' })).toThrow();
    expect(seg.search({ q: '*' }).hits.map((h) => h.id)).toEqual(['a']);
    expect(() => seg.search({ q: '*', offset: -1 })).toThrow(/offset must be a non-negative integer/);
    expect(() => seg.search({ q: '*', limit: 10_001 })).toThrow(/must not exceed/);
  });

  it('swaps a merged segment in, dropping from it what moved on while it was built', () => {
    const rand = mulberry32(9);
    const seg = new SegmentedIndex(schema);
    const one = new ShardIndex(schema);
    const docs = new Map<string, StoredDoc>();
    const put = (id: string, d: StoredDoc): void => {
      seg.add(id, d);
      one.add(id, d);
      docs.set(id, d);
    };
    for (let i = 0; i < 300; i++) {
      put(`d${i}`, doc(rand, i));
      if (i % 100 === 99) seg.seal(`s${i}`);
    }
    const sources = seg.segments.slice(0, 2);
    // The merge reads the sources' documents...
    const merged = new ShardIndex(schema);
    for (const s of sources) for (const id of s.index.liveIds()) merged.add(id, docs.get(id)!);
    // ...while writes go on.
    put('d5', doc(rand, 5));
    seg.delete('d150');
    one.delete('d150');
    seg.replace(sources, { name: 'merged', index: merged, deleted: new Set() });
    expect(seg.segments.map((s) => s.name)).toEqual(['merged', 's299']);
    expect([...seg.segments[0]!.deleted].sort()).toEqual(['d150', 'd5']);
    check(seg, one);
  });
});

describe('mergeIndexes (segments combined without analysing documents again)', () => {
  it('answers as the segments did together, and keeps doing so under later replacements and deletes', () => {
    for (const seed of [4, 5]) {
      const rand = mulberry32(seed);
      const seg = new SegmentedIndex(schema);
      const one = new ShardIndex(schema);
      const write = (n: number): void => {
        for (let k = 0; k < n; k++) {
          const i = Math.floor(rand() * 400);
          if (rand() < 0.25) {
            seg.delete(`d${i}`);
            one.delete(`d${i}`);
          } else {
            const d = doc(rand, i);
            seg.add(`d${i}`, d);
            one.add(`d${i}`, d);
          }
        }
      };
      for (let round = 0; round < 5; round++) {
        write(150);
        seg.seal(`s${round}`);
      }
      const sources = seg.segments.slice(0, 4);
      const merged = mergeIndexes(schema, sources.map((s) => s.index));
      expect(merged.size).toBe(sources.reduce((n, s) => n + s.index.size, 0));
      seg.replace(sources, { name: 'merged', index: merged, deleted: new Set() });
      expect(seg.segments.map((s) => s.name)).toEqual(['merged', 's4']);
      check(seg, one);
      // Deletes and replacements of merged documents use its forward index and statistics.
      write(300);
      check(seg, one);
      // A merge of a merge, with the buffer sealed too.
      seg.seal('last');
      seg.replace(seg.segments, { name: 'all', index: mergeIndexes(schema, seg.segments.map((s) => s.index)), deleted: new Set() });
      expect(seg.segments).toHaveLength(1);
      check(seg, one);
      expect(seg.segments[0]!.index.exportState().deadDocs).toBe(0);
    }
  });
});

describe('pickMerge', () => {
  const policy = { segmentsPerTier: 3, maxSegmentDocs: 1000, floorSegmentDocs: 10, reclaimDeletes: 1 };
  const segment = (name: string, docs: number, deleted = 0): Segment => {
    const index = new ShardIndex(schema);
    for (let i = 0; i < docs; i++) index.add(`${name}-${i}`, { title: 'alpha' });
    return { name, index, deleted: new Set(Array.from({ length: deleted }, (_, i) => `gone${i}`)) };
  };
  const names = (s: Segment[] | undefined): string[] | undefined => s?.map((x) => x.name);

  it('merges nothing while every tier has fewer than segmentsPerTier segments', () => {
    expect(pickMerge([segment('a', 5), segment('b', 5), segment('c', 50), segment('d', 50)], policy)).toBeUndefined();
  });

  it('merges the smallest segments of the smallest full tier', () => {
    const s = [segment('big1', 50), segment('s1', 4), segment('big2', 60), segment('s2', 2), segment('big3', 70), segment('s3', 3), segment('s4', 9)];
    expect(names(pickMerge(s, policy))).toEqual(['s2', 's3', 's1']);
    expect(names(pickMerge(s.filter((x) => x.name.startsWith('big')), policy))).toEqual(['big1', 'big2', 'big3']);
  });

  it('never exceeds maxSegmentDocs, and leaves segments of more than half of it alone', () => {
    const s = [segment('a', 400), segment('b', 450), segment('c', 300), segment('d', 600)];
    expect(names(pickMerge(s, policy))).toEqual(['c', 'a']);
    expect(pickMerge([segment('x', 600), segment('y', 700), segment('z', 800)], policy)).toBeUndefined();
  });

  it('idle, merges every segment below the floor however few, and otherwise picks as when busy', () => {
    const s = [segment('big', 50), segment('s1', 4), segment('s2', 2), segment('mid', 20)];
    expect(pickMerge(s, policy)).toBeUndefined();
    expect(names(pickMerge(s, policy, { idle: true }))?.sort()).toEqual(['s1', 's2']);
    // One small segment: nothing to merge it with.
    expect(pickMerge([segment('big', 50), segment('s1', 4)], policy, { idle: true })).toBeUndefined();
    // A full tier still merges as when busy.
    expect(names(pickMerge([segment('m1', 20), segment('m2', 30), segment('m3', 40), segment('s1', 4)], policy, { idle: true }))).toEqual(['m1', 'm2', 'm3']);
    // A mostly deleted segment still comes first.
    expect(names(pickMerge([...s, segment('d', 20, 30)], policy, { idle: true }))).toEqual(['d']);
  });

  it('rewrites a mostly deleted segment alone, first', () => {
    const s = [segment('a', 5), segment('b', 5), segment('c', 5), segment('d', 20, 30)];
    expect(names(pickMerge(s, policy))).toEqual(['d']);
  });
});
