import { describe, expect, it } from 'vitest';
import { parseSchema, ShardIndex, type SearchRequest } from '../src/index/index.js';
import { SlicePool } from '../src/index/slice-pool.js';

/** A deterministic PRNG (mulberry32), so a failure can be replayed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('SlicePool', () => {
  it('reads back every list as it was appended, across slices and pages', () => {
    const pool = new SlicePool();
    const model: number[][] = Array.from({ length: 300 }, () => []);
    const next = random(7);
    let value = 0;
    // Interleaved appends, mostly short, some long enough for the largest slices and several pages.
    for (let round = 0; round < 3000; round++) {
      const id = Math.floor(next() * model.length);
      const count = next() < 0.02 ? 5000 + Math.floor(next() * 5000) : Math.floor(next() * 40);
      const values = Int32Array.from({ length: count + 3 }, () => value++);
      pool.append(id, values, 3, count);
      model[id].push(...values.subarray(3));
    }
    for (let id = 0; id < model.length; id++) {
      expect(pool.has(id)).toBe(model[id].length > 0);
      if (pool.has(id)) expect(Array.from(pool.read(id, model[id].length))).toEqual(model[id]);
    }
  });

  it('copies the first ints of a list to an offset of another array', () => {
    const pool = new SlicePool();
    pool.append(5, Int32Array.from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), 0, 10);
    const target = new Int32Array(10).fill(-1);
    pool.copyTo(5, 7, target, 2);
    expect(Array.from(target)).toEqual([-1, -1, 1, 2, 3, 4, 5, 6, 7, -1]);
  });

  it('starts a dropped list afresh', () => {
    const pool = new SlicePool();
    pool.append(0, Int32Array.from([1, 2, 3, 4, 5, 6, 7, 8]), 0, 8);
    pool.drop(0);
    expect(pool.has(0)).toBe(false);
    pool.append(0, Int32Array.from([9, 10]), 0, 2);
    expect(Array.from(pool.read(0, 2))).toEqual([9, 10]);
  });
});

describe('postings of an index being built', () => {
  const schema = parseSchema({ title: 'text', category: 'keyword' });
  const ids = (ix: ShardIndex, req: SearchRequest): string[] =>
    ix
      .search({ limit: 1000, ...req })
      .hits.map((h) => h.id)
      .sort();
  const names = (prefix: string, from: number, to: number): string[] => Array.from({ length: to - from }, (_, i) => `${prefix}${String(from + i).padStart(3, '0')}`).sort();

  it('a search sees documents added after an earlier search of the same term', () => {
    const ix = new ShardIndex(schema);
    for (let i = 0; i < 50; i++) ix.add(`d${String(i).padStart(3, '0')}`, { title: `apple pie ${i}`, category: 'fruit' });
    expect(ids(ix, { q: '"apple pie"' })).toEqual(names('d', 0, 50));
    for (let i = 50; i < 120; i++) ix.add(`d${String(i).padStart(3, '0')}`, { title: `apple pie ${i}`, category: 'fruit' });
    expect(ids(ix, { q: '"apple pie"' })).toEqual(names('d', 0, 120));
    expect(ids(ix, { q: 'category:fruit' })).toEqual(names('d', 0, 120));
  });

  it('keeps a term right after deletes rewrite it, and while more documents add to it', () => {
    const ix = new ShardIndex(schema);
    for (let i = 0; i < 200; i++) ix.add(`x${String(i).padStart(3, '0')}`, { title: 'other words' });
    for (let i = 0; i < 40; i++) ix.add(`d${String(i).padStart(3, '0')}`, { title: `words then apple pie`, category: 'fruit' });
    ix.search({ q: 'apple' });
    // More dead postings than live ones: the term is rewritten without them.
    for (let i = 0; i < 30; i++) ix.delete(`d${String(i).padStart(3, '0')}`);
    expect(ids(ix, { q: '"apple pie"' })).toEqual(names('d', 30, 40));
    for (let i = 40; i < 60; i++) ix.add(`d${String(i).padStart(3, '0')}`, { title: `words then apple pie`, category: 'fruit' });
    expect(ids(ix, { q: '"apple pie"' })).toEqual(names('d', 30, 60));
    expect(ids(ix, { q: 'category:fruit' })).toEqual(names('d', 30, 60));
  });

  it('keeps every term right after the index renumbers its documents, and while more are added', () => {
    const ix = new ShardIndex(schema);
    for (let i = 0; i < 100; i++) ix.add(`d${String(i).padStart(3, '0')}`, { title: `apple pie ${i % 7}`, category: `c${i % 3}` });
    // More deleted documents than live ones: the index compacts.
    for (let i = 0; i < 70; i++) ix.delete(`d${String(i).padStart(3, '0')}`);
    for (let i = 100; i < 130; i++) ix.add(`d${String(i).padStart(3, '0')}`, { title: `apple pie ${i % 7}`, category: `c${i % 3}` });
    expect(ids(ix, { q: '"apple pie"' })).toEqual(names('d', 70, 130));
    expect(ids(ix, { q: 'category:c0' })).toEqual(names('d', 70, 130).filter((id) => Number(id.slice(1)) % 3 === 0));
  });

  it('exports the same state before and after trim, and as its restored copy does', () => {
    const ix = new ShardIndex(schema);
    const next = random(3);
    const words = ['apple', 'pie', 'banana', 'split', 'cherry', 'tart', 'plum', 'cake'];
    for (let i = 0; i < 400; i++) {
      const title = Array.from({ length: 3 + Math.floor(next() * 20) }, () => words[Math.floor(next() * words.length)]).join(' ');
      ix.add(`d${i}`, { title: `${title} w${i}`, category: words[i % words.length] });
      if (i % 50 === 49) ix.search({ q: 'apple' });
      if (i % 9 === 0) ix.delete(`d${Math.floor(next() * i)}`);
    }
    const state = ix.exportState();
    expect(ShardIndex.restore(schema, state).exportState()).toEqual(state);
    ix.trim();
    expect(ix.exportState()).toEqual(state);
  });
});
