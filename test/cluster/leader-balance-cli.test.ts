// Leader balance in the cluster `shardex dev` runs (3 nodes, a collection of 2 shards x 2: both
// leaders used to sit on node1), and `shardex rebalance-leaders` through the built CLI.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterView, startThreadedCluster, type ThreadedTestCluster } from '../support/cluster.js';
import { assertBuilt, runCli } from '../support/cli-run.js';
import { pollUntil } from '../support/poll.js';

const C = 'docs';
let tc: ThreadedTestCluster;

beforeAll(async () => {
  await assertBuilt('node/cli-client.ts');
  tc = await startThreadedCluster({ nodes: 3, collection: { name: C, numShards: 2, replicationFactor: 2, router: 'compositeId' } });
});

afterAll(async () => {
  await tc?.stop();
});

describe('balanced leaders in the dev cluster', () => {
  it('leads its two shards from two nodes', async () => {
    const leaders = await pollUntil(
      'two shard leaders on two nodes',
      async () => {
        const shards = Object.values((await clusterView(tc.urls[0]!)).collections[C]!.shards);
        const nodes = new Set(shards.map((s) => s.leader));
        return shards.every((s) => s.leader !== null) && nodes.size === 2 ? nodes : undefined;
      },
      { ms: 30_000 },
    );
    expect(leaders.size).toBe(2);
  });

  it('`shardex rebalance-leaders` prints each shard, the leaders per node, and exits 0 once balanced', async () => {
    const run = await runCli(['rebalance-leaders', C, '--url', tc.urls[1]!, '--wait', '20000']);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^shard1 +leader node\d +target node\d +preferred node\d$/m);
    expect(run.stdout).toMatch(/^leaders per node: node\d 1, node\d 1 \(at most 1 each when balanced\)$/m);
    expect(run.stdout).toMatch(/^docs: balanced, every shard is led by its preferred leader or within the bound$/m);
  });

  it('says what is wrong for a collection that does not exist', async () => {
    const run = await runCli(['rebalance-leaders', 'nope', '--url', tc.urls[0]!]);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(/nope/);
  });
});
