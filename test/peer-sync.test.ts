// Peer sync compares the two update logs by version and fetches only the entries the replica's
// log lacks (a restart with what the leader has transfers versions, not documents); after it,
// convergence replaces what only the replica holds (a deposed leader's unacknowledged write).
import { join } from 'node:path';
import { pino } from 'pino';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { holdsSameLog, syncFrom, syncStartOf, type PeerLogInfo, type SyncSource } from '../src/distrib/recovery.js';
import { ShardReplica } from '../src/distrib/replica.js';
import { epochBase } from '../src/distrib/shard-state.js';
import { ReplicaStore, type StoredEntry, type UpdateOp } from '../src/ulog/index.js';
import { useTempStores } from './support/temp-stores.js';

const tmp = useTempStores('peer-sync');

async function replicaIn(name: string): Promise<ShardReplica> {
  const store = await ReplicaStore.open(join(tmp.dir, name));
  tmp.stores.push(store);
  return new ShardReplica('c', 'shard1', store, pino({ level: 'silent' }));
}

const V = epochBase(1);
const op = (id: string, n: number, doc: 'live' | 'deleted' = 'live'): UpdateOp => ({ id, version: V + n, doc: doc === 'live' ? { id, n } : null });

interface Counts {
  entries: number;
  versions: number;
  digests?: number;
}

/** A sync source over a store in this process, counting what it transfers. */
function sourceOf(peer: ShardReplica, counts: Counts): SyncSource {
  return {
    info: async (): Promise<PeerLogInfo> => ({ maxVersion: peer.store.maxVersion, trimmedThrough: peer.store.trimmedThrough, epoch: 1, leading: true }),
    logVersions: async (after, limit) => {
      const v = await peer.store.logVersionsAfter(after, limit);
      counts.versions += v.length;
      return v;
    },
    logDigest: async (after, upto) => {
      counts.digests = (counts.digests ?? 0) + 1;
      return peer.store.logDigest(after, upto);
    },
    logEntries: async (versions) => {
      const e = await peer.store.logEntries(versions);
      counts.entries += e.length;
      return e;
    },
    entries: async (ids) => (await peer.store.getMany(ids)).map((e): StoredEntry | undefined => e),
    copy: async function* () {
      const all: StoredEntry[] = [];
      for await (const e of peer.store.entries()) all.push(e);
      counts.entries += all.length;
      yield all;
    },
  };
}

async function contents(r: ShardReplica): Promise<Array<[string, number, boolean]>> {
  const out: Array<[string, number, boolean]> = [];
  for await (const e of r.store.entries()) out.push([e.id, e.version, e.doc !== null]);
  return out;
}

