// Issue 14, client failover: the Data Movement SDK's HostAvailabilityListener, NoResponseListener
// and RetryListener rules, through the public API, against fake nodes (real HTTP servers on
// 127.0.0.1 where the socket error matters, a fake fetch elsewhere) and timers the test fires.
import { pino, type Logger } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import {
  DEFAULT_HOST_UNAVAILABLE_CODES,
  ShardexClient,
  classifyFailure,
  decideHostFailure,
  type BatchFailureEvent,
  type HostSuspendedEvent,
  type QueryBatch,
  type QueryBatchFailureEvent,
} from '../src/client/index.js';
import { ShardexError } from '../src/errors.js';
import { FakeHttpCluster, FakeNet, ManualScheduler, connectionRefused, json, until } from './support/client-fakes.js';

type Options = ConstructorParameters<typeof ShardexClient>[0];

const clients: ShardexClient[] = [];
const clusters: FakeHttpCluster[] = [];

afterEach(async () => {
  for (const c of clients.splice(0)) await c.close();
  for (const c of clusters.splice(0)) await c.close();
});

function captureLog(): { logger: Logger; lines: Array<{ level: number; msg: string } & Record<string, unknown>> } {
  const lines: Array<{ level: number; msg: string } & Record<string, unknown>> = [];
  return { logger: pino({ level: 'debug' }, { write: (s: string) => void lines.push(JSON.parse(s)) }), lines };
}

function make(opts: Options): { client: ShardexClient; suspended: HostSuspendedEvent[]; scheduler: ManualScheduler } {
  const scheduler = new ManualScheduler();
  const client = new ShardexClient({ backoff: () => 0, refreshIntervalMs: 0, scheduler, ...opts } as Options);
  clients.push(client);
  const suspended: HostSuspendedEvent[] = [];
  client.onHostSuspended((e) => suspended.push(e));
  return { client, suspended, scheduler };
}

function onFake(net: FakeNet, extra: Partial<Options> = {}) {
  return make({ urls: ['http://node1.test'], fetch: net.fetch, ...extra } as Options);
}

async function httpCluster(opts: Parameters<typeof FakeHttpCluster.start>[0] = {}): Promise<FakeHttpCluster> {
  const c = await FakeHttpCluster.start(opts);
  clusters.push(c);
  return c;
}

/** Ids that the fake cluster routes to `shard` (leaders: shard1 node1, shard2 node2, shard3 node3, shard4 node1). */
function idsOn(net: FakeNet, shard: string, count: number, prefix = 'id'): string[] {
  const out: string[] = [];
  for (let i = 0; out.length < count; i++) if (net.shardOf(`${prefix}-${i}`) === shard) out.push(`${prefix}-${i}`);
  return out;
}

function fill(net: FakeNet, n: number): void {
  for (let i = 0; i < n; i++) {
    const id = `q-${String(i).padStart(4, '0')}`;
    net.docs.set(id, { id });
  }
}

const posts = (net: FakeNet, host: string) => net.callsTo(host, 'POST', '/api/collections');
const stateReads = (net: FakeNet) => net.calls.filter((c) => c.path === '/api/cluster').length;

// ---- 1. the host-unavailable list is the list ---------------------------------------------

