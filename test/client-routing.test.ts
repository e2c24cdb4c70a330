// The smart client's routing, against a fake network: each shard's group goes straight to its
// leader, with the nodes' own router; reads go to the leader or, when eventual, to the reader
// the scan-server selector picks; bad input is refused before anything is sent.
import { afterEach, describe, expect, it } from 'vitest';
import { ClusterSnapshot, ShardexClient } from '../src/client/index.js';
import { ShardexError } from '../src/errors.js';
import { formatRange, partitionRange, routeId } from '../src/hashrange/index.js';
import { FakeNet, json } from './support/client-fakes.js';

const clients: ShardexClient[] = [];
function clientOn(net: FakeNet, extra: Partial<ConstructorParameters<typeof ShardexClient>[0]> = {}): ShardexClient {
  const c = new ShardexClient({ urls: ['http://node1.test'], fetch: net.fetch, backoff: () => 0, refreshIntervalMs: 0, ...extra });
  clients.push(c);
  return c;
}

afterEach(async () => {
  for (const c of clients.splice(0)) await c.close();
});

const ids = ['a', 'b', 'c', 'd', 'e', 'acme!1', 'acme!2', 'globex!7', 'doc-42', 'ü-ñ', 'x'.repeat(100)];

describe('ClusterSnapshot', () => {
  it('orders shards by range, never by name (shard10 follows shard9)', () => {
    const shards: Record<string, { range: string; leader: string | null; replicas: never[] }> = {};
    for (const r of partitionRange(12).reverse()) shards[r.name] = { range: formatRange(r), leader: null, replicas: [] };
    const s = ClusterSnapshot.fromView({ nodes: [], collections: { c: { router: 'compositeId', numShards: 12, replicationFactor: 1, shards } } });
    expect(s.collection('c')!.shards.map((x) => x.name)).toEqual(Array.from({ length: 12 }, (_, i) => `shard${i + 1}`));
  });

  it('routes every id to the shard the nodes route it to', () => {
    const net = new FakeNet({ shards: 6 });
    const s = ClusterSnapshot.fromView(net.view);
    for (const id of ids) expect(s.router('docs').route(id).shard).toBe(routeId(id, 6, 'compositeId').shard);
  });
});

describe('add', () => {
  it('posts each shard group once, straight to that shard leader, and merges the answers', async () => {
    const net = new FakeNet();
    const client = clientOn(net);
    const res = await client.add('docs', ids.map((id) => ({ id, title: id })));
    expect(res.added).toBe(ids.length);
    expect(Object.keys(res.versions).sort()).toEqual([...ids].sort());
    const posts = net.docPosts();
    const shards = new Set(ids.map((id) => net.shardOf(id)));
    expect(posts).toHaveLength(shards.size);
    for (const p of posts) {
      const docIds = (p.body as Array<{ id: string }>).map((d) => d.id);
      const shard = net.shardOf(docIds[0]!);
      expect(docIds.every((id) => net.shardOf(id) === shard)).toBe(true);
      expect(p.host).toBe(net.leaderOf(shard));
    }
  });

  it('refuses an invalid document before sending anything, naming its position', async () => {
    const net = new FakeNet();
    const client = clientOn(net);
    await expect(client.add('docs', [{ id: 'ok' }, { title: 'no id' }])).rejects.toMatchObject({ code: 'SHX_BAD_DOCUMENT', message: expect.stringContaining('document 1') });
    expect(net.docPosts()).toHaveLength(0);
  });

  it('says which shards failed and how many documents were written when one group is rejected', async () => {
    const net = new FakeNet();
    const client = clientOn(net);
    const badShard = net.shardOf('a');
    net.failNext((c) => c.method === 'POST' && c.host === net.leaderOf(badShard), () => json(400, { error: 'field price is not a number', code: 'SHX_BAD_DOCUMENT' }));
    const err = (await client.add('docs', ids.map((id) => ({ id }))).catch((e: unknown) => e)) as ShardexError;
    expect(err.code).toBe('SHX_BAD_DOCUMENT');
    expect(err.details).toMatchObject({ failedShards: [badShard], written: ids.filter((id) => net.shardOf(id) !== badShard).length });
  });

  it('fails with SHX_COLLECTION_NOT_FOUND for a collection the cluster does not list', async () => {
    const client = clientOn(new FakeNet());
    await expect(client.add('nope', [{ id: '1' }])).rejects.toMatchObject({ code: 'SHX_COLLECTION_NOT_FOUND' });
  });
});

