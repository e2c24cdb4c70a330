// A leader skips a replica already marked down (its node restarting) when it fans an update out,
// and acknowledges the update with the replicas it reached. Before that acknowledgement the
// shard's terms must put the leader above the skipped replica (Solr's ensureTermsAreHigher):
// otherwise, if the leader is gone before the restarted replica recovers, that replica is
// elected without the write, and the returning leader's copy of it is then removed as one
// nobody acknowledged.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { ShardexNode } from '../../src/node/shardex-node.js';
import { ReplicaStore } from '../../src/ulog/index.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';
import { pollUntil } from '../support/poll.js';

const C = 'skip';
let tc: TestCluster;

beforeAll(async () => {
  tc = await startCluster({ nodes: 2, collection: { name: C, numShards: 1, replicationFactor: 2, router: 'compositeId' } });
  await tc.cluster.waitAllActive(30_000);
});

afterAll(async () => {
  await tc?.stop();
});

/** The shard's leader and its follower, by node index. */
function roles(): { L: ShardexNode; leader: string; li: number; fi: number; follower: string } {
  const nodes = tc.cluster.nodes;
  const leader = nodes[0]!.coordinator.leader(C, 'shard1')!.node;
  const li = nodes.findIndex((n) => n.name === leader);
  return { L: nodes[li]!, leader, li, fi: 1 - li, follower: nodes[1 - li]!.name };
}

async function write(L: ShardexNode, id: string): Promise<{ rf: number }> {
  const res = await http('POST', `${L.httpUrl}/api/collections/${C}/docs`, [{ id }]);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
}

/**
 * Restarts the follower with its stores held shut (a slow disk), waits until the leader sees it
 * live and down, and runs `meanwhile`; then lets the stores open. Resolves the restarted node.
 */
async function whileRestarting(meanwhile: () => Promise<void>): Promise<ShardexNode> {
  const { L, fi, follower } = roles();
  await tc.cluster.nodes[fi]!.stop();
  const open = ReplicaStore.open.bind(ReplicaStore);
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  ReplicaStore.open = (async (...args: Parameters<typeof ReplicaStore.open>) => {
    await gate;
    return open(...args);
  }) as typeof ReplicaStore.open;
  let restarting: Promise<ShardexNode> | undefined;
  try {
    restarting = tc.cluster.startNode(fi);
    const stateOf = (): string | undefined => L.coordinator.collection(C)?.shards[0]?.replicas.find((r) => r.node === follower)?.state;
    await pollUntil('the restarting follower to be live and down', () => (L.coordinator.isLive(follower) && stateOf() === 'down' ? true : undefined), { ms: 20_000, everyMs: 10 });
    await meanwhile();
  } finally {
    ReplicaStore.open = open;
    release();
  }
  return restarting;
}

it('keeps a write acknowledged while a replica was down when the leader dies before that replica recovers', async () => {
  const { L, leader, li, follower } = roles();
  await write(L, 'before');
  const F = await whileRestarting(async () => {
    // Acknowledged by the leader alone: the follower is skipped.
    expect((await write(L, 'W')).rf).toBe(1);
    const terms = await L.coordinator.terms(C, 'shard1');
    expect(terms[leader]!).toBeGreaterThan(terms[follower]!);
    // The leader goes away before the follower has opened its stores, let alone recovered.
    await L.stop();
  });
  // The follower may not lead: its term is behind. The leader returns, leads, and the follower
  // recovers from it; the write is on both.
  await tc.cluster.startNode(li);
  await tc.cluster.waitAllActive(30_000);
  expect(F.replica(C, 'shard1')!.role).toBe('follower');
  for (const url of tc.cluster.urls) {
    for (const id of ['before', 'W']) {
      const got = await http('GET', `${url}/api/collections/${C}/docs/${id}`);
      expect(got.status, `${id} at ${url}: ${JSON.stringify(got.body)}`).toBe(200);
    }
  }
  for (const n of tc.cluster.nodes) expect(await n.replica(C, 'shard1')!.store.get('W'), `W in ${n.name}'s replica`).toBeDefined();
});

it('raises the terms again for each time a replica goes down, and reads them once per state while it is down', async () => {
  const { L, leader, fi, follower } = roles();
  let raises = 0;
  const raiseTerms = L.coordinator.raiseTerms.bind(L.coordinator);
  L.coordinator.raiseTerms = async (...args) => {
    raises++;
    return raiseTerms(...args);
  };
  try {
    for (const round of [1, 2]) {
      await whileRestarting(async () => {
        const before = raises;
        await write(L, `r${round}a`);
        await write(L, `r${round}b`);
        // One raise for the state in which the follower is down, not one per write.
        expect(raises - before).toBe(1);
        const terms = await L.coordinator.terms(C, 'shard1');
        expect(terms[leader]!, `round ${round}: ${JSON.stringify(terms)}`).toBeGreaterThan(terms[follower]!);
      });
      // Recovered, the follower's term is the leader's again: the next time it is down, the terms are raised again.
      await tc.cluster.waitAllActive(30_000);
      const caught = await L.coordinator.terms(C, 'shard1');
      expect(caught[follower]).toBe(caught[leader]);
    }
  } finally {
    L.coordinator.raiseTerms = raiseTerms;
  }
  for (const id of ['r1a', 'r1b', 'r2a', 'r2b']) {
    const got = await http('GET', `${tc.cluster.urls[fi]}/api/collections/${C}/docs/${id}`);
    expect(got.status, id).toBe(200);
  }
});
