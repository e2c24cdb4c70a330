// Issue 2, "what it must show" 4: concurrent writers of the same ids through different nodes
// leave leader and replicas identical. Several writers post (and now and then delete) the
// same ids, each through its own node, at the same time; afterwards every replica of every
// id holds the same document and _version_, and that is the newest acknowledged write. On the cluster `npm start` runs (each node in a worker thread).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { routeId } from '../../src/hashrange/index.js';
import { clusterView, http, startThreadedCluster, type ClusterView, type ThreadedTestCluster } from '../support/cluster.js';
import { mulberry32 } from '../../src/corpus.js';

const COLLECTION = 'cw';
const SHARDS = 3;
const WRITERS = 6;
const ROUNDS = 12;
const IDS = [
  ...Array.from({ length: 40 }, (_, i) => `doc-${i}`),
  ...Array.from({ length: 10 }, (_, i) => `tenant${i % 3}!item-${i}`),
  'é-accent',
  '漢字-id',
  '😀-emoji',
  'constructor',
];


function shuffled<T>(items: readonly T[], rand: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}


/** What one acknowledged write left for an id: a document from (writer, round), or a delete. */
type Written = { version: number; writer: number; round: number } | { version: number; deleted: true };

const docUrl = (base: string, id: string, distrib?: boolean): string =>
  `${base}/api/collections/${COLLECTION}/docs/${encodeURIComponent(id)}${distrib === false ? '?distrib=false' : ''}`;

describe('concurrent writers of the same ids through different nodes', () => {
  let tc: ThreadedTestCluster;
  let view: ClusterView;
  /** Every acknowledged write, by id. */
  const acked = new Map<string, Written[]>();
  const failures: string[] = [];
  const rfs = new Set<number>();

  const record = (id: string, w: Written): void => {
    let list = acked.get(id);
    if (!list) acked.set(id, (list = []));
    list.push(w);
  };

  async function writer(w: number): Promise<void> {
    const rand = mulberry32(1000 + w);
    const base = tc.urls[w % tc.urls.length]!;
    for (let round = 0; round < ROUNDS; round++) {
      const docs = shuffled(IDS, rand).map((id) => ({ id, writer: w, round, note: `w${w}r${round}` }));
      const res = await http('POST', `${base}/api/collections/${COLLECTION}/docs`, docs);
      if (res.status !== 200) {
        failures.push(`writer ${w} round ${round}: ${res.status} ${JSON.stringify(res.body)}`);
        continue;
      }
      rfs.add(res.body.rf);
      for (const [id, version] of Object.entries(res.body.versions as Record<string, number>)) record(id, { version, writer: w, round });
      if (round % 4 === w % 4) {
        // Delete two ids, so that tombstones race with adds too.
        for (const id of shuffled(IDS, rand).slice(0, 2)) {
          const del = await http('DELETE', docUrl(base, id));
          if (del.status !== 200) failures.push(`writer ${w} delete ${id}: ${del.status} ${JSON.stringify(del.body)}`);
          else {
            rfs.add(del.body.rf);
            record(id, { version: del.body.version, deleted: true });
          }
        }
      }
    }
  }

  beforeAll(async () => {
    tc = await startThreadedCluster({ nodes: 3, collection: { name: COLLECTION, numShards: SHARDS, replicationFactor: 2, router: 'compositeId' } });
    // The cluster's start waited until every replica was active: the writers start now.
    await Promise.all(Array.from({ length: WRITERS }, (_, w) => writer(w)));
    view = await clusterView(tc.urls[0]!);
  });

  afterAll(async () => {
    await tc?.stop();
  });

  it('acknowledges every write on both replicas of its shard', () => {
    expect(failures).toEqual([]);
    expect([...rfs]).toEqual([2]);
    expect(acked.size).toBe(IDS.length);
  });

  it('gives every acknowledged write of an id a distinct version', () => {
    for (const [id, list] of acked) expect(new Set(list.map((w) => w.version)).size, id).toBe(list.length);
  });

  it('keeps every replica active: no replica missed an update', () => {
    for (const shard of Object.values(view.collections[COLLECTION]!.shards)) {
      expect(shard.leader).not.toBeNull();
      expect(shard.replicas.map((r) => r.state)).toEqual(['active', 'active']);
    }
  });

  it('leaves leader and replica holding the identical document and _version_ for every id', async () => {
    const nodeUrl = new Map(view.nodes.map((n) => [n.name, n.http]));
    const mismatches: string[] = [];
    await Promise.all(
      IDS.map(async (id) => {
        const shard = view.collections[COLLECTION]!.shards[routeId(id, SHARDS).shard]!;
        const reads = await Promise.all(shard.replicas.map((r) => http('GET', docUrl(nodeUrl.get(r.node)!, id, false))));
        const seen = reads.map((r) => JSON.stringify({ status: r.status, body: r.status === 200 ? r.body : undefined }));
        if (new Set(seen).size !== 1) mismatches.push(`${id}: ${shard.replicas.map((r, i) => `${r.node}=${seen[i]}`).join(' ')}`);
      }),
    );
    expect(mismatches).toEqual([]);
  });

  it('leaves on every replica the write with the newest acknowledged version', async () => {
    const nodeUrl = new Map(view.nodes.map((n) => [n.name, n.http]));
    const wrong: string[] = [];
    await Promise.all(
      IDS.map(async (id) => {
        const newest = acked.get(id)!.reduce((a, b) => (b.version > a.version ? b : a));
        const shard = view.collections[COLLECTION]!.shards[routeId(id, SHARDS).shard]!;
        for (const r of shard.replicas) {
          const res = await http('GET', docUrl(nodeUrl.get(r.node)!, id, false));
          if ('deleted' in newest) {
            if (res.status !== 404) wrong.push(`${id} on ${r.node}: deleted at ${newest.version}, but got ${res.status} ${JSON.stringify(res.body)}`);
          } else if (res.status !== 200 || res.body._version_ !== newest.version || res.body.writer !== newest.writer || res.body.round !== newest.round) {
            wrong.push(`${id} on ${r.node}: expected w${newest.writer}r${newest.round}@${newest.version}, got ${res.status} ${JSON.stringify(res.body)}`);
          }
        }
      }),
    );
    expect(wrong).toEqual([]);
  });

  it('serves the same state from the leader through every node (distrib)', async () => {
    const diverging: string[] = [];
    await Promise.all(
      IDS.map(async (id) => {
        const reads = await Promise.all(tc.urls.map((u) => http('GET', docUrl(u, id))));
        const seen = new Set(reads.map((r) => JSON.stringify({ status: r.status, v: r.body?._version_ })));
        if (seen.size !== 1) diverging.push(`${id}: ${[...seen].join(' ')}`);
      }),
    );
    expect(diverging).toEqual([]);
  });

  it('holds each id only on the nodes hosting its shard', async () => {
    const hosting = (id: string): Set<string> =>
      new Set(view.collections[COLLECTION]!.shards[routeId(id, SHARDS).shard]!.replicas.map((r) => r.node));
    const strays: string[] = [];
    await Promise.all(
      IDS.map(async (id) => {
        for (const n of view.nodes) {
          if (hosting(id).has(n.name)) continue;
          const res = await http('GET', docUrl(n.http, id, false));
          if (res.status !== 404) strays.push(`${id} on ${n.name}: ${res.status}`);
        }
      }),
    );
    expect(strays).toEqual([]);
  });
});
