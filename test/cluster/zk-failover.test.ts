// Issue 3: separate `shardex node` processes on a real ZooKeeper. Killing any node, leader or
// not, loses no acknowledged write; restarts recover by peer sync or full copy; a leader
// whose session expired accepts no write as leader.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterView, http } from '../support/cluster.js';
import { liveUrls, until, verifyAcked, waitSettled } from '../support/zk-cluster.js';
import { NodeProcesses } from '../support/processes.js';
import { SteadyWriter } from '../support/writer.js';
import { zkConnect } from '../support/zookeeper.js';

const ZK_TIMEOUT_MS = 4000;
const NAMES = ['n1', 'n2', 'n3'];

describe('a 3-process cluster on ZooKeeper (2 shards x 3 replicas)', () => {
  let procs: NodeProcesses;
  const C = 'failover';

  beforeAll(async () => {
    procs = new NodeProcesses(zkConnect('failover'), { zkTimeoutMs: ZK_TIMEOUT_MS, env: { SHARDEX_LOG_LEVEL: 'info' } });
    for (const n of NAMES) await procs.start(n);
    const res = await http('POST', `${procs.nodes.get('n1')!.http}/api/collections`, { name: C, numShards: 2, replicationFactor: 3 });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    await waitSettled(procs, C);
  });

  afterAll(async () => {
    await procs?.stopAll();
  });

  it('loses no acknowledged write over 5 rounds of kill -9 (leaders and non-leaders) and restart', { timeout: 400_000 }, async () => {
    const writer = new SteadyWriter(C, () => liveUrls(procs), { batch: 20, pauseMs: 10, prefix: 'w-' });
    writer.start();
    const failoverMs: number[] = [];
    try {
      await until('first writes', 30_000, async () => (writer.acked.size > 200 ? true : undefined));
      const plan: Array<'leader:shard1' | 'leader:shard2' | 'follower'> = ['leader:shard1', 'follower', 'leader:shard2', 'leader:shard1', 'follower'];
      for (const [round, kind] of plan.entries()) {
        const view = await waitSettled(procs, C);
        const shards = view.collections[C]!.shards;
        const leaders = new Set(Object.values(shards).map((s) => s.leader!));
        const victim =
          kind === 'follower'
            ? NAMES.find((n) => !leaders.has(n)) ?? NAMES.find((n) => n !== shards.shard1!.leader)!
            : shards[kind.slice('leader:'.length)]!.leader!;
        const ackedBefore = writer.acks.length;
        const killedAt = Date.now();
        await procs.kill(victim);
        // Writes go on through the survivors; wait for a new leader of every shard the victim led.
        await until(`new leaders after killing ${victim}`, 60_000, async () => {
          const v = await clusterView(liveUrls(procs)[0]!);
          return Object.values(v.collections[C]!.shards).every((s) => s.leader !== null && s.leader !== victim) ? true : undefined;
        });
        // The first write both sent and acknowledged after the kill.
        const firstAfter = await until('a write sent and accepted after the kill', 60_000, async () => writer.acks.slice(ackedBefore).find((a) => a.sent > killedAt)?.acked);
        failoverMs.push(firstAfter - killedAt);
        await procs.start(victim);
        await waitSettled(procs, C);
        process.stderr.write(`round ${round + 1}: killed ${victim} (${kind}); first write accepted ${firstAfter - killedAt} ms after the kill\n`);
      }
    } finally {
      await writer.stop();
    }
    process.stderr.write(`failover (kill -9 -> first accepted write), ZooKeeper session timeout ${ZK_TIMEOUT_MS} ms: ${failoverMs.join(', ')} ms\n`);
    expect(writer.unexpected).toEqual([]);
    await waitSettled(procs, C);
    expect(await verifyAcked(procs, C, writer.acked)).toEqual([]);
    expect(writer.acked.size).toBeGreaterThan(1000);
  });

  it('keeps every acknowledged document across a full restart of all nodes', { timeout: 240_000 }, async () => {
    const writer = new SteadyWriter(C, () => liveUrls(procs), { batch: 50, pauseMs: 0, prefix: 'r-' });
    writer.start();
    try {
      await until('2,000 acknowledged writes', 90_000, async () => (writer.acked.size >= 2000 ? true : undefined));
    } catch (err) {
      procs.dumpLogs(`acked ${writer.acked.size}; retryable failures ${writer.retryable.length}; unexpected ${JSON.stringify(writer.unexpected.slice(-3))}`);
      throw err;
    }
    await writer.stop();
    for (const n of NAMES) await procs.stop(n);
    for (const n of NAMES) await procs.start(n);
    await waitSettled(procs, C);
    const problems = await verifyAcked(procs, C, writer.acked);
    if (problems.length > 0) procs.dumpLogs(`${problems.length} acknowledged documents missing or stale`);
    expect(problems.slice(0, 20)).toEqual([]);
  });
});
