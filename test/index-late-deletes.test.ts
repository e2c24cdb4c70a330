// A segment file keeps no forward index (which terms each document holds), so a document of a
// reopened segment is removed late: its terms' document frequencies follow when each term is
// read (InvertedField.removeLateDoc, docFreqOf). The promise kept: a reopened index, whatever
// deletes, overwrites and adds it takes, gives the statistics, hits and scores of an index built
// from its live documents alone, before and after it compacts.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeSegment, encodeSegment, parseSchema, ShardIndex, type SearchRequest, type StoredDoc } from '../src/index/index.js';

const schema = parseSchema({ title: 'text', body: 'text', tag: 'keyword', n: 'number' });
const WORDS = ['ash', 'birch', 'cedar', 'elm', 'fir', 'hazel', 'larch', 'oak', 'pine', 'yew'];
const TAGS = ['red', 'green', 'blue'];

const docArb: fc.Arbitrary<StoredDoc> = fc.record(
  {
    title: fc.array(fc.constantFrom(...WORDS), { minLength: 1, maxLength: 3 }).map((w) => w.join(' ')),
    body: fc.array(fc.constantFrom(...WORDS), { minLength: 1, maxLength: 12 }).map((w) => w.join(' ')),
    tag: fc.constantFrom(...TAGS),
    n: fc.integer({ min: 0, max: 50 }),
  },
  { requiredKeys: ['body'] },
);

type Op = { kind: 'delete'; id: number } | { kind: 'put'; id: number; doc: StoredDoc } | { kind: 'compact' };
const ID_SPACE = 40;
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('delete' as const), id: fc.nat(ID_SPACE - 1) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('put' as const), id: fc.nat(ID_SPACE - 1), doc: docArb }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'compact' as const }) },
);

const QUERIES: SearchRequest[] = [
  ...WORDS.map((w) => ({ q: w, limit: 100 })),
  ...TAGS.map((t) => ({ q: `tag:${t}`, limit: 100 })),
  { q: 'oak OR pine OR title:elm', limit: 100 },
  { q: 'birch AND cedar', limit: 100 },
  { q: '"ash birch"', limit: 100 },
  { q: 'fir', filters: ['tag:red'], sort: 'n desc', limit: 100 },
];

const reopen = (ix: ShardIndex): ShardIndex => ShardIndex.restore(schema, decodeSegment(Buffer.concat(encodeSegment(ix.exportState(), { seq: 1, fingerprint: 'f' }))).state);

/** Expects `got` to answer every query and give every statistic as an index of `live` alone does. */
function expectAsRebuilt(got: ShardIndex, live: ReadonlyMap<string, StoredDoc>): void {
  const want = new ShardIndex(schema);
  for (const [id, doc] of [...live].sort(([a], [b]) => (a < b ? -1 : 1))) want.add(id, doc);
  expect(got.size).toBe(want.size);
  for (const q of QUERIES) {
    expect(got.collectStats(q), JSON.stringify(q.q)).toEqual(want.collectStats(q));
    expect(got.search(q), JSON.stringify(q.q)).toEqual(want.search(q));
  }
}

describe('a reopened segment', () => {
  it('keeps exact statistics, hits and scores through deletes, overwrites, adds and compactions', () => {
    fc.assert(
      fc.property(fc.array(docArb, { minLength: 5, maxLength: ID_SPACE }), fc.array(opArb, { maxLength: 60 }), (initial, ops) => {
        const first = new ShardIndex(schema);
        const live = new Map<string, StoredDoc>();
        initial.forEach((doc, i) => {
          first.add(`d${i}`, doc);
          live.set(`d${i}`, doc);
        });
        const ix = reopen(first);
        for (const op of ops) {
          const id = `d${op.kind === 'compact' ? 0 : op.id}`;
          if (op.kind === 'delete') {
            expect(ix.delete(id)).toBe(live.delete(id));
          } else if (op.kind === 'put') {
            ix.add(id, op.doc);
            live.set(id, op.doc);
          } else {
            ix.compact();
          }
        }
        expectAsRebuilt(ix, live);
        ix.compact();
        expectAsRebuilt(ix, live);
      }),
      { numRuns: 150, seed: 15 },
    );
  });

  it('counts a late delete once in a term read before and after it, and in one read only after many', () => {
    const first = new ShardIndex(schema);
    const live = new Map<string, StoredDoc>();
    // 300 documents hold 'oak', so the few deletes read first are looked up one by one, and the
    // hundreds after them by one walk of the postings.
    for (let i = 0; i < 300; i++) {
      const doc = { body: i % 2 === 0 ? 'oak pine' : 'oak', tag: TAGS[i % 3]! };
      first.add(`d${i}`, doc);
      live.set(`d${i}`, doc);
    }
    const ix = reopen(first);
    const remove = (from: number, to: number): void => {
      for (let i = from; i < to; i++) {
        ix.delete(`d${i}`);
        live.delete(`d${i}`);
      }
    };
    remove(0, 3);
    expectAsRebuilt(ix, live);
    remove(3, 290);
    expectAsRebuilt(ix, live);
    // The term read only now sees all of them at once.
    expect(ix.collectStats({ q: 'tag:red' }).terms).toEqual([{ field: 'tag', term: 'red', docFreq: 3 }]);
  });
});

describe('found by the property above', () => {
  it('a keyword field a segment holds no term of takes one when a document is added', () => {
    const first = new ShardIndex(schema);
    for (let i = 0; i < 3; i++) first.add(`d${i}`, { body: 'ash' });
    const ix = reopen(first);
    ix.add('d0', { body: 'ash', tag: 'red' });
    expect(ix.search({ q: 'tag:red' }).hits.map((h) => h.id)).toEqual(['d0']);
    expect(ix.collectStats({ q: 'tag:red' }).terms).toEqual([{ field: 'tag', term: 'red', docFreq: 1 }]);
  });

  it('a compaction gives no number to a document that had none, where its new number had one', () => {
    const ix = new ShardIndex(schema);
    // The column grows to 1,024 entries; the last 76 documents have no number and lie past it.
    for (let i = 0; i < 1100; i++) ix.add(`d${i}`, i < 1024 ? { body: 'ash', n: i } : { body: 'ash' });
    ix.delete('d0');
    // Every document moves down one: d1024 takes number 1023, where d1023 had n = 1023.
    ix.compact();
    expect(ix.search({ q: 'n:*' }).total).toBe(1023);
    expect(ix.search({ q: 'n:1023' }).hits.map((h) => h.id)).toEqual(['d1023']);
  });
});
