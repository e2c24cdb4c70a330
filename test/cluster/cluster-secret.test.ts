// Inter-node trust (issue 13) against real processes: every node and the snapshot reader of a
// cluster share a secret, and require API keys; a process holding another secret reaches their
// gRPC ports and is refused on every call a peer makes (forward, replicate, commit, snapshot copy,
// recovery's versions and log, get, search) and changes nothing, while a process with the secret
// is served. A smart client holds an API key, not the secret: its reads (get, search) are served
// to a key with the read role, and nothing else is.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShardexError } from '../../src/errors.js';
import { silentLogger } from '../../src/logger.js';
import { ShardexClient } from '../../src/client/index.js';
import { PeerClients, type ShardUpdate } from '../../src/transport/index.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';
import { KEYS, bearer, keyEntries, storedState } from '../support/guarded-node.js';

const C = 'trusted';
const SECRET = 'the-cluster-secret-0123456789abcdef';
const WRONG = 'not-the-cluster-secret-0123456789';

let tc: TestCluster;
const clients: PeerClients[] = [];

/** A gRPC client of every member of the cluster, sending `secret` and, when given, an API key. */
function peers(secret: string | undefined, key?: string): PeerClients {
  const members = [...tc.cluster.nodes.map((n) => ({ name: n.name, grpc: n.grpcAddress })), ...tc.cluster.readers.map((r) => ({ name: r.name, grpc: r.grpcAddress }))];
  const c = new PeerClients({
    resolve: (name) => members.find((m) => m.name === name)?.grpc,
    logger: silentLogger(),
    callTimeoutMs: 5000,
    ...(secret !== undefined && { secret }),
    ...(key !== undefined && { authorization: `Bearer ${key}` }),
  });
  clients.push(c);
  return c;
}

/** The error a promise rejects with (fails the test when it resolves). */
async function refusal(p: Promise<unknown>): Promise<ShardexError> {
  const err = await p.then(
    (v: unknown) => new Error(`served: ${JSON.stringify(v)}`),
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ShardexError);
  return err as ShardexError;
}

async function copied(c: PeerClients, node: string): Promise<unknown[]> {
  const out: unknown[] = [];
  for await (const chunk of c.streamCall(node, 'copyShard', { collection: C, shard: 'shard1', commit: true })) out.push(chunk);
  return out;
}

function roles(): { leader: string; replica: string } {
  const leader = tc.cluster.nodes[0]!.coordinator.leader(C, 'shard1')?.node;
  const names = tc.cluster.nodes.map((n) => n.name);
  expect(names).toContain(leader);
  return { leader: leader!, replica: names.find((n) => n !== leader)! };
}

beforeAll(async () => {
  tc = await startCluster({
    nodes: 2,
    readers: 1,
    nodeOptions: { clusterSecret: SECRET, http: { apiKeys: keyEntries() } },
    readerOptions: { clusterSecret: SECRET },
    collection: { name: C, numShards: 1, replicationFactor: 2, router: 'compositeId', autoCommitMs: 0 },
  });
  const w = await http('POST', `${tc.urls[0]}/api/collections/${C}/docs`, [{ id: 'kept', title: 'written by the cluster' }], bearer(KEYS.all));
  expect(w.status, JSON.stringify(w.body)).toBe(200);
  expect(w.body.rf).toBe(2);
  expect((await http('POST', `${tc.urls[0]}/api/collections/${C}/commit`, undefined, bearer(KEYS.all))).status).toBe(200);
});

afterAll(async () => {
  for (const c of clients.splice(0)) c.close();
  await tc?.stop();
});

