// Issue 4, "what it must show" 1 and 3: the same 20,000 generated documents in a 1-shard and
// a 5-shard collection on 3 nodes answer 200 generated queries with identical id lists and
// scores within 1e-9 (global statistics make shards rank like one index); after overwrites
// and deletes no query returns a deleted document or a stale field value. On the cluster `npm start` runs (each node in a worker thread).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDocs, mulberry32, type CorpusDoc } from '../../src/corpus.js';
import { http, startThreadedCluster, type ThreadedTestCluster } from '../support/cluster.js';

const DOCS = 20_000;
const FIELDS = { title: 'text', body: 'text', category: 'keyword', price: 'number', ts: 'date' };


interface Q {
  q?: string;
  filter?: string[];
  sort?: string;
  offset?: number;
  limit?: number;
}

function generateQueries(docs: CorpusDoc[], n: number): Q[] {
  const rand = mulberry32(42);
  const pick = <T>(a: readonly T[]): T => a[Math.floor(rand() * a.length)]!;
  const word = (): string => pick(pick(docs).title.split(' '));
  const sorts = [undefined, 'price desc', 'ts asc', 'category asc,price desc', 'score desc,ts desc', 'price asc'];
  const out: Q[] = [];
  for (let i = 0; i < n; i++) {
    const title = pick(docs).title.split(' ');
    const kinds = [
      () => word(),
      () => `${word()} ${word()}`,
      () => `${word()} AND ${word()}`,
      () => `"${title[0]} ${title[1]}"`,
      () => `title:${word()}`,
      () => `(${word()} OR ${word()}) AND NOT ${word()}`,
      () => `${word().slice(0, 3)}*`,
      () => `price:[${Math.floor(rand() * 400)} TO ${400 + Math.floor(rand() * 600)}]`,
      () => `ts:[2024-0${1 + Math.floor(rand() * 8)}-01 TO *]`,
      () => '*',
    ];
    const q: Q = { q: pick(kinds)() };
    if (rand() < 0.3) q.filter = [`category:cat-${String.fromCharCode(97 + Math.floor(rand() * 20))}`];
    const sort = pick(sorts);
    if (sort) q.sort = sort;
    if (rand() < 0.3) q.offset = Math.floor(rand() * 200);
    q.limit = 5 + Math.floor(rand() * 30);
    out.push(q);
  }
  return out;
}

function toQuery(q: Q): string {
  const p = new URLSearchParams();
  if (q.q !== undefined) p.set('q', q.q);
  for (const f of q.filter ?? []) p.append('filter', f);
  if (q.sort) p.set('sort', q.sort);
  if (q.offset !== undefined) p.set('offset', String(q.offset));
  if (q.limit !== undefined) p.set('limit', String(q.limit));
  p.set('fields', 'id,title,price');
  return p.toString();
}

