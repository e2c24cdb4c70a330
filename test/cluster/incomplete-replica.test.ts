// A replica that is not a whole copy of its shard never leads, whatever its term: one whose data
// directory was lost (its store created again after the shard had a leader), on a cluster where
// every node was killed. Its equal term would let it win the election once the old leader's
// session expired; the leader would then be an empty replica, and the other replica would converge
// to it (every document lost). Instead it waits, unfit, until the replica with the data returns,
// leads, and recovers it.
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { clusterView, http } from '../support/cluster.js';
import { NodeProcesses } from '../support/processes.js';
import { liveUrls, replicaVersions, until, waitSettled } from '../support/zk-cluster.js';
import { zkConnect } from '../support/zookeeper.js';

const C = 'incomplete';

describe('a replica whose data was lost (1 shard x 2 replicas on ZooKeeper, every node killed)', () => {
  // Info logs: the test waits for the replica's election to refuse it.
  const procs = new NodeProcesses(zkConnect('incomplete'), { zkTimeoutMs: 4000, env: { SHARDEX_LOG_LEVEL: 'info' } });

  afterAll(async () => {
    await procs.stopAll();
  });

  it('does not lead before the replica holding the data returns, then recovers every document from it', async () => {
    await procs.start('a');
    await procs.start('b');
    expect((await http('POST', `${procs.nodes.get('a')!.http}/api/collections`, { name: C, numShards: 1, replicationFactor: 2 })).status).toBe(201);
    const view = await waitSettled(procs, C);
    const leader = view.collections[C]!.shards.shard1!.leader!;
    const lost = leader === 'a' ? 'b' : 'a';
    const docs = Array.from({ length: 50 }, (_, i) => ({ id: `d${i}`, title: `document ${i}` }));
    const res = await http('POST', `${procs.nodes.get(leader)!.http}/api/collections/${C}/docs`, docs);
    expect(res.body.rf).toBe(2);

    await procs.kill(leader);
    await procs.kill(lost);
    await rm(join(procs.nodes.get(lost)!.dataDir, C), { recursive: true, force: true });
    const node = await procs.start(lost);
    // Once the old leader's session has expired, the queue holds the restarted replica only: it is
    // asked whether it may lead, and refuses.
    await until(`${lost} to refuse to lead`, 60_000, async () => (node.output.some((l) => l.includes('not fit to lead yet')) ? true : undefined));
    const alone = await clusterView(liveUrls(procs)[0]!);
    expect(alone.nodes.map((n) => n.name)).toEqual([lost]);
    expect(alone.collections[C]!.shards.shard1!.leader).toBeNull();

    await procs.start(leader);
    await waitSettled(procs, C);
    // The replica holding the data leads first; the other one may lead later (a preferred
    // leader's handover), but only once it has recovered every document.
    const lines = procs.nodes.get(lost)!.output;
    const recovered = lines.findIndex((l) => l.includes('"msg":"replica recovered"'));
    const elected = lines.findIndex((l) => l.includes('"msg":"elected leader"'));
    expect(recovered).toBeGreaterThanOrEqual(0);
    if (elected >= 0) expect(elected).toBeGreaterThan(recovered);
    expect(procs.nodes.get(leader)!.output.some((l) => l.includes('"msg":"elected leader"'))).toBe(true);
    const theirs = await replicaVersions(procs.nodes.get(leader)!.http, C, 'shard1');
    const mine = await replicaVersions(procs.nodes.get(lost)!.http, C, 'shard1');
    expect(theirs.size).toBe(50);
    expect(mine).toEqual(theirs);
  });
});
