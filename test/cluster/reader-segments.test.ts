// Issue 11: a snapshot reader copies the segment files of the leader's commit point rather than
// indexing the commit point's documents again; what it serves is exactly that commit point (its
// deletes and replacements, none after). A copied segment that does not load is not served: the
// reader indexes the copied documents instead and answers the same.
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PersistedIndex } from '../../src/distrib/index-persistence.js';
import type { SnapshotReader } from '../../src/read/snapshot-reader.js';
import { silentLogger } from '../../src/logger.js';
import { PeerClients } from '../../src/transport/index.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';

const WORDS = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta'];
const doc = (i: number, variant = 0): Record<string, unknown> => ({
  id: `d${i}`,
  title: `${WORDS[(i + variant) % 8]} ${WORDS[(i * 3 + variant) % 8]} ${WORDS[(i * 5) % 8]}`,
  price: (i * 7 + variant) % 50,
});

const QUERIES = ['q=alpha', 'q=%22alpha%20beta%22', 'q=*&sort=price%20desc&limit=20', 'q=beta%20OR%20theta&limit=15', 'q=price:[10%20TO%2030]&sort=price%20asc&limit=50'];

/** Each query's hits (ids and scores) and total, as one consistency level answers them. */
async function answers(url: string, collection: string, consistency: 'immediate' | 'eventual'): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const q of QUERIES) {
    const r = await http('GET', `${url}/api/collections/${collection}/search?${q}&consistency=${consistency}`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    if (consistency === 'eventual') expect(Object.values(r.body.servedBy).every((s: any) => s.node === 'reader1' && !s.fallback)).toBe(true);
    out.push({ total: r.body.total, hits: r.body.hits.map((h: any) => [h.id, h.score, h.price]) });
  }
  return out;
}

async function indexedByReader(reader: SnapshotReader): Promise<number> {
  const m = await reader.metrics.getSingleMetric('shardex_reader_copy_indexed_docs_total')!.get();
  return m.values[0]?.value ?? 0;
}

const cachedIndex = (reader: SnapshotReader, collection: string): string[] =>
  (reader.status() as { shards: Array<{ shard: string; index: string }> }).shards.filter((s) => s.shard.startsWith(`${collection}/`)).map((s) => s.index);

