// Host failover after MarkLogic DMSDK's HostAvailabilityListener, against a fake network and
// timers the test fires: suspension on a host-unavailable error found anywhere in the cause
// chain, one pending refresh timer, return only when listed, re-routing of queued batches,
// minHosts, and the retry policy (retryable errors retried with backoff, rejections never).
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_HOST_UNAVAILABLE_CODES, ShardexClient, decideHostFailure, type HostSuspendedEvent, type HostsRestoredEvent, type BatchRetryEvent, type BatchFailureEvent, type BatchSuccessEvent } from '../src/client/index.js';
import { ShardexError } from '../src/errors.js';
import { FakeNet, ManualScheduler, connectionRefused, json, until } from './support/client-fakes.js';

const N1 = 'http://node1.test';
const N2 = 'http://node2.test';
const N3 = 'http://node3.test';

const clients: ShardexClient[] = [];
function clientOn(net: FakeNet, extra: Partial<ConstructorParameters<typeof ShardexClient>[0]> = {}): { client: ShardexClient; scheduler: ManualScheduler; suspended: HostSuspendedEvent[]; restored: HostsRestoredEvent[] } {
  const scheduler = new ManualScheduler();
  const client = new ShardexClient({ urls: [N1], fetch: net.fetch, backoff: () => 0, refreshIntervalMs: 0, scheduler, ...extra });
  clients.push(client);
  const suspended: HostSuspendedEvent[] = [];
  const restored: HostsRestoredEvent[] = [];
  client.onHostSuspended((e) => suspended.push(e));
  client.onHostsRestored((e) => restored.push(e));
  return { client, scheduler, suspended, restored };
}

afterEach(async () => {
  for (const c of clients.splice(0)) await c.close();
});

/** Ids that the fake cluster routes to `shard` (leaders: shard1 node1, shard2 node2, shard3 node3, shard4 node1). */
function idsOn(net: FakeNet, shard: string, count: number): string[] {
  const out: string[] = [];
  for (let i = 0; out.length < count; i++) if (net.shardOf(`id-${i}`) === shard) out.push(`id-${i}`);
  return out;
}

function jobEvents(job: { onBatchSuccess: Function; onBatchFailure: Function; onBatchRetry: Function }) {
  const ev = { ok: [] as BatchSuccessEvent[], failed: [] as BatchFailureEvent[], retries: [] as BatchRetryEvent[] };
  job.onBatchSuccess((e: BatchSuccessEvent) => void ev.ok.push(e));
  job.onBatchFailure((e: BatchFailureEvent) => void ev.failed.push(e));
  job.onBatchRetry((e: BatchRetryEvent) => void ev.retries.push(e));
  return ev;
}

describe('decideHostFailure (pure)', () => {
  const refused = new ShardexError('SHX_UNAVAILABLE', 'could not reach', { cause: new Error('fetch failed', { cause: Object.assign(new Error('x'), { code: 'ECONNREFUSED' }) }) });
  const base = { listed: [N1, N2, N3], suspended: new Set<string>(), minHosts: 1, codes: DEFAULT_HOST_UNAVAILABLE_CODES };

  it('leaves an error that is not host-unavailable to the retry policy', () => {
    expect(decideHostFailure({ ...base, host: N2, error: new ShardexError('SHX_NOT_LEADER', 'x') })).toEqual({ action: 'not-host-unavailable' });
  });

  it('finds a socket error code deep in the cause chain', () => {
    expect(decideHostFailure({ ...base, host: N2, error: refused })).toEqual({ action: 'suspend', remaining: [N1, N3] });
  });

  it('matches only the configured codes', () => {
    expect(decideHostFailure({ ...base, codes: ['EHOSTDOWN'], host: N2, error: refused }).action).toBe('not-host-unavailable');
  });

  it('changes nothing for a host already suspended', () => {
    expect(decideHostFailure({ ...base, suspended: new Set([N2]), host: N2, error: refused })).toEqual({ action: 'unchanged' });
  });

  it('changes nothing for a host the state no longer lists', () => {
    expect(decideHostFailure({ ...base, listed: [N1, N3], host: N2, error: refused })).toEqual({ action: 'unchanged' });
  });

  it('stops when suspending would leave fewer than minHosts hosts', () => {
    expect(decideHostFailure({ ...base, minHosts: 3, host: N2, error: refused })).toEqual({ action: 'stop', remaining: [N1, N3] });
    expect(decideHostFailure({ ...base, minHosts: 2, host: N2, error: refused }).action).toBe('suspend');
    expect(decideHostFailure({ ...base, minHosts: 2, suspended: new Set([N3]), host: N2, error: refused })).toEqual({ action: 'stop', remaining: [N1] });
  });
});

