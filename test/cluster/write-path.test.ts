// Issue 2, "what it must show" 3: 3 nodes, 4 shards x 2 replicas, 10,000 generated documents
// posted round-robin in batches of 500; every document reads back from every node (export pages,
// and real-time gets of a sample), and with distrib=false it is found on exactly the nodes hosting
// its shard, with equal versions. On the cluster `npm start` runs (each node in a worker thread).
import pLimit from 'p-limit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDocs, type CorpusDoc } from '../../src/corpus.js';
import { routeId } from '../../src/hashrange/index.js';
import { clusterView, http, startThreadedCluster, type ClusterView, type ThreadedTestCluster } from '../support/cluster.js';

const DOCS = 10_000;
const BATCH = 500;

describe('write path on a 3-node cluster (4 shards x 2 replicas)', () => {
  let tc: ThreadedTestCluster;
  let view: ClusterView;
  const docs: CorpusDoc[] = [...generateDocs({ count: DOCS, seed: 7, words: 30 })];
  const acked = new Map<string, number>();
  const limit = pLimit(32);

  beforeAll(async () => {
    tc = await startThreadedCluster({ nodes: 3, collection: { name: 'docs', numShards: 4, replicationFactor: 2, router: 'compositeId' } });
    for (let i = 0; i < DOCS; i += BATCH) {
      const url = tc.urls[(i / BATCH) % tc.urls.length];
      const res = await http('POST', `${url}/api/collections/docs/docs`, docs.slice(i, i + BATCH));
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.added).toBe(BATCH);
      expect(res.body.rf).toBe(2);
      for (const [id, v] of Object.entries(res.body.versions as Record<string, number>)) acked.set(id, v);
    }
    view = await clusterView(tc.urls[0]!);
  });

  afterAll(async () => {
    await tc?.stop();
  });

  it('acknowledges every document with a version', () => {
    expect(acked.size).toBe(DOCS);
  });

  it('lists 4 shards with their Solr ranges, each with a leader and 2 active replicas', () => {
    const shards = view.collections.docs!.shards;
    expect(Object.keys(shards)).toEqual(['shard1', 'shard2', 'shard3', 'shard4']);
    expect(Object.values(shards).map((s) => s.range)).toEqual(['80000000-bfffffff', 'c0000000-ffffffff', '0-3fffffff', '40000000-7fffffff']);
    for (const s of Object.values(shards)) {
      expect(s.leader).not.toBeNull();
      expect(s.replicas.map((r) => r.state)).toEqual(['active', 'active']);
      expect(s.replicas.map((r) => r.node)).toContain(s.leader);
    }
  });

  /** Every document of `shard` that the node at `url` serves through export (distrib as given), by id. */
  async function exported(url: string, shard: string, distrib: boolean): Promise<{ status: number; docs: Map<string, { title: unknown; version: number }> }> {
    const docs = new Map<string, { title: unknown; version: number }>();
    let after: string | undefined;
    for (;;) {
      const q = `shard=${shard}&limit=10000${distrib ? '' : '&distrib=false'}${after === undefined ? '' : `&after=${encodeURIComponent(after)}`}`;
      const res = await http('GET', `${url}/api/collections/docs/export?${q}`);
      if (res.status !== 200) return { status: res.status, docs };
      for (const d of res.body.docs as Array<{ id: string; title: unknown; _version_: number }>) docs.set(d.id, { title: d.title, version: d._version_ });
      if (res.body.next === null) return { status: 200, docs };
      after = res.body.next as string;
    }
  }

  it('reads every document back from every node (export pages), and by real-time get (a sample of each shard)', async () => {
    const misses: string[] = [];
    const shards = Object.keys(view.collections.docs!.shards);
    for (const url of tc.urls) {
      const seen = new Map<string, { title: unknown; version: number }>();
      for (const shard of shards) for (const [id, d] of (await exported(url, shard, true)).docs) seen.set(id, d);
      for (const d of docs) {
        const got = seen.get(d.id);
        if (got === undefined || got.title !== d.title || got.version !== acked.get(d.id)) misses.push(`${url} ${d.id} exported as ${JSON.stringify(got)}`);
      }
      if (seen.size !== DOCS) misses.push(`${url} exported ${seen.size} documents`);
    }
    // Real-time gets through every node, forwarded to the leader when it is elsewhere: every 10th document.
    await Promise.all(
      docs
        .filter((_, i) => i % 10 === 0)
        .flatMap((d) =>
          tc.urls.map((url) =>
            limit(async () => {
              const res = await http('GET', `${url}/api/collections/docs/docs/${encodeURIComponent(d.id)}`);
              if (res.status !== 200 || res.body.title !== d.title || res.body._version_ !== acked.get(d.id)) misses.push(`${url} ${d.id} ${res.status}`);
            }),
          ),
        ),
    );
    expect(misses.slice(0, 10)).toEqual([]);
  });

  it('finds each document with distrib=false exactly on the nodes hosting the shard its hash names, with equal versions', async () => {
    const byName = new Map(view.nodes.map((n) => [n.name, n.http]));
    const problems: string[] = [];
    for (const [shard, s] of Object.entries(view.collections.docs!.shards)) {
      const want = docs.filter((d) => routeId(d.id, 4, 'compositeId').shard === shard);
      const hosts = s.replicas.map((r) => r.node);
      for (const [name, url] of byName) {
        const { status, docs: local } = await exported(url, shard, false);
        if (!hosts.includes(name)) {
          if (status === 200) problems.push(`${shard} unexpectedly on ${name}`);
          continue;
        }
        if (status !== 200) problems.push(`${shard} missing on ${name}: ${status}`);
        if (local.size !== want.length) problems.push(`${shard} on ${name} holds ${local.size} documents, the hash names ${want.length}`);
        for (const d of want) if (local.get(d.id)?.version !== acked.get(d.id)) problems.push(`${d.id} on ${name}: version ${local.get(d.id)?.version}, acknowledged ${acked.get(d.id)}`);
      }
    }
    // And by real-time get with distrib=false, for a sample: found exactly where its shard is.
    await Promise.all(
      docs
        .filter((_, i) => i % 25 === 0)
        .map((d) =>
          limit(async () => {
            const shard = routeId(d.id, 4, 'compositeId').shard;
            const hosts = view.collections.docs!.shards[shard]!.replicas.map((r) => r.node);
            for (const [name, url] of byName) {
              const res = await http('GET', `${url}/api/collections/docs/docs/${encodeURIComponent(d.id)}?distrib=false`);
              const hosted = hosts.includes(name);
              if (hosted && (res.status !== 200 || res.body._shard_ !== shard || res.body._version_ !== acked.get(d.id))) problems.push(`${d.id} on ${name}: ${res.status}`);
              if (!hosted && res.status !== 404) problems.push(`${d.id} unexpectedly on ${name}`);
            }
          }),
        ),
    );
    expect(problems.slice(0, 10)).toEqual([]);
  });
});
