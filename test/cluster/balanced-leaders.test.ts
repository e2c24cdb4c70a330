// Leaders balanced (issue 15, must-show 5): with N nodes and S shards no node leads more than
// ceil(S/N) shards after a collection is created, and again after a failed node returns (its
// shards' leadership comes back to it, as Solr's preferredLeader and REBALANCELEADERS do);
// writes keep being acknowledged meanwhile.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, startCluster, type TestCluster } from '../support/cluster.js';

const C = 'spread';
const SHARDS = 6;
const NODES = 3;
let tc: TestCluster;

beforeAll(async () => {
  tc = await startCluster({ nodes: NODES });
  const created = await http('POST', `${tc.urls[0]}/api/collections`, { name: C, numShards: SHARDS, replicationFactor: 2 });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  await tc.cluster.waitAllActive(30_000);
});

afterAll(async () => {
  await tc?.stop();
});

/** How many shards each live node leads (from the first live node's view). */
function leadsPerNode(): Map<string, number> {
  const live = tc.cluster.nodes.filter((n) => n && !n['stopped']);
  const view = live[0]!.coordinator;
  const counts = new Map<string, number>(live.map((n) => [n.name, 0]));
  for (let s = 1; s <= SHARDS; s++) {
    const leader = view.leader(C, `shard${s}`);
    if (leader) counts.set(leader.node, (counts.get(leader.node) ?? 0) + 1);
  }
  return counts;
}

async function balanced(most: number): Promise<Map<string, number>> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const counts = leadsPerNode();
    const total = [...counts.values()].reduce((a, b) => a + b, 0);
    if (total === SHARDS && [...counts.values()].every((n) => n <= most)) return counts;
    if (Date.now() > deadline) throw new Error(`leaders not balanced within 30 s: ${JSON.stringify([...counts])}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('leaders', () => {
  it('spread evenly over the nodes at creation', async () => {
    const counts = await balanced(Math.ceil(SHARDS / NODES));
    expect([...counts.values()]).toEqual([2, 2, 2]);
  });

  it('come back to a node that failed and returned, while writes go on', async () => {
    const victim = 1;
    const name = tc.cluster.nodes[victim]!.name;
    await tc.cluster.nodes[victim]!.stop();
    // Two nodes lead everything meanwhile.
    await balanced(SHARDS);
    expect(leadsPerNode().has(name)).toBe(false);

    let stop = false;
    let acked = 0;
    const failures: string[] = [];
    const writer = (async () => {
      for (let i = 0; !stop; i++) {
        const r = await http('POST', `${tc.urls[0]}/api/collections/${C}/docs`, [{ id: `w${i}`, n: i }]);
        if (r.status === 200) acked++;
        else failures.push(`${r.status} ${JSON.stringify(r.body)}`);
      }
    })();
    try {
      await tc.cluster.startNode(victim);
      await tc.cluster.waitAllActive(30_000);
      const counts = await balanced(Math.ceil(SHARDS / NODES));
      expect(counts.get(name)).toBe(2);
    } finally {
      stop = true;
      await writer;
    }
    expect(acked).toBeGreaterThan(0);
    // A handover refuses new writes as not-the-leader for a moment; the node forwarding them retries.
    expect(failures).toEqual([]);
  });
});

describe('election candidacies', () => {
  it('puts a replica that is out of its election back in at the next cluster change', async () => {
    const node = tc.cluster.nodes[2]!;
    const shard = tc.cluster.nodes[0]!.coordinator
      .collection(C)!
      .shards.find((s) => s.replicas.some((r) => r.node === node.name) && node.coordinator.leader(C, s.name)?.node !== node.name)!.name;
    // What a resign that could not rejoin (coordination unreachable) leaves behind.
    await node.coordinator.leaveElection(C, shard);
    expect(node.coordinator.inElection(C, shard)).toBe(false);
    // Any change of the cluster state: here another collection.
    expect((await http('POST', `${tc.urls[0]}/api/collections`, { name: 'other', numShards: 1, replicationFactor: 1 })).status).toBe(201);
    const deadline = Date.now() + 30_000;
    while (!(node.coordinator.inElection(C, shard) && (await node.coordinator.electionCandidates(C, shard)).includes(node.name))) {
      if (Date.now() > deadline) throw new Error(`${node.name} did not stand in the election of ${shard} again`);
      await new Promise((r) => setTimeout(r, 100));
    }
  });
});
