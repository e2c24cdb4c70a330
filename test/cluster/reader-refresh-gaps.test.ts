// A snapshot reader refreshes a cached shard from the leader's log between the copy's commit
// point and the newest one, when that log tells every change; otherwise it copies the shard
// whole again: after a leader change (the copy may hold a deposed leader's writes nobody
// acknowledged), when the newest commit point is older than the copy's (the collection was
// deleted and created again), and when the leader trimmed its log past a page while the reader
// read it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Coordinator } from '../../src/coordination/index.js';
import { PeerClients } from '../../src/transport/index.js';
import { silentLogger } from '../../src/logger.js';
import type { SnapshotReader } from '../../src/read/snapshot-reader.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';
import { pollUntil } from '../support/poll.js';
import { parsePrometheusText, samplesNamed } from '../support/prometheus-text.js';
import { readerCalls } from '../support/reader-calls.js';

const EXPIRY_MS = 5000;
const C = 'gaps';
let tc: TestCluster;
let peers: PeerClients;
let url: string;
let clock = 1_000_000;
const { readerGet, add, commit } = readerCalls(C, () => ({ url, peers }));

async function create(): Promise<void> {
  const res = await http('POST', `${url}/api/collections`, { name: C, numShards: 1, replicationFactor: 1, autoCommit: 'off' });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  await pollUntil('the collection to have a leader', async () => ((await http('GET', `${url}/api/cluster`)).body.collections?.[C]?.shards?.shard1?.leader ? true : undefined), { ms: 20_000, everyMs: 20 });
}

/** Full copies a reader has made so far (the first cluster's reader by default). */
async function copies(reader = tc.cluster.readers[0]!): Promise<number> {
  const text = (await http<string>('GET', `${reader.httpUrl}/metrics`)).body;
  return samplesNamed(parsePrometheusText(text), 'shardex_reader_copies_total').reduce((n, x) => n + x.value, 0);
}

beforeAll(async () => {
  tc = await startCluster({ nodes: 1, readers: 1, readerOptions: { snapshotExpiryMs: EXPIRY_MS, now: () => clock } });
  url = tc.urls[0]!;
  const reader: SnapshotReader = tc.cluster.readers[0]!;
  peers = new PeerClients({ resolve: () => reader.grpcAddress, logger: silentLogger() });
});

afterAll(async () => {
  peers?.close();
  await tc?.stop();
});

it('copies whole again a collection deleted and created again, whose commit points start over', async () => {
  await create();
  for (let i = 0; i < 20; i++) await add(`old${i}`);
  await commit();
  expect((await readerGet('old0')).result).toMatchObject([{ id: 'old0' }]);
  expect((await http('DELETE', `${url}/api/collections/${C}`)).status).toBe(200);
  await create();
  await add('new1');
  const version = await commit();
  clock += EXPIRY_MS + 1;
  const before = await copies();
  expect(await readerGet('new1')).toMatchObject({ snapshot: version, result: [{ id: 'new1' }] });
  expect((await readerGet('old0')).result).toEqual([null]);
  expect(await copies()).toBe(before + 1);
});

it('refreshes in place, from the log, when nothing stands in the way', async () => {
  await add('p1');
  await commit();
  clock += EXPIRY_MS + 1;
  expect((await readerGet('p1')).result).toMatchObject([{ id: 'p1' }]);
  await add('p2');
  const version = await commit();
  clock += EXPIRY_MS + 1;
  const before = await copies();
  expect(await readerGet('p2')).toMatchObject({ snapshot: version, result: [{ id: 'p2' }] });
  expect(await copies()).toBe(before);
});

it('copies whole again when the leader trimmed its log past a page while the reader read it', async () => {
  await add('t1');
  await commit();
  clock += EXPIRY_MS + 1;
  expect((await readerGet('t1')).result).toMatchObject([{ id: 't1' }]);
  await add('t2');
  const version = await commit();
  clock += EXPIRY_MS + 1;
  // The leader's log is trimmed between the reader's look at it and its first page: the page
  // cannot tell whether it holds every change.
  const node = tc.cluster.nodes[0]!;
  const store = node.replica(C, 'shard1')!.store;
  const trimmed = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(store), 'trimmedThrough')!.get!;
  let looks = 0;
  Object.defineProperty(store, 'trimmedThrough', { configurable: true, get: () => (++looks >= 2 ? version : trimmed.call(store)) });
  const before = await copies();
  try {
    expect(await readerGet('t2')).toMatchObject({ snapshot: version, result: [{ id: 't2' }] });
  } finally {
    delete (store as unknown as Record<string, unknown>).trimmedThrough;
  }
  expect(looks).toBeGreaterThanOrEqual(2);
  expect(await copies()).toBe(before + 1);
});

describe('after a leader change', () => {
  let tc2: TestCluster;
  let peers2: PeerClients;
  let clock2 = 1_000_000;
  const calls = readerCalls('lc', () => ({ url: tc2.urls.find((u, i) => tc2.cluster.nodes[i]?.ready)!, peers: peers2 }));

  beforeAll(async () => {
    tc2 = await startCluster({ nodes: 2, readers: 1, readerOptions: { snapshotExpiryMs: EXPIRY_MS, now: () => clock2 } });
    const res = await http('POST', `${tc2.urls[0]}/api/collections`, { name: 'lc', numShards: 1, replicationFactor: 2, autoCommit: 'off' });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    await tc2.cluster.waitAllActive(30_000);
    const reader: SnapshotReader = tc2.cluster.readers[0]!;
    peers2 = new PeerClients({ resolve: () => reader.grpcAddress, logger: silentLogger() });
  });

  afterAll(async () => {
    peers2?.close();
    await tc2?.stop();
  });

  it('copies whole again: the old copy may hold a deposed leader\'s writes the new leader does not undo', async () => {
    await calls.add('a');
    await calls.commit();
    clock2 += EXPIRY_MS + 1;
    expect((await calls.readerGet('a')).result).toMatchObject([{ id: 'a' }]);
    const copiesOf = (): Promise<number> => copies(tc2.cluster.readers[0]!);
    const before = await copiesOf();
    // The leader stops; the other replica is elected with a new epoch and records a commit point.
    const leader = tc2.cluster.nodes[0]!.coordinator.leader('lc', 'shard1')!.node;
    const li = tc2.cluster.nodes.findIndex((n) => n.name === leader);
    await tc2.cluster.nodes[li]!.stop();
    const other = tc2.cluster.nodes[1 - li]!;
    await pollUntil('the other node to lead', () => (other.replica('lc', 'shard1')?.role === 'leader' ? true : undefined), { ms: 30_000, everyMs: 20 });
    const view = (tc2.cluster.readers[0] as unknown as { o: { coordinator: Coordinator } }).o.coordinator;
    await pollUntil("the reader's view to name the new leader", () => (view.leader('lc', 'shard1')?.node === other.name ? true : undefined), { ms: 30_000, everyMs: 20 });
    clock2 += EXPIRY_MS + 1;
    expect((await calls.readerGet('a')).result).toMatchObject([{ id: 'a' }]);
    expect(await copiesOf()).toBe(before + 1);
  });
});
