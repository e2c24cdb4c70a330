import { describe, expect, it } from 'vitest';
import { ShardexError } from '../src/errors.js';
import { parseSchema, ShardIndex, type SearchRequest, type StoredDoc } from '../src/index/index.js';

const schema = parseSchema({ title: 'text', body: 'text', category: 'keyword', price: 'number', ts: 'date' });

const ids = (ix: ShardIndex, req: SearchRequest): string[] => ix.search({ limit: 1000, ...req }).hits.map((h) => h.id);

describe('overwriting a document', () => {
  it('no longer matches the old text', () => {
    const ix = new ShardIndex(schema);
    ix.add('a', { title: 'apple pie' });
    ix.add('a', { title: 'banana split' });
    expect(ids(ix, { q: 'apple' })).toEqual([]);
    expect(ids(ix, { q: '"apple pie"' })).toEqual([]);
    expect(ids(ix, { q: 'app*' })).toEqual([]);
    expect(ids(ix, { q: 'banana' })).toEqual(['a']);
    expect(ix.size).toBe(1);
  });

  it('no longer matches an old number, date or keyword', () => {
    const ix = new ShardIndex(schema);
    ix.add('a', { category: 'old', price: 10, ts: '2024-01-01' });
    ix.add('a', { category: 'new', price: 99, ts: '2025-01-01' });
    expect(ids(ix, { q: 'category:old' })).toEqual([]);
    expect(ids(ix, { q: 'price:[0 TO 50]' })).toEqual([]);
    expect(ids(ix, { q: 'ts:[* TO 2024-12-31]' })).toEqual([]);
    expect(ids(ix, { q: 'category:new AND price:99 AND ts:2025-01-01' })).toEqual(['a']);
  });

  it('returns the new sort values', () => {
    const ix = new ShardIndex(schema);
    ix.add('a', { price: 10, category: 'x' });
    ix.add('b', { price: 20, category: 'y' });
    ix.add('a', { price: 30, category: 'z' });
    const byPrice = ix.search({ sort: 'price desc' });
    expect(byPrice.hits.map((h) => [h.id, h.sortValues[0]])).toEqual([['a', 30], ['b', 20]]);
    const byCategory = ix.search({ sort: 'category asc' });
    expect(byCategory.hits.map((h) => [h.id, h.sortValues[0]])).toEqual([['b', 'y'], ['a', 'z']]);
  });

  it('drops fields the new version does not have', () => {
    const ix = new ShardIndex(schema);
    ix.add('a', { title: 'apple', price: 10, category: 'x', color: 'red', rating: 5 });
    ix.add('b', { price: 20, rating: 1 });
    ix.add('a', { body: 'other' });
    expect(ids(ix, { q: 'title:*' })).toEqual([]);
    expect(ids(ix, { q: 'price:*' })).toEqual(['b']);
    expect(ids(ix, { q: 'category:*' })).toEqual([]);
    expect(ids(ix, { q: 'color:red' })).toEqual([]);
    expect(ids(ix, { q: 'color.keyword:red' })).toEqual([]);
    expect(ix.search({ sort: 'price asc' }).hits.map((h) => h.sortValues[0])).toEqual([20, null]);
    expect(ix.search({ sort: 'rating desc' }).hits.map((h) => [h.id, h.sortValues[0]])).toEqual([['b', 1], ['a', null]]);
  });

  it('follows an undeclared field from strings to numbers', () => {
    const ix = new ShardIndex(schema);
    ix.add('a', { size: 'large' });
    ix.add('a', { size: 42 });
    expect(ids(ix, { q: 'size:large' })).toEqual([]);
    expect(ids(ix, { q: 'size.keyword:large' })).toEqual([]);
    expect(ids(ix, { q: 'size:[40 TO 50]' })).toEqual(['a']);
  });

  it('replaces every value of a multi-valued field', () => {
    const ix = new ShardIndex(schema);
    ix.add('a', { category: ['x', 'y'], price: [1, 100] });
    ix.add('a', { category: ['z'], price: [50] });
    expect(ids(ix, { q: 'category:x OR category:y' })).toEqual([]);
    expect(ids(ix, { q: 'price:[0 TO 10] OR price:[90 TO 200]' })).toEqual([]);
    expect(ix.search({ sort: 'price desc' }).hits[0].sortValues).toEqual([50]);
  });

  it('keeps the earlier version when the new one is rejected', () => {
    const ix = new ShardIndex(schema);
    ix.add('a', { title: 'apple', price: 10 });
    expect(() => ix.add('a', { title: 'banana', price: 'cheap' })).toThrow(ShardexError);
    expect(ids(ix, { q: 'apple' })).toEqual(['a']);
    expect(ids(ix, { q: 'banana' })).toEqual([]);
    expect(ids(ix, { q: 'price:10' })).toEqual(['a']);
  });

  it('scores with statistics that forget the old version', () => {
    const ix = new ShardIndex(schema);
    ix.add('a', { title: 'apple apple apple' });
    ix.add('b', { title: 'apple banana' });
    ix.add('a', { title: 'cherry' });
    const fresh = new ShardIndex(schema);
    fresh.add('b', { title: 'apple banana' });
    fresh.add('a', { title: 'cherry' });
    expect(ix.search({ q: 'apple' })).toEqual(fresh.search({ q: 'apple' }));
    expect(ix.collectStats({ q: 'apple cherry' })).toEqual(fresh.collectStats({ q: 'apple cherry' }));
  });
});