describe('peer sync', () => {
  it('fetches only the entries the replica lacks, and ends with the leader state', async () => {
    const leader = await replicaIn('leader');
    const replica = await replicaIn('replica');
    const ops = Array.from({ length: 2000 }, (_, i) => op(`d${i}`, i + 1));
    await leader.apply(ops);
    // The replica missed 3 updates in the middle (reordered in flight, then it restarted) and the newest.
    const missed = new Set([500, 1200, 1201, 2000]);
    await replica.apply(ops.filter((_, i) => !missed.has(i + 1)));
    await leader.apply([op('d7', 2001, 'deleted')]);

    const counts: Counts = { entries: 0, versions: 0 };
    const source = sourceOf(leader, counts);
    const report = await syncFrom(replica, source, await source.info());

    // The digests differ (the replica lacks versions in the middle): both logs are listed in full.
    expect(report).toEqual({ method: 'peer-sync', applied: 5, copied: 0, reverted: 0, compared: 2001 + 1996, onlyTheirs: 5, onlyOurs: 0 });
    expect(counts.entries).toBe(5);
    expect(counts.versions).toBe(2001);
    expect(await contents(replica)).toEqual(await contents(leader));
    expect(replica.store.docCount).toBe(1999);
  });

  it.each([
    // The replica got every update in order: the logs match, nothing is transferred.
    ['transfers no entry when the replica already holds the leader log', 'in order', 0],
    // Newest first: each id's older versions arrive after its newest and are dropped, never
    // logged; peer sync fetches those superseded versions and drops them again.
    ['converges when updates reached the replica out of order', 'newest first', 180],
  ] as const)('%s', async (_what, order, transferred) => {
    const leader = await replicaIn('leader');
    const replica = await replicaIn('replica');
    const ops = Array.from({ length: 300 }, (_, i) => op(`d${i % 120}`, i + 1, i % 7 === 0 ? 'deleted' : 'live'));
    await leader.apply(ops);
    await replica.apply(order === 'in order' ? ops : [...ops].reverse());
    const counts: Counts = { entries: 0, versions: 0 };
    const source = sourceOf(leader, counts);
    const report = await syncFrom(replica, source, await source.info());
    expect(report.applied).toBe(0);
    expect(counts.entries).toBe(transferred);
    // Logs that agree are compared by their digests alone; others version by version.
    expect(counts.digests).toBe(1);
    expect(counts.versions).toBe(order === 'in order' ? 0 : 300);
    expect(report.compared).toBe(order === 'in order' ? 0 : 300 + 120);
    expect(await contents(replica)).toEqual(await contents(leader));
  });

  it('fails, and copies whole the next time, when the peer trims its log between listing the versions and sending them', async () => {
    const leader = await replicaIn('leader');
    const replica = await replicaIn('replica');
    const ops = Array.from({ length: 10 }, (_, i) => op(`d${i}`, i + 1));
    await leader.apply(ops);
    await replica.apply(ops.slice(0, 3));
    const counts: Counts = { entries: 0, versions: 0 };
    const source = sourceOf(leader, counts);
    const info = await source.info();
    // The entries of versions 4 and 5 leave the peer's log after it listed them (a trim).
    const trimmed = new Set([V + 4, V + 5]);
    const logEntries = source.logEntries;
    source.logEntries = async (versions) => (await logEntries(versions)).filter((e) => !trimmed.has(e.version));
    await expect(syncFrom(replica, source, info)).rejects.toMatchObject({ code: 'SHX_UNAVAILABLE', message: expect.stringMatching(/no longer holds 2 of the versions/) });
    // Nothing was counted as synced: the floor stays where the sync began.
    expect(replica.store.syncFloor).toBeDefined();
    // The next attempt sees the trimmed log and copies the replica whole.
    source.logEntries = logEntries;
    const report = await syncFrom(replica, source, { ...(await source.info()), trimmedThrough: V + 5 });
    expect(report.method).toBe('full-copy');
    expect(await contents(replica)).toEqual(await contents(leader));
  });

  it('lists only the versions after the replica newest when the logs agree up to it', async () => {
    const leader = await replicaIn('leader');
    const replica = await replicaIn('replica');
    const ops = Array.from({ length: 1000 }, (_, i) => op(`d${i % 400}`, i + 1));
    await leader.apply(ops);
    await replica.apply(ops.slice(0, 990));
    const counts: Counts = { entries: 0, versions: 0 };
    const source = sourceOf(leader, counts);
    const report = await syncFrom(replica, source, await source.info());
    expect(report).toEqual({ method: 'peer-sync', applied: 10, copied: 0, reverted: 0, compared: 10, onlyTheirs: 10, onlyOurs: 0 });
    expect(counts.versions).toBe(10);
    expect(await contents(replica)).toEqual(await contents(leader));
  });

  it('compares in full two logs of the same length that hold different versions', async () => {
    const leader = await replicaIn('leader');
    const replica = await replicaIn('replica');
    await leader.apply([op('a', 1), op('b', 2), op('c', 3), op('d', 5)]);
    // Same count up to the replica newest version (3 entries), not the same versions: a deposed
    // leader's write (4) where the leader holds 3.
    await replica.apply([op('a', 1), op('b', 2), op('x', 4)]);
    const counts: Counts = { entries: 0, versions: 0 };
    const source = sourceOf(leader, counts);
    const report = await syncFrom(replica, source, await source.info());
    // Leader 1, 2, 3, 5 against replica 1, 2, 4: two versions only the leader's log holds, one only ours.
    expect(report).toEqual({ method: 'peer-sync', applied: 2, copied: 0, reverted: 1, compared: 4 + 3, onlyTheirs: 2, onlyOurs: 1 });
    expect(counts.versions).toBe(4);
    expect(await contents(replica)).toEqual(await contents(leader));
  });

  it('replaces a write only the replica holds with the leader entry, or removes it', async () => {
    const leader = await replicaIn('leader');
    const replica = await replicaIn('replica');
    await leader.apply([op('a', 1), op('b', 2)]);
    await replica.apply([op('a', 1), op('b', 2)]);
    // A deposed leader's writes nobody acknowledged: a new version of `a`, a new document `z`.
    await replica.apply([op('a', 3), op('z', 4)]);
    // The new leader's own write of `b` with a version the replica also lacks.
    await leader.apply([op('b', 5)]);

    const counts: Counts = { entries: 0, versions: 0 };
    const source = sourceOf(leader, counts);
    const report = await syncFrom(replica, source, await source.info());
    expect(report.method).toBe('peer-sync');
    expect(report.applied).toBe(1);
    expect(report.reverted).toBe(2);
    expect(await contents(replica)).toEqual([
      ['a', V + 1, true],
      ['b', V + 5, true],
    ]);
    // The replaced versions left the replica's log: no later peer syncs them from it.
    expect(await replica.store.logVersionsAfter(0, 100)).toEqual([V + 1, V + 2, V + 5]);
  });

  it("removes every version of a deposed leader's writes from the replica's log, not only the current one", async () => {
    const leader = await replicaIn('leader');
    const replica = await replicaIn('replica');
    await leader.apply([op('a', 1)]);
    await replica.apply([op('a', 1)]);
    // Two unacknowledged writes of `a` by a deposed leader: only the newer one is current.
    await replica.apply([op('a', 3)]);
    await replica.apply([op('a', 4)]);
    // The new leader's own write since (its versions are newer than the deposed ones).
    await leader.apply([op('b', 5)]);
    const source = sourceOf(leader, { entries: 0, versions: 0 });
    const report = await syncFrom(replica, source, await source.info());
    expect(report.reverted).toBe(1);
    expect(await contents(replica)).toEqual([
      ['a', V + 1, true],
      ['b', V + 5, true],
    ]);
    expect(await replica.store.logVersionsAfter(0, 100)).toEqual([V + 1, V + 5]);
    // The logs agree again: a later peer sync compares digests, not every version.
    expect(await holdsSameLog(replica, source)).toBe(true);
    // Led by this replica later, another replica that syncs from it gets none of those writes.
    const third = await replicaIn('third');
    await third.apply([op('a', 1)]);
    const fromReplica = sourceOf(replica, { entries: 0, versions: 0 });
    await syncFrom(third, fromReplica, await fromReplica.info());
    expect(await contents(third)).toEqual(await contents(leader));
  });

  // The source of a catch-up can be a deposed leader that has just applied a write its replicas
  // refuse: the replica syncing from it has heard of the newer leadership meanwhile.
  it('stores nothing more from a source once the replica has seen a newer leadership than the one it syncs from', async () => {
    const leader = await replicaIn('leader');
    const replica = await replicaIn('replica');
    await leader.apply([op('a', 1), op('stray', 2)]);
    await replica.apply([op('a', 1)]);
    const source = sourceOf(leader, { entries: 0, versions: 0 });
    const info = await source.info();
    const entries = source.logEntries;
    source.logEntries = async (versions) => {
      const got = await entries(versions);
      // The newer leader's announcement arrives while the entries are on their way.
      replica.step({ type: 'fromLeader', epoch: 2 });
      return got;
    };
    await expect(syncFrom(replica, source, info, { valid: () => replica.fence <= 1 })).rejects.toMatchObject({ code: 'SHX_STALE_EPOCH' });
    expect(await replica.store.versionOf('stray')).toBeUndefined();
    expect(await contents(replica)).toEqual([['a', V + 1, true]]);
  });

  // A restarted deposed leader syncs from the leader of the moment, which hands its leadership
  // over meanwhile: the sync stops after it stored that leader's newer entries, before it compared
  // the replica's own. Those newer versions must not move the next sync's window above them.
  it("still reverts a deposed leader's writes after a sync that stored newer entries and then stopped", async () => {
    const at = (epoch: number, n: number): number => epochBase(epoch) + n;
    const leader = await replicaIn('leader');
    const replica = await replicaIn('replica');
    const both = [{ id: 'a', version: at(2, 1), doc: { id: 'a', n: 1 } }];
    await leader.apply(both);
    await replica.apply(both);
    // Epoch 3: the replica led, cut off, and stored writes nobody else got.
    await replica.apply([{ id: 'stray', version: at(3, 1), doc: { id: 'stray', n: 2 } }, { id: 'a', version: at(3, 2), doc: { id: 'a', n: 3 } }]);
    // Epochs 4 and 5: the leaders after it wrote on.
    await leader.apply([{ id: 'b', version: at(4, 1), doc: { id: 'b', n: 4 } }]);
    await leader.apply([{ id: 'c', version: at(5, 1), doc: { id: 'c', n: 5 } }]);

    const first = sourceOf(leader, { entries: 0, versions: 0 });
    const entries = first.entries;
    first.entries = async (ids) => {
      const got = await entries(ids);
      // A newer leadership is announced once the leader's entries are stored, before convergence.
      replica.step({ type: 'fromLeader', epoch: 6 });
      return got;
    };
    await expect(syncFrom(replica, first, await first.info(), { valid: () => replica.fence <= 5 })).rejects.toMatchObject({ code: 'SHX_STALE_EPOCH' });
    expect(await replica.store.versionOf('c')).toBe(at(5, 1));
    expect(await replica.store.versionOf('stray')).toBe(at(3, 1));
    expect(replica.store.syncFloor).toBeDefined();

    // The next sync (the new leader holds the same log), after a restart of the replica too,
    // still compares the epoch-3 writes.
    await replica.store.close();
    tmp.stores.splice(tmp.stores.indexOf(replica.store), 1);
    const restarted = await replicaIn('replica');
    const next = sourceOf(leader, { entries: 0, versions: 0 });
    const report = await syncFrom(restarted, next, await next.info());
    expect(report.reverted).toBe(2);
    expect(await contents(restarted)).toEqual(await contents(leader));
    expect(await holdsSameLog(restarted, next)).toBe(true);
    expect(restarted.store.syncFloor).toBeUndefined();
  });

  // A recovering replica applies the leader's new updates as they come, while it syncs: their
  // versions, far above what it lacks once the leader has written 50,000 of them in its epoch,
  // must not move the window (the node fixes the floor before the leader sends it any).
  it('fetches what the replica lacks below updates it applied during its recovery, from the floor fixed at its start', async () => {
    const at = (n: number): number => epochBase(1) + n;
    const leader = await replicaIn('leader');
    const replica = await replicaIn('replica');
    const x = { id: 'x', version: at(1), doc: { id: 'x', n: 1 } };
    await leader.apply([x]);
    await replica.apply([x]);
    // Written while the replica was down.
    await leader.apply([{ id: 'a', version: at(10), doc: { id: 'a', n: 2 } }, { id: 'b', version: at(20), doc: { id: 'b', n: 3 } }]);
    // The recovery begins (recover() fixes the floor), then an update the leader sends it lands.
    await replica.store.setSyncFloor(await syncStartOf(replica.store));
    const late = { id: 'c', version: at(60_000), doc: { id: 'c', n: 4 } };
    await leader.apply([late]);
    await replica.apply([late]);
    const source = sourceOf(leader, { entries: 0, versions: 0 });
    const report = await syncFrom(replica, source, await source.info());
    expect(report.applied).toBe(2);
    expect(await contents(replica)).toEqual(await contents(leader));
    expect(replica.store.syncFloor).toBeUndefined();
  });

  it('copies again after a full copy stopped part way, whatever updates landed since', async () => {
    const at = (n: number): number => epochBase(1) + n;
    const leader = await replicaIn('leader');
    const replica = await replicaIn('replica');
    await leader.apply(Array.from({ length: 26 }, (_, i) => ({ id: `d${String.fromCharCode(97 + i)}`, version: at(i + 1), doc: { id: `d${i}`, n: i } })));
    const source = sourceOf(leader, { entries: 0, versions: 0 });
    // The leader's log no longer reaches back: a full copy, in two chunks; a newer leadership is heard after the first.
    const copyAll = source.copy;
    source.copy = async function* () {
      for await (const chunk of copyAll()) {
        yield chunk.slice(0, 13);
        replica.step({ type: 'fromLeader', epoch: 2 });
        yield chunk.slice(13);
      }
    };
    const info = { ...(await source.info()), trimmedThrough: at(10) };
    await expect(syncFrom(replica, source, info, { valid: () => replica.fence <= 1 })).rejects.toMatchObject({ code: 'SHX_STALE_EPOCH' });
    expect(replica.store.docCount).toBe(13);
    expect(replica.store.syncFloor).toBe(0);
    // An update the leader sends meanwhile, far above the copied versions.
    const late = { id: 'late', version: at(60_000), doc: { id: 'late', n: 99 } };
    await leader.apply([late]);
    await replica.apply([late]);
    source.copy = copyAll;
    const report = await syncFrom(replica, source, { ...(await source.info()), trimmedThrough: at(10) });
    expect(report.method).toBe('full-copy');
    expect(await contents(replica)).toEqual(await contents(leader));
    expect(replica.store.syncFloor).toBeUndefined();
  });

  it('stores no page of a full copy once the replica has seen a newer leadership', async () => {
    const leader = await replicaIn('leader');
    const replica = await replicaIn('replica');
    await leader.apply([op('a', 1), op('b', 2)]);
    await replica.apply([op('z', 1)]);
    const source = sourceOf(leader, { entries: 0, versions: 0 });
    const copy = source.copy;
    source.copy = async function* () {
      for await (const chunk of copy()) {
        replica.step({ type: 'fromLeader', epoch: 2 });
        yield chunk;
      }
    };
    // The leader's log no longer reaches back to the replica's: a full copy.
    const info = { ...(await source.info()), trimmedThrough: V + 2 };
    await expect(syncFrom(replica, source, info, { valid: () => replica.fence <= 1 })).rejects.toMatchObject({ code: 'SHX_STALE_EPOCH' });
    expect(await contents(replica)).toEqual([]);
  });

  it('copies everything into an empty replica', async () => {
    const leader = await replicaIn('leader');
    const replica = await replicaIn('replica');
    await leader.apply(Array.from({ length: 50 }, (_, i) => op(`d${i}`, i + 1)));
    const counts: Counts = { entries: 0, versions: 0 };
    const source = sourceOf(leader, counts);
    const report = await syncFrom(replica, source, await source.info());
    expect(report.applied).toBe(50);
    expect(await contents(replica)).toEqual(await contents(leader));
  });
});

