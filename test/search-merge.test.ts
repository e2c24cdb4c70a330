import { describe, expect, it } from 'vitest';
import { generateDocs, mulberry32 } from '../src/corpus.js';
import { mergeSearchResults, type MergedPage, type ShardResponse } from '../src/distrib/search-merge.js';
import { mergeStats, parseSchema, parseSort, ShardIndex, type IndexStats, type SearchRequest, type StoredDoc } from '../src/index/index.js';

const schema = parseSchema({ title: 'text', body: 'text', category: 'keyword', price: 'number', ts: 'date' });
const SHARDS = 5;
const EPS = 1e-9;

// ---- the distributed query, as a coordinator runs it ----

/** dfs_query_then_fetch: stats from every shard, merged; phase 1 on every shard; merge. */
function distributedSearch(shards: readonly ShardIndex[], req: SearchRequest, useGlobalStats = true): MergedPage {
  const offset = req.offset ?? 0;
  const limit = req.limit ?? 10;
  const sort = parseSort(typeof req.sort === 'string' ? req.sort : undefined, schema);
  const stats: IndexStats | undefined = useGlobalStats ? mergeStats(shards.map((s) => s.collectStats({ q: req.q, sort: req.sort }))) : undefined;
  const responses: ShardResponse[] = shards.map((s, i) => ({
    shard: `shard${i + 1}`,
    result: s.search({ ...req, offset: 0, limit: offset + limit }, stats),
  }));
  return mergeSearchResults(responses, sort, offset, limit);
}

function singleSearch(one: ShardIndex, req: SearchRequest): MergedPage {
  const offset = req.offset ?? 0;
  const limit = req.limit ?? 10;
  const sort = parseSort(typeof req.sort === 'string' ? req.sort : undefined, schema);
  return mergeSearchResults([{ shard: 'only', result: one.search({ ...req, offset: 0, limit: offset + limit }) }], sort, offset, limit);
}

// ---- a deterministic collection ----

function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}
const shardOf = (id: string): number => fnv1a(id) % SHARDS;


interface Collection {
  one: ShardIndex;
  shards: ShardIndex[];
  docs: Map<string, StoredDoc>;
}

function buildCollection(count: number): Collection {
  const docs = new Map<string, StoredDoc>();
  for (const d of generateDocs({ count, seed: 42, words: 40 })) {
    const n = Number(d.id.slice(4));
    const doc: StoredDoc = { ...d };
    // Undeclared fields too: numbers on some documents, strings on others.
    if (n % 3 === 0) doc.rating = n % 11;
    if (n % 5 === 0) doc.color = ['red', 'green', 'blue', 'Dark Red'][n % 4];
    docs.set(d.id, doc);
  }
  const one = new ShardIndex(schema, { lookup: (id) => docs.get(id) });
  const shards = Array.from({ length: SHARDS }, () => new ShardIndex(schema, { lookup: (id) => docs.get(id) }));
  for (const [id, doc] of docs) {
    one.add(id, doc);
    shards[shardOf(id)].add(id, doc);
  }
  // Overwrites and deletes, applied to both: statistics must follow them everywhere.
  const r = mulberry32(7);
  for (let i = 0; i < count / 10; i++) {
    const id = `doc-${Math.floor(r() * count)}`;
    if (r() < 0.5) {
      one.delete(id);
      shards[shardOf(id)].delete(id);
      docs.delete(id);
    } else {
      const doc: StoredDoc = { ...(docs.get(id) ?? { title: 'revived' }), title: `updated ${id} kalo`, price: Math.floor(r() * 1000) };
      one.add(id, doc);
      shards[shardOf(id)].add(id, doc);
      docs.set(id, doc);
    }
  }
  return { one, shards, docs };
}

// ---- generated queries ----

