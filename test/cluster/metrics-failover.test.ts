// The leadership and replication series on /metrics (issue 13, observability) move when the
// cluster fails over: a leader stopped -> the other replica's node counts its election; that old
// leader back with another cluster secret -> the new leader's FROMLEADER updates to it are
// refused, retried, finally failed, and the replica is marked down. The restarted node cannot
// recover either (inter-node trust): it never holds what was written meanwhile.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ShardexNode } from '../../src/node/shardex-node.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';
import { pollUntil } from '../support/poll.js';
import { parsePrometheusText, samplesNamed } from '../support/prometheus-text.js';

const C = 'failover';
const REPLICA = `${C}/shard1`;
const SECRET = 'the-cluster-secret-0123456789abcdef';
const WRONG = 'not-the-cluster-secret-0123456789';

let tc: TestCluster;
/** Node indexes of the shard's first leader and of its other replica. */
let first: number;
let second: number;

/** The value of the sample `name` with (at least) `labels` on the node at `url`; 0 when absent. */
async function value(url: string, name: string, labels: Record<string, string>): Promise<number> {
  const text = (await http<string>('GET', `${url}/metrics`)).body;
  const hits = samplesNamed(parsePrometheusText(text), name).filter((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  expect(hits.length).toBeLessThanOrEqual(1);
  return hits[0]?.value ?? 0;
}

interface PeerCalls {
  call(node: string, method: string, body: unknown, timeoutMs?: number): Promise<unknown>;
}

/** `node`'s `versions` calls to `leader` answered by `leader` in-process (its other calls go over the network). */
function answerVersionsInProcess(node: ShardexNode, leader: ShardexNode): void {
  const peers = (node as unknown as { peers: PeerCalls }).peers;
  const real = peers.call.bind(peers);
  const versions = (leader as unknown as { onPeerVersions(req: unknown): unknown }).onPeerVersions.bind(leader);
  peers.call = (target, method, body, timeoutMs) => (method === 'versions' && target === leader.name ? Promise.resolve().then(() => versions(body)) : real(target, method, body, timeoutMs));
}

const url = (i: number): string => tc.cluster.nodes[i]!.httpUrl;
const name = (i: number): string => tc.cluster.nodes[i]!.name;
const replicaState = (i: number): string | undefined =>
  tc.cluster.nodes[second]!.coordinator
    .collection(C)
    ?.shards[0]?.replicas.find((r) => r.node === name(i))?.state;

beforeAll(async () => {
  tc = await startCluster({
    nodes: 2,
    nodeOptions: { clusterSecret: SECRET },
    collection: { name: C, numShards: 1, replicationFactor: 2, router: 'compositeId', autoCommitMs: 0 },
  });
  const leader = tc.cluster.nodes[0]!.coordinator.leader(C, 'shard1')?.node;
  first = tc.cluster.nodes.findIndex((n) => n.name === leader);
  expect(first).toBeGreaterThanOrEqual(0);
  second = 1 - first;
  expect((await http('POST', `${url(first)}/api/collections/${C}/docs`, [{ id: 'before', title: 'both replicas' }])).body.rf).toBe(2);
});

afterAll(async () => {
  await tc?.stop();
});

describe('failover metrics', () => {
  it('count the election of the other replica when its leader stops', async () => {
    const elections = await value(url(second), 'shardex_leader_elections_total', { replica: REPLICA });
    expect(await value(url(second), 'shardex_replica_leader', { replica: REPLICA })).toBe(0);
    await tc.cluster.nodes[first]!.stop();
    await pollUntil('the other replica to lead', async () => ((await value(url(second), 'shardex_replica_leader', { replica: REPLICA })) === 1 ? true : undefined), { ms: 20_000 });
    expect(await value(url(second), 'shardex_leader_elections_total', { replica: REPLICA })).toBe(elections + 1);
  });

  it('count FROMLEADER updates retried, then failed, and the replica marked down, when a replica refuses them', async () => {
    // The old leader comes back with another secret: it refuses every update of the new leader,
    // and the leader refuses its calls. A replica publishes itself recovering only once its leader
    // says it leads: that one question is answered here, in-process, so that it does, and the new
    // leader sends it every update (its sync from the leader is still refused: it never recovers).
    await tc.cluster.startNode(first, { clusterSecret: WRONG });
    answerVersionsInProcess(tc.cluster.nodes[first]!, tc.cluster.nodes[second]!);
    const seen = tc.cluster.nodes[second]!.coordinator;
    await pollUntil('the restarted replica to be live and recovering', () => (seen.isLive(name(first)) && replicaState(first) === 'recovering' ? true : undefined), { ms: 20_000 });
    const dest = { dest: name(first) };
    const before = {
      retried: await value(url(second), 'shardex_distributor_requests_total', { ...dest, outcome: 'retried' }),
      failed: await value(url(second), 'shardex_distributor_requests_total', { ...dest, outcome: 'failed' }),
      markedDown: await value(url(second), 'shardex_replicas_marked_down_total', { replica: REPLICA }),
    };

    const w = await http('POST', `${url(second)}/api/collections/${C}/docs`, [{ id: 'after', title: 'one replica' }]);
    expect(w.status, JSON.stringify(w.body)).toBe(200);
    expect(w.body.rf).toBe(1);

    // The write was acknowledged after its fan-out ended: the counters have moved by then.
    expect(await value(url(second), 'shardex_distributor_requests_total', { ...dest, outcome: 'retried' })).toBeGreaterThan(before.retried);
    expect(await value(url(second), 'shardex_distributor_requests_total', { ...dest, outcome: 'failed' })).toBe(before.failed + 1);
    expect(await value(url(second), 'shardex_replicas_marked_down_total', { replica: REPLICA })).toBe(before.markedDown + 1);
    expect((await http('GET', `${url(first)}/api/collections/${C}/docs/after?distrib=false`)).status).toBe(404);
    expect(await value(url(first), 'shardex_recoveries_total', {})).toBe(0);
  });
});