describe('peer sync after any history of a leader change', () => {
  it('ends with exactly the new leader\'s documents and log, whatever each side missed or alone received', async () => {
    // An old leader's writes (epoch 1) reached the new leader and this replica each with some
    // losses; then the new leader's own writes (epoch 2) reached the replica with some losses.
    // Writes only the replica got are a deposed leader's that nobody acknowledged.
    const write = fc.record({ id: fc.nat(12), del: fc.boolean(), toLeader: fc.boolean(), toReplica: fc.boolean() });
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(write, { maxLength: 40 }), fc.array(write, { maxLength: 20 }), async (old, mine) => {
        const leader = await replicaIn(`leader${run}`);
        const replica = await replicaIn(`replica${run++}`);
        const entry = (w: { id: number; del: boolean }, version: number): UpdateOp => ({ id: `d${w.id}`, version, doc: w.del ? null : { id: `d${w.id}`, version } });
        for (const [n, w] of old.entries()) {
          const e = entry(w, epochBase(1) + n + 1);
          if (w.toLeader) await leader.apply([e]);
          if (w.toReplica) await replica.apply([e]);
        }
        for (const [n, w] of mine.entries()) {
          const e = entry(w, epochBase(2) + n + 1);
          await leader.apply([e]);
          if (w.toReplica) await replica.apply([e]);
        }
        const source = sourceOf(leader, { entries: 0, versions: 0 });
        await syncFrom(replica, source, { ...(await source.info()), epoch: 2 });
        expect(await contents(replica)).toEqual(await contents(leader));
        expect(await replica.store.logVersionsAfter(0, 1000)).toEqual(await leader.store.logVersionsAfter(0, 1000));
        expect(await holdsSameLog(replica, source)).toBe(true);
        expect(replica.store.docCount).toBe(leader.store.docCount);
        for (const r of [leader, replica]) {
          tmp.stores.splice(tmp.stores.indexOf(r.store), 1);
          await r.store.close();
        }
      }),
      { numRuns: 150 },
    );
  });
});

describe('holdsSameLog (a leader handover\'s last check of its target)', () => {
  it('is true only when the target holds exactly the leader\'s recent versions', async () => {
    const leader = await replicaIn('leader');
    const same = await replicaIn('same');
    const stray = await replicaIn('stray');
    const behind = await replicaIn('behind');
    const ops = Array.from({ length: 300 }, (_, i) => op(`d${i}`, 2 * i + 1));
    await leader.apply(ops);
    await same.apply(ops);
    // A deposed leader's write that no one else holds, below the newest version.
    await stray.apply([...ops, op('stray', 300)]);
    await behind.apply(ops.slice(0, 299));
    const counts = (): Counts => ({ entries: 0, versions: 0 });
    expect(await holdsSameLog(leader, sourceOf(same, counts()))).toBe(true);
    expect(await holdsSameLog(leader, sourceOf(stray, counts()))).toBe(false);
    expect(await holdsSameLog(leader, sourceOf(behind, counts()))).toBe(false);
  });
});
