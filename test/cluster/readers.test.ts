// Issue 5: eventual reads from snapshot readers chosen by the scan-server selector.
import pLimit from 'p-limit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShardexClient } from '../../src/client/index.js';
import { rendezvousCandidates } from '../../src/read/index.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';

async function until<T>(what: string, probe: () => Promise<T | undefined>, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const v = await probe();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const servedBy = (headers: Headers): { node: string; snapshot?: number; attempts: number; busy: number; fallback: boolean } =>
  JSON.parse(headers.get('x-shardex-served-by') ?? 'null');

describe('the Accumulo scenario: eventual reads see commit points only', () => {
  let tc: TestCluster;
  beforeAll(async () => {
    tc = await startCluster({
      nodes: 1,
      readers: 1,
      readerOptions: { snapshotExpiryMs: 100 },
      // A second profile whose reader group nobody runs: its reads must fall back to the leaders.
      nodeOptions: {
        selectorProfiles: [
          { isDefault: true, maxBusyTimeout: '5m', busyTimeoutMultiplier: 8, attemptPlans: [{ servers: '3', busyTimeout: '33ms', salt: 'one' }, { servers: '100%', busyTimeout: '33ms' }] },
          { scanTypeActivations: ['offline'], group: 'nobody', maxBusyTimeout: '5m', busyTimeoutMultiplier: 8, attemptPlans: [{ servers: '100%', busyTimeout: '33ms' }] },
        ],
      },
    });
    const res = await http('POST', `${tc.urls[0]}/api/collections`, { name: 'scan', numShards: 2, replicationFactor: 1, autoCommit: 'off' });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
  });
  afterAll(async () => tc?.stop());

  it('hides an uncommitted document from eventual reads and shows it once committed', async () => {
    const url = tc.urls[0]!;
    expect((await http('POST', `${url}/api/collections/scan/docs`, [{ id: 'k1', title: 'hello snapshot' }])).status).toBe(200);
    // immediate: the leader sees the update at once.
    expect((await http('GET', `${url}/api/collections/scan/docs/k1`)).status).toBe(200);
    expect((await http('GET', `${url}/api/collections/scan/search?q=hello`)).body.total).toBe(1);
    // eventual: served by the reader from the last commit point, which predates the update.
    const before = await http('GET', `${url}/api/collections/scan/docs/k1?consistency=eventual`);
    expect(before.status).toBe(404);
    expect(servedBy(before.headers)).toMatchObject({ node: 'reader1', fallback: false });
    const search = await http('GET', `${url}/api/collections/scan/search?q=hello&consistency=eventual`);
    expect(search.body.total).toBe(0);
    expect(Object.values(search.body.servedBy).every((s: any) => s.node === 'reader1' && !s.fallback)).toBe(true);

    expect((await http('POST', `${url}/api/collections/scan/commit`)).status).toBe(200);
    const after = await until('the reader to refresh its snapshot', async () => {
      const r = await http('GET', `${url}/api/collections/scan/docs/k1?consistency=eventual`);
      return r.status === 200 ? r : undefined;
    });
    expect(after.body.title).toBe('hello snapshot');
    expect(servedBy(after.headers).node).toBe('reader1');
    await until('eventual search to see it', async () => {
      const r = await http('GET', `${url}/api/collections/scan/search?q=hello&consistency=eventual`);
      return r.body.total === 1 ? true : undefined;
    });
  });

  it('serves minVersion reads from a snapshot at least that new, else from the leader', async () => {
    const url = tc.urls[0]!;
    for (let i = 0; i < 20; i++) {
      const w = await http('POST', `${url}/api/collections/scan/docs`, [{ id: 'mv', n: i }]);
      const v = w.body.versions.mv as number;
      const r = await http('GET', `${url}/api/collections/scan/docs/mv?consistency=eventual&minVersion=${v}`);
      expect(r.status).toBe(200);
      expect(r.body._version_).toBeGreaterThanOrEqual(v);
      expect(r.body.n).toBe(i);
      if (i % 5 === 0) await http('POST', `${url}/api/collections/scan/commit`);
    }
  });

  it('lets the smart client pick the reader itself for eventual gets and searches', async () => {
    const client = new ShardexClient({ urls: tc.urls, refreshIntervalMs: 0 });
    try {
      const w = await client.add('scan', [{ id: 'c1', title: 'client side selection' }]);
      // Not committed yet: the snapshot does not have it, the leader does.
      expect(await client.get('scan', 'c1', { consistency: 'eventual' })).toBeUndefined();
      expect((await client.get('scan', 'c1'))?.title).toBe('client side selection');
      // With minVersion the client falls back to the leader rather than serve an older snapshot.
      expect((await client.get('scan', 'c1', { consistency: 'eventual', minVersion: w.versions.c1! }))?.title).toBe('client side selection');
      await client.commit('scan');
      await until('the client to see the commit', async () => ((await client.get('scan', 'c1', { consistency: 'eventual' })) ? true : undefined));
      const res = await client.search('scan', 'client', { consistency: 'eventual', fields: ['title'] });
      expect(res.hits.map((h) => h.id)).toEqual(['c1']);
      expect(Object.values(res.servedBy ?? {}).length).toBe(2);
      for (const s of Object.values(res.servedBy ?? {})) expect(s).toMatchObject({ node: 'reader1', fallback: false });
      // trackTotalHits reaches the readers' shards: nothing is counted past 0, the page stays.
      const uncounted = await client.search('scan', 'client', { consistency: 'eventual', fields: ['title'], trackTotalHits: 0 });
      expect(uncounted).toMatchObject({ total: 0, totalRelation: 'gte' });
      expect(uncounted.hits).toEqual(res.hits);
      expect(await client.search('scan', 'client', { fields: ['title'], trackTotalHits: false })).toMatchObject({ total: 0, totalRelation: 'gte', hits: res.hits });
    } finally {
      await client.close();
    }
  });

  it('lists the reader with its cached shards and counters', async () => {
    const res = await http('GET', `${tc.urls[0]}/api/readers`);
    expect(res.status).toBe(200);
    expect(res.body.readers).toHaveLength(1);
    expect(res.body.readers[0]).toMatchObject({ name: 'reader1', group: 'default' });
    expect(res.body.readers[0].shards.map((s: any) => s.shard).sort()).toEqual(['scan/shard1', 'scan/shard2']);
  });

  it('falls back to the leaders when the profile\'s group has no reader, and says so', async () => {
    const res = await http('GET', `${tc.urls[0]}/api/collections/scan/search?q=*&consistency=eventual&scanType=offline`);
    expect(res.status).toBe(200);
    expect(res.body.total).toBeGreaterThan(0);
    for (const s of Object.values(res.body.servedBy) as any[]) expect(s).toMatchObject({ node: 'node1', fallback: true });
  });

  it('uses the default profile for an unknown scan type', async () => {
    const res = await http('GET', `${tc.urls[0]}/api/collections/scan/search?q=*&consistency=eventual&scanType=unheard-of`);
    expect(res.status).toBe(200);
    for (const s of Object.values(res.body.servedBy) as any[]) expect(s).toMatchObject({ node: 'reader1', fallback: false });
  });

  it('rejects a bad consistency or minVersion with 400', async () => {
    expect((await http('GET', `${tc.urls[0]}/api/collections/scan/docs/k1?consistency=sometimes`)).status).toBe(400);
    expect((await http('GET', `${tc.urls[0]}/api/collections/scan/docs/k1?consistency=eventual&minVersion=soon`)).status).toBe(400);
  });
});

describe('4 readers, one of them slow', () => {
  let tc: TestCluster;
  beforeAll(async () => {
    tc = await startCluster({ nodes: 1, readers: 4, readerOptions: { snapshotExpiryMs: 60_000 } });
    const res = await http('POST', `${tc.urls[0]}/api/collections`, { name: 'busy', numShards: 4, replicationFactor: 1 });
    expect(res.status).toBe(201);
    const docs = Array.from({ length: 400 }, (_, i) => ({ id: `d${i}`, title: `doc number ${i}` }));
    expect((await http('POST', `${tc.urls[0]}/api/collections/busy/docs`, docs)).status).toBe(200);
    expect((await http('POST', `${tc.urls[0]}/api/collections/busy/commit`)).status).toBe(200);
  });
  afterAll(async () => tc?.stop());

  it('keeps at most 3 distinct readers per shard over 1,000 reads while none is busy', async () => {
    const seen = new Set<string>();
    const limit = pLimit(4);
    await Promise.all(
      Array.from({ length: 1000 }, (_, i) =>
        limit(async () => {
          const r = await http('GET', `${tc.urls[0]}/api/collections/busy/docs/d0?consistency=eventual`);
          expect(r.status).toBe(200);
          const s = servedBy(r.headers);
          expect(s.fallback).toBe(false);
          if (s.busy === 0) seen.add(s.node);
        }),
      ),
    );
    expect(seen.size).toBeGreaterThan(0);
    expect(seen.size).toBeLessThanOrEqual(3);
  });

  it('completes every eventual read when one candidate reader is saturated, counting its BUSY answers', async () => {
    // Make a reader that is a first-plan candidate of shard1 slow: one scan slot, slow scans.
    const names = tc.cluster.readers.map((r) => r.name);
    const slowName = rendezvousCandidates(names, { collection: 'busy', shard: 'shard1', salt: 'one' }, 3)[0]!;
    const idx = names.indexOf(slowName);
    await tc.cluster.readers[idx]!.stop();
    await tc.cluster.startReader(idx, { maxScans: 1, scanDelayMs: 400 });
    const limit = pLimit(12);
    let busyInResponses = 0;
    let ok = 0;
    await Promise.all(
      Array.from({ length: 240 }, () =>
        limit(async () => {
          const r = await http('GET', `${tc.urls[0]}/api/collections/busy/search?q=doc&limit=3&consistency=eventual`);
          expect(r.status, JSON.stringify(r.body)).toBe(200);
          expect(r.body.total).toBe(400);
          for (const s of Object.values(r.body.servedBy) as any[]) busyInResponses += s.busy;
          ok++;
        }),
      ),
    );
    expect(ok).toBe(240);
    expect(busyInResponses).toBeGreaterThan(0);
    const metrics = (await http('GET', `${tc.cluster.readers[idx]!.httpUrl}/metrics`)).body as string;
    const busyMetric = Number(/shardex_reader_busy_total (\d+)/.exec(metrics)?.[1] ?? 0);
    expect(busyMetric).toBeGreaterThan(0);
    expect(busyMetric).toBeLessThanOrEqual(busyInResponses);
  });
});