describe('distributed search (3 nodes: 1-shard and 5-shard collections of the same documents)', () => {
  let tc: ThreadedTestCluster;
  const docs = [...generateDocs({ count: DOCS, seed: 11, words: 30 })];

  beforeAll(async () => {
    tc = await startThreadedCluster({ nodes: 3 });
    const url = tc.urls[0]!;
    for (const [name, numShards] of [['one', 1], ['five', 5]] as const) {
      const res = await http('POST', `${url}/api/collections`, { name, numShards, replicationFactor: 1, fields: FIELDS });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      for (let i = 0; i < DOCS; i += 1000) {
        const r = await http('POST', `${tc.urls[(i / 1000) % 3]}/api/collections/${name}/docs`, docs.slice(i, i + 1000));
        expect(r.status, JSON.stringify(r.body)).toBe(200);
      }
    }
  });

  afterAll(async () => {
    await tc?.stop();
  });

  it('ranks 200 generated queries identically on 1 and 5 shards (ids, totals, scores within 1e-9)', async () => {
    const queries = generateQueries(docs, 200);
    let nonEmpty = 0;
    for (const [i, q] of queries.entries()) {
      const qs = toQuery(q);
      const one = await http('GET', `${tc.urls[i % 3]}/api/collections/one/search?${qs}`);
      const five = await http('GET', `${tc.urls[(i + 1) % 3]}/api/collections/five/search?${qs}`);
      expect(one.status, `${qs}: ${JSON.stringify(one.body)}`).toBe(200);
      expect(five.status, `${qs}: ${JSON.stringify(five.body)}`).toBe(200);
      expect(five.body.total, qs).toBe(one.body.total);
      expect(five.body.hits.map((h: { id: string }) => h.id), qs).toEqual(one.body.hits.map((h: { id: string }) => h.id));
      five.body.hits.forEach((h: { score: number }, k: number) => expect(Math.abs(h.score - one.body.hits[k].score), qs).toBeLessThan(1e-9));
      expect(five.body.shards).toEqual({ total: 5, ok: 5, failed: 0 });
      if (one.body.hits.length > 0) nonEmpty++;
    }
    expect(nonEmpty).toBeGreaterThan(150);
  });

  it('returns the requested fields, with id and score always present', async () => {
    const res = await http('GET', `${tc.urls[0]}/api/collections/five/search?q=*&limit=3&fields=title`);
    expect(res.status).toBe(200);
    for (const h of res.body.hits) expect(Object.keys(h).sort()).toEqual(['id', 'score', 'title']);
  });

  it('says where a search\'s time went with timing=true (dfs, query, merge, fetch, rounds), and only then', async () => {
    const url = `${tc.urls[0]}/api/collections/five/search?q=*&limit=3`;
    const timed = await http('GET', `${url}&timing=true`);
    expect(timed.status).toBe(200);
    const { shards, ...rounds } = timed.body.timing;
    expect(Object.keys(rounds).sort()).toEqual(['dfsMs', 'fetchMs', 'mergeMs', 'queryMs', 'rounds']);
    for (const v of Object.values(rounds as Record<string, number>)) expect(v).toBeGreaterThanOrEqual(0);
    // Each shard's query round: as the coordinator saw it, and the shard's own part of it.
    expect(Object.keys(shards).sort()).toEqual(['shard1', 'shard2', 'shard3', 'shard4', 'shard5']);
    for (const s of Object.values(shards as Record<string, { queryMs: number; servedMs: number }>)) {
      expect(s.servedMs).toBeGreaterThanOrEqual(0);
      expect(s.queryMs).toBeGreaterThanOrEqual(s.servedMs);
    }
    expect((await http('GET', url)).body.timing).toBeUndefined();
    const bad = await http('GET', `${url}&timing=maybe`);
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatch(/timing/);
  });

  it('counts the total only as far as trackTotalHits asks, says so, and returns the same page', async () => {
    const words = [...new Set(docs.slice(0, 50).flatMap((d) => d.title.split(' ')))].slice(0, 6);
    let bounded = 0;
    const queries = [
      { q: words[0]! },
      { q: `${words[1]} OR ${words[2]}` },
      { q: `${words[3]} ${words[4]} ${words[5]}` },
      { q: `"${docs[0]!.title.split(' ').slice(0, 2).join(' ')}" OR ${words[1]}` },
      { q: `${words[1]} OR ${words[2]}`, sort: 'price desc' },
      { q: '*', sort: 'ts asc' },
    ];
    for (const [i, { q, sort }] of queries.entries()) {
      for (const name of ['one', 'five']) {
        const base = `${tc.urls[i % 3]}/api/collections/${name}/search?${new URLSearchParams({ q, limit: '10', fields: 'title', ...(sort && { sort }) })}`;
        const exact = await http('GET', base);
        const counted = await http('GET', `${base}&trackTotalHits=50`);
        expect(counted.status, JSON.stringify(counted.body)).toBe(200);
        expect(exact.body.totalRelation).toBeUndefined();
        expect(counted.body.hits).toEqual(exact.body.hits);
        if (counted.body.totalRelation === 'gte') {
          bounded++;
          expect(counted.body.total).toBeGreaterThanOrEqual(50);
          expect(counted.body.total).toBeLessThanOrEqual(exact.body.total);
        } else {
          expect(counted.body.total).toBe(exact.body.total);
        }
        // JSON bodies take a boolean; false counts nothing it need not.
        const posted = await http('POST', `${tc.urls[(i + 1) % 3]}/api/collections/${name}/search`, { q, limit: 10, fields: 'title', trackTotalHits: false, ...(sort && { sort }) });
        expect(posted.status, JSON.stringify(posted.body)).toBe(200);
        expect(posted.body.hits).toEqual(exact.body.hits);
        expect(posted.body.total).toBeLessThanOrEqual(exact.body.total);
      }
    }
    // These words match thousands of the 20,000 documents: the count stopped for some.
    expect(bounded).toBeGreaterThan(2);
    for (const bad of ['-1', '2.5', 'some']) {
      const res = await http('GET', `${tc.urls[0]}/api/collections/five/search?q=x&trackTotalHits=${bad}`);
      expect(res.status).toBe(400);
      expect(res.body.error).toMatch(/trackTotalHits must be true, false or a non-negative integer/);
    }
  });

  it('answers a query that does not parse with 400 and the position', async () => {
    const res = await http('GET', `${tc.urls[0]}/api/collections/five/search?q=${encodeURIComponent('(kalo AND')}`);
    expect(res.status).toBe(400);
    expect(res.body.error).toMatch(/position|column|at \d+/i);
  });

  it('never returns a deleted document or a stale field value after overwrites and deletes', async () => {
    const victims = docs.slice(0, 300);
    const deleted = victims.slice(0, 150).map((d) => d.id);
    const rewritten = victims.slice(150).map((d) => ({ ...d, title: 'zzrewritten marker', category: 'cat-z' }));
    for (const name of ['one', 'five']) {
      for (const id of deleted) expect((await http('DELETE', `${tc.urls[1]}/api/collections/${name}/docs/${id}`)).status).toBe(200);
      expect((await http('POST', `${tc.urls[2]}/api/collections/${name}/docs`, rewritten)).status).toBe(200);
      // Search for each victim's old title words: a deleted id never comes back.
      const gone = new Set(deleted);
      for (const d of victims.slice(0, 40)) {
        const res = await http('GET', `${tc.urls[0]}/api/collections/${name}/search?${new URLSearchParams({ q: `"${d.title}"`, limit: '50', fields: 'title,category' })}`);
        expect(res.status).toBe(200);
        for (const h of res.body.hits) expect(gone.has(h.id), `${name}: deleted ${h.id} returned`).toBe(false);
      }
      const marker = await http('GET', `${tc.urls[0]}/api/collections/${name}/search?q=zzrewritten&limit=500&fields=title,category`);
      expect(marker.body.total).toBe(150);
      for (const h of marker.body.hits) expect(h).toMatchObject({ title: 'zzrewritten marker', category: 'cat-z' });
      // The old field values of the rewritten docs no longer match them.
      for (const d of victims.slice(150, 170)) {
        const res = await http('GET', `${tc.urls[0]}/api/collections/${name}/search?${new URLSearchParams({ q: `"${d.title}"`, limit: '50' })}`);
        expect(res.body.hits.map((h: { id: string }) => h.id)).not.toContain(d.id);
      }
      const byCategory = await http('GET', `${tc.urls[0]}/api/collections/${name}/search?q=*&filter=category:cat-z&limit=1`);
      expect(byCategory.body.total).toBe(150);
    }
  });
});