describe('a process with the wrong cluster secret', () => {
  it('is refused by the nodes on forward, replicate, commit, snapshot copy, recovery, get and search, and changes nothing', async () => {
    const { leader, replica } = roles();
    const before = await storedState(tc.cluster.nodes);
    const commitsBefore = tc.cluster.nodes.map((n) => n.replica(C, 'shard1')!.store.lastCommit);
    const epoch = tc.cluster.nodes.find((n) => n.name === leader)!.replica(C, 'shard1')!.epoch;
    const rogue = peers(WRONG);
    const op = { id: 'planted', v: Number.MAX_SAFE_INTEGER, doc: { id: 'planted', title: 'from a rogue process' } };
    const forward: ShardUpdate = { collection: C, shard: 'shard1', phase: 'TOLEADER', epoch: 0, ops: [{ id: 'planted', doc: op.doc }], minRf: 1, from: 'rogue' };
    const replicate: ShardUpdate = { collection: C, shard: 'shard1', phase: 'FROMLEADER', epoch, ops: [op], minRf: 1, from: leader };

    // The update stream is refused as a whole; the client reports it as the stream's failure.
    expect((await refusal(rogue.send(leader, [forward]))).message).toContain('cluster secret');
    expect((await refusal(rogue.send(replica, [replicate]))).message).toContain('cluster secret');
    const calls: Array<[string, () => Promise<unknown>]> = [
      ['commit', () => rogue.call(leader, 'commit', { collection: C, shard: 'shard1' })],
      ['snapshot copy', () => copied(rogue, leader)],
      ['versions', () => rogue.call(leader, 'versions', { collection: C, shard: 'shard1', replica })],
      ['updatesAfter', () => rogue.call(leader, 'updatesAfter', { collection: C, shard: 'shard1', after: 0, limit: 100 })],
      ['get', () => rogue.call(leader, 'get', { collection: C, shard: 'shard1', ids: ['kept'] })],
      ['search', () => rogue.call(replica, 'search', { collection: C, shard: 'shard1', kind: 'query', params: { q: '*', limit: 10 } })],
    ];
    for (const [what, call] of calls) expect(await refusal(call()), what).toMatchObject({ code: 'SHX_UNAUTHORIZED' });

    expect(await storedState(tc.cluster.nodes)).toEqual(before);
    expect(tc.cluster.nodes.map((n) => n.replica(C, 'shard1')!.store.lastCommit)).toEqual(commitsBefore);
    for (const url of tc.urls) expect((await http('GET', `${url}/api/collections/${C}/docs/planted?distrib=false`, undefined, bearer(KEYS.reader))).status).toBe(404);
  });

  it('is refused by a snapshot reader on get and search', async () => {
    const reader = tc.cluster.readers[0]!.name;
    const rogue = peers(WRONG);
    expect(await refusal(rogue.call(reader, 'get', { collection: C, shard: 'shard1', ids: ['kept'], eventual: { busyTimeoutMs: 1000 } }))).toMatchObject({
      code: 'SHX_UNAUTHORIZED',
    });
    expect(
      await refusal(rogue.call(reader, 'search', { collection: C, shard: 'shard1', kind: 'query', params: { q: '*', limit: 10 }, eventual: { busyTimeoutMs: 1000 } })),
    ).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
  });
});

describe('a process with the cluster secret', () => {
  it('is served by the nodes and the snapshot reader', async () => {
    const { leader } = roles();
    const member = peers(SECRET);
    expect(await member.call(leader, 'get', { collection: C, shard: 'shard1', ids: ['kept'] })).toEqual([expect.objectContaining({ id: 'kept' })]);
    expect(await member.call(leader, 'versions', { collection: C, shard: 'shard1' })).toMatchObject({ maxVersion: expect.any(Number) });
    const reader = tc.cluster.readers[0]!.name;
    const read = await member.call(reader, 'get', { collection: C, shard: 'shard1', ids: ['kept'], eventual: { busyTimeoutMs: 5000 } });
    expect(JSON.stringify(read)).toContain('kept');
  });
});

describe('a smart client, with an API key and no secret', () => {
  it('reads from the snapshot reader and the leaders with a key of the read role, and can do nothing else over gRPC', async () => {
    const { leader } = roles();
    const reader = tc.cluster.readers[0]!.name;
    const keyed = peers(undefined, KEYS.reader);
    expect(await keyed.call(leader, 'get', { collection: C, shard: 'shard1', ids: ['kept'] })).toEqual([expect.objectContaining({ id: 'kept' })]);
    expect(JSON.stringify(await keyed.call(reader, 'get', { collection: C, shard: 'shard1', ids: ['kept'], eventual: { busyTimeoutMs: 5000 } }))).toContain('kept');
    for (const call of [() => keyed.call(leader, 'versions', { collection: C, shard: 'shard1' }), () => keyed.call(leader, 'commit', { collection: C, shard: 'shard1' }), () => copied(keyed, leader)]) {
      expect(await refusal(call())).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
    }
    const writer = peers(undefined, KEYS.writer);
    expect(await refusal(writer.call(reader, 'get', { collection: C, shard: 'shard1', ids: ['kept'], eventual: { busyTimeoutMs: 5000 } }))).toMatchObject({ code: 'SHX_FORBIDDEN' });
  });

  it('serves ShardexClient\'s eventual reads from the reader with its apiKey of the read role, and refuses them to another role', async () => {
    const client = new ShardexClient({ urls: tc.urls, apiKey: KEYS.reader });
    try {
      const doc = await client.get(C, 'kept', { consistency: 'eventual', timeoutMs: 10_000 });
      expect(doc).toMatchObject({ id: 'kept' });
      const res = await client.search(C, 'title:cluster', { consistency: 'eventual', timeoutMs: 10_000 });
      expect(res.hits.map((h) => h.id)).toEqual(['kept']);
      expect(Object.values(res.servedBy ?? {}).every((b) => b.node === tc.cluster.readers[0]!.name && !b.fallback)).toBe(true);
    } finally {
      await client.close();
    }
    // A writer's key reads the cluster state (any key may), but the reader refuses it the read.
    const writer = new ShardexClient({ urls: tc.urls, apiKey: KEYS.writer, maxRetries: 0 });
    try {
      await expect(writer.get(C, 'kept', { consistency: 'eventual', timeoutMs: 3000 })).rejects.toMatchObject({ code: 'SHX_FORBIDDEN' });
    } finally {
      await writer.close();
    }
  });
});