describe('the host-unavailable list', () => {
  const wrap = (cause: unknown) => new ShardexError('SHX_UNAVAILABLE', 'could not reach', { cause: new TypeError('fetch failed', { cause }), details: { host: 'h', unreachable: true } });
  const coded = (code: string, message = code) => Object.assign(new Error(message), { code });

  it('covers socket, DNS, socket hang-up and TLS handshake failures by default', () => {
    expect(DEFAULT_HOST_UNAVAILABLE_CODES).toEqual(expect.arrayContaining(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_SOCKET', 'ERR_SSL_*']));
    for (const code of ['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_SOCKET', 'ERR_SSL_WRONG_VERSION_NUMBER']) {
      expect(classifyFailure(wrap(coded(code)), DEFAULT_HOST_UNAVAILABLE_CODES).hostUnavailable, code).toBe(true);
    }
    expect(classifyFailure(wrap(new Error('socket hang up')), DEFAULT_HOST_UNAVAILABLE_CODES).hostUnavailable).toBe(true);
  });

  it('counts a message match such as "socket hang up" only when its code is on the list', () => {
    const hangUp = wrap(new Error('socket hang up'));
    expect(classifyFailure(hangUp, ['ECONNREFUSED']).hostUnavailable).toBe(false);
    expect(classifyFailure(hangUp, ['ECONNRESET']).hostUnavailable).toBe(true);
    expect(classifyFailure(wrap(coded('ECONNRESET', 'socket hang up')), ['EPIPE']).hostUnavailable).toBe(false);
  });

  it('is replaced, not extended, by hostUnavailableCodes: a hang-up off the list retries on the same host', async () => {
    const net = new FakeNet();
    const { client, suspended } = onFake(net, { hostUnavailableCodes: ['EHOSTDOWN'] });
    await client.connect();
    const id = idsOn(net, 'shard2', 1)[0]!;
    net.failNext((c) => c.method === 'POST', () => new TypeError('fetch failed', { cause: new Error('socket hang up') }));
    await client.add('docs', [{ id }]);
    expect(suspended).toEqual([]);
    expect(net.docPosts().map((c) => c.host)).toEqual([net.host('node2'), net.host('node2')]);
  });

  it('suspends a node that resets the connection (real socket) and writes the batch elsewhere', async () => {
    const cluster = await httpCluster();
    const { client, suspended } = make({ urls: cluster.url(1) });
    await cluster.setMode(2, 'reset');
    const id = idsOn(cluster.net, 'shard2', 1)[0]!;
    const job = client.writeBatcher({ collection: 'docs', batchSize: 1 });
    const failures: BatchFailureEvent[] = [];
    job.onBatchFailure((e) => void failures.push(e));
    await job.add({ id });
    const report = await job.awaitCompletion();
    expect(report).toMatchObject({ written: 1, failed: 0 });
    expect(suspended.map((e) => e.host)).toEqual([cluster.url(2)]);
    expect(failures).toMatchObject([{ host: cluster.url(2), retrying: true }]);
    expect(posts(cluster.net, cluster.url(2))).toHaveLength(1);
    expect(cluster.net.docs.has(id)).toBe(true);
  });

  it('suspends a node whose TLS handshake fails', async () => {
    const cluster = await httpCluster({ tls: [2] });
    const { client, suspended } = make({ urls: cluster.url(1) });
    await client.add('docs', [{ id: idsOn(cluster.net, 'shard2', 1)[0]! }]);
    expect(cluster.url(2)).toMatch(/^https:/);
    expect(suspended.map((e) => e.host)).toEqual([cluster.url(2)]);
    expect(suspended[0]!.error).toMatchObject({ code: 'SHX_UNAVAILABLE' });
  });

  it('suspends a node that refuses connections (real socket)', async () => {
    const cluster = await httpCluster();
    const { client, suspended } = make({ urls: cluster.url(1) });
    await client.connect();
    await cluster.setMode(3, 'refuse');
    await client.add('docs', [{ id: idsOn(cluster.net, 'shard3', 1)[0]! }]);
    expect(suspended.map((e) => e.host)).toEqual([cluster.url(3)]);
  });
});

// ---- 2. an HTTP answer is not an unavailable host -------------------------------------------

describe('an HTTP answer', () => {
  it('never suspends its node, whatever its body says about other nodes; a 5xx is retried', async () => {
    const cluster = await httpCluster();
    const { client, suspended } = make({ urls: cluster.url(1) });
    const net = cluster.net;
    net.failNext((c) => c.method === 'POST', () => json(503, { error: 'could not reach node3: socket hang up (ECONNRESET)', code: 'SHX_UNAVAILABLE' }));
    net.failNext((c) => c.method === 'POST', () => json(500, { error: 'connect ECONNREFUSED 10.0.0.3:8983', code: 'SHX_INTERNAL' }));
    net.failNext((c) => c.method === 'POST', () => new Response('bad gateway', { status: 502 }));
    const id = idsOn(net, 'shard2', 1)[0]!;
    const res = await client.add('docs', [{ id }]);
    expect(res.added).toBe(1);
    expect(suspended).toEqual([]);
    expect(client.suspendedHosts).toEqual([]);
    expect(posts(net, cluster.url(2))).toHaveLength(4);
  });

  it('is never retried when it is a 4xx', async () => {
    const net = new FakeNet();
    const { client, suspended } = onFake(net);
    await client.connect();
    net.script((c) => (c.method === 'POST' ? json(409, { error: 'conflict (ECONNRESET)', code: 'SHX_COLLECTION_EXISTS' }) : undefined));
    await expect(client.add('docs', [{ id: 'a' }])).rejects.toMatchObject({ code: 'SHX_COLLECTION_EXISTS' });
    expect(net.docPosts()).toHaveLength(1);
    expect(suspended).toEqual([]);
  });
});

// ---- 3. a node that accepts and never answers ---------------------------------------------

describe('a node that accepts and never answers (NoResponseListener)', () => {
  it('counts as unavailable after the request timeout: suspended once, the batch re-routed', async () => {
    const cluster = await httpCluster();
    const { client, suspended } = make({ urls: cluster.url(1), requestTimeoutMs: 300 });
    await client.connect();
    await cluster.setMode(2, 'hang');
    const ids = idsOn(cluster.net, 'shard2', 3);
    const job = client.writeBatcher({ collection: 'docs', batchSize: 1, concurrency: 1 });
    const retries: Array<{ host: string; hostUnavailable: boolean; suspended: boolean }> = [];
    job.onBatchRetry((r) => void retries.push(r));
    await job.addAll(ids.map((id) => ({ id })));
    const report = await job.awaitCompletion();
    expect(report).toMatchObject({ written: 3, failed: 0 });
    expect(suspended.map((e) => e.host)).toEqual([cluster.url(2)]);
    expect(suspended[0]!.error).toMatchObject({ code: 'SHX_TIMEOUT' });
    expect(retries).toMatchObject([{ host: cluster.url(2), hostUnavailable: true, suspended: true }]);
    // One wait on the silent node, not one per batch or per retry.
    expect(posts(cluster.net, cluster.url(2))).toHaveLength(1);
    expect(ids.every((id) => cluster.net.docs.has(id))).toBe(true);
  });
});

// ---- 4. failure listeners see every failure --------------------------------------------------

describe('onBatchFailure', () => {
  it('is called for every failed attempt, saying whether a retry follows', async () => {
    const net = new FakeNet();
    const { client } = onFake(net, { maxRetries: 2 });
    net.failNext((c) => c.method === 'POST', () => json(503, { error: 'recovering', code: 'SHX_RECOVERING' }), 2);
    const job = client.writeBatcher({ collection: 'docs', batchSize: 2 });
    const failures: BatchFailureEvent[] = [];
    job.onBatchFailure((e) => void failures.push(e));
    await job.addAll(idsOn(net, 'shard1', 2).map((id) => ({ id })));
    expect(await job.awaitCompletion()).toMatchObject({ written: 2, failed: 0, retries: 2 });
    expect(failures.map((f) => [f.attempt, f.retrying])).toEqual([
      [1, true],
      [2, true],
    ]);

    const job2 = client.writeBatcher({ collection: 'docs', batchSize: 2, maxRetries: 1 });
    const failures2: BatchFailureEvent[] = [];
    job2.onBatchFailure((e) => void failures2.push(e));
    net.failNext((c) => c.method === 'POST', () => json(503, { error: 'recovering', code: 'SHX_RECOVERING' }), 2);
    await job2.addAll(idsOn(net, 'shard1', 2, 'x').map((id) => ({ id })));
    expect(await job2.awaitCompletion()).toMatchObject({ written: 0, failed: 2, batchesFailed: 1 });
    expect(failures2.map((f) => [f.attempt, f.retrying])).toEqual([
      [1, true],
      [2, false],
    ]);
  });

  it('pauses by default with the jittered exponential backoff: 100 then 200 ms, each up to 20% shorter at random', async () => {
    const net = new FakeNet();
    const { client } = onFake(net, { maxRetries: 2, backoff: undefined });
    net.failNext((c) => c.method === 'POST', () => json(503, { error: 'recovering', code: 'SHX_RECOVERING' }), 2);
    const job = client.writeBatcher({ collection: 'docs', batchSize: 1 });
    const delays: number[] = [];
    job.onBatchRetry((r) => void delays.push(r.delayMs));
    await job.addAll([{ id: idsOn(net, 'shard1', 1)[0]! }]);
    expect(await job.awaitCompletion()).toMatchObject({ written: 1, retries: 2 });
    expect(delays).toHaveLength(2);
    expect(delays[0]).toBeGreaterThanOrEqual(80);
    expect(delays[0]).toBeLessThanOrEqual(100);
    expect(delays[1]).toBeGreaterThanOrEqual(160);
    expect(delays[1]).toBeLessThanOrEqual(200);
    // Unjittered, both pauses would be exactly the formula's (clients retrying together stay in step).
    expect(delays).not.toEqual([100, 200]);
  });

  it('a job stopped below minHosts reports which documents were never sent, by id and position', async () => {
    const net = new FakeNet();
    const { client } = onFake(net, { minHosts: 3 });
    await client.connect();
    net.down.add(net.host('node2'));
    const job = client.writeBatcher({ collection: 'docs', batchSize: 2, concurrency: 1 });
    const [a, b] = idsOn(net, 'shard2', 2);
    const [c, d] = idsOn(net, 'shard3', 2);
    const e = idsOn(net, 'shard4', 1)[0]!;
    // Positions: 0 a, 1 c, 2 b (shard2 full: sent, fails, stops the job), 3 d, 4 e never sent.
    await job.add({ id: a });
    await job.add({ id: c });
    await job.add({ id: b }).catch(() => undefined);
    await until(() => job.stopped, 'job stopped');
    const err = (await job.awaitCompletion().catch((x: unknown) => x)) as ShardexError;
    expect(err.message).toMatch(/fewer than minHosts 3; 0 document\(s\) written, 2 failed, 1 not sent \(positions 1;/);
    const report = err.details!.report as { notSentDocs: unknown; notSent: number };
    expect(report.notSentDocs).toEqual([{ id: c, position: 1 }]);
    expect([d, e].every((id) => !net.docs.has(id))).toBe(true);
  });
});

// ---- 5. stopped jobs are stopped -------------------------------------------------------------

describe('a stopped job', () => {
  it('has its suspension timer read nothing for it; the state is read when the client next sends', async () => {
    const net = new FakeNet();
    const { client, scheduler } = onFake(net);
    await client.connect();
    net.down.add(net.host('node2'));
    const job = client.writeBatcher({ collection: 'docs', batchSize: 1 });
    await job.add({ id: idsOn(net, 'shard2', 1)[0]! });
    await job.flush();
    expect(client.suspendedHosts).toEqual([net.host('node2')]);
    job.stop();
    net.down.delete(net.host('node2'));
    const before = stateReads(net);
    scheduler.fireAll();
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
    expect(stateReads(net)).toBe(before);
    expect(client.suspendedHosts).toEqual([net.host('node2')]);
    // The next operation reads the state first, and the host is back.
    net.calls.length = 0;
    await client.add('docs', [{ id: idsOn(net, 'shard2', 2)[1]! }]);
    expect(net.calls[0]!.path).toBe('/api/cluster');
    expect(client.suspendedHosts).toEqual([]);
    expect(net.docPosts().map((c) => c.host)).toEqual([net.host('node2')]);
  });

  it('still has the state re-read by the timer while the job runs', async () => {
    const net = new FakeNet();
    const { client, scheduler } = onFake(net);
    net.down.add(net.host('node2'));
    const job = client.writeBatcher({ collection: 'docs', batchSize: 1 });
    await job.add({ id: idsOn(net, 'shard2', 1)[0]! });
    await job.flush();
    const before = stateReads(net);
    scheduler.fireAll();
    await until(() => client.suspendedHosts.length === 0, 'restored');
    expect(stateReads(net)).toBe(before + 1);
  });

  it('write batcher: retry() logs a warning and returns, sending nothing', async () => {
    const net = new FakeNet();
    const { logger, lines } = captureLog();
    const { client } = onFake(net, { maxRetries: 0, logger });
    net.failNext((c) => c.method === 'POST', () => json(503, { error: 'busy', code: 'SHX_UNAVAILABLE' }));
    const job = client.writeBatcher({ collection: 'docs', batchSize: 1 });
    const failed: BatchFailureEvent[] = [];
    job.onBatchFailure((e) => void failed.push(e));
    await job.add({ id: 'a' });
    await job.awaitCompletion();
    job.stop();
    const sent = net.docPosts().length;
    await expect(job.retry(failed[0]!.batch)).resolves.toBeUndefined();
    await expect(job.retryWithFailureListeners(failed[0]!.batch)).resolves.toBeUndefined();
    expect(net.docPosts()).toHaveLength(sent);
    expect(lines.filter((l) => l.level === 40 && /stopped write job/.test(l.msg))).toHaveLength(2);
  });

  it('write batcher: retry() rejects when the batch fails again and tells no failure listener; retryWithFailureListeners tells them', async () => {
    const net = new FakeNet();
    const { client } = onFake(net, { maxRetries: 0 });
    net.failNext((c) => c.method === 'POST', () => json(503, { error: 'busy', code: 'SHX_UNAVAILABLE' }), 3);
    const job = client.writeBatcher({ collection: 'docs', batchSize: 1 });
    const failed: BatchFailureEvent[] = [];
    job.onBatchFailure((e) => void failed.push(e));
    await job.add({ id: 'a' });
    await job.flush();
    await expect(job.retry(failed[0]!.batch)).rejects.toMatchObject({ code: 'SHX_UNAVAILABLE' });
    expect(failed).toHaveLength(1);
    await job.retryWithFailureListeners(failed[0]!.batch);
    expect(failed).toHaveLength(2);
    await job.retry(failed[1]!.batch);
    expect(await job.awaitCompletion()).toMatchObject({ written: 1, failed: 0, batchesFailed: 0 });
  });

  it('query batcher: retryWithFailureListeners resumes a shard whose page failed, from the same cursor', async () => {
    const net = new FakeNet();
    fill(net, 200);
    const { client } = onFake(net, { maxRetries: 0 });
    let served = 0;
    net.script((c) => (c.path.includes('/export') && c.path.includes('shard=shard2') && ++served === 2 ? json(503, { error: 'recovering', code: 'SHX_RECOVERING' }) : undefined));
    const seen = new Map<string, number>();
    const job = client.queryBatcher('docs', '*', { batchSize: 10 });
    const failures: QueryBatchFailureEvent[] = [];
    job.onBatch((b) => b.ids.forEach((id) => seen.set(id, (seen.get(id) ?? 0) + 1)));
    job.onBatchFailure((e) => {
      failures.push(e);
      if (!e.retrying) void job.retryWithFailureListeners(e);
    });
    const report = await job.awaitCompletion();
    expect(failures).toMatchObject([{ shard: 'shard2', retrying: false }]);
    expect(failures[0]!.after).toBeDefined();
    expect(report.shardsFailed).toEqual([]);
    expect([...report.shardsDone].sort()).toEqual(['shard1', 'shard2', 'shard3', 'shard4']);
    expect([...seen.keys()].sort()).toEqual([...net.docs.keys()].sort());
    expect([...seen.values()].every((n) => n === 1)).toBe(true);
  });

  it('query batcher: retry() throws when the page fails again; on a stopped job it warns and sends nothing', async () => {
    const net = new FakeNet();
    fill(net, 40);
    const { logger, lines } = captureLog();
    const { client } = onFake(net, { maxRetries: 0, logger });
    net.script((c) => (c.path.includes('/export') && c.path.includes('shard=shard3') ? json(503, { error: 'recovering', code: 'SHX_RECOVERING' }) : undefined));
    const job = client.queryBatcher('docs', '*', { batchSize: 100 });
    const failures: QueryBatchFailureEvent[] = [];
    job.onBatchFailure((e) => void failures.push(e));
    const report = await job.awaitCompletion();
    expect(report.shardsFailed).toMatchObject([{ shard: 'shard3' }]);
    await expect(job.retry(failures[0]!)).rejects.toMatchObject({ code: 'SHX_RECOVERING' });
    expect(failures).toHaveLength(1);
    job.stop();
    const exports = net.calls.filter((c) => c.path.includes('/export')).length;
    await expect(job.retry(failures[0]!)).resolves.toBeUndefined();
    await expect(job.retryWithFailureListeners(failures[0]!)).resolves.toBeUndefined();
    expect(net.calls.filter((c) => c.path.includes('/export'))).toHaveLength(exports);
    expect(lines.filter((l) => l.level === 40 && /stopped query job/.test(l.msg))).toHaveLength(2);
  });
});

// ---- 6. work for a shard without a leader waits ------------------------------------------------

describe('a walk whose shard has no leader', () => {
  it('waits for the state to list one, spends no retry budget, and resumes after the last id seen', async () => {
    const net = new FakeNet();
    fill(net, 300);
    const { client } = onFake(net, { maxRetries: 0 });
    // The nodes refuse the shard's work while it has no leader, as real ones do.
    net.script((c) => (c.path.includes('shard=shard2') && net.view.collections.docs!.shards.shard2!.leader === null ? json(503, { error: 'shard docs/shard2 has no leader right now', code: 'SHX_NO_LEADER' }) : undefined));
    const seen = new Map<string, number>();
    let shard2Pages = 0;
    const job = client.queryBatcher('docs', '*', { batchSize: 10 }).onBatch((b) => {
      b.ids.forEach((id) => seen.set(id, (seen.get(id) ?? 0) + 1));
      if (b.shard === 'shard2' && ++shard2Pages === 2) net.setLeader('shard2', null); // the leader is lost mid-walk
    });
    const running = job.awaitCompletion();
    await until(() => shard2Pages === 2, 'shard2 read twice');
    const reads = stateReads(net);
    await until(() => stateReads(net) >= reads + 5, 'the state re-read while parked');
    const exportsWhileParked = net.calls.filter((c) => c.path.includes('shard=shard2')).length;
    net.setLeader('shard2', 'node3');
    const report = await running;
    // One refused attempt (maxRetries 0 would have ended the shard there), then the wait.
    expect(report).toMatchObject({ shardsFailed: [], shardsNotDone: [], retries: 1 });
    expect([...seen.keys()].sort()).toEqual([...net.docs.keys()].sort());
    expect([...seen.values()].every((n) => n === 1)).toBe(true);
    const shard2 = net.calls.filter((c) => c.path.includes('shard=shard2'));
    // Nothing more was asked while there was no leader; the first page after the wait goes to the new leader, after the last id seen.
    expect(exportsWhileParked).toBe(3);
    expect(shard2[3]!.host).toBe(net.host('node3'));
    const lastSeen = [...seen.keys()].filter((id) => net.shardOf(id) === 'shard2').sort()[19];
    expect(new URL(shard2[3]!.host + shard2[3]!.path).searchParams.get('after')).toBe(lastSeen);
  });

  it('parks on a SHX_NO_LEADER answer once the re-read state confirms it', async () => {
    const net = new FakeNet();
    fill(net, 40);
    const { client } = onFake(net, { maxRetries: 0 });
    await client.connect();
    net.failNext(
      (c) => c.path.includes('shard=shard1'),
      () => {
        net.setLeader('shard1', null);
        return json(503, { error: 'shard docs/shard1 has no leader right now', code: 'SHX_NO_LEADER' });
      },
    );
    const job = client.queryBatcher('docs', '*');
    const running = job.awaitCompletion();
    const reads = stateReads(net);
    await until(() => stateReads(net) >= reads + 3, 'parked');
    net.setLeader('shard1', 'node2');
    expect(await running).toMatchObject({ ids: 40, shardsFailed: [] });
  });

  it('waits until the job deadline, then stops saying which shard waited and where to resume', async () => {
    const net = new FakeNet();
    fill(net, 60);
    net.setLeader('shard4', null);
    const { client, scheduler } = onFake(net);
    const job = client.queryBatcher('docs', '*', { batchSize: 100, timeoutMs: 30_000 });
    const running = job.awaitCompletion().catch((e: unknown) => e as ShardexError);
    await until(() => job.report().shardsDone.length === 3, 'the other shards done');
    const reads = stateReads(net);
    await until(() => stateReads(net) >= reads + 3, 'parked');
    scheduler.timers.find((t) => t.ms === 30_000)!.fn();
    const err = await running;
    expect(err).toMatchObject({ code: 'SHX_TIMEOUT' });
    expect((err as Error).message).toMatch(/timeoutMs 30000; shard\(s\) shard4 were waiting for a leader/);
    expect((err as ShardexError).details!.report).toMatchObject({ shardsNotDone: [{ shard: 'shard4', after: undefined, waitingForLeader: true }] });
  });
});

// ---- 7. a listener's own request that fails over is re-applied (RetryListener) ---------------

describe("a query listener's own request", () => {
  it('re-applies the listener, once per registration, with the shard host resolved afresh', async () => {
    const cluster = await httpCluster();
    const net = cluster.net;
    fill(net, 30);
    const { client, suspended } = make({ urls: cluster.url(1) });
    const calls: Array<{ host: string; shard: string }> = [];
    const fetched: string[] = [];
    let refused = false;
    const other: QueryBatch[] = [];
    const failures: QueryBatchFailureEvent[] = [];
    const job = client
      .queryBatcher('docs', '*', { batchSize: 100, concurrency: 1 })
      .onBatch(async (b) => {
        calls.push({ host: b.host, shard: b.shard });
        if (b.shard === 'shard2' && !refused) {
          refused = true;
          await cluster.setMode(2, 'refuse');
        }
        // The listener's own request, to the host that served the page (as DMSDK's ExportListener).
        const res = await fetch(`${b.host}/api/collections/docs/docs/${encodeURIComponent(b.ids[0]!)}`);
        fetched.push(((await res.json()) as { id: string }).id);
      })
      .onBatch((b) => void other.push(b))
      .onBatchFailure((e) => void failures.push(e));
    const report = await job.awaitCompletion();
    const shard2 = calls.filter((c) => c.shard === 'shard2');
    expect(shard2).toHaveLength(2);
    expect(shard2[0]!.host).toBe(cluster.url(2));
    expect(shard2[1]!.host).not.toBe(cluster.url(2));
    expect(other.map((b) => b.shard).sort()).toEqual(['shard1', 'shard2', 'shard3', 'shard4']);
    expect(failures).toMatchObject([{ shard: 'shard2', retrying: true, host: cluster.url(2) }]);
    expect(suspended.map((e) => e.host)).toEqual([cluster.url(2)]);
    expect(report).toMatchObject({ listenerFailures: 0, retries: 1 });
    expect(fetched).toHaveLength(4);
  });

  it('is not re-applied when the failure names no host of the cluster, or the registration opted out', async () => {
    const net = new FakeNet();
    fill(net, 20);
    const { client, suspended } = onFake(net);
    let a = 0;
    let b = 0;
    const report = await client
      .queryBatcher('docs', '*', { batchSize: 100 })
      .onBatch((batch) => {
        if (batch.shard === 'shard1' && ++a === 1) throw Object.assign(new Error('write EPIPE'), { code: 'EPIPE' }); // e.g. stdout closed
      })
      .onBatch(
        (batch) => {
          if (batch.shard === 'shard1' && ++b === 1) throw new ShardexError('SHX_UNAVAILABLE', 'x', { cause: connectionRefused('node1.test:80'), details: { host: net.host('node1') } });
        },
        { retryOnHostUnavailable: false },
      )
      .awaitCompletion();
    expect([a, b]).toEqual([1, 1]);
    expect(report.listenerFailures).toBe(2);
    expect(suspended).toEqual([]);
  });
});

// ---- 8. options are validated when set -------------------------------------------------------

describe('options', () => {
  const base = { urls: 'http://node1.test' };
  const bad = (o: object, message: RegExp) => expect(() => new ShardexClient({ ...base, ...o } as Options)).toThrow(expect.objectContaining({ code: 'SHX_BAD_CONFIG', message: expect.stringMatching(message) }));

  it('refuses a null, negative or fractional suspendTimeForHostUnavailableMs', () => {
    for (const v of [null, -1, 1.5, '10m', Number.NaN]) bad({ suspendTimeForHostUnavailableMs: v }, /suspendTimeForHostUnavailableMs must be a duration in whole milliseconds >= 0/);
    expect(() => clients.push(new ShardexClient({ ...base, suspendTimeForHostUnavailableMs: 0 }))).not.toThrow();
  });

  it('refuses minHosts below 1', () => {
    for (const v of [0, -2, null, 1.5]) bad({ minHosts: v }, /minHosts must be an integer >= 1/);
  });

  it('refuses unknown keys, suggesting the one meant', () => {
    bad({ minHost: 2 }, /unknown client option 'minHost'; did you mean 'minHosts'\?/);
    bad({ zkSessionTimeoutMs: 1000 }, /unknown client option 'zkSessionTimeoutMs'/);
    bad({ zk: '127.0.0.1:2181' }, /give only one of urls, zk and coordinator/);
    bad({ hostUnavailableCodes: 'ECONNREFUSED' }, /hostUnavailableCodes must be an array of error codes/);
    bad({ connection: 'balanced' }, /connection must be one of "direct", "gateway"/);
    const client = new ShardexClient(base);
    clients.push(client);
    expect(() => client.writeBatcher({ collection: 'docs', batchsize: 10 } as never)).toThrow(/unknown write batcher option 'batchsize'; did you mean 'batchSize'\?/);
    expect(() => client.queryBatcher('docs', '*', { timeout: 5 } as never)).toThrow(/unknown query batcher option 'timeout'; did you mean 'timeoutMs'\?/);
  });

  it('refuses at start a minHosts larger than the hosts the cluster lists, with both numbers', async () => {
    const net = new FakeNet();
    const { client } = onFake(net);
    await expect(client.writeBatcher({ collection: 'docs', minHosts: 4 }).add({ id: 'a' })).rejects.toMatchObject({
      code: 'SHX_BAD_CONFIG',
      message: expect.stringMatching(/^minHosts 4 is more than the 3 host\(s\) the cluster lists/),
    });
    await expect(client.queryBatcher('docs', '*', { minHosts: 5 }).awaitCompletion()).rejects.toThrow(/minHosts 5 is more than the 3 host\(s\)/);
    expect(net.docPosts()).toEqual([]);
  });

  it('refuses gateway mode with several URLs or minHosts above 1', () => {
    bad({ urls: ['http://a.test', 'http://b.test'], connection: 'gateway' }, /connection "gateway" takes one URL/);
    bad({ connection: 'gateway', minHosts: 2 }, /minHosts must be 1 with connection "gateway"/);
  });
});

// ---- 9. gateway mode -------------------------------------------------------------------------

describe('gateway mode', () => {
  const GW = 'http://gateway.test';

  it('sends every batch and read to the gateway, never suspends it, and retries by the retry policy', async () => {
    const net = new FakeNet();
    fill(net, 25);
    // The nodes' own addresses are not reachable from here.
    for (const n of ['node1', 'node2', 'node3']) net.down.add(net.host(n));
    const { client, suspended } = make({ urls: GW, connection: 'gateway', fetch: net.fetch, maxRetries: 3 });
    net.failNext((c) => c.method === 'POST', () => connectionRefused('gateway.test:80'), 2);
    const job = client.writeBatcher({ collection: 'docs', batchSize: 3 });
    await job.addAll(['a', 'b', 'c', 'd', 'e', 'f'].map((id) => ({ id })));
    expect(await job.awaitCompletion()).toMatchObject({ written: 6, failed: 0, retries: 2 });
    await client.get('docs', 'a');
    await client.search('docs', 'x', { consistency: 'eventual' });
    await client.delete('docs', ['b']);
    const walk = await client.queryBatcher('docs', '*').awaitCompletion();
    expect(walk.shardsFailed).toEqual([]);
    expect(suspended).toEqual([]);
    expect(client.suspendedHosts).toEqual([]);
    expect(client.liveHosts).toEqual([GW]);
    expect(net.calls.every((c) => c.host === GW)).toBe(true);
    const search = net.calls.find((c) => c.path.includes('/search'))!;
    expect(search.path).toContain('consistency=eventual');
  });

  it('does not suspend a gateway that does not answer: the retry policy tries again', async () => {
    const cluster = await httpCluster({ nodes: 1 });
    const { client, suspended } = make({ urls: cluster.url(1), connection: 'gateway', requestTimeoutMs: 200, maxRetries: 1 });
    await client.connect();
    await cluster.setMode(1, 'hang');
    await expect(client.add('docs', [{ id: 'a' }])).rejects.toMatchObject({ code: 'SHX_TIMEOUT', details: { indeterminate: true } });
    expect(suspended).toEqual([]);
    expect(posts(cluster.net, cluster.url(1))).toHaveLength(2);
  });
});

// ---- definite and indeterminate failures -------------------------------------------------------

describe('a write that fails for good', () => {
  it('retries both kinds of 503 and reports a definite refusal as definite', async () => {
    const net = new FakeNet();
    const { client } = onFake(net, { maxRetries: 2 });
    await client.connect();
    net.script((c) => (c.method === 'POST' ? json(503, { error: 'no leader', code: 'SHX_NO_LEADER' }) : undefined));
    const err = (await client.add('docs', [{ id: 'a' }]).catch((e: unknown) => e)) as ShardexError;
    expect(err).toMatchObject({ code: 'SHX_NO_LEADER', details: { indeterminate: false, indeterminateShards: [] } });
    expect(net.docPosts()).toHaveLength(3);
  });

  it('reports an indeterminate failure as such (events and error details)', async () => {
    const net = new FakeNet();
    const { client } = onFake(net, { maxRetries: 2 });
    await client.connect();
    const id = idsOn(net, 'shard1', 1)[0]!;
    net.script((c) => (c.method === 'POST' ? json(503, { error: 'leader deposed after writing', code: 'SHX_INDETERMINATE' }) : undefined));
    const err = (await client.add('docs', [{ id }]).catch((e: unknown) => e)) as ShardexError;
    expect(net.docPosts()).toHaveLength(3);
    expect(err).toMatchObject({ code: 'SHX_INDETERMINATE', details: { indeterminate: true, indeterminateShards: ['shard1'] } });
    expect(err.message).toMatch(/may have been written all the same \(indeterminate\): retry them/);

    const job = client.writeBatcher({ collection: 'docs', batchSize: 1, maxRetries: 0 });
    const failures: BatchFailureEvent[] = [];
    job.onBatchFailure((e) => void failures.push(e));
    await job.add({ id });
    await job.awaitCompletion();
    expect(failures).toMatchObject([{ retrying: false, indeterminate: true }]);
  });

  it('stays indeterminate when an earlier attempt was (a reset), even if the last refusal is definite', async () => {
    const cluster = await httpCluster();
    const net = cluster.net;
    const { client } = make({ urls: cluster.url(1), maxRetries: 1, hostUnavailableCodes: [] });
    await client.connect();
    const id = idsOn(net, 'shard3', 1)[0]!;
    net.failNext((c) => c.method === 'POST', () => new Error('reset'));
    net.script((c) => (c.method === 'POST' ? json(503, { error: 'not the leader', code: 'SHX_NOT_LEADER' }) : undefined));
    const err = (await client.add('docs', [{ id }]).catch((e: unknown) => e)) as ShardexError;
    expect(err).toMatchObject({ code: 'SHX_NOT_LEADER', details: { indeterminate: true } });
    expect(net.docPosts()).toHaveLength(2);
  });

  /** A fetch whose matching requests leave and are never answered (until aborted); `hung` counts them. */
  function hangingFetch(net: FakeNet, hangs: (init: RequestInit) => boolean): { fetch: Options['fetch']; hung: () => number } {
    let hung = 0;
    const fetch = (async (url: string, init: RequestInit) => {
      if (!hangs(init)) return net.fetch(url, init as never);
      hung++;
      return new Promise<Response>((_, reject) => init.signal?.addEventListener('abort', () => reject(init.signal!.reason)));
    }) as Options['fetch'];
    return { fetch, hung: () => hung };
  }

  it("add(): a deadline that ends during an attempt says what was written, and that the cut-off shard's part may have been", async () => {
    const net = new FakeNet();
    const ids = Array.from({ length: 8 }, (_, i) => `id-${i}`);
    const slow = net.shardOf(ids[0]!);
    const hangs = (init: RequestInit): boolean => init.method === 'POST' && (JSON.parse(String(init.body)) as Array<{ id: string }>).some((d) => net.shardOf(d.id) === slow);
    const { client } = make({ urls: ['http://node1.test'], fetch: hangingFetch(net, hangs).fetch });
    await client.connect();
    const err = (await client.add('docs', ids.map((id) => ({ id })), { timeoutMs: 200 }).catch((e: unknown) => e)) as ShardexError;
    const written = ids.filter((id) => net.shardOf(id) !== slow);
    expect(written.length).toBeGreaterThan(0);
    expect(err).toMatchObject({ code: 'SHX_TIMEOUT', details: { written: written.length, failedShards: [slow], indeterminate: true, indeterminateShards: [slow] } });
    expect(Object.keys((err.details as { versions: object }).versions).sort()).toEqual(written.sort());
    expect(err.message).toMatch(/did not complete within 200 ms \(the last attempt failed: /);
  });

  it('delete(): a deadline that ends during an attempt names the ids that may have been deleted', async () => {
    const net = new FakeNet();
    const { client } = make({ urls: ['http://node1.test'], fetch: hangingFetch(net, (init) => init.method === 'DELETE').fetch });
    await client.connect();
    await client.add('docs', [{ id: 'a' }]);
    const err = (await client.delete('docs', ['a'], { timeoutMs: 200 }).catch((e: unknown) => e)) as ShardexError;
    expect(err).toMatchObject({ code: 'SHX_TIMEOUT', details: { deleted: 0, failedIds: ['a'], indeterminate: true, indeterminateIds: ['a'] } });
  });

  it("add(): the caller's abort during an attempt ends it with the signal's reason", async () => {
    const net = new FakeNet();
    const fake = hangingFetch(net, (init) => init.method === 'POST');
    const { client } = make({ urls: ['http://node1.test'], fetch: fake.fetch });
    await client.connect();
    const ac = new AbortController();
    const reason = new Error('the user left');
    const pending = client.add('docs', [{ id: 'a' }], { signal: ac.signal });
    await until(() => fake.hung() > 0, 'the POST to be sent');
    ac.abort(reason);
    await expect(pending).rejects.toBe(reason);
  });

  it('write batcher: a batch in flight when the caller aborts is reported as failed and indeterminate, not as never sent', async () => {
    const net = new FakeNet();
    const fake = hangingFetch(net, (init) => init.method === 'POST');
    const { client } = make({ urls: ['http://node1.test'], fetch: fake.fetch });
    await client.connect();
    const ac = new AbortController();
    const job = client.writeBatcher({ collection: 'docs', batchSize: 1, signal: ac.signal });
    const failures: BatchFailureEvent[] = [];
    job.onBatchFailure((e) => void failures.push(e));
    await job.add({ id: 'a' });
    await until(() => fake.hung() > 0, 'the batch to be sent');
    ac.abort();
    const err = (await job.awaitCompletion().catch((e: unknown) => e)) as ShardexError;
    const report = (err.details as { report: { failed: number; notSent: number } }).report;
    expect(report).toMatchObject({ failed: 1, notSent: 0 });
    expect(failures).toMatchObject([{ retrying: false, indeterminate: true, attempt: 1 }]);
  });

  it('a connection refused before anything was sent is definite', async () => {
    const net = new FakeNet({ nodes: 1 });
    const { client } = onFake(net, { maxRetries: 1, hostUnavailableCodes: [] });
    await client.connect();
    net.down.add(net.host('node1'));
    const err = (await client.delete('docs', ['a']).catch((e: unknown) => e)) as ShardexError;
    expect(err).toMatchObject({ code: 'SHX_UNAVAILABLE', details: { indeterminate: false, failedIds: ['a'] } });
  });

  it('classifies answers: 4xx and 503 no-leader/not-leader/starting are definite; other 5xx indeterminate', () => {
    const answer = (status: number, code: string) => new ShardexError(code as never, 'x', { details: { host: 'h', status } });
    const c = (status: number, code: string) => classifyFailure(answer(status, code), DEFAULT_HOST_UNAVAILABLE_CODES);
    expect(c(400, 'SHX_BAD_DOCUMENT')).toMatchObject({ kind: 'answered', retryable: false, indeterminate: false, hostUnavailable: false });
    expect(c(429, 'SHX_BUSY')).toMatchObject({ retryable: true, indeterminate: false });
    for (const code of ['SHX_NO_LEADER', 'SHX_NOT_LEADER', 'SHX_STARTING']) expect(c(503, code)).toMatchObject({ retryable: true, indeterminate: false });
    for (const [s, code] of [[503, 'SHX_INDETERMINATE'], [503, 'SHX_RECOVERING'], [500, 'SHX_INTERNAL'], [504, 'SHX_TIMEOUT']] as const) {
      expect(c(s, code)).toMatchObject({ retryable: true, indeterminate: true });
    }
    expect(decideHostFailure({ host: 'h', error: answer(503, 'SHX_UNAVAILABLE'), listed: ['h', 'g'], suspended: new Set(), minHosts: 1, codes: DEFAULT_HOST_UNAVAILABLE_CODES }).action).toBe('not-host-unavailable');
  });
});
