// Election candidacies: a replica that is out of its shard's election (a resign that could not
// rejoin while coordination was unreachable) stands again at the next cluster change.
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
