// The update log's bucket sums: a digest of any stretch of the log, read from whole buckets' sums
// plus its edge buckets' keys, equals the digest of the versions in that stretch; it does not
// depend on how the versions were batched, added or removed. Also over a real ReplicaStore:
// appends, trims, a reconcile, a reopen and a clear keep the sums exact, and a store written
// before the sums were kept is summed at open.
import { join } from 'node:path';
import fc from 'fast-check';
import { Level } from 'level';
import { describe, expect, it } from 'vitest';
import { epochBase } from '../src/distrib/shard-state.js';
import { BUCKET_SIZE, LogSums, digestOf, sumOf } from '../src/ulog/log-sums.js';
import { ReplicaStore, type UpdateOp } from '../src/ulog/index.js';
import { useTempStores } from './support/temp-stores.js';

const tmp = useTempStores('log-sums');

/** The digest of the versions of `log` in (after, upto], computed directly. */
const expected = (log: Iterable<number>, after: number, upto: number): ReturnType<typeof digestOf> => digestOf(sumOf([...log].filter((v) => v > after && v <= upto)));

describe('LogSums', () => {
  it('digests any stretch as the sum of its versions, whatever the batches, removals and bucket edges', async () => {
    const version = fc.integer({ min: 1, max: 12 * BUCKET_SIZE }).map((v) => v + epochBase(3));
    await fc.assert(
      fc.asyncProperty(fc.uniqueArray(version, { maxLength: 300 }), fc.integer({ min: 1, max: 7 }), fc.nat(), version, version, async (versions, batches, removeEvery, x, y) => {
        const sums = new LogSums();
        const log = new Set<number>();
        // Added in `batches` batches, then every removeEvery-th removed in one.
        const step = Math.ceil(versions.length / batches) || 1;
        for (let i = 0; i < versions.length; i += step) {
          const batch = versions.slice(i, i + step);
          sums.commit(sums.preview(batch));
          for (const v of batch) log.add(v);
        }
        const removed = removeEvery > 0 ? versions.filter((_, i) => i % (removeEvery + 1) === 0) : [];
        sums.commit(sums.preview([], removed));
        for (const v of removed) log.delete(v);
        const [after, upto] = x <= y ? [x, y] : [y, x];
        const scan = async (a: number, b: number) => sumOf([...log].filter((v) => v > a && v <= b));
        expect(await sums.digest(after, upto, scan)).toEqual(expected(log, after, upto));
      }),
      { numRuns: 300 },
    );
  });

  it('tells apart two sets of the same size', () => {
    expect(digestOf(sumOf([1, 2, 3]))).not.toEqual(digestOf(sumOf([1, 2, 4])));
    expect(digestOf(sumOf([epochBase(1) + 5]))).not.toEqual(digestOf(sumOf([epochBase(2) + 5])));
    expect(digestOf(sumOf([3, 1, 2]))).toEqual(digestOf(sumOf([1, 2, 3])));
  });

  it('drops a bucket whose versions are all removed', () => {
    const sums = new LogSums();
    sums.commit(sums.preview([1, 2, BUCKET_SIZE * 3]));
    expect(sums.size).toBe(2);
    sums.commit(sums.preview([], [1, 2]));
    expect(sums.size).toBe(1);
  });
});

describe('ReplicaStore log digests', () => {
  const V = epochBase(2);
  const op = (id: string, n: number): UpdateOp => ({ id, version: V + n, doc: { id, n } });

  async function open(name: string, logRetention?: number): Promise<ReplicaStore> {
    const s = await ReplicaStore.open(join(tmp.dir, name), logRetention === undefined ? {} : { logRetention });
    tmp.stores.push(s);
    return s;
  }

  /** Checks the store's digests of a few stretches against its listed versions. */
  async function checkDigests(store: ReplicaStore): Promise<void> {
    const listed = await store.logVersionsAfter(0, 1_000_000);
    for (const [a, b] of [[0, V + 30_000], [V + 100, V + 9000], [V + 4095, V + 4096], [V + 5000, V + 5001], [V + 8191, V + 20_000]] as const) {
      expect(await store.logDigest(a, b)).toEqual(expected(listed, a, b));
    }
  }

  it('stays exact through appends, a trim, a reconcile, a reopen and a clear', async () => {
    let store = await open('a', 6000);
    for (let i = 0; i < 7000; i += 500) await store.apply(Array.from({ length: 500 }, (_, j) => op(`d${(i + j) % 3000}`, i + j + 1)));
    expect(store.trimmedThrough).toBeGreaterThan(0);
    await checkDigests(store);
    // A deposed leader's write (7001) replaced by the leader's entry (7003), one id removed.
    await store.apply([op('x', 7001)]);
    await store.reconcile([{ id: 'x', leader: op('x', 7003) }, { id: 'd5', leader: undefined }], () => false);
    await checkDigests(store);
    await store.close();
    store = await open('a', 6000);
    await checkDigests(store);
    await store.clear();
    expect(await store.logDigest(0, V + 30_000)).toEqual(digestOf(sumOf([])));
  });

  it('sums at open a log written before the sums were kept', async () => {
    const store = await open('b');
    await store.apply(Array.from({ length: 9000 }, (_, i) => op(`d${i}`, i + 1)));
    const before = await store.logDigest(V + 10, V + 8500);
    await store.close();
    // What an earlier version left: the log without its sums.
    const db = new Level<string, string>(join(tmp.dir, 'b'));
    await db.del('m:logsums');
    await db.batch((await db.keys({ gte: 'h', lt: 'h:' }).all()).map((key) => ({ type: 'del' as const, key })));
    await db.close();
    const reopened = await open('b');
    expect(await reopened.logDigest(V + 10, V + 8500)).toEqual(before);
    await checkDigests(reopened);
  });

  it('sums again at open when the sums do not count the log (an older version wrote to it meanwhile)', async () => {
    const store = await open('s');
    await store.apply(Array.from({ length: 5000 }, (_, i) => op(`d${i}`, i + 1)));
    await store.close();
    // An older version appended to the log without its sums (and counted the entries).
    const db = new Level<string, string>(join(tmp.dir, 's'));
    await db.batch([
      { type: 'put', key: `l${String(V + 5001).padStart(16, '0')}`, value: JSON.stringify({ id: 'x', version: V + 5001, doc: { id: 'x' } }) },
      { type: 'put', key: 'm:logcount', value: '5001' },
    ]);
    await db.close();
    const reopened = await open('s');
    await checkDigests(reopened);
    expect((await reopened.logDigest(0, V + 30_000)).count).toBe(5001);
  });
});