describe('delete', () => {
  it('sends each id to its shard leader', async () => {
    const net = new FakeNet();
    const client = clientOn(net);
    const res = await client.delete('docs', ['a', 'b', 'acme!1']);
    expect(res.deleted).toBe(3);
    const dels = net.calls.filter((c) => c.method === 'DELETE');
    for (const d of dels) {
      const url = new URL(d.path, 'http://x');
      const id = decodeURIComponent(url.pathname.split('/').pop()!);
      expect(d.host).toBe(net.leaderOf(net.shardOf(id)));
      // Each attempt tells the node how long the client waits for it.
      expect(Number(url.searchParams.get('timeoutMs'))).toBeGreaterThan(0);
    }
  });

  it('tells the node what is left of the operation\'s deadline, so that its forwards end with it', async () => {
    const net = new FakeNet();
    const client = clientOn(net, { requestTimeoutMs: 60_000 });
    await client.add('docs', [{ id: 'a' }], { timeoutMs: 5000 });
    await client.add('docs', [{ id: 'b' }], { minRf: 2 });
    const [first, second] = net.docPosts().map((p) => new URL(p.path, 'http://x').searchParams);
    expect(Number(first!.get('timeoutMs'))).toBeGreaterThan(0);
    expect(Number(first!.get('timeoutMs'))).toBeLessThanOrEqual(5000);
    // Without a deadline: the per-request timeout.
    expect(Object.fromEntries(second!)).toEqual({ timeoutMs: '60000', minRf: '2' });
  });
});

describe('get', () => {
  it('reads from the shard leader and answers undefined for a missing document', async () => {
    const net = new FakeNet();
    const client = clientOn(net);
    await client.add('docs', [{ id: 'acme!1', n: 1 }]);
    expect(await client.get('docs', 'acme!1')).toMatchObject({ id: 'acme!1', n: 1, _shard_: net.shardOf('acme!1') });
    expect(await client.get('docs', 'missing')).toBeUndefined();
    const gets = net.calls.filter((c) => c.method === 'GET' && c.path.includes('/docs/'));
    expect(gets.map((g) => g.host)).toEqual([net.leaderOf(net.shardOf('acme!1')), net.leaderOf(net.shardOf('missing'))]);
  });
});

describe('search and commit', () => {
  it('passes the query and options to a node', async () => {
    const net = new FakeNet();
    const client = clientOn(net);
    const res = await client.search('docs', 'title:dune', { filter: 'price:[0 TO 10]', sort: 'price desc', limit: 5, fields: ['id', 'title'], scanType: 'batch', priority: 'low' });
    expect(res.shards.total).toBe(4);
    const call = net.calls.find((c) => c.path.includes('/search'))!;
    const q = new URL(call.host + call.path).searchParams;
    expect(Object.fromEntries(q)).toMatchObject({ q: 'title:dune', filter: 'price:[0 TO 10]', sort: 'price desc', limit: '5', fields: 'id,title', scanType: 'batch', priority: 'low' });
  });

  it('sends an eventual search or get that names a priority through a node, whose balancer holds it to the priority\'s slots', async () => {
    const net = new FakeNet();
    net.docs.set('a', { id: 'a', _version_: 1, _shard_: net.shardOf('a') });
    const client = clientOn(net);
    // The fake cluster has no readers and no gRPC: read by the client itself, these could not be answered.
    const res = await client.search('docs', 'title:dune', { consistency: 'eventual', priority: 'report', timeoutMs: 5000 });
    expect(res.shards.total).toBe(4);
    const search = new URL(net.calls.find((c) => c.path.includes('/search'))!.path, 'http://x').searchParams;
    expect(Object.fromEntries(search)).toMatchObject({ q: 'title:dune', consistency: 'eventual', priority: 'report' });
    const doc = await client.get('docs', 'a', { consistency: 'eventual', priority: 'report', timeoutMs: 5000 });
    expect(doc?.id).toBe('a');
    const get = net.calls.find((c) => c.method === 'GET' && c.path.includes('/docs/a'))!;
    const getParams = Object.fromEntries(new URL(get.path, 'http://x').searchParams);
    expect(getParams).toMatchObject({ consistency: 'eventual', priority: 'report' });
    // The node's balancer and readers are bounded by what is left of the client's deadline.
    for (const t of [search.get('timeoutMs'), getParams.timeoutMs]) {
      expect(Number(t)).toBeGreaterThan(0);
      expect(Number(t)).toBeLessThanOrEqual(5000);
    }
  });

  it('tells the node how long each read attempt may take: immediate gets, searches and export pages', async () => {
    const net = new FakeNet();
    const client = clientOn(net, { requestTimeoutMs: 20_000 });
    await client.add('docs', [{ id: 'a' }]);
    await client.get('docs', 'a', { timeoutMs: 3000 });
    await client.search('docs', '*');
    await client.queryBatcher('docs', '*').awaitCompletion();
    const reads = net.calls.filter((c) => c.method === 'GET' && /\/(docs\/a|search|export)\?/.test(c.path));
    expect(reads.some((c) => c.path.includes('/export?'))).toBe(true);
    for (const r of reads) {
      const t = Number(new URL(r.path, 'http://x').searchParams.get('timeoutMs'));
      expect(t, r.path).toBeGreaterThan(0);
      // The get's own deadline (3 s), else the per-request timeout.
      expect(t, r.path).toBeLessThanOrEqual(r.path.includes('/docs/a') ? 3000 : 20_000);
    }
  });

  it('commits through a node', async () => {
    const net = new FakeNet();
    expect(await clientOn(net).commit('docs')).toHaveProperty('shard1');
  });
});