describe('suspension', () => {
  it('suspends a host whose connection error is wrapped in causes, re-reads the state and retries the batch at the new leader', async () => {
    const net = new FakeNet();
    const { client, suspended } = clientOn(net);
    await client.connect();
    const deep = () => new TypeError('fetch failed', { cause: new Error('pool error', { cause: connectionRefused('node2.test:80') }) });
    net.failNext((c) => c.host === N2, deep, 100);
    net.setLeader('shard2', 'node3');
    const job = client.writeBatcher({ collection: 'docs', batchSize: 10 });
    const ev = jobEvents(job);
    await job.addAll(idsOn(net, 'shard2', 3).map((id) => ({ id })));
    const report = await job.awaitCompletion();
    expect(report).toMatchObject({ written: 3, failed: 0, retries: 1 });
    expect(suspended.map((e) => e.host)).toEqual([N2]);
    expect(client.suspendedHosts).toEqual([N2]);
    expect(ev.retries).toMatchObject([{ host: N2, hostUnavailable: true, suspended: true, attempt: 1 }]);
    expect(ev.ok.map((e) => e.host)).toEqual([N3]);
  });

  it('keeps one pending refresh timer: a new suspension replaces it', async () => {
    const net = new FakeNet();
    const { client, scheduler, suspended } = clientOn(net, { suspendTimeForHostUnavailableMs: 600_000 });
    await client.connect();
    net.down.add(N2);
    await client.add('docs', [{ id: idsOn(net, 'shard2', 1)[0] }]);
    expect(scheduler.pending()).toHaveLength(1);
    net.down.add(N3);
    await client.add('docs', [{ id: idsOn(net, 'shard3', 1)[0] }]);
    expect(suspended.map((e) => e.host)).toEqual([N2, N3]);
    expect(scheduler.timers).toHaveLength(2);
    expect(scheduler.timers[0]!.cleared).toBe(true);
    expect(scheduler.pending()).toHaveLength(1);
    expect(scheduler.pending()[0]!.ms).toBe(600_000);
  });

  it('after the suspension re-reads the state and brings back only the hosts it lists', async () => {
    const net = new FakeNet();
    const { client, scheduler, restored } = clientOn(net);
    await client.connect();
    net.down.add(N2);
    net.down.add(N3);
    await client.add('docs', [{ id: idsOn(net, 'shard2', 1)[0] }, { id: idsOn(net, 'shard3', 1)[0] }]);
    expect([...client.suspendedHosts].sort()).toEqual([N2, N3]);
    // node2 comes back; node3 is gone from the cluster.
    net.down.delete(N2);
    net.unlist('node3');
    net.setLeader('shard3', 'node1');
    scheduler.fireAll();
    await until(() => restored.length === 1, 'restore');
    expect(restored[0]).toEqual({ restored: [N2], gone: [N3] });
    expect(client.suspendedHosts).toEqual([]);
    expect(client.liveHosts).toEqual([N1, N2]);
    net.calls.length = 0;
    await client.add('docs', [{ id: idsOn(net, 'shard2', 2)[1] }]);
    expect(net.docPosts().map((c) => c.host)).toEqual([N2]);
  });

  it('does not bring a host back while the state cannot be read; tries again later', async () => {
    const net = new FakeNet();
    const { client, scheduler, restored } = clientOn(net);
    await client.connect();
    net.down.add(N2);
    await client.add('docs', [{ id: idsOn(net, 'shard2', 1)[0] }]);
    net.failNext((c) => c.path === '/api/cluster', () => json(503, { error: 'unavailable', code: 'SHX_UNAVAILABLE' }), 10);
    scheduler.fireAll();
    await until(() => scheduler.pending().length === 1, 're-armed timer');
    expect(restored).toEqual([]);
    expect(client.suspendedHosts).toEqual([N2]);
  });

  it('changes nothing when a host already suspended fails again, but still retries that batch', async () => {
    const net = new FakeNet();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const held: string[] = [];
    const fetchFn: typeof net.fetch = async (url, init) => {
      if (url.startsWith(N2)) {
        held.push(url);
        await gate;
        throw connectionRefused('node2.test:80');
      }
      return net.fetch(url, init);
    };
    const { client, scheduler, suspended } = clientOn(net, { fetch: fetchFn });
    await client.connect();
    const job = client.writeBatcher({ collection: 'docs', batchSize: 1, concurrency: 2 });
    const ev = jobEvents(job);
    const [a, b] = idsOn(net, 'shard2', 2);
    await job.add({ id: a });
    await job.add({ id: b });
    await until(() => held.length === 2, 'both batches in flight to node2');
    release();
    const report = await job.awaitCompletion();
    expect(report).toMatchObject({ written: 2, failed: 0 });
    expect(suspended).toHaveLength(1);
    expect(scheduler.timers).toHaveLength(1);
    expect(ev.retries.map((r) => [r.host, r.hostUnavailable, r.suspended])).toEqual([
      [N2, true, true],
      [N2, true, false],
    ]);
    expect(ev.ok.every((e) => e.host !== N2)).toBe(true);
  });

  it('re-routes queued batches aimed at a suspended host', async () => {
    const net = new FakeNet();
    const { client } = clientOn(net);
    await client.connect();
    net.down.add(N2);
    // The state still names node2 leader of shard2 (no new leader yet): work goes to nodes that forward.
    const job = client.writeBatcher({ collection: 'docs', batchSize: 1, concurrency: 1 });
    const ev = jobEvents(job);
    await job.addAll(idsOn(net, 'shard2', 4).map((id) => ({ id })));
    const report = await job.awaitCompletion();
    expect(report).toMatchObject({ written: 4, failed: 0, batchesSucceeded: 4 });
    expect(net.callsTo(N2, 'POST')).toHaveLength(1);
    expect(ev.ok.map((e) => e.host).every((h) => h === N1 || h === N3)).toBe(true);
    expect(ev.ok.map((e) => e.batch.jobBatchNumber).sort()).toEqual([1, 2, 3, 4]);
  });
});

