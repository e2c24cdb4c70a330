// The coordinator's rounds (src/distrib/search.ts): a small page gets its stored fields with the
// query round (no fetch round), a larger one fetches only from the shards owning its ids, and
// both give the same hits; remembered statistics skip the dfs round without changing a score. Real ShardIndex shards served through servePhase, as nodes and
// readers serve them; the rounds each shard is asked are counted.
import { describe, expect, it } from 'vitest';
import { generateDocs } from '../src/corpus.js';
import { distributedSearch, FETCH_WITH_QUERY_MAX, servePhase, type SearchParams, type SearchResponse, type ShardSearcher } from '../src/distrib/search.js';
import { ShardStatsCache } from '../src/distrib/shard-stats-cache.js';
import { parseSchema, ShardIndex, type StoredDoc } from '../src/index/index.js';
import type { StoredEntry } from '../src/ulog/index.js';

const schema = parseSchema({ title: 'text', body: 'text', category: 'keyword', price: 'number' });
const SHARDS = 3;

function cluster(shards = SHARDS) {
  const docs = [...generateDocs({ count: 600, seed: 7, words: 12 })];
  const parts = Array.from({ length: shards }, () => ({ index: new ShardIndex(schema), store: new Map<string, StoredDoc>() }));
  docs.forEach((d, i) => {
    const p = parts[i % shards]!;
    p.index.add(d.id, d);
    p.store.set(d.id, d as unknown as StoredDoc);
  });
  const rounds: string[] = [];
  const searchers: ShardSearcher[] = parts.map((p, i) => {
    const shard = `shard${i + 1}`;
    const store = { getMany: async (ids: readonly string[]): Promise<Array<StoredEntry | undefined>> => ids.map((id) => (p.store.has(id) ? ({ id, version: 1, doc: p.store.get(id)! } as StoredEntry) : undefined)) };
    const phase = <T>(req: Parameters<typeof servePhase>[0]): Promise<T> => {
      rounds.push(`${req.kind} ${shard}`);
      return servePhase(req, p.index, store) as Promise<T>;
    };
    return {
      shard,
      stats: (params) => phase({ kind: 'stats', collection: 'c', shard, params }),
      query: (params, stats, expect) => phase({ kind: 'query', collection: 'c', shard, params, stats, ...(expect && { expect }) }),
      fetch: (ids, fields) => phase({ kind: 'fetch', collection: 'c', shard, ids: [...ids], ...(fields !== undefined && { fields }) }),
    };
  });
  const word = docs[0]!.title.split(' ')[0]!;
  return { searchers, rounds, word, parts };
}

const search = (c: ReturnType<typeof cluster>, params: SearchParams) => distributedSearch(schema, c.searchers, params);