describe('deadlines and cancellation', () => {
  it('ends an operation that outlives timeoutMs with SHX_TIMEOUT', async () => {
    const net = new FakeNet();
    const client = clientOn(net, { backoff: () => 50, maxRetries: 1000 });
    await client.connect();
    net.script((c) => (c.method === 'POST' ? json(503, { error: 'no leader', code: 'SHX_NO_LEADER' }) : undefined));
    await expect(client.add('docs', [{ id: 'a' }], { timeoutMs: 200 })).rejects.toMatchObject({ code: 'SHX_TIMEOUT' });
  });

  it('says in a deadline\'s error why the operation did not complete: the last attempt\'s failure', async () => {
    const net = new FakeNet();
    const client = clientOn(net, { backoff: () => 50, maxRetries: 1000 });
    await client.connect();
    net.script((c) => (c.path.includes('/search') ? json(503, { error: 'no reader of group fast is live', code: 'SHX_UNAVAILABLE' }) : undefined));
    await expect(client.search('docs', '*', { timeoutMs: 300 })).rejects.toMatchObject({
      code: 'SHX_TIMEOUT',
      message: expect.stringMatching(/^searching docs did not complete within 300 ms \((a retry would end past it; )?the last attempt failed: .*no reader of group fast is live/),
    });
  });

  it('makes no retry whose pause would end past the deadline: one attempt, and the error names its failure', async () => {
    const net = new FakeNet();
    const client = clientOn(net, { backoff: () => 60_000, maxRetries: 1000 });
    await client.connect();
    net.script((c) => (c.method === 'POST' ? json(503, { error: 'leader is recovering', code: 'SHX_UNAVAILABLE' }) : undefined));
    await expect(client.add('docs', [{ id: 'a' }], { timeoutMs: 5_000 })).rejects.toMatchObject({
      code: 'SHX_TIMEOUT',
      message: expect.stringMatching(/within 5000 ms \(a retry would end past it; the last attempt failed: .*leader is recovering/),
    });
    expect(net.docPosts()).toHaveLength(1);
  });

  it('rejects with the caller abort reason when the signal aborts', async () => {
    const net = new FakeNet();
    const client = clientOn(net, { backoff: () => 50, maxRetries: 1000 });
    await client.connect();
    net.script((c) => (c.method === 'POST' ? json(503, { error: 'no leader', code: 'SHX_NO_LEADER' }) : undefined));
    const ac = new AbortController();
    const p = client.add('docs', [{ id: 'a' }], { signal: ac.signal });
    ac.abort(new Error('user gave up'));
    await expect(p).rejects.toThrow('user gave up');
  });
});
