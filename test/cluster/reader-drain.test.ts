// Issue 14, reader item 4 and must-show 2: a stopping reader answers new scans BUSY at once,
// finishes those it started, deregisters, then closes; readers stopped and started one after
// another under an eventual-read load fail no read, and every answer is within the staleness
// bound: it shows every commit acknowledged more than the snapshot expiry before it was asked.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.js';
import { PeerClients } from '../../src/transport/index.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';

const EXPIRY_MS = 400;
const IDS = Array.from({ length: 8 }, (_, i) => `k${i}`);

describe('draining readers', () => {
  let tc: TestCluster;
  let url: string;
  beforeAll(async () => {
    tc = await startCluster({ nodes: 1, readers: 3, readerOptions: { snapshotExpiryMs: EXPIRY_MS, scanDelayMs: 20, copyStallMs: 1000 } });
    url = tc.urls[0]!;
    const res = await http('POST', `${url}/api/collections`, { name: 'dr', numShards: 2, replicationFactor: 1, autoCommit: 'off' });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    expect((await http('POST', `${url}/api/collections/dr/docs`, IDS.map((id) => ({ id, n: 0 })))).status).toBe(200);
    expect((await http('POST', `${url}/api/collections/dr/commit`)).status).toBe(200);
  });
  afterAll(async () => tc?.stop());

  it('answers new scans BUSY at once, finishes the started one, deregisters, then stops', async () => {
    const slow = await tc.cluster.startReader(3, { scanDelayMs: 400 });
    const peers = new PeerClients({ resolve: () => slow.grpcAddress, logger: silentLogger() });
    try {
      const get = (): Promise<{ snapshot: number; result: unknown[] }> =>
        peers.call('reader4', 'get', { collection: 'dr', shard: 'shard1', ids: ['k0'], eventual: { busyTimeoutMs: 5000 } });
      const events: string[] = [];
      const started = get().then((a) => {
        events.push('started scan answered');
        return a;
      });
      // The scan is running once the reader counts it.
      while ((slow.status() as { scans: { running: number } }).scans.running === 0) await new Promise((r) => setTimeout(r, 5));
      const stopping = slow.stop().then(() => events.push('stopped'));
      const refused = await get().catch((e) => e);
      events.push('new scan refused');
      expect(refused.code).toBe('SHX_BUSY');
      expect(refused.message).toMatch(/reader4 is stopping/);
      expect((await started).result).toHaveLength(1);
      await stopping;
      expect(events).toEqual(['new scan refused', 'started scan answered', 'stopped']);
      expect(tc.cluster.nodes[0]!.readers().map((r) => r.name)).not.toContain('reader4');
    } finally {
      peers.close();
    }
  });

  it('fails no eventual read while readers are stopped and started under load, each answer within the bound', async () => {
    // Committed versions of the documents' `n`, with when each commit was acknowledged.
    const acked: Array<{ n: number; at: number }> = [{ n: 0, at: performance.now() }];
    let writing = true;
    const writer = (async () => {
      for (let n = 1; writing; n++) {
        const w = await http('POST', `${url}/api/collections/dr/docs`, IDS.map((id) => ({ id, n })));
        expect(w.status).toBe(200);
        expect((await http('POST', `${url}/api/collections/dr/commit`)).status).toBe(200);
        acked.push({ n, at: performance.now() });
        await new Promise((r) => setTimeout(r, 40));
      }
    })();

    const answers: Array<{ status: number; sentAt: number; n: number; body?: unknown; servedBy: { node: string; busy: number; fallback: boolean } }> = [];
    let reading = true;
    const readerLoop = async (w: number): Promise<void> => {
      for (let i = 0; reading; i++) {
        const sentAt = performance.now();
        if (w % 2 === 0) {
          const id = IDS[(w + i) % IDS.length]!;
          const r = await http('GET', `${url}/api/collections/dr/docs/${id}?consistency=eventual&timeoutMs=20000`);
          answers.push({ status: r.status, sentAt, n: r.body?.n, ...(r.status !== 200 && { body: r.body }), servedBy: JSON.parse(r.headers.get('x-shardex-served-by') ?? 'null') });
        } else {
          // A search: every phase of each shard on one reader, restarted elsewhere if that reader starts draining.
          const r = await http('GET', `${url}/api/collections/dr/search?q=*&limit=8&fields=n&consistency=eventual&timeoutMs=20000`);
          const ok = r.status === 200 && r.body.total === IDS.length && r.body.hits.length === IDS.length;
          for (const shard of Object.values((r.body?.servedBy ?? {}) as Record<string, { node: string; busy: number; fallback: boolean }>)) {
            for (const h of r.body.hits as Array<{ n: number }>) answers.push({ status: ok ? 200 : r.status || 500, sentAt, n: h.n, servedBy: shard });
          }
          if (!ok) answers.push({ status: r.status === 200 ? 500 : r.status, sentAt, n: -1, body: r.body, servedBy: { node: '?', busy: 0, fallback: false } });
        }
        // Irregular gaps: a reader's copy of a shard is not asked for a while, then asked again.
        await new Promise((res) => setTimeout(res, Math.random() * 300));
      }
    };
    const load = Promise.all([0, 1, 2, 3, 4, 5].map(readerLoop));

    try {
      const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
      await pause(300);
      for (const i of [0, 1, 2, 0]) {
        await tc.cluster.readers[i]!.stop();
        await pause(200);
        await tc.cluster.startReader(i);
        await pause(300);
      }
    } finally {
      reading = false;
      writing = false;
      await load;
      await writer;
    }

    const failed = answers.filter((a) => a.status !== 200);
    expect(failed, JSON.stringify(failed.slice(0, 3))).toEqual([]);
    for (const a of answers) {
      // The newest commit acknowledged more than the expiry before the read was sent.
      const due = acked.filter((c) => c.at < a.sentAt - EXPIRY_MS).at(-1)?.n ?? 0;
      expect(a.n, `read sent at ${a.sentAt.toFixed(0)} by ${a.servedBy.node}`).toBeGreaterThanOrEqual(due);
    }
    const byReaders = answers.filter((a) => !a.servedBy.fallback).length;
    expect(byReaders).toBeGreaterThan(answers.length / 2);
    expect(acked.length).toBeGreaterThan(10);
  });
});