describe('deleting a document', () => {
  const doc: StoredDoc = { title: 'apple pie', body: 'sweet', category: 'food', price: 5, ts: '2024-05-05', color: 'red', rating: 3 };

  it('removes it from every kind of query', () => {
    const ix = new ShardIndex(schema);
    ix.add('a', doc);
    ix.add('b', { title: 'other' });
    expect(ix.delete('a')).toBe(true);
    for (const q of ['apple', '"apple pie"', 'app*', 'body:*', 'category:food', 'category:[a TO z]', 'price:5', 'price:*', 'ts:[2024-01-01 TO *]', 'color:red', 'color.keyword:red', 'rating:3', 'id:a', 'NOT title:other']) {
      expect(ids(ix, { q }), q).toEqual([]);
    }
    expect(ids(ix, { q: '*' })).toEqual(['b']);
    expect(ix.search({ q: '*' }).total).toBe(1);
    expect(ix.size).toBe(1);
  });

  it('reports whether there was a document', () => {
    const ix = new ShardIndex(schema);
    ix.add('a', doc);
    expect(ix.delete('nope')).toBe(false);
    expect(ix.delete('a')).toBe(true);
    expect(ix.delete('a')).toBe(false);
  });

  it('may be added again', () => {
    const ix = new ShardIndex(schema);
    ix.add('a', doc);
    ix.delete('a');
    ix.add('a', { title: 'banana' });
    expect(ids(ix, { q: 'apple' })).toEqual([]);
    expect(ids(ix, { q: 'banana' })).toEqual(['a']);
  });

  it('is not fetched', async () => {
    const store = new Map<string, StoredDoc>([['a', { id: 'a', ...doc }], ['b', { id: 'b', title: 'other', _version_: 7 }]]);
    const ix = new ShardIndex(schema, { lookup: (id) => store.get(id) });
    for (const [id, d] of store) ix.add(id, d);
    ix.delete('a');
    expect(await ix.fetch(['a', 'b'], 'id,title,missing')).toEqual([{ id: 'b', title: 'other' }]);
    expect(await ix.fetch(['b'])).toEqual([{ id: 'b', title: 'other' }]);
  });
});

