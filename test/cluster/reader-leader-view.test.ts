// A reader copies and checks a shard against the node its view of the cluster names as the
// shard's leader. While that view is behind a leader change, it names a node that no longer
// leads, whose commit points can be older than commits the shard acknowledged: the reader must
// refuse to copy or check against it, rather than serve an older snapshot as fresh. The view
// is made stale here by the test (the reader's coordinator names the follower); the nodes, the
// reader and the wire are real.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Coordinator } from '../../src/coordination/index.js';
import { silentLogger } from '../../src/logger.js';
import type { SnapshotReader } from '../../src/read/snapshot-reader.js';
import { PeerClients } from '../../src/transport/index.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';
import { readerCalls } from '../support/reader-calls.js';

const EXPIRY_MS = 5000;

describe("a reader whose view of the shard's leader is behind", () => {
  let tc: TestCluster;
  let peers: PeerClients;
  let url: string;
  let readerClock = 1_000_000;
  let leader = '';
  let follower = '';
  /** While set, the reader's coordinator names `node` as the shard's leader, for `times` more look-ups. */
  let stale: { node: string; times: number } | undefined;

  const { readerGet, add, commit } = readerCalls('lv', () => ({ url, peers }));

  beforeAll(async () => {
    tc = await startCluster({ nodes: 2, readers: 1, readerOptions: { snapshotExpiryMs: EXPIRY_MS, now: () => readerClock } });
    url = tc.urls[0]!;
    const res = await http('POST', `${url}/api/collections`, { name: 'lv', numShards: 1, replicationFactor: 2, autoCommit: 'off' });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    const deadline = Date.now() + 20_000;
    for (;;) {
      const shard = (await http('GET', `${url}/api/cluster`)).body.collections?.lv?.shards?.shard1;
      if (shard?.leader && shard.replicas.length === 2 && shard.replicas.every((r: { state: string }) => r.state === 'active')) {
        leader = shard.leader;
        follower = shard.replicas.find((r: { node: string }) => r.node !== leader).node;
        break;
      }
      if (Date.now() > deadline) throw new Error('collection lv did not settle in 20 s');
      await new Promise((r) => setTimeout(r, 50));
    }
    // The reader's own coordinator, as it sees the cluster (a test's view of a private part).
    const reader: SnapshotReader = tc.cluster.readers[0]!;
    const coordinator = (reader as unknown as { o: { coordinator: Coordinator } }).o.coordinator;
    const real = coordinator.leader.bind(coordinator);
    coordinator.leader = (collection, shard) => {
      const info = real(collection, shard);
      if (stale === undefined || !info || stale.times <= 0) return info;
      stale.times--;
      return { ...info, node: stale.node };
    };
    peers = new PeerClients({ resolve: () => reader.grpcAddress, logger: silentLogger() });
  });
  afterAll(async () => {
    peers?.close();
    await tc?.stop();
  });


  it("does not copy a shard from a node that no longer leads it (the follower's last commit point predates the leader's)", async () => {
    await add('a');
    const version = await commit();
    stale = { node: follower, times: Infinity };
    await expect(readerGet('a')).rejects.toMatchObject({ code: 'SHX_NOT_LEADER' });
    // Once the view names the leader again, the first read copies the commit that holds `a`.
    stale = undefined;
    expect(await readerGet('a')).toMatchObject({ snapshot: version, result: [{ id: 'a' }] });
  });

  it('does not count a check against a node that no longer leads the shard: an expired copy is not served', async () => {
    await add('b');
    const version = await commit();
    stale = { node: follower, times: Infinity };
    readerClock += EXPIRY_MS + 1;
    // The copy holds `a` but not `b`, committed since: checked against the follower it would look
    // current and be served for another expiry.
    const refused = readerGet('b');
    await expect(refused).rejects.toMatchObject({ code: 'SHX_UNAVAILABLE' });
    await expect(refused).rejects.toThrow(/refreshing it failed \(.*no longer leads the shard/);
    stale = undefined;
    expect(await readerGet('b')).toMatchObject({ snapshot: version, result: [{ id: 'b' }] });
  });

  it('does not check against a leader cut off from coordination past its grace, which has not yet heard that it was deposed', async () => {
    await add('d');
    const version = await commit();
    readerClock += EXPIRY_MS + 1;
    // The leader's session may have expired and another replica be leading: the node refuses
    // writes then, and its replica keeps the leader role until it hears so.
    const node = tc.cluster.nodes.find((n) => n.name === leader)!;
    const canAct = node.coordinator.canActAsLeader;
    node.coordinator.canActAsLeader = () => false;
    try {
      const refused = readerGet('d');
      await expect(refused).rejects.toMatchObject({ code: 'SHX_UNAVAILABLE' });
      await expect(refused).rejects.toThrow(/refreshing it failed \(.*no longer leads the shard/);
    } finally {
      node.coordinator.canActAsLeader = canAct;
    }
    expect(await readerGet('d')).toMatchObject({ snapshot: version, result: [{ id: 'd' }] });
  });

  it("serves an eventual search once the reader's view catches up: the node's next attempt finds every committed document", async () => {
    await add('c');
    await commit();
    readerClock += EXPIRY_MS + 1;
    // The view names the follower for the first look-up only, as a watch that fires a moment late.
    stale = { node: follower, times: 1 };
    const res = await http('GET', `${url}/api/collections/lv/search?q=*&limit=10&consistency=eventual`);
    expect(stale.times).toBe(0);
    stale = undefined;
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toMatchObject({ total: 4, servedBy: { shard1: { node: 'reader1' } } });
  });
});
