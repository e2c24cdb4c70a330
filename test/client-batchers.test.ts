// The bulk jobs against a fake network: the write batcher (per-shard batches from an async
// source, back-pressure, progress, invalid documents reported and skipped) and the query
// batcher (a cursor per shard, every id exactly once, a node lost mid-walk).
import { afterEach, describe, expect, it } from 'vitest';
import { ShardexClient, type QueryBatch, type WriteBatch } from '../src/client/index.js';
import { FakeNet, json, until } from './support/client-fakes.js';

const clients: ShardexClient[] = [];
function clientOn(net: FakeNet, extra: Partial<ConstructorParameters<typeof ShardexClient>[0]> = {}): ShardexClient {
  const c = new ShardexClient({ urls: 'http://node1.test', fetch: net.fetch, backoff: () => 0, refreshIntervalMs: 0, ...extra });
  clients.push(c);
  return c;
}

afterEach(async () => {
  for (const c of clients.splice(0)) await c.close();
});

async function* generate(n: number): AsyncGenerator<unknown> {
  for (let i = 0; i < n; i++) {
    yield { id: `doc-${i}`, n: i };
    if (i % 50 === 0) await new Promise((r) => setImmediate(r));
  }
}

describe('writeBatcher', () => {
  it('writes every document of an async source in per-shard batches, each sent to its leader', async () => {
    const net = new FakeNet();
    const client = clientOn(net);
    const job = client.writeBatcher({ collection: 'docs', batchSize: 40, concurrency: 3 });
    const batches: WriteBatch[] = [];
    job.onBatchSuccess((e) => {
      batches.push(e.batch);
      expect(e.host).toBe(net.leaderOf(e.batch.shard));
    });
    expect(await job.addAll(generate(1000))).toBe(1000);
    const report = await job.awaitCompletion();
    expect(report).toMatchObject({ submitted: 1000, written: 1000, failed: 0, notSent: 0, pending: 0, inFlight: 0 });
    expect(net.docs.size).toBe(1000);
    for (const b of batches) {
      expect(b.docs.length).toBeLessThanOrEqual(40);
      expect(b.ids.every((id) => net.shardOf(id) === b.shard)).toBe(true);
    }
    // Only each shard's last batch may be partial.
    const partial = batches.filter((b) => b.docs.length < 40);
    expect(new Set(partial.map((b) => b.shard)).size).toBe(partial.length);
  });

  it('holds back the producer while the send queue is full', async () => {
    const net = new FakeNet();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const client = clientOn(net, { fetch: async (url, init) => (init.method === 'POST' ? gate.then(() => net.fetch(url, init)) : net.fetch(url, init)) });
    const job = client.writeBatcher({ collection: 'docs', batchSize: 1, concurrency: 1 });
    let accepted = 0;
    const producing = (async () => {
      for (let i = 0; i < 10; i++) {
        await job.add({ id: `d${i}` });
        accepted++;
      }
    })();
    await until(() => job.progress.submitted === 2, 'second document accepted');
    for (let i = 0; i < 50; i++) await new Promise((r) => setImmediate(r));
    expect(accepted).toBe(1);
    expect(job.progress).toMatchObject({ submitted: 2, pending: 1, inFlight: 1, written: 0 });
    release();
    await producing;
    expect((await job.awaitCompletion()).written).toBe(10);
  });

  it('reports invalid documents of the source with their position and writes the others', async () => {
    const net = new FakeNet();
    const client = clientOn(net);
    const job = client.writeBatcher({ collection: 'docs', batchSize: 10 });
    const rejected: Array<[number, string]> = [];
    job.onDocumentRejected((e) => void rejected.push([e.position, e.error.message]));
    const source = [{ id: 'a' }, { title: 'no id' }, 'text', { id: 'b', _version_: 3 }, { id: 'c' }];
    expect(await job.addAll(source)).toBe(2);
    const report = await job.awaitCompletion();
    expect(report).toMatchObject({ written: 2, rejected: 3 });
    expect(rejected).toEqual([
      [1, 'document 1 has no "id"; nothing was written'],
      [2, 'document 2 is a string, not a JSON object; nothing was written'],
      [3, 'document 3 sets a reserved field (_version_ or _shard_); nothing was written'],
    ]);
  });

  it('flush() sends partial batches and waits for them; the job goes on afterwards', async () => {
    const net = new FakeNet();
    const client = clientOn(net);
    const job = client.writeBatcher({ collection: 'docs', batchSize: 1000 });
    await job.addAll([{ id: 'a' }, { id: 'b' }]);
    expect(net.docPosts()).toHaveLength(0);
    await job.flush();
    expect(net.docs.size).toBe(2);
    await job.add({ id: 'c' });
    expect((await job.awaitCompletion()).written).toBe(3);
  });
});

