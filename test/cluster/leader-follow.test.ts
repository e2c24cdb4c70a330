// A replica that was down when its shard's new leader announced its epoch learns that epoch when
// it recovers from that leader: it then follows the leadership, and leader balance can hand the
// shard back to it. Before, it followed only once a write arrived: with no writes, a returning
// preferred leader was refused every handover ("does not follow ... yet") and the shard stayed
// led by the other node. No write is made in this test, on purpose.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { pollUntil } from '../support/poll.js';

const C = 'follow';
let tc: TestCluster;

beforeAll(async () => {
  tc = await startCluster({ nodes: 2, collection: { name: C, numShards: 1, replicationFactor: 2, router: 'compositeId' } });
});

afterAll(async () => {
  await tc?.stop();
});

function leaderOf(): string | undefined {
  const node = tc.cluster.nodes.find((n) => n?.ready);
  const l = node?.coordinator.leader(C, 'shard1');
  const holder = l && tc.cluster.nodes.find((n) => n?.ready && n.name === l.node);
  return holder?.replica(C, 'shard1')?.role === 'leader' ? l!.node : undefined;
}

it('hands the shard back to its preferred leader after that node returns, with no write in between', async () => {
  const nodes = tc.cluster.nodes;
  const preferred = nodes[0]!.coordinator.collection(C)!.shards[0]!.preferredLeader!;
  expect(leaderOf()).toBe(preferred);
  const p = nodes.findIndex((n) => n?.name === preferred);
  const q = nodes.findIndex((n) => n?.name !== preferred);
  const fenceBefore = nodes[p]!.replica(C, 'shard1')!.fence;

  // Both nodes stop, the preferred leader last; the other comes back first and is elected with a
  // new epoch, which it can announce to nobody: the preferred leader is down.
  await nodes[q]!.stop();
  await nodes[p]!.stop();
  const other = await tc.cluster.startNode(q);
  await pollUntil('the other node to lead', () => (leaderOf() === other.name ? true : undefined), { ms: 30_000 });
  const epoch = other.replica(C, 'shard1')!.epoch;
  expect(epoch).toBeGreaterThan(fenceBefore);

  const back = await tc.cluster.startNode(p);
  expect(back.replica(C, 'shard1')!.fence).toBeLessThan(epoch);
  // Recovered from the leader of `epoch`, the returning replica follows it, and takes the shard back.
  await tc.cluster.waitAllActive(30_000);
  expect(leaderOf()).toBe(preferred);
  expect(back.replica(C, 'shard1')!.fence).toBeGreaterThan(epoch);
});
