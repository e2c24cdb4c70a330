// A deposed leader's write (issue 10, must-show 4): the leader applies a write, then learns from its
// replicas that a newer leadership exists. The client gets an indeterminate error for it (not a
// success, not a definite refusal); the old leader stops leading, recovers from the new one, and
// the write nobody acknowledged is gone from every replica, which all end with the same map.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, startCluster, type TestCluster } from '../support/cluster.js';

const C = 'deposed';
let tc: TestCluster;

beforeAll(async () => {
  // No forwarding retries: the node's own retry would re-send the write through the new leader.
  tc = await startCluster({ nodes: 3, collection: { name: C, numShards: 1, replicationFactor: 3, router: 'compositeId' }, nodeOptions: { forwardRetries: 0 } });
  await tc.cluster.waitAllActive(30_000);
});

afterAll(async () => {
  await tc?.stop();
});

/** id -> version of the replica on each node (distrib=false). */
async function maps(): Promise<Array<Record<string, number>>> {
  return Promise.all(
    tc.cluster.nodes.map(async (n) => {
      const res = await http('GET', `${n.httpUrl}/api/collections/${C}/export?shard=shard1&distrib=false&limit=1000`);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return Object.fromEntries((res.body.docs as Array<{ id: string; _version_: number }>).map((d) => [d.id, d._version_]));
    }),
  );
}

describe('a leader deposed while it writes', () => {
  it('answers indeterminate, stops leading, and recovery removes the write it kept from every replica', async () => {
    expect((await http('POST', `${tc.urls[0]}/api/collections/${C}/docs`, [{ id: 'before' }])).status).toBe(200);
    const leaderName = tc.cluster.nodes[0]!.coordinator.leader(C, 'shard1')!.node;
    const leader = tc.cluster.nodes.find((n) => n.name === leaderName)!;
    const epoch = leader.replica(C, 'shard1')!.epoch;
    // The replicas hear of a newer leadership first (its announcement: an empty FROMLEADER).
    for (const n of tc.cluster.nodes) {
      if (n === leader) continue;
      await n.processor.fromLeader({ collection: C, shard: 'shard1', phase: 'FROMLEADER', epoch: epoch + 1, ops: [], minRf: 1, from: 'a-newer-leader' });
    }
    const res = await http('POST', `${leader.httpUrl}/api/collections/${C}/docs`, [{ id: 'stray' }]);
    expect(res.status, JSON.stringify(res.body)).toBe(503);
    expect(res.body.code).toBe('SHX_INDETERMINATE');
    // The old leader kept it for now: it is its own stray write.
    expect(leader.replica(C, 'shard1')!.store.versionOf('stray')).toBeDefined();

    // Another replica leads; the old one recovers from it.
    await leader.waitFor(() => {
      const l = leader.coordinator.leader(C, 'shard1');
      return l !== undefined && l.node !== leaderName;
    }, 30_000);
    await tc.cluster.waitAllActive(30_000);
    for (const n of tc.cluster.nodes) {
      expect((await http('GET', `${n.httpUrl}/api/collections/${C}/docs/stray?distrib=false`)).status, `stray on ${n.name}`).toBe(404);
      expect((await http('GET', `${n.httpUrl}/api/collections/${C}/docs/before?distrib=false`)).status, `before on ${n.name}`).toBe(200);
    }
    const [a, b, c] = await maps();
    expect(b).toEqual(a);
    expect(c).toEqual(a);
    // Writes go on through the new leader, from any node, the old leader included.
    const after = await http('POST', `${leader.httpUrl}/api/collections/${C}/docs`, [{ id: 'after' }]);
    expect(after.status, JSON.stringify(after.body)).toBe(200);
    expect(after.body.rf).toBe(3);
  });
});