describe('the rounds of a distributed search', () => {
  it('returns a small page\'s stored fields with the query round: no fetch round', async () => {
    const c = cluster();
    const res = await search(c, { q: c.word, limit: 10, fields: 'title,price' });
    expect(res.hits).toHaveLength(10);
    for (const h of res.hits) expect(Object.keys(h).sort()).toEqual(['id', 'price', 'score', 'title']);
    expect(c.rounds.filter((r) => r.startsWith('fetch'))).toEqual([]);
    expect(c.rounds.filter((r) => r.startsWith('query'))).toHaveLength(SHARDS);
  });

  it('fetches a larger page in its own round, only from the shards owning its ids, with the same hits', async () => {
    const c = cluster();
    const params = { q: c.word, offset: FETCH_WITH_QUERY_MAX - 5, limit: 10, fields: 'title,price' };
    const fetched = await search(c, params);
    const fetchRounds = c.rounds.filter((r) => r.startsWith('fetch'));
    expect(fetchRounds.length).toBeGreaterThan(0);
    expect(fetchRounds.length).toBeLessThanOrEqual(SHARDS);
    // The same page through two smaller ones fetched with the query round: identical hits.
    const c2 = cluster();
    const first = await search(c2, { ...params, offset: FETCH_WITH_QUERY_MAX - 5, limit: 5 });
    const inline = await search(c2, { ...params, offset: FETCH_WITH_QUERY_MAX, limit: 0 });
    expect(inline.hits).toEqual([]);
    expect(first.hits).toEqual(fetched.hits.slice(0, 5));
    expect(first.total).toBe(fetched.total);
    expect(c2.rounds.filter((r) => r.startsWith('fetch'))).toEqual([]);
  });

  it('leaves out a document deleted after the query round found it, fetched inline or not', async () => {
    for (const limit of [10, FETCH_WITH_QUERY_MAX + 10]) {
      const c = cluster();
      const all = await search(c, { q: c.word, limit });
      const gone = all.hits[0]!.id;
      // Delete from every store between the rounds: the index still finds it, the store does not have it.
      const searchers = c.searchers.map((s) => ({
        ...s,
        query: async (p: SearchParams, stats: Parameters<ShardSearcher['query']>[1]) => {
          const r = await s.query(p, stats);
          return 'docs' in r && r.docs ? { ...r, docs: r.docs.filter((d) => d.id !== gone) } : r;
        },
        fetch: async (ids: readonly string[], fields: string | undefined) => (await s.fetch(ids, fields)).filter((d) => d.id !== gone),
      }));
      const res = await distributedSearch(schema, searchers, { q: c.word, limit });
      expect(res.hits.map((h) => h.id)).toEqual(all.hits.map((h) => h.id).filter((id) => id !== gone));
    }
  });

  it('asks a one-shard collection once: no dfs round (its own statistics are the global ones), the same ranking', async () => {
    const one = cluster(1);
    const three = cluster(3);
    for (const params of [{ q: one.word, limit: 10 }, { q: `${one.word} OR ${one.word}s`, limit: 5, sort: 'price desc' }]) {
      one.rounds.length = 0;
      const a = await search(one, params);
      const b = await search(three, params);
      expect(one.rounds).toEqual(['query shard1']);
      expect(a.total).toBe(b.total);
      expect(a.hits.map((h) => h.id)).toEqual(b.hits.map((h) => h.id));
      a.hits.forEach((h, i) => expect(h.score).toBeCloseTo(b.hits[i]!.score, 9));
    }
  });
});

describe('remembered term statistics', () => {
  const ranking = (res: SearchResponse) => ({ total: res.total, hits: res.hits.map((h) => [h.id, h.score]) });

  it('skip the dfs round once every shard\'s statistics for the query are remembered, with the same hits and scores', async () => {
    const c = cluster();
    const memo = new ShardStatsCache().of('c');
    const params = { q: `${c.word} OR ${c.word}s`, limit: 10, timing: true };
    const first = await distributedSearch(schema, c.searchers, params, memo);
    expect(c.rounds.filter((r) => r.startsWith('stats'))).toHaveLength(SHARDS);
    c.rounds.length = 0;
    const second = await distributedSearch(schema, c.searchers, params, memo);
    expect(c.rounds.map((r) => r.split(' ')[0])).toEqual(Array(SHARDS).fill('query'));
    expect(second.timing?.rounds).toBe(1);
    expect(ranking(second)).toEqual(ranking(first));
  });

  it('are checked by each shard: one whose statistics changed answers with them, and the query runs again as a fresh search would', async () => {
    const c = cluster();
    const memo = new ShardStatsCache().of('c');
    const params = { q: c.word, limit: 10 };
    await distributedSearch(schema, c.searchers, params, memo);
    const doc = { id: 'added', title: `${c.word} ${c.word}`, body: c.word, category: 'x', price: 1 };
    c.parts[0]!.index.add(doc.id, doc);
    c.parts[0]!.store.set(doc.id, doc as unknown as StoredDoc);
    c.rounds.length = 0;
    const remembered = await distributedSearch(schema, c.searchers, params, memo);
    expect(c.rounds.map((r) => r.split(' ')[0])).toEqual(Array(2 * SHARDS).fill('query'));
    const fresh = await distributedSearch(schema, c.searchers, params);
    expect(ranking(remembered)).toEqual(ranking(fresh));
    expect(remembered.hits.map((h) => h.id)).toContain('added');
    // The changed statistics are remembered in turn: the next search is one round again.
    c.rounds.length = 0;
    await distributedSearch(schema, c.searchers, params, memo);
    expect(c.rounds).toHaveLength(SHARDS);
  });
});
