// Recovery runs on the one retry executor (issue 14, item 10): a failed attempt is tried again
// after a pause, the replica ends active once its leader answers, and a node that stops ends its
// recoveries instead of trying on. The follower's calls to its leader are failed in the test
// (connection refused) by wrapping its peer clients.
import { afterEach, describe, expect, it } from 'vitest';
import type { ShardexNode } from '../../src/node/shardex-node.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';
import { parsePrometheusText, samplesNamed } from '../support/prometheus-text.js';
import { failVersions } from '../support/peer-faults.js';
import { pollUntil } from '../support/poll.js';

const C = 'rec';
let tc: TestCluster | undefined;

afterEach(async () => {
  await tc?.stop();
  tc = undefined;
});

async function twoNodes(): Promise<{ follower: ShardexNode }> {
  tc = await startCluster({ nodes: 2, collection: { name: C, numShards: 1, replicationFactor: 2, router: 'compositeId' } });
  await tc.cluster.waitAllActive(30_000);
  const follower = tc.cluster.nodes.find((n) => n.replica(C, 'shard1')?.role === 'follower');
  if (!follower) throw new Error('no follower of rec/shard1');
  // Its own recovery at start publishes `active` a moment before it ends: a recover() asked for
  // meanwhile would find one running and return at once.
  const replica = follower.replica(C, 'shard1')!;
  await pollUntil('the follower\'s first recovery to end', () => (replica.recovering ? undefined : true), { ms: 20_000, everyMs: 10 });
  return { follower };
}

describe('recovery', () => {
  it('tries a failed attempt again after a pause, and ends active once the leader answers, with every document back', async () => {
    const { follower } = await twoNodes();
    const docs = Array.from({ length: 5 }, (_, i) => ({ id: `r${i}` }));
    expect((await http('POST', `${follower.httpUrl}/api/collections/${C}/docs`, docs)).body.rf).toBe(2);
    let failing = true;
    const calls = failVersions(follower, () => failing);
    const replica = follower.replica(C, 'shard1')!;
    // Emptied, as a full copy would begin: the recovery must bring the documents back.
    await replica.reset();
    const recovering = follower.recover(replica);
    await pollUntil('three failed recovery attempts', () => (calls.tries() >= 3 ? true : undefined), { ms: 20_000, everyMs: 20 });
    expect(replica.recovering).toBe(true);
    failing = false;
    await recovering;
    expect(replica.recovering).toBe(false);
    const state = follower.coordinator.collection(C)!.shards[0]!.replicas.find((r) => r.node === follower.name);
    expect(state?.state).toBe('active');
    expect(replica.store.docCount).toBe(5);
    // Its progress is on /metrics: documents stored by recoveries, by step.
    const text = (await http<string>('GET', `${follower.httpUrl}/metrics`)).body;
    const stored = samplesNamed(parsePrometheusText(text), 'shardex_recovery_docs_total').filter((x) => x.labels.replica === `${C}/shard1`);
    expect(stored.reduce((n, x) => n + x.value, 0)).toBeGreaterThanOrEqual(5);
  });

  it('ends when its node stops, without trying again', async () => {
    const { follower } = await twoNodes();
    const calls = failVersions(follower, () => true);
    const recovering = follower.recover(follower.replica(C, 'shard1')!);
    await pollUntil('two failed recovery attempts', () => (calls.tries() >= 2 ? true : undefined), { ms: 20_000, everyMs: 20 });
    await follower.stop();
    const after = calls.tries();
    // The recovery's promise settles (it does not reject) once the stop has ended its pause.
    await expect(recovering).resolves.toBeUndefined();
    expect(calls.tries()).toBe(after);
  });
});

describe('recovery and a leader that marks the replica down meanwhile', () => {
  it('does not end active over the down mark: it recovers again and holds every write acknowledged meanwhile', async () => {
    const { follower } = await twoNodes();
    const leader = tc!.cluster.nodes.find((n) => n !== follower)!;
    expect((await http('POST', `${leader.httpUrl}/api/collections/${C}/docs`, [{ id: 'before' }])).body.rf).toBe(2);
    const replica = follower.replica(C, 'shard1')!;
    const stateSeenBy = (node: ShardexNode): string | undefined => node.coordinator.collection(C)?.shards[0]?.replicas.find((r) => r.node === follower.name)?.state;
    // After the sync, before the replica goes active: the leader cannot reach it (as when its
    // gRPC port is not open yet), marks it down, and acknowledges writes without it.
    const coordinator = follower.coordinator as unknown as { catchUpTerm: (c: string, s: string, n: string, upTo: number) => Promise<void> };
    const catchUp = coordinator.catchUpTerm.bind(coordinator);
    let hooked = false;
    let termsThen: Record<string, number> | undefined;
    coordinator.catchUpTerm = async (c, s, n, upTo) => {
      if (hooked) return catchUp(c, s, n, upTo);
      hooked = true;
      await leader.coordinator.setReplicaState(C, 'shard1', follower.name, 'down');
      await pollUntil('the leader to see the follower down', () => (stateSeenBy(leader) === 'down' ? true : undefined), { ms: 10_000, everyMs: 10 });
      const meanwhile = await http('POST', `${leader.httpUrl}/api/collections/${C}/docs`, [{ id: 'meanwhile-1' }, { id: 'meanwhile-2' }]);
      expect(meanwhile.status, JSON.stringify(meanwhile.body)).toBe(200);
      expect(meanwhile.body.rf).toBe(1);
      await catchUp(c, s, n, upTo);
      termsThen = await leader.coordinator.terms(C, 'shard1');
    };
    await follower.recover(replica);
    expect(hooked).toBe(true);
    // The recovery that missed those writes did not take the term the leader raised for them:
    // had the leader died then, the replica could not have been elected without them.
    expect(termsThen![follower.name]!).toBeLessThan(termsThen![leader.name]!);
    expect(stateSeenBy(follower)).toBe('active');
    expect((await replica.store.getMany(['before', 'meanwhile-1', 'meanwhile-2'])).map((e) => e?.doc !== null && e !== undefined)).toEqual([true, true, true]);
  });
});

describe('recovery and where its sync compares from', () => {
  it('fixes it before the leader may send the replica updates, and clears it once the replica has converged', async () => {
    const { follower } = await twoNodes();
    const replica = follower.replica(C, 'shard1')!;
    expect(replica.store.syncFloor).toBeUndefined();
    // The first call to the leader (does it lead?) passes; the next (does it see the replica
    // recovering?) fails: each attempt stops after it published `recovering`.
    let calls = 0;
    let failing = true;
    failVersions(follower, () => failing && ++calls > 1);
    const recovering = follower.recover(replica);
    await pollUntil('the sync floor fixed as the recovery began', () => (replica.store.syncFloor !== undefined ? true : undefined), { ms: 20_000, everyMs: 10 });
    expect(replica.recovering).toBe(true);
    failing = false;
    await recovering;
    expect(replica.store.syncFloor).toBeUndefined();
    expect(follower.coordinator.collection(C)!.shards[0]!.replicas.find((r) => r.node === follower.name)?.state).toBe('active');
  });
});