describe('snapshot readers copy segments', () => {
  let tc: TestCluster;
  let url: string;
  let reader: SnapshotReader;
  beforeAll(async () => {
    // Merges of three segments, so that the leader merges the commit point's segments away.
    tc = await startCluster({ nodes: 1, readers: 1, readerOptions: { snapshotExpiryMs: 100 }, nodeOptions: { checkpointPolicy: { segmentsPerTier: 3 } } });
    url = tc.urls[0]!;
    reader = tc.cluster.readers[0]!;
    for (const name of ['seg', 'dmg', 'bare', 'cut']) {
      const res = await http('POST', `${url}/api/collections`, { name, numShards: 2, replicationFactor: 1, autoCommit: 'off', fields: { title: 'text', price: 'number' } });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
    }
  });
  afterAll(async () => tc?.stop());

  it("serves the commit point from the leader's segments: its deletes and replacements, none after", async () => {
    const indexOf = (shard: string): PersistedIndex => {
      const index = tc.cluster.nodes[0]!.replica('seg', shard)!.index;
      expect(index).toBeInstanceOf(PersistedIndex);
      return index as PersistedIndex;
    };
    const checkpoint = async (): Promise<void> => {
      for (const shard of ['shard1', 'shard2']) await indexOf(shard).checkpoint();
    };
    expect((await http('POST', `${url}/api/collections/seg/docs`, Array.from({ length: 300 }, (_, i) => doc(i)))).status).toBe(200);
    // Written before the commit point: its deletes below are the commit point's delete lists.
    await checkpoint();
    expect((await http('POST', `${url}/api/collections/seg/docs`, Array.from({ length: 30 }, (_, i) => doc(i * 7, 3)))).status).toBe(200);
    for (const id of ['d1', 'd2', 'd50', 'd99']) expect((await http('DELETE', `${url}/api/collections/seg/docs/${id}`)).status).toBe(200);
    expect((await http('POST', `${url}/api/collections/seg/commit`)).status).toBe(200);
    const atCommit = await answers(url, 'seg', 'immediate');

    // After the commit point, before the reader's first copy: deletes and replacements in the
    // committed segments, new documents, then checkpoints and merges on the leader.
    for (const id of ['d3', 'd4', 'd60', 'd200']) expect((await http('DELETE', `${url}/api/collections/seg/docs/${id}`)).status).toBe(200);
    expect((await http('POST', `${url}/api/collections/seg/docs`, [...Array.from({ length: 40 }, (_, i) => doc(i * 5, 1)), ...Array.from({ length: 20 }, (_, i) => doc(400 + i))])).status).toBe(200);
    const committedNames = (shard: string): string[] => indexOf(shard).index.segments.map((x) => x.name);
    const atCommitSegments = ['shard1', 'shard2'].map(committedNames);
    for (let round = 0; round < 3; round++) {
      expect((await http('POST', `${url}/api/collections/seg/docs`, Array.from({ length: 10 }, (_, i) => doc(500 + round * 10 + i)))).status).toBe(200);
      await checkpoint();
    }
    for (const shard of ['shard1', 'shard2']) while (await indexOf(shard).merge());
    // The merges replaced segments of the commit point: the reader must still get those files.
    expect(['shard1', 'shard2'].some((shard, i) => atCommitSegments[i]!.some((n) => !committedNames(shard).includes(n)))).toBe(true);
    const current = await answers(url, 'seg', 'immediate');
    expect(current).not.toEqual(atCommit);

    expect(await answers(url, 'seg', 'eventual')).toEqual(atCommit);
    expect(cachedIndex(reader, 'seg')).toEqual(['segments', 'segments']);
    expect(await indexedByReader(reader)).toBe(0);

    // The next commit point reaches the copy through the leader's log, on top of the segments.
    expect((await http('POST', `${url}/api/collections/seg/commit`)).status).toBe(200);
    await expect.poll(() => answers(url, 'seg', 'eventual'), { timeout: 10_000 }).toEqual(current);
    expect(await indexedByReader(reader)).toBe(0);
  });

  it('indexes the copied documents itself when a copied segment is damaged, and answers the same', async () => {
    expect((await http('POST', `${url}/api/collections/dmg/docs`, Array.from({ length: 200 }, (_, i) => doc(i)))).status).toBe(200);
    expect((await http('DELETE', `${url}/api/collections/dmg/docs/d7`)).status).toBe(200);
    expect((await http('POST', `${url}/api/collections/dmg/commit`)).status).toBe(200);
    const atCommit = await answers(url, 'dmg', 'immediate');
    // One byte changed in the middle of each of shard1's segment files on the leader: a
    // checksum no longer matches. (A collection this small keeps every section in memory, so
    // the leader itself never reads the files again.)
    const dir = join(tc.dataDir, 'node1', 'dmg', 'shard1');
    // The commit is answered before its files are written: openCommitted waits for them.
    const replica = tc.cluster.nodes[0]!.replica('dmg', 'shard1')!;
    const committed = await (replica.index as PersistedIndex).openCommitted(replica.store.lastCommit!);
    expect(committed).toBeDefined();
    await Promise.all(committed!.files.map((f) => f.handle.close()));
    const files = committed!.files.map((f) => f.name);
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) {
      const bytes = await readFile(join(dir, f));
      bytes[bytes.length >> 1] ^= 0xff;
      await writeFile(join(dir, f), bytes);
    }
    expect(await answers(url, 'dmg', 'eventual')).toEqual(atCommit);
    expect(cachedIndex(reader, 'dmg').sort()).toEqual(['documents', 'segments']);
    // shard1's documents, indexed by the reader: 199 of the 200 minus those of shard2.
    const indexed = await indexedByReader(reader);
    expect(indexed).toBeGreaterThan(0);
    expect(indexed).toBeLessThan(199);
  });

  it('indexes the documents of a commit point the leader has no segments for, and answers the same', async () => {
    expect((await http('POST', `${url}/api/collections/bare/docs`, Array.from({ length: 120 }, (_, i) => doc(i)))).status).toBe(200);
    // A commit point recorded by the store alone: no index checkpoint at it.
    for (const shard of ['shard1', 'shard2']) await tc.cluster.nodes[0]!.replica('bare', shard)!.store.commit();
    const atCommit = await answers(url, 'bare', 'immediate');
    const before = await indexedByReader(reader);
    expect(await answers(url, 'bare', 'eventual')).toEqual(atCommit);
    expect(cachedIndex(reader, 'bare')).toEqual(['documents', 'documents']);
    expect((await indexedByReader(reader)) - before).toBe(120);
  });

  it('lets the commit point go on the leader when a reader gives a copy up halfway', async () => {
    const docs = Array.from({ length: 24_000 }, (_, i) => ({ id: `c${i}`, title: `${WORDS[i % 8]} ${WORDS[(i >> 3) % 8]}`, price: i % 97 }));
    for (let i = 0; i < docs.length; i += 4000) expect((await http('POST', `${url}/api/collections/cut/docs`, docs.slice(i, i + 4000))).status).toBe(200);
    expect((await http('POST', `${url}/api/collections/cut/commit`)).status).toBe(200);
    const leader = tc.cluster.nodes[0]!;
    const store = (shard: string) => leader.replica('cut', shard)!.store;
    const peers = new PeerClients({ resolve: () => leader.grpcAddress, logger: silentLogger() });
    try {
      const copy = peers.streamCall<{ commit?: unknown }>(leader.name, 'copyShard', { collection: 'cut', shard: 'shard1', commit: true, segments: true, raw: true });
      const header = await copy.next();
      expect(header.value).toMatchObject({ commit: { version: expect.any(Number) } });
      expect(store('shard1').heldCommits).toBe(1);
      // The reader reads no further and goes away while the leader is still sending.
      await new Promise((r) => setTimeout(r, 200));
      await copy.return(undefined);
      await expect.poll(() => store('shard1').heldCommits, { timeout: 10_000 }).toBe(0);
    } finally {
      peers.close();
    }
  });
});

describe('a snapshot reader started with --copy-documents', () => {
  let tc: TestCluster;
  afterAll(async () => tc?.stop());

  it('indexes every copy itself and answers as the leader', async () => {
    tc = await startCluster({ nodes: 1, readers: 1, readerOptions: { copyDocuments: true } });
    const url = tc.urls[0]!;
    const reader = tc.cluster.readers[0]!;
    expect((await http('POST', `${url}/api/collections`, { name: 'docs2', numShards: 2, replicationFactor: 1, autoCommit: 'off', fields: { title: 'text', price: 'number' } })).status).toBe(201);
    expect((await http('POST', `${url}/api/collections/docs2/docs`, Array.from({ length: 80 }, (_, i) => doc(i)))).status).toBe(200);
    expect((await http('POST', `${url}/api/collections/docs2/commit`)).status).toBe(200);
    expect(await answers(url, 'docs2', 'eventual')).toEqual(await answers(url, 'docs2', 'immediate'));
    expect(cachedIndex(reader, 'docs2')).toEqual(['documents', 'documents']);
    expect(await indexedByReader(reader)).toBe(80);
  });
});
