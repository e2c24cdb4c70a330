// Issue 6 on real node processes coordinated by ZooKeeper, with a client that watches ZooKeeper
// ({ zk }) instead of polling a node:
// - it routes straight to the leaders (no TOLEADER forwards);
// - "what it must show" 2 with kill -9: a node is killed while a write job runs; the job
//   completes, the killed host was suspended and its batches retried, every document is there;
// - "what it must show" 4: the query batcher then visits every id exactly once, with a replica
//   of every shard the killed node held missing.
// The 100,000 documents (short bodies).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShardexClient, type BatchRetryEvent, type HostSuspendedEvent } from '../../src/client/index.js';
import { generateDocs, type CorpusDoc } from '../../src/corpus.js';
import { http } from '../support/cluster.js';
import { NodeProcesses } from '../support/processes.js';
import { liveUrls, metric, until, waitLeadersPreferred, waitSettled } from '../support/zk-cluster.js';
import { zkConnect } from '../support/zookeeper.js';

const ZK_TIMEOUT_MS = 2000;
const NAMES = ['n1', 'n2', 'n3'];
const C = 'zkclient';
const DOCS = 100_000;

function* docsFrom(docs: readonly CorpusDoc[]): Generator<CorpusDoc> {
  yield* docs;
}

describe('smart client watching ZooKeeper, against 3 node processes (4 shards x 2 replicas)', () => {
  let procs: NodeProcesses;
  let client: ShardexClient;
  const connect = zkConnect('client');

  beforeAll(async () => {
    procs = new NodeProcesses(connect, { zkTimeoutMs: ZK_TIMEOUT_MS });
    for (const n of NAMES) await procs.start(n);
    const res = await http('POST', `${procs.nodes.get('n1')!.http}/api/collections`, { name: C, numShards: 4, replicationFactor: 2 });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    await waitSettled(procs, C);
    client = new ShardexClient({ zk: connect, zkSessionTimeoutMs: ZK_TIMEOUT_MS * 2, backoff: (n) => Math.min(100 * n, 1000), maxRetries: 30 });
    await client.connect();
  });

  afterAll(async () => {
    await client?.close();
    await procs?.stopAll();
  });

  it('sees the cluster as the nodes do, and writes without TOLEADER forwards', async () => {
    const view = client.state.collection(C)!;
    expect(view.shards.map((s) => s.name)).toEqual(['shard1', 'shard2', 'shard3', 'shard4']);
    expect(view.shards.every((s) => s.leader !== null)).toBe(true);
    expect(client.liveHosts.length).toBe(3);
    // Leader balance may still hand a shard to its preferred leader after the cluster settled:
    // count forwards once no leader will move and the client has seen where they are.
    const leaders = await waitLeadersPreferred(procs, C);
    const sameLeaders = () => client.state.collection(C)!.shards.every((s) => s.leader === leaders[s.name]);
    await until('the client to see the leaders the nodes see', 30_000, async () => (sameLeaders() ? true : undefined));
    const forwards = () => Promise.all(liveUrls(procs).map((u) => metric(u, 'shardex_updates_forwarded_total', 'phase="TOLEADER"')));
    const before = await forwards();
    const res = await client.add(C, [...generateDocs({ count: 500, seed: 51, start: 1_000_000, words: 10 })]);
    expect(res.added).toBe(500);
    expect(await forwards()).toEqual(before);
  });

  it('completes a write job during which a leader is killed with kill -9, retrying its batches elsewhere', { timeout: 120_000 }, async () => {
    const docs = [...generateDocs({ count: DOCS, seed: 52, words: 10 })];
    const victim = client.state.collection(C)!.shards[0]!.leader!;
    const victimUrl = procs.nodes.get(victim)!.http;
    const suspended: HostSuspendedEvent[] = [];
    client.onHostSuspended((e) => suspended.push(e));
    const retries: BatchRetryEvent[] = [];
    let killing: Promise<void> | undefined;
    const job = client
      .writeBatcher({ collection: C, batchSize: 250, concurrency: 4 })
      .onBatchRetry((r) => void retries.push(r))
      .onBatchSuccess(() => {
        if (killing === undefined && job.progress.written >= DOCS / 4) killing = procs.kill(victim);
      });
    await job.addAll(docsFrom(docs));
    const report = await job.awaitCompletion();
    await killing;

    expect(killing).toBeDefined();
    expect(report).toMatchObject({ submitted: DOCS, written: DOCS, failed: 0, notSent: 0 });
    expect(suspended.map((e) => e.host)).toEqual([victimUrl]);
    expect(retries.some((r) => r.host === victimUrl && r.hostUnavailable)).toBe(true);

    // Every document, read back through the walk of the next test's kind.
    const seen = new Map<string, number>();
    const walk = await client
      .queryBatcher(C, '*', { batchSize: 2000 })
      .onBatch((b) => {
        for (const id of b.ids) seen.set(id, (seen.get(id) ?? 0) + 1);
      })
      .awaitCompletion();
    expect(walk.shardsFailed).toEqual([]);
    expect(docs.filter((d) => !seen.has(d.id))).toEqual([]);
    expect([...seen.values()].every((n) => n === 1)).toBe(true);
  });
});