function generateQueries(docs: Map<string, StoredDoc>, count: number): SearchRequest[] {
  const r = mulberry32(2024);
  const list = [...docs.values()];
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)];
  const bodyWords = (): string[] => String(pick(list).body).split(' ');
  const word = (): string => pick(bodyWords());
  const titleWord = (): string => pick(String(pick(list).title).split(' '));
  const phrase = (): string => {
    const ws = bodyWords();
    const i = Math.floor(r() * (ws.length - 2));
    return ws.slice(i, i + (r() < 0.7 ? 2 : 3)).join(' ');
  };
  const category = (): string => `cat-${String.fromCharCode(97 + Math.floor(r() * 20))}`;
  const date = (): string => new Date(Date.UTC(2024, 0, 1) + Math.floor(r() * 365) * 86400000).toISOString().slice(0, 10);
  const price = (): number => Math.floor(r() * 1000);

  const shapes: (() => string)[] = [
    () => word(),
    () => `title:${titleWord()}`,
    () => `body:${word()}`,
    () => `${word()} ${word()}`,
    () => `${word()} OR ${titleWord()}`,
    () => `${word()} AND ${word()}`,
    () => `"${phrase()}"`,
    () => `body:"${phrase()}" OR title:${titleWord()}`,
    () => `${word()} AND NOT ${word()}`,
    () => `(${word()} OR ${word()}) AND ${word()}`,
    () => `${word().slice(0, 3)}*`,
    () => `title:${titleWord().slice(0, 4)}* ${word()}`,
    () => `price:[${price()} TO ${price() + 300}]`,
    () => `ts:[${date()} TO *]`,
    () => `category:${category()}`,
    () => `category:${category()} OR ${word()}`,
    () => `title:${titleWord()}^3 body:${word()}`,
    () => `+${word()} ${word()} -category:${category()}`,
    () => `color:red OR ${word()}`,
    () => `rating:[3 TO 7] AND ${word()}`,
    () => '*',
  ];
  const sorts = [undefined, undefined, undefined, 'price asc', 'ts desc', 'category asc,price desc', 'rating desc,score desc', 'id desc', 'score asc', 'color.keyword asc,ts asc'];
  const filters = (): string[] | undefined => {
    const x = r();
    if (x < 0.6) return undefined;
    if (x < 0.75) return [`category:${category()} OR category:${category()} OR category:${category()}`];
    if (x < 0.9) return [`price:[* TO ${price() + 200}}`];
    return [`ts:[* TO ${date()}]`, `NOT category:${category()}`];
  };
  const queries: SearchRequest[] = [];
  for (let i = 0; i < count; i++) {
    const deep = r() < 0.3;
    queries.push({
      q: pick(shapes)(),
      filters: filters(),
      sort: pick(sorts),
      offset: deep ? Math.floor(r() * 200) : 0,
      limit: 5 + Math.floor(r() * 20),
      boosts: r() < 0.15 ? { title: 2.5 } : undefined,
    });
  }
  return queries;
}

// ---- the tests ----

describe('a sharded collection ranks exactly like one index (dfs_query_then_fetch)', () => {
  const { one, shards, docs } = buildCollection(4000);
  const queries = generateQueries(docs, 200);

  it('splits the documents over every shard', () => {
    expect(shards.reduce((n, s) => n + s.size, 0)).toBe(one.size);
    for (const s of shards) expect(s.size).toBeGreaterThan(one.size / SHARDS / 2);
  });

  it('returns the same ids, totals, sort values and scores for 200 generated queries', () => {
    let nonEmpty = 0;
    for (const req of queries) {
      const label = JSON.stringify(req);
      const expected = singleSearch(one, req);
      const got = distributedSearch(shards, req);
      expect(got.total, label).toBe(expected.total);
      expect(got.hits.map((h) => h.id), label).toEqual(expected.hits.map((h) => h.id));
      for (let i = 0; i < got.hits.length; i++) {
        expect(Math.abs(got.hits[i].score - expected.hits[i].score), label).toBeLessThan(EPS);
        const sort = parseSort(typeof req.sort === 'string' ? req.sort : undefined, schema);
        sort.forEach((key, k) => {
          if (key.type !== 'score') expect(got.hits[i].sortValues[k], label).toEqual(expected.hits[i].sortValues[k]);
        });
      }
      if (expected.hits.length > 0) nonEmpty++;
    }
    // The generator must exercise real matches, not a pile of empty pages.
    expect(nonEmpty).toBeGreaterThan(queries.length * 0.7);
  });

  it('needs the global statistics: per-shard statistics rank differently', () => {
    let differing = 0;
    for (const req of queries.slice(0, 60)) {
      const expected = singleSearch(one, req).hits;
      const local = distributedSearch(shards, req, false).hits;
      if (local.some((h, i) => expected[i] === undefined || h.id !== expected[i].id || Math.abs(h.score - expected[i].score) > EPS)) differing++;
    }
    expect(differing).toBeGreaterThan(0);
  });

  it('names the shard that holds each id of the page, for phase 2', async () => {
    const req: SearchRequest = { q: 'kalo OR mi', limit: 30 };
    const page = distributedSearch(shards, req);
    expect(page.hits.length).toBe(30);
    const fetched: StoredDoc[] = [];
    for (const [shard, ids] of page.idsByShard) {
      const index = shards[Number(shard.slice(5)) - 1];
      for (const id of ids) expect(index.has(id)).toBe(true);
      fetched.push(...(await index.fetch(ids, 'id,title')));
    }
    expect(fetched.map((d) => d.id).sort()).toEqual(page.hits.map((h) => h.id).sort());
    for (const d of fetched) expect(d).toEqual({ id: d.id, title: docs.get(String(d.id))?.title });
  });

  it('ranks alike when an undeclared text field exists on one shard only', () => {
    const docsB: [string, StoredDoc][] = [
      ['n1', { title: 'apple pie', notes: 'apple apple tart' }],
      ['n2', { title: 'apple', notes: 'cherry' }],
      ['p1', { title: 'apple cherry', body: 'tart' }],
      ['p2', { title: 'pie', body: 'apple apple apple' }],
      ['p3', { body: 'cherry tart apple' }],
    ];
    const single = new ShardIndex(schema);
    const split = [new ShardIndex(schema), new ShardIndex(schema)];
    for (const [id, doc] of docsB) {
      single.add(id, doc);
      split[id.startsWith('n') ? 0 : 1].add(id, doc);
    }
    for (const q of ['apple', 'apple tart', '"apple tart"', 'apple AND cherry', 'ta*', 'notes:apple OR pie']) {
      const expected = singleSearch(single, { q });
      const got = distributedSearch(split, { q });
      expect(got.hits.map((h) => h.id), q).toEqual(expected.hits.map((h) => h.id));
      got.hits.forEach((h, i) => expect(Math.abs(h.score - expected.hits[i].score), q).toBeLessThan(EPS));
    }
  });

  it('rejects a sort on a field no shard has, and accepts one that only some shards have', () => {
    expect(() => distributedSearch(shards, { q: '*', sort: 'nosuch desc' })).toThrow(/unknown sort field 'nosuch'/);
    const only = new ShardIndex(schema);
    only.add('x', { title: 'x', weight: 3 });
    const mixed = [only, new ShardIndex(schema)];
    mixed[1].add('y', { title: 'y' });
    const page = distributedSearch(mixed, { q: '*', sort: 'weight desc' });
    expect(page.hits.map((h) => [h.id, h.sortValues[0]])).toEqual([['x', 3], ['y', null]]);
  });
});

