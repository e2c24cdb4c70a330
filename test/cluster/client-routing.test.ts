// Issue 6, "what it must show" 1 and 4, on a 3-node cluster (4 shards x 2 replicas):
// - the smart client sends every shard's documents straight to that shard's leader, so the
//   nodes forward nothing (shardex_updates_forwarded_total{phase="TOLEADER"} stays put), while
//   the same import posted to one node makes it forward most of it;
// - the query batcher visits every id exactly once, also when a node is lost mid-walk.
// The client import is the 50,000 documents (short bodies); the plain-HTTP import that
// shows the forwards is 10,000.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShardexClient } from '../../src/client/index.js';
import { generateDocs, type CorpusDoc } from '../../src/corpus.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';

const DOCS = 50_000;
const HTTP_DOCS = 10_000;
const BATCH = 500;

async function toLeaderForwards(url: string): Promise<number> {
  const text = (await http<string>('GET', `${url}/metrics`)).body;
  const m = /^shardex_updates_forwarded_total\{phase="TOLEADER"\} (\S+)$/m.exec(text);
  return m ? Number(m[1]) : 0;
}

async function forwardsByNode(urls: readonly string[]): Promise<number[]> {
  return Promise.all(urls.map(toLeaderForwards));
}

describe('smart client on a 3-node cluster (4 shards x 2 replicas)', () => {
  let tc: TestCluster;
  let client: ShardexClient;
  const viaClient: CorpusDoc[] = [...generateDocs({ count: DOCS, seed: 11, words: 10 })];
  const viaHttp: CorpusDoc[] = [...generateDocs({ count: HTTP_DOCS, seed: 12, start: DOCS, words: 10 })];

  beforeAll(async () => {
    tc = await startCluster({ nodes: 3, collection: { name: 'docs', numShards: 4, replicationFactor: 2, router: 'compositeId' } });
    client = new ShardexClient({ urls: tc.urls[0]!, refreshIntervalMs: 0 });
  });

  afterAll(async () => {
    await client?.close();
    await tc?.stop();
  });

  it('imports with zero TOLEADER forwards on every node', async () => {
    const before = await forwardsByNode(tc.urls);
    const job = client.writeBatcher({ collection: 'docs', batchSize: BATCH, concurrency: 4 });
    await job.addAll(viaClient);
    const report = await job.awaitCompletion();
    expect(report).toMatchObject({ written: DOCS, failed: 0 });
    const after = await forwardsByNode(tc.urls);
    expect(after).toEqual(before);
  });

  it('while the same import posted to one node makes it forward every document of the shards it does not lead', async () => {
    const before = await forwardsByNode(tc.urls);
    for (let i = 0; i < HTTP_DOCS; i += BATCH) {
      const res = await http('POST', `${tc.urls[0]}/api/collections/docs/docs`, viaHttp.slice(i, i + BATCH));
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    }
    const after = await forwardsByNode(tc.urls);
    // node1 forwards exactly the documents of the shards it does not lead.
    const state = client.state.collection('docs')!;
    const router = client.state.router('docs');
    const notLedByNode1 = viaHttp.filter((d) => state.shards.find((s) => s.name === router.route(d.id).shard)!.leader !== 'node1').length;
    expect(notLedByNode1).toBeGreaterThan(0);
    expect(after[0]! - before[0]!).toBe(notLedByNode1);
    expect(after.slice(1)).toEqual(before.slice(1));
  });

  it('reads every imported document back from its leader', async () => {
    const missing: string[] = [];
    const sample = viaClient.filter((_, i) => i % 10 === 0);
    await Promise.all(
      sample.map(async (d) => {
        const got = await client.get('docs', d.id);
        if (got?.title !== d.title) missing.push(d.id);
      }),
    );
    expect(missing).toEqual([]);
  });

  it('queryBatcher visits exactly the ids matching its query, with the fields asked for', async () => {
    const expected = new Set([...viaClient, ...viaHttp].filter((d) => d.title.split(' ').includes(viaClient[0]!.title.split(' ')[0]!)).map((d) => d.id));
    const word = viaClient[0]!.title.split(' ')[0]!;
    const seen: string[] = [];
    const job = client.queryBatcher('docs', `title:${word}`, { batchSize: 300, fields: ['title'] }).onBatch((b) => {
      for (const d of b.docs) {
        expect(Object.keys(d).sort()).toEqual(['_version_', 'id', 'title']);
        seen.push(String(d.id));
      }
    });
    await job.awaitCompletion();
    expect(seen.length).toBe(expected.size);
    expect(new Set(seen)).toEqual(expected);
  });

  it('queryBatcher visits every id exactly once, also when a node is lost mid-walk', async () => {
    const all = new Set([...viaClient, ...viaHttp].map((d) => d.id));
    const seen = new Map<string, number>();
    // Lose the node serving shard4's pages right after its first page: its next page must be
    // retried (leaders move, e.g. back to their preferred node, so the victim is whoever served it).
    let victim: (typeof tc.cluster.nodes)[number] | undefined;
    const retriedAt: string[] = [];
    const job = client
      .queryBatcher('docs', '*', { batchSize: 400, concurrency: 1 })
      .onBatch(async (b) => {
        for (const id of b.ids) seen.set(id, (seen.get(id) ?? 0) + 1);
        if (victim === undefined && b.shard === 'shard4') {
          victim = tc.cluster.nodes.find((n) => n.httpUrl === b.host)!;
          await victim.stop();
        }
      })
      .onBatchRetry((r) => void retriedAt.push(r.host));
    const report = await job.awaitCompletion();
    expect(report.shardsFailed).toEqual([]);
    expect(seen.size).toBe(all.size);
    expect([...seen.keys()].filter((id) => !all.has(id))).toEqual([]);
    expect([...seen.entries()].filter(([, n]) => n !== 1)).toEqual([]);
    expect(victim).toBeDefined();
    expect(retriedAt).toContain(victim!.httpUrl);
  });
});