describe('queryBatcher', () => {
  function fill(net: FakeNet, n: number): void {
    for (let i = 0; i < n; i++) net.docs.set(`q-${String(i).padStart(4, '0')}`, { id: `q-${String(i).padStart(4, '0')}` });
  }

  it('visits every id exactly once, shard by shard, in pages from each shard leader', async () => {
    const net = new FakeNet();
    fill(net, 500);
    const client = clientOn(net);
    const seen: string[] = [];
    const batches: QueryBatch[] = [];
    const report = await client
      .queryBatcher('docs', '*', { batchSize: 30 })
      .onBatch((b) => {
        batches.push(b);
        seen.push(...b.ids);
      })
      .awaitCompletion();
    expect(seen.sort()).toEqual([...net.docs.keys()].sort());
    expect(report).toMatchObject({ ids: 500, shardsFailed: [], listenerFailures: 0 });
    expect([...report.shardsDone].sort()).toEqual(['shard1', 'shard2', 'shard3', 'shard4']);
    for (const b of batches) expect(b.host).toBe(net.leaderOf(b.shard));
    const exports = net.calls.filter((c) => c.path.includes('/export'));
    expect(exports.every((c) => /[?&]q=\*/.test(c.path) && c.path.includes('limit=30'))).toBe(true);
  });

  it('asks every page with its read-balancer priority, and refuses a bad priority name at construction', async () => {
    const net = new FakeNet();
    fill(net, 60);
    const client = clientOn(net);
    const report = await client.queryBatcher('docs', '*', { batchSize: 25, priority: 'export' }).awaitCompletion();
    expect(report.ids).toBe(60);
    const exports = net.calls.filter((c) => c.path.includes('/export'));
    expect(exports.length).toBeGreaterThanOrEqual(4);
    expect(exports.every((c) => new URL(c.path, 'http://x').searchParams.get('priority') === 'export')).toBe(true);
    expect(() => client.queryBatcher('docs', '*', { priority: 'not a name' })).toThrow(/priority must be a name matching/);
  });

  it('survives the loss of a node mid-walk: the page is asked again from the same cursor elsewhere', async () => {
    const net = new FakeNet();
    fill(net, 400);
    const client = clientOn(net);
    const seen = new Map<string, number>();
    let pages = 0;
    const job = client.queryBatcher('docs', '*', { batchSize: 25, concurrency: 1 }).onBatch(async (b) => {
      for (const id of b.ids) seen.set(id, (seen.get(id) ?? 0) + 1);
      if (++pages === 3) {
        // node1 dies; the cluster elects node3 for its shards.
        net.down.add('http://node1.test');
        net.setLeader('shard1', 'node3');
        net.setLeader('shard4', 'node3');
      }
    });
    const retries: string[] = [];
    job.onBatchRetry((r) => void retries.push(r.host));
    const report = await job.awaitCompletion();
    expect([...seen.keys()].sort()).toEqual([...net.docs.keys()].sort());
    expect([...seen.values()].every((n) => n === 1)).toBe(true);
    expect(retries).toEqual(['http://node1.test']);
    expect(client.suspendedHosts).toEqual(['http://node1.test']);
    expect(report.shardsFailed).toEqual([]);
  });

  it('reports a listener failure and goes on', async () => {
    const net = new FakeNet();
    fill(net, 100);
    const client = clientOn(net);
    const failures: unknown[] = [];
    let n = 0;
    const report = await client
      .queryBatcher('docs', 'category:x', { batchSize: 10 })
      .onBatch(() => {
        if (++n === 2) throw new Error('listener broke');
      })
      .onBatchFailure((f) => void failures.push(f.error))
      .awaitCompletion();
    expect(report.ids).toBe(100);
    expect(report.listenerFailures).toBe(1);
    expect(failures).toEqual([new Error('listener broke')]);
  });

  it('ends a shard whose export is refused, naming the shard and the cursor reached', async () => {
    const net = new FakeNet();
    fill(net, 50);
    net.failNext((c) => c.path.includes('/export') && c.path.includes('shard=shard2'), () => json(400, { error: 'bad query', code: 'SHX_BAD_QUERY' }));
    const client = clientOn(net);
    const report = await client.queryBatcher('docs', 'title:(', { batchSize: 10 }).awaitCompletion();
    expect(report.shardsFailed).toMatchObject([{ shard: 'shard2', after: undefined, error: { code: 'SHX_BAD_QUERY' } }]);
    expect([...report.shardsDone].sort()).toEqual(['shard1', 'shard3', 'shard4']);
  });
});