describe('mergeSearchResults', () => {
  const scoreSort = parseSort(undefined, schema);
  const hit = (id: string, score: number, sortValues: (number | string | null)[] = [score]) => ({ id, score, sortValues });

  it('orders by score and breaks ties by id ascending, whatever the shard', () => {
    const page = mergeSearchResults(
      [
        { shard: 's1', result: { total: 2, hits: [hit('b', 2), hit('d', 1)] } },
        { shard: 's2', result: { total: 3, hits: [hit('a', 2), hit('c', 1), hit('e', 0.5)] } },
      ],
      scoreSort,
      0,
      10,
    );
    expect(page.hits.map((h) => h.id)).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(page.total).toBe(5);
  });

  it('applies offset and limit to the merged order', () => {
    const page = mergeSearchResults(
      [
        { shard: 's1', result: { total: 10, hits: [hit('a', 5), hit('c', 3)] } },
        { shard: 's2', result: { total: 7, hits: [hit('b', 4), hit('d', 2)] } },
      ],
      scoreSort,
      1,
      2,
    );
    expect(page.hits.map((h) => [h.id, h.shard])).toEqual([['b', 's2'], ['c', 's1']]);
    expect(page.total).toBe(17);
    expect(page.idsByShard).toEqual(new Map([['s2', ['b']], ['s1', ['c']]]));
  });

  it('returns an empty page past the end', () => {
    const page = mergeSearchResults([{ shard: 's1', result: { total: 1, hits: [hit('a', 1)] } }], scoreSort, 5, 10);
    expect(page.hits).toEqual([]);
    expect(page.total).toBe(1);
    expect(page.idsByShard.size).toBe(0);
  });

  it('puts missing sort values last in both directions', () => {
    for (const dir of ['asc', 'desc'] as const) {
      const sort = parseSort(`price ${dir}`, schema);
      const page = mergeSearchResults(
        [
          { shard: 's1', result: { total: 2, hits: [hit('a', 1, [5]), hit('b', 1, [null])] } },
          { shard: 's2', result: { total: 1, hits: [hit('c', 1, [7])] } },
        ],
        sort,
        0,
        10,
      );
      expect(page.hits.map((h) => h.id)).toEqual(dir === 'asc' ? ['a', 'c', 'b'] : ['c', 'a', 'b']);
    }
  });

  it('counts an id returned by two shards once, where it ranks best', () => {
    const page = mergeSearchResults(
      [
        { shard: 's1', result: { total: 2, hits: [hit('a', 3), hit('b', 1)] } },
        { shard: 's2', result: { total: 1, hits: [hit('a', 2)] } },
      ],
      scoreSort,
      0,
      10,
    );
    expect(page.hits.map((h) => [h.id, h.shard])).toEqual([['a', 's1'], ['b', 's1']]);
    expect(page.total).toBe(2);
  });

  it('rejects a shard answer whose sort values do not fit the sort', () => {
    expect(() => mergeSearchResults([{ shard: 's1', result: { total: 1, hits: [hit('a', 1, [1, 2])] } }], scoreSort, 0, 10)).toThrow(/2 sort values/);
  });
});
