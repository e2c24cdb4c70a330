// Issue 12: the smart client's own reads are balanced too. An eventual read that names a priority
// goes through a node (the node's balancer holds it to the priority's slots, and its eventual router
// picks the reader); one without a priority is served by the client itself, straight from a reader.
// The query batcher (and `shardex export`) asks every page with its priority. On the cluster
// `npm start` runs (members in worker threads, with its cluster secret: the client reads from the
// reader as any client, without it).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShardexClient } from '../../src/client/index.js';
import { assertBuilt, runCli } from '../support/cli-run.js';
import { startThreadedCluster, type ThreadedTestCluster } from '../support/cluster.js';
import { pollUntil } from '../support/poll.js';

describe('the smart client\'s reads under read balancing (1 node, 1 reader)', () => {
  let tc: ThreadedTestCluster;
  let client: ShardexClient;

  beforeAll(async () => {
    tc = await startThreadedCluster({ nodes: 1, readers: 1, collection: { name: 'docs', numShards: 2, replicationFactor: 1, router: 'compositeId' } });
    client = new ShardexClient({ urls: tc.urls[0]!, refreshIntervalMs: 0 });
    await client.add('docs', [{ id: 'a', title: 'dune' }, { id: 'b', title: 'dune messiah' }]);
    await client.commit('docs');
    // `rep` may use the reader group; `walled` only a group that has no reader, so nothing can serve it.
    await client.readBalance.set('rep', 'default', { weight: 1, slots: 2 });
    await client.readBalance.set('walled', 'nowhere', { weight: 1, slots: 2 });
    await pollUntil('the node to apply both priorities', async () => {
      const [node] = await client.readSlots();
      const priorities = new Set(node?.slots.map((s) => s.priority));
      return priorities.has('rep') && priorities.has('walled') ? true : undefined;
    }, { ms: 20_000 });
  });

  afterAll(async () => {
    await client?.close();
    await tc?.stop();
  });

  it('serves an eventual read without a priority itself, from the reader', async () => {
    const res = (await client.search('docs', 'title:dune', { consistency: 'eventual' })) as Awaited<ReturnType<ShardexClient['search']>> & { readBalance?: unknown };
    expect(res.total).toBe(2);
    expect(Object.values(res.servedBy ?? {}).map((s) => s.node)).toEqual(['reader1', 'reader1']);
    expect(res.readBalance).toBeUndefined();
  });

  it('sends an eventual search with a priority through the node, which places it on the priority\'s target', async () => {
    const res = (await client.search('docs', 'title:dune', { consistency: 'eventual', priority: 'rep' })) as Awaited<ReturnType<ShardexClient['search']>> & { readBalance?: unknown };
    expect(res.total).toBe(2);
    expect(Object.values(res.servedBy ?? {}).map((s) => s.node)).toEqual(['reader1', 'reader1']);
    expect(res.readBalance).toMatchObject({ priority: 'rep' });
    const [node] = await client.readSlots();
    expect(node!.slots.find((s) => s.priority === 'rep' && s.target === 'default')).toMatchObject({ taken: 0, queued: 0 });
  });

  it('has the node refuse an eventual search or get whose priority no live target can serve (read by the client itself, it would have been answered)', async () => {
    // A target that is down may come back: the client retries the refusal until its deadline.
    await expect(client.search('docs', 'title:dune', { consistency: 'eventual', priority: 'walled', timeoutMs: 1500 })).rejects.toThrow(/walled/);
    await expect(client.get('docs', 'a', { consistency: 'eventual', priority: 'walled', timeoutMs: 1500 })).rejects.toThrow(/walled/);
    expect((await client.get('docs', 'a', { consistency: 'eventual' }))?.id).toBe('a');
  });

  it('asks every page of a query batcher with its priority: a priority with no target for leader reads fails the walk', async () => {
    const walled = await client.queryBatcher('docs', '*', { priority: 'walled', maxRetries: 0 }).awaitCompletion();
    expect(walled.ids).toBe(0);
    expect(walled.shardsFailed.map((f) => String((f.error as Error).message))).toEqual([expect.stringMatching(/walled/), expect.stringMatching(/walled/)]);
    const open = await client.queryBatcher('docs', '*').awaitCompletion();
    expect(open.ids).toBe(2);
  });

  it('shardex export --priority asks every page with it: `rep` has no target for leader reads, so the node refuses the pages', async () => {
    await assertBuilt('node/cli-client.ts');
    const refused = await runCli(['export', 'docs', '--priority', 'rep', '--url', tc.urls[0]!]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/the priority is configured on/);
    expect(refused.stdout).toBe('');
    const open = await runCli(['export', 'docs', '--url', tc.urls[0]!]);
    expect(open.code).toBe(0);
    expect(open.stdout.trim().split('\n')).toHaveLength(2);
  });
});