describe('an index after many updates', () => {
  // A small PRNG so the sequence is the same on every run.
  function rng(seed: number): () => number {
    let s = seed >>> 0;
    return () => {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      return s / 4294967296;
    };
  }
  const WORDS = ['apple', 'banana', 'cherry', 'date', 'elder', 'fig', 'grape', 'honey'];

  function randomDoc(r: () => number): StoredDoc {
    const words = (n: number): string => Array.from({ length: n }, () => WORDS[Math.floor(r() * WORDS.length)]).join(' ');
    const doc: StoredDoc = { title: words(1 + Math.floor(r() * 4)) };
    if (r() < 0.7) doc.body = words(3 + Math.floor(r() * 10));
    if (r() < 0.8) doc.category = `c${Math.floor(r() * 5)}`;
    if (r() < 0.8) doc.price = Math.floor(r() * 100);
    if (r() < 0.5) doc.ts = new Date(Date.UTC(2024, 0, 1) + Math.floor(r() * 300) * 86400000).toISOString();
    if (r() < 0.3) doc.tag = r() < 0.5 ? words(1) : Math.floor(r() * 10);
    return doc;
  }

  const queries: SearchRequest[] = [
    { q: 'apple' },
    { q: 'apple banana' },
    { q: 'apple AND NOT cherry' },
    { q: '"banana cherry"' },
    { q: 'title:"apple apple"' },
    { q: 'gr*' },
    { q: 'category:c1 OR category:c2' },
    { q: 'price:[10 TO 50}' },
    { q: '*', sort: 'price desc,ts asc' },
    { q: 'body:*', sort: 'category asc' },
    { q: 'fig', filters: ['price:[* TO 60]'] },
    { q: 'tag:*', sort: 'tag desc' },
    { q: 'honey OR date', sort: 'ts desc', offset: 3 },
  ];

  function churn(ix: ShardIndex, final: Map<string, StoredDoc>, ops: number, idSpace: number, seed: number): void {
    const r = rng(seed);
    for (let i = 0; i < ops; i++) {
      const id = `d${Math.floor(r() * idSpace)}`;
      if (r() < 0.3) {
        ix.delete(id);
        final.delete(id);
      } else {
        const doc = randomDoc(r);
        ix.add(id, doc);
        final.set(id, doc);
      }
    }
  }

  function freshFrom(final: Map<string, StoredDoc>): ShardIndex {
    const fresh = new ShardIndex(schema);
    // In reverse order: the result must not depend on the order documents arrived in.
    for (const [id, doc] of [...final].reverse()) fresh.add(id, doc);
    return fresh;
  }

  it('answers exactly as an index built from the surviving documents', () => {
    const ix = new ShardIndex(schema);
    const final = new Map<string, StoredDoc>();
    churn(ix, final, 3000, 300, 11);
    const fresh = freshFrom(final);
    expect(ix.size).toBe(final.size);
    for (const req of queries) expect(ix.search({ limit: 50, ...req }), JSON.stringify(req)).toEqual(fresh.search({ limit: 50, ...req }));
  });

  it('answers the same after compact()', () => {
    const ix = new ShardIndex(schema);
    const final = new Map<string, StoredDoc>();
    churn(ix, final, 2000, 200, 5);
    const before = queries.map((req) => ix.search({ limit: 50, ...req }));
    ix.compact();
    expect(queries.map((req) => ix.search({ limit: 50, ...req }))).toEqual(before);
    churn(ix, final, 500, 200, 6);
    const fresh = freshFrom(final);
    for (const req of queries) expect(ix.search({ limit: 50, ...req }), JSON.stringify(req)).toEqual(fresh.search({ limit: 50, ...req }));
  });

  it('answers the same after trim(), and keeps taking updates', () => {
    const ix = new ShardIndex(schema);
    const final = new Map<string, StoredDoc>();
    churn(ix, final, 1500, 400, 21);
    const before = queries.map((req) => ix.search({ limit: 50, ...req }));
    ix.trim();
    expect(queries.map((req) => ix.search({ limit: 50, ...req }))).toEqual(before);
    churn(ix, final, 500, 400, 22);
    const fresh = freshFrom(final);
    for (const req of queries) expect(ix.search({ limit: 50, ...req }), JSON.stringify(req)).toEqual(fresh.search({ limit: 50, ...req }));
  });

  it('answers the same when the updates come in batches (apply), as a replica sends them', () => {
    const r = rng(31);
    const ops: { id: string; doc: StoredDoc | null }[] = [];
    for (let i = 0; i < 4000; i++) {
      const id = `d${Math.floor(r() * 250)}`;
      ops.push({ id, doc: r() < 0.25 ? null : randomDoc(r) });
    }
    const oneByOne = new ShardIndex(schema);
    for (const op of ops) {
      if (op.doc === null) oneByOne.delete(op.id);
      else oneByOne.add(op.id, op.doc);
    }
    const batched = new ShardIndex(schema);
    // Batches of 1 to 300 ops: the same id is often added, replaced and deleted within one batch.
    for (let i = 0; i < ops.length; ) {
      const n = 1 + Math.floor(r() * 300);
      batched.apply(ops.slice(i, i + n));
      i += n;
    }
    expect(batched.size).toBe(oneByOne.size);
    for (const req of queries) expect(batched.search({ limit: 50, ...req }), JSON.stringify(req)).toEqual(oneByOne.search({ limit: 50, ...req }));
    expect(batched.collectStats({ q: 'apple banana "cherry date"' })).toEqual(oneByOne.collectStats({ q: 'apple banana "cherry date"' }));
  });

  it('answers the same after one batch larger than the pending-postings buffer', () => {
    // 6,000 documents of ~40 distinct terms: far more (term, document) entries than one flush
    // holds, so the batch is appended in several rounds, with overwrites and deletes between.
    const r = rng(77);
    const word = (): string => `w${Math.floor(r() * 3000)}`;
    const ops: { id: string; doc: StoredDoc | null }[] = [];
    for (let i = 0; i < 6000; i++) {
      const id = `d${Math.floor(r() * 4000)}`;
      const body = Array.from({ length: 40 }, word).join(' ');
      ops.push({ id, doc: r() < 0.1 ? null : { title: `${word()} ${word()}`, body, category: word() } });
    }
    const oneByOne = new ShardIndex(schema);
    for (const op of ops) {
      if (op.doc === null) oneByOne.delete(op.id);
      else oneByOne.add(op.id, op.doc);
    }
    const batched = new ShardIndex(schema);
    batched.apply(ops);
    const probe = (ops.find((o) => o.doc !== null)?.doc?.body as string).split(' ');
    const reqs: SearchRequest[] = [
      { q: probe[0] },
      { q: `${probe[1]} ${probe[2]}` },
      { q: `"${probe[3]} ${probe[4]}"` },
      { q: 'w1*', sort: 'category desc' },
      { q: '*', sort: 'category asc' },
    ];
    expect(batched.size).toBe(oneByOne.size);
    for (const req of reqs) expect(batched.search({ limit: 100, ...req }), JSON.stringify(req)).toEqual(oneByOne.search({ limit: 100, ...req }));
  });

  it('keeps the documents before a rejected one in a batch, and stays consistent', () => {
    const ix = new ShardIndex(schema);
    expect(() =>
      ix.apply([
        { id: 'a', doc: { title: 'apple pie' } },
        { id: 'b', doc: { title: 'apple tart', price: 'not a number' } },
        { id: 'c', doc: { title: 'apple crumble' } },
      ]),
    ).toThrow(ShardexError);
    expect(ids(ix, { q: 'apple' })).toEqual(['a']);
    expect(ids(ix, { q: '"apple pie"' })).toEqual(['a']);
    ix.apply([{ id: 'c', doc: { title: 'apple crumble' } }]);
    expect(ids(ix, { q: 'apple' }).sort()).toEqual(['a', 'c']);
  });

  it('compacts itself under heavy overwriting and still answers exactly', () => {
    const ix = new ShardIndex(schema);
    const final = new Map<string, StoredDoc>();
    // 20,000 operations over 50 ids: dead document numbers outnumber live ones many times over.
    churn(ix, final, 20000, 50, 99);
    const fresh = freshFrom(final);
    for (const req of queries) expect(ix.search({ limit: 50, ...req }), JSON.stringify(req)).toEqual(fresh.search({ limit: 50, ...req }));
    expect(ix.collectStats({ q: 'apple banana "cherry date"' })).toEqual(fresh.collectStats({ q: 'apple banana "cherry date"' }));
  });
});
