// Issue 14, reader item 1: a reader never serves a copy checked more than the snapshot expiry
// ago. The reader's clock is simulated (advanced by the test), so expiry needs no waiting; the
// node, the leader and the wire are real.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.js';
import { PeerClients } from '../../src/transport/index.js';
import type { ReaderAnswer } from '../../src/read/snapshot-reader.js';
import type { StoredEntry } from '../../src/ulog/index.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';
import { readerCalls } from '../support/reader-calls.js';

const EXPIRY_MS = 5000;

describe('a reader\'s copy past the snapshot expiry', () => {
  let tc: TestCluster;
  let peers: PeerClients;
  let url: string;
  let readerClock = 1_000_000;
  const { readerGet, add, commit } = readerCalls('st', () => ({ url, peers }));

  beforeAll(async () => {
    tc = await startCluster({ nodes: 1, readers: 1, readerOptions: { snapshotExpiryMs: EXPIRY_MS, now: () => readerClock } });
    url = tc.urls[0]!;
    const res = await http('POST', `${url}/api/collections`, { name: 'st', numShards: 1, replicationFactor: 1, autoCommit: 'off' });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    const r = tc.cluster.readers[0]!;
    peers = new PeerClients({ resolve: () => r.grpcAddress, logger: silentLogger() });
  });
  afterAll(async () => {
    peers?.close();
    await tc?.stop();
  });

  const refreshes = async (): Promise<number> => {
    const text = (await http('GET', `${tc.cluster.readers[0]!.httpUrl}/metrics`)).body as string;
    return Number(/shardex_reader_refreshes_total (\d+)/.exec(text)?.[1]);
  };

  it('refreshes before answering once the copy is expired: the issue\'s scenario', async () => {
    await add('a');
    const first = await readerGet('a');
    expect(first).toMatchObject({ snapshot: 0, result: [null] });
    const version = await commit();
    readerClock += 8000;
    // The very next read of the same reader: the copy is 8 s old, past the 5 s expiry.
    const next = await readerGet('a');
    expect(next.snapshot).toBe(version);
    expect(next.result[0]?.id).toBe('a');
  });

  it('shares one refresh among the requests that find the copy expired', async () => {
    await add('b');
    const version = await commit();
    readerClock += EXPIRY_MS + 1;
    const before = await refreshes();
    const answers = await Promise.all(Array.from({ length: 8 }, () => readerGet('b')));
    for (const a of answers) expect(a).toMatchObject({ snapshot: version, result: [{ id: 'b' }] });
    expect((await refreshes()) - before).toBe(1);
  });

  it('serves a copy inside the expiry as it is, and refreshes it ahead past half the expiry', async () => {
    await add('c');
    const held = (await readerGet('c')).snapshot;
    const version = await commit();
    readerClock += EXPIRY_MS / 2 + 1;
    // Still inside the bound: answered from the copy held; a refresh starts behind it.
    const inside = await readerGet('c');
    expect(inside).toMatchObject({ snapshot: held, result: [null] });
    const deadline = Date.now() + 10_000;
    let seen = inside;
    while (seen.snapshot !== version && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
      seen = await readerGet('c');
    }
    expect(seen).toMatchObject({ snapshot: version, result: [{ id: 'c' }] });
  });

  it('with an expiry of 0, answers every read from a copy checked after the read started', async () => {
    // A second reader on the real clock: each read waits for a refresh that starts after it.
    const fresh = await tc.cluster.startReader(1, { snapshotExpiryMs: 0, now: () => performance.timeOrigin + performance.now() });
    const direct = new PeerClients({ resolve: () => fresh.grpcAddress, logger: silentLogger() });
    try {
      for (const id of ['e1', 'e2', 'e3']) {
        await add(id);
        const version = await commit();
        const answer = await direct.call<ReaderAnswer<Array<StoredEntry | null>>>('reader2', 'get', { collection: 'st', shard: 'shard1', ids: [id], eventual: { busyTimeoutMs: 1000 } });
        expect(answer.snapshot).toBeGreaterThanOrEqual(version);
        expect(answer.result[0]?.id).toBe(id);
      }
    } finally {
      direct.close();
      await fresh.stop();
    }
  });

  it('never serves an expired copy it cannot refresh: the leader is gone', async () => {
    await tc.cluster.nodes[0]!.stop();
    readerClock += EXPIRY_MS + 1;
    const err = await readerGet('a').catch((e) => e);
    expect(err.code).toBe('SHX_UNAVAILABLE');
    expect(err.message).toMatch(/more than the snapshot expiry of 5000 ms/);
  });
});

describe('commit points across a leader change', () => {
  let tc: TestCluster;
  let peers: PeerClients;
  let readerClock = 1_000_000;
  beforeAll(async () => {
    tc = await startCluster({ nodes: 2, readers: 1, readerOptions: { snapshotExpiryMs: EXPIRY_MS, now: () => readerClock } });
    const res = await http('POST', `${tc.urls[0]!}/api/collections`, { name: 'lc', numShards: 1, replicationFactor: 2, autoCommit: 'off' });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    await tc.cluster.waitAllActive(30_000);
    const r = tc.cluster.readers[0]!;
    peers = new PeerClients({ resolve: () => r.grpcAddress, logger: silentLogger() });
  });
  afterAll(async () => {
    peers?.close();
    await tc?.stop();
  });

  it('a commit acknowledged by the old leader stays visible to eventual reads once another replica leads', async () => {
    const nodes = tc.cluster.nodes;
    const leaderName = nodes[0]!.coordinator.leader('lc', 'shard1')!.node;
    const leader = nodes.find((n) => n.name === leaderName)!;
    const follower = nodes.find((n) => n.name !== leaderName)!;
    expect((await http('POST', `${follower.httpUrl}/api/collections/lc/docs`, [{ id: 'kept', title: 'kept' }])).status).toBe(200);
    const commit = await http('POST', `${follower.httpUrl}/api/collections/lc/commit`);
    expect(commit.status).toBe(200);
    const version = commit.body.commit.shard1.version as number;

    await leader.stop();
    await follower.waitFor(() => follower.replica('lc', 'shard1')?.role === 'leader', 30_000);
    readerClock += EXPIRY_MS + 1;
    // The reader holds no copy of the shard: it copies the new leader's newest commit point.
    const answer = await peers.call<ReaderAnswer<Array<StoredEntry | null>>>('reader1', 'get', { collection: 'lc', shard: 'shard1', ids: ['kept'], eventual: { busyTimeoutMs: 1000 } });
    expect(answer.snapshot).toBeGreaterThanOrEqual(version);
    expect(answer.result[0]?.id).toBe('kept');
  });
});