describe('minHosts', () => {
  it('stops the job, without retrying, when a host failure would leave fewer than minHosts hosts, and says what was written', async () => {
    const net = new FakeNet();
    const { client, suspended } = clientOn(net, { minHosts: 3 });
    await client.connect();
    net.down.add(N2);
    const job = client.writeBatcher({ collection: 'docs', batchSize: 1, concurrency: 1 });
    const ev = jobEvents(job);
    const docs = [idsOn(net, 'shard1', 1)[0], idsOn(net, 'shard2', 1)[0], idsOn(net, 'shard3', 1)[0], idsOn(net, 'shard4', 1)[0]].map((id) => ({ id }));
    let addError: unknown;
    for (const d of docs) {
      try {
        await job.add(d);
      } catch (err) {
        addError = err;
        break;
      }
    }
    expect(addError).toBeInstanceOf(ShardexError);
    expect((addError as Error).message).toMatch(/host http:\/\/node2\.test is unavailable.*fewer than minHosts 3/);
    const err = (await job.awaitCompletion().catch((e: unknown) => e)) as ShardexError;
    expect(err.message).toMatch(/write job stopped: .*fewer than minHosts 3; 1 document\(s\) written, 1 failed, 1 not sent/);
    expect(err.details?.report).toMatchObject({ submitted: 3, written: 1, failed: 1, notSent: 1, stopped: true });
    expect(suspended).toEqual([]);
    expect(ev.retries).toEqual([]);
    expect(net.callsTo(N2, 'POST')).toHaveLength(1);
    expect(ev.failed.map((f) => f.batch.shard)).toEqual(['shard2']);
    expect(ev.ok.map((e) => e.batch.ids[0])).toEqual([docs[0]!.id]);
  });

  it('refuses to start a job that asks for more hosts than the cluster has', async () => {
    const net = new FakeNet();
    const { client } = clientOn(net);
    const job = client.writeBatcher({ collection: 'docs', minHosts: 4 });
    await expect(job.add({ id: 'a' })).rejects.toThrow('minHosts 4 is more than the 3 host(s) the cluster lists');
  });
});

