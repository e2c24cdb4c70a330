// A node holds back index checkpoints that are due only to their age while a replica of it is
// recovering (src/node/merge-gate.ts: checkpointWork), as the README says: while merges give way
// to replicas coming up, a checkpoint waits for the 10,000 changes. Checked at the node, not only
// where it is decided: a replica that is not recovering itself, on a node whose other replica is,
// writes no checkpoint by age until that recovery ends, then writes one. The recovery is held by
// failing its calls to the leader (connection refused), as test/cluster/recovery-retry.test.ts does.
// Also: how often the node checks the checkpoint policy (twice per checkpointInterval, at least
// every 250 ms), from the period of the timer its start arms.
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { PersistedIndex } from '../../src/distrib/index-persistence.js';
import type { ShardReplica } from '../../src/distrib/replica.js';
import type { ShardexNode } from '../../src/node/shardex-node.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';
import { failVersions } from '../support/peer-faults.js';
import { pollUntil } from '../support/poll.js';

const C = 'hold';
let tc: TestCluster | undefined;

afterEach(async () => {
  await tc?.stop();
  tc = undefined;
});

/** Counts the node's periodic checkpoint checks (its timer calls the method by name). */
function countChecks(node: ShardexNode): () => number {
  const target = node as unknown as { checkpointReplicas: () => void };
  const real = target.checkpointReplicas.bind(node);
  let checks = 0;
  target.checkpointReplicas = () => {
    checks++;
    real();
  };
  return () => checks;
}

const unsealed = (replica: ShardReplica): number => (replica.index as PersistedIndex).index.unsealedChanges;

describe('checkpoints while a replica of the node recovers', () => {
  it('are not written for their age until the recovery ends, then are', async () => {
    // Due by age after 20 ms, never by count: every checkpoint the test sees is one by age.
    tc = await startCluster({ nodes: 2, collection: { name: C, numShards: 2, replicationFactor: 2, router: 'compositeId' }, nodeOptions: { checkpointPolicy: { maxAgeMs: 20, maxChanges: 1_000_000 } } });
    await tc.cluster.waitAllActive(30_000);
    // Leaders balanced first (one shard each): a handover later would end the held recovery.
    const nodes = tc.cluster.nodes;
    const leads = (n: ShardexNode): number => ['shard1', 'shard2'].filter((s) => n.replica(C, s)?.role === 'leader').length;
    await pollUntil('each node to lead one shard', () => (nodes.every((n) => leads(n) === 1) ? true : undefined), { ms: 30_000, everyMs: 20 });
    // A node following one shard: that replica recovers; the node's other replica does not.
    const node = nodes.find((n) => ['shard1', 'shard2'].some((s) => n.replica(C, s)?.role === 'follower'))!;
    const following = ['shard1', 'shard2'].find((s) => node.replica(C, s)?.role === 'follower')!;
    const recovering = node.replica(C, following)!;
    const other = node.replica(C, following === 'shard1' ? 'shard2' : 'shard1')!;
    await pollUntil("the follower's first recovery to end", () => (recovering.recovering ? undefined : true), { ms: 20_000, everyMs: 10 });

    let failing = true;
    failVersions(node, () => failing);
    const recovery = node.recover(recovering);
    expect(recovering.recovering).toBe(true);
    expect(other.recovering).toBe(false);
    const docs = Array.from({ length: 40 }, (_, i) => ({ id: `h${i}`, title: `held ${i}` }));
    expect((await http('POST', `${node.httpUrl}/api/collections/${C}/docs`, docs)).status).toBe(200);
    expect(unsealed(other)).toBeGreaterThan(0);

    // Four checks later the changes are far older than 20 ms, and still not checkpointed.
    const checks = countChecks(node);
    await pollUntil('four checkpoint checks', () => (checks() >= 4 ? true : undefined), { ms: 20_000, everyMs: 20 });
    expect(recovering.recovering).toBe(true);
    expect(unsealed(other)).toBeGreaterThan(0);

    failing = false;
    await recovery;
    await pollUntil('a checkpoint once the recovery ended', () => (unsealed(other) === 0 ? true : undefined), { ms: 20_000, everyMs: 20 });
  });
});

describe("the node's checkpoint check", () => {
  /** The periods of every setInterval the node's start arms, in this thread. */
  async function periodsAtStart(maxAgeMs: number): Promise<number[]> {
    const periods: number[] = [];
    const real = globalThis.setInterval;
    const spy = vi.spyOn(globalThis, 'setInterval').mockImplementation(((fn: (...args: unknown[]) => void, ms?: number, ...args: unknown[]) => {
      periods.push(ms ?? 0);
      return real(fn, ms, ...args);
    }) as typeof setInterval);
    try {
      tc = await startCluster({ nodes: 1, nodeOptions: { checkpointPolicy: { maxAgeMs } } });
    } finally {
      spy.mockRestore();
    }
    await tc.stop();
    tc = undefined;
    return periods;
  }

  it('runs twice per checkpoint interval, and at least every 250 ms (README)', async () => {
    expect(await periodsAtStart(86)).toContain(43);
    const long = await periodsAtStart(5_000);
    expect(long).toContain(250);
    expect(long).not.toContain(2_500);
  });
});
