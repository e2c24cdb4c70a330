// A replica store under concurrent work keeps what peer sync and the counts rely on: the update
// log's persisted sums are the sums of its keys (two replicas holding the same versions have the
// same digest, else peer sync lists every version of the window), its kept size is its key count,
// the live count is the live documents, and each id ends at the newest version it was sent.
// Random scripts of applies (repeated, reordered, deletes), reconciles, removals of stale log
// entries, superseded entries recorded, and trims, fired while earlier work is still being looked up and written, with little
// room for ids in memory; checked again after a reopen (the sums read from disk, not recounted).
// Every version the log holds reads back as the update it was, whether its id moved on since.
import fc from 'fast-check';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { digestOf, sumOf } from '../src/ulog/log-sums.js';
import { ReplicaStore, type UpdateOp } from '../src/ulog/index.js';
import { useTempStores } from './support/temp-stores.js';

const tmp = useTempStores('store-invariants');

type Step = { kind: 'apply'; versions: number[] } | { kind: 'reconcile'; version: number } | { kind: 'drop'; versions: number[] } | { kind: 'record'; versions: number[] } | { kind: 'pause' };

// Spread over several of the log's sum buckets (log-sums.ts, 4,096 versions each), so that a
// digest reads the persisted sums of whole buckets, not only the keys of its edges.
const version = fc.integer({ min: 1, max: 3000 }).map((v) => v * 11);
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 8, arbitrary: fc.record({ kind: fc.constant('apply' as const), versions: fc.array(version, { minLength: 1, maxLength: 6 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('reconcile' as const), version }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('drop' as const), versions: fc.array(version, { minLength: 1, maxLength: 4 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('record' as const), versions: fc.array(version, { minLength: 1, maxLength: 4 }) }) },
  { weight: 2, arbitrary: fc.constant({ kind: 'pause' as const }) },
);

/** A version is one update of one id, as a shard's leader numbers them: sent again, it is the same update. */
const toOp = (version: number): UpdateOp => {
  const id = `i${version % 25}`;
  return { id, version, doc: version % 7 === 0 ? null : { id, v: version } };
};

/** What the store's keys say, against what it keeps about them. */
async function check(store: ReplicaStore): Promise<void> {
  const versions = await store.logVersionsAfter(0, 1_000_000);
  expect(store.logSize).toBe(versions.length);
  const max = Math.max(store.maxVersion, ...versions);
  expect(await store.logDigest(0, max)).toEqual(digestOf(sumOf(versions)));
  // Every stretch, not only the whole log: a peer sync compares from its window's start.
  for (const after of [versions[0] ?? 0, versions[Math.floor(versions.length / 2)] ?? 0]) {
    expect(await store.logDigest(after, max)).toEqual(digestOf(sumOf(versions.filter((v) => v > after))));
  }
  let live = 0;
  for await (const e of store.entries()) if (e.doc !== null) live++;
  expect(store.docCount).toBe(live);
  // Each version in the log reads back as the update it was, current or replaced since: what a
  // peer syncs.
  const expected = versions.map(toOp).map(({ id, version, doc }) => ({ id, version, doc }));
  expect(await store.logEntries(versions)).toEqual(expected);
  expect(await store.updatesAfter(0, 1_000_000)).toEqual(expected);
}

describe('replica store invariants under concurrent work', () => {
  it('counts a version applied again, whose log entry a peer sync recorded before a reconcile moved its id below it, once', async () => {
    // Found by the property below (seed 258948847): the log held 3 keys and counted 4.
    const store = await ReplicaStore.open(join(tmp.dir, 'rewritten'), { logRetention: 40, idCacheSize: 3 });
    tmp.stores.push(store);
    const entry = (v: number) => ({ ...toOp(v) });
    await store.apply([toOp(25234), toOp(11)]);
    // 7909 (of the same id as 25234) is recorded as superseded, then the id is reconciled down to 4609.
    expect(await store.recordSuperseded([entry(7909)])).toBe(1);
    await store.reconcile([{ id: toOp(4609).id, leader: toOp(4609) }], () => false);
    expect(await store.apply([toOp(7909)])).toHaveLength(1);
    await check(store);
    expect(await store.logVersionsAfter(0, 100)).toEqual([11, 4609, 7909]);
  });

  it('keeps log sums, log size and live count true to its keys, and the newest version of each id', { timeout: 120_000 }, async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 20, maxLength: 120 }), async (steps) => {
        const dir = join(tmp.dir, String(run++));
        let store = await ReplicaStore.open(dir, { logRetention: 40, idCacheSize: 3, deleteRetentionMs: 3_600_000 });
        tmp.stores.push(store);
        // Without reconciles, each id must end at the newest version sent (a tombstone included).
        const newest = new Map<string, number>();
        let reconciled = false;
        // A reconcile makes an id hold the leader's entry: the newer versions sent before it were
        // a deposed leader's, which are fenced and never sent again; those sent after it are the
        // leader's own, which the reconcile leaves alone (its sinceSync).
        const sent = new Set<number>();
        const deposed = new Set<number>();
        // The step that last sent each version, and the last that asked to drop it from the log
        // when a newer version of its id had been sent before (so it was stale by then).
        const sentAt = new Map<number, number>();
        const staleDropAt = new Map<number, number>();
        const work: Array<Promise<unknown>> = [];
        for (const [at, s] of steps.entries()) {
          if (s.kind === 'pause') await new Promise((r) => setImmediate(r));
          else if (s.kind === 'record') {
            // Recorded in the log again, as a send puts it there.
            const versions = s.versions.filter((v) => !deposed.has(v));
            for (const v of versions) sentAt.set(v, at);
            work.push(store.recordSuperseded(versions.map(toOp)));
          }
          else if (s.kind === 'drop') {
            for (const v of s.versions) if ((newest.get(toOp(v).id) ?? 0) > v) staleDropAt.set(v, at);
            work.push(store.dropStaleLog(s.versions));
          } else if (s.kind === 'apply') {
            const ops = s.versions.filter((v) => !deposed.has(v)).map(toOp);
            for (const op of ops) {
              newest.set(op.id, Math.max(newest.get(op.id) ?? 0, op.version));
              sent.add(op.version);
              sentAt.set(op.version, at);
            }
            work.push(store.apply(ops));
          } else {
            reconciled = true;
            const leader = toOp(s.version);
            for (const v of sent) if (v > leader.version && toOp(v).id === leader.id) deposed.add(v);
            // As converge does: a version sent after the leader answered came from it since, and stays.
            const answered = new Set(sent);
            work.push(store.reconcile([{ id: leader.id, leader }], (v) => !answered.has(v)));
          }
        }
        await Promise.all(work);
        await check(store);
        // The current version of each id is in the log (unless trimmed). A version dropped when
        // stale, and not sent again since, has left it (a reconcile may make it current again).
        const log = new Set(await store.logVersionsAfter(0, 1_000_000));
        for (const id of new Set([...sent].map((v) => toOp(v).id))) {
          const v = await store.versionOf(id);
          if (v !== undefined && v > store.trimmedThrough) expect({ id, v, inLog: log.has(v) }).toEqual({ id, v, inLog: true });
        }
        if (!reconciled) for (const [v, at] of staleDropAt) if (at > (sentAt.get(v) ?? -1)) expect({ v, inLog: log.has(v) }).toEqual({ v, inLog: false });
        if (!reconciled) for (const [id, version] of newest) expect({ id, version: await store.versionOf(id) }).toEqual({ id, version });
        await store.close();
        tmp.stores.splice(tmp.stores.indexOf(store), 1);
        store = await ReplicaStore.open(dir, { logRetention: 40, idCacheSize: 3 });
        tmp.stores.push(store);
        await check(store);
      }),
      { numRuns: 300 },
    );
  });
});