describe('retry policy', () => {
  it('never retries a rejected request (4xx)', async () => {
    const net = new FakeNet();
    const { client } = clientOn(net);
    await client.connect();
    net.failNext((c) => c.method === 'POST', () => json(400, { error: 'document 0 has a bad field', code: 'SHX_BAD_DOCUMENT' }));
    const job = client.writeBatcher({ collection: 'docs', batchSize: 5 });
    const ev = jobEvents(job);
    await job.addAll(idsOn(net, 'shard1', 5).map((id) => ({ id })));
    const report = await job.awaitCompletion();
    expect(report).toMatchObject({ written: 0, failed: 5, retries: 0, batchesFailed: 1 });
    expect(ev.retries).toEqual([]);
    expect(ev.failed[0]!.error).toMatchObject({ code: 'SHX_BAD_DOCUMENT', status: 400 });
    expect(net.docPosts()).toHaveLength(1);
  });

  it('retries 503 not-leader after re-reading the cluster state, at the leader it names', async () => {
    const net = new FakeNet();
    const { client } = clientOn(net);
    await client.connect();
    net.failNext(
      (c) => c.method === 'POST' && c.host === N2,
      () => {
        net.setLeader('shard2', 'node3');
        return json(503, { error: 'node2 is not the leader of docs/shard2', code: 'SHX_NOT_LEADER' });
      },
    );
    const stateReads = () => net.calls.filter((c) => c.path === '/api/cluster').length;
    const before = stateReads();
    const res = await client.add('docs', [{ id: idsOn(net, 'shard2', 1)[0] }]);
    expect(res.added).toBe(1);
    expect(stateReads()).toBe(before + 1);
    expect(net.docPosts().map((c) => c.host)).toEqual([N2, N3]);
  });

  it('retries 429 and 503 with backoff, up to maxRetries, then fails with the last error', async () => {
    const net = new FakeNet();
    const pauses: number[] = [];
    const { client } = clientOn(net, { maxRetries: 3, backoff: (n) => (pauses.push(n), 0) });
    await client.connect();
    net.failNext((c) => c.method === 'POST', () => json(429, { error: 'queue full', code: 'SHX_BUSY' }));
    net.script((c) => (c.method === 'POST' ? json(503, { error: 'shard is recovering', code: 'SHX_RECOVERING' }) : undefined));
    await expect(client.add('docs', [{ id: 'a' }])).rejects.toMatchObject({ code: 'SHX_RECOVERING' });
    expect(net.docPosts()).toHaveLength(4);
    expect(pauses).toEqual([1, 2, 3]);
  });

  it('retries a connection error not in the configured codes without suspending the host', async () => {
    const net = new FakeNet();
    const { client, suspended } = clientOn(net, { hostUnavailableCodes: ['EHOSTDOWN'] });
    await client.connect();
    net.failNext((c) => c.method === 'POST', () => connectionRefused('node1.test:80'));
    await client.add('docs', [{ id: idsOn(net, 'shard1', 1)[0] }]);
    expect(suspended).toEqual([]);
    expect(net.docPosts().map((c) => c.host)).toEqual([N1, N1]);
  });

  it('lets a failure listener re-submit a failed batch (retry listener)', async () => {
    const net = new FakeNet();
    const { client } = clientOn(net, { maxRetries: 0 });
    await client.connect();
    net.failNext((c) => c.method === 'POST', () => json(503, { error: 'busy', code: 'SHX_UNAVAILABLE' }));
    const job = client.writeBatcher({ collection: 'docs', batchSize: 2 });
    const ev = jobEvents(job);
    job.onBatchFailure((e) => void (!e.retrying && job.retryWithFailureListeners(e.batch)));
    await job.addAll(idsOn(net, 'shard1', 2).map((id) => ({ id })));
    const report = await job.awaitCompletion();
    expect(report).toMatchObject({ written: 2, failed: 0, batchesFailed: 0, batchesSucceeded: 1 });
    expect(ev.failed).toHaveLength(1);
    expect(ev.ok[0]!.batch.jobBatchNumber).toBe(ev.failed[0]!.batch.jobBatchNumber);
  });
});
