// Durability of one replica store: with `request` every apply resolves only after a synced batch
// holds it; concurrent applies share one sync (group commit); `async` syncs on its interval; the
// fence and the data format survive a reopen; convergent recovery's reconcile.
import { join } from 'node:path';
import { Level } from 'level';
import { describe, expect, it } from 'vitest';
import { ReplicaStore, type StoreWrite, type UpdateOp } from '../src/ulog/index.js';
import { useTempStores } from './support/temp-stores.js';
import { thrown } from './support/errors.js';

const tmp = useTempStores('durability');
const stores = tmp.stores;

async function open(writes: StoreWrite[], mode: 'request' | 'async' = 'request', syncIntervalMs = 5000, name = 'r'): Promise<ReplicaStore> {
  const s = await ReplicaStore.open(join(tmp.dir, name), { durability: { mode, syncIntervalMs }, onWrite: (w) => writes.push(w) });
  stores.push(s);
  return s;
}

const op = (id: string, version: number): UpdateOp => ({ id, version, doc: { id, n: version } });

describe('durability request', () => {
  it('resolves an apply only after a synced batch that holds its versions', async () => {
    const writes: StoreWrite[] = [];
    const store = await open(writes);
    const acked: number[] = [];
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        store.apply([op(`d${i}`, i + 1)]).then(() => {
          // At the moment the apply resolves, a synced write with its version has completed.
          const synced = writes.filter((w) => w.sync).flatMap((w) => w.versions);
          expect(synced).toContain(i + 1);
          acked.push(i + 1);
        }),
      ),
    );
    expect(acked).toHaveLength(20);
    expect(writes.every((w) => w.sync)).toBe(true);
  });

  it('merges concurrent applies into fewer synced batches (group commit)', async () => {
    const writes: StoreWrite[] = [];
    const store = await open(writes);
    await Promise.all(Array.from({ length: 100 }, (_, i) => store.apply([op(`g${i}`, i + 1)])));
    const batches = writes.filter((w) => w.versions.length > 0);
    expect(batches.reduce((n, w) => n + w.applies, 0)).toBe(100);
    expect(batches.length).toBeLessThan(100);
    expect(Math.max(...batches.map((w) => w.applies))).toBeGreaterThan(1);
  });

  it('applies issued while a batch is being written go to disk together in the next one', async () => {
    const writes: StoreWrite[] = [];
    const store = await open(writes);
    const first = store.apply([op('a', 1)]);
    // The first batch is now queued; these join it or the one after it, never one sync each.
    const rest = Array.from({ length: 10 }, (_, i) => store.apply([op(`b${i}`, i + 2)]));
    await Promise.all([first, ...rest]);
    expect(writes.filter((w) => w.versions.length > 0).length).toBeLessThanOrEqual(2);
  });
});

describe('durability request: a version dropped for one still being written', () => {
  // A replica answers FROMLEADER once its apply resolves: an op dropped as already stored (a
  // retried send, a peer sync's page overlapping it, an older version reordered behind a newer
  // one) is on disk only once the write that holds its id's newer version is.
  it.each([
    ['the same version again', 5],
    ['an older version', 4],
  ] as const)('resolves %s only after the synced batch holding the newer one', async (_what, again) => {
    const writes: StoreWrite[] = [];
    const store = await open(writes);
    const first = store.apply([op('x', 5)]);
    // Queued while the first is being decided or written: it applies nothing.
    const second = store.apply([op('x', again)]);
    const onDisk = (): boolean => writes.some((w) => w.sync && w.versions.includes(5));
    expect(await second.then(() => onDisk())).toBe(true);
    expect(await second).toEqual([]);
    await first;
  });

  it('fails an apply whose dropped op waited on a batch that could not be written', async () => {
    const store = await open([]);
    const db = (store as unknown as { db: { batch: (...a: unknown[]) => unknown } }).db;
    const batch = db.batch.bind(db);
    let failNext = true;
    db.batch = (...a: unknown[]) => {
      if (!failNext) return batch(...a);
      failNext = false;
      throw new Error('disk full');
    };
    const first = store.apply([op('x', 5)]);
    const second = store.apply([op('x', 5)]);
    await expect(first).rejects.toThrow(/disk full/);
    await expect(second).rejects.toThrow(/disk full/);
    // Nothing was stored: a resend is applied and written.
    expect(await store.apply([op('x', 5)])).toHaveLength(1);
  });

  it('fails an apply that wrote other ids in a later batch when its dropped op waited on a batch that could not be written', async () => {
    const store = await open([]);
    const db = (store as unknown as { db: { batch: () => { write: (o: object) => Promise<void>; close: () => Promise<void> } } }).db;
    const batch = db.batch.bind(db);
    let release!: () => void;
    const failing = new Promise<void>((r) => (release = r));
    let failNext = true;
    db.batch = () => {
      const b = batch();
      if (!failNext) return b;
      failNext = false;
      // The first batch's write is under way until the test lets it fail.
      b.write = async () => {
        await failing;
        await b.close();
        throw new Error('disk full');
      };
      return b;
    };
    const first = store.apply([op('x', 5)]);
    // Queued while the first batch is being written: its own batch (y) is the next one.
    await new Promise((r) => setImmediate(r));
    const second = store.apply([op('x', 5), op('y', 6)]);
    // Decided (y queued for the next batch) before the first batch fails.
    while ((store as unknown as { pending?: unknown }).pending === undefined) await new Promise((r) => setImmediate(r));
    release();
    await expect(first).rejects.toThrow(/disk full/);
    await expect(second).rejects.toThrow(/disk full/);
  });
});

describe('durability async', () => {
  it('writes without sync and syncs on its interval', async () => {
    const writes: StoreWrite[] = [];
    const store = await open(writes, 'async', 100);
    await store.apply([op('a', 1)]);
    expect(writes[0]).toMatchObject({ sync: false, versions: [1] });
    const deadline = Date.now() + 10_000;
    while (!writes.some((w) => w.sync) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(writes.some((w) => w.sync)).toBe(true);
  });

  it('can be switched to request at run time', async () => {
    const writes: StoreWrite[] = [];
    const store = await open(writes, 'async', 60_000);
    await store.apply([op('a', 1)]);
    store.setDurability({ mode: 'request', syncIntervalMs: 5000 });
    await store.apply([op('b', 2)]);
    expect(writes.map((w) => w.sync)).toEqual([false, true]);
  });
});

describe('fence and format across a reopen', () => {
  it('keeps the newest fence; an older one never replaces it', async () => {
    const store = await open([]);
    await store.apply([op('a', 1)], { fence: 5 });
    await store.apply([], { fence: 3 });
    expect(store.fence).toBe(5);
    await store.close();
    stores.splice(0);
    const again = await open([]);
    expect(again.fence).toBe(5);
  });

  it('keeps the fence through a reset (full copy)', async () => {
    const store = await open([]);
    await store.apply([], { fence: 9 });
    await store.clear();
    expect(store.fence).toBe(9);
    await store.close();
    stores.splice(0);
    expect((await open([])).fence).toBe(9);
  });

  it('finishes a wipe cut short by a crash at the next open: empty, incomplete, fence kept', async () => {
    const store = await open([]);
    await store.apply(Array.from({ length: 50 }, (_, i) => op(`d${String(i).padStart(2, '0')}`, i + 1)), { fence: 4 });
    await store.commit();
    // LevelDB's clear is not atomic: the process stops after part of the documents are gone.
    const db = (store as unknown as { db: { clear: (o?: object) => Promise<void> } }).db;
    db.clear = async () => {
      await Level.prototype.clear.call(db, { gte: 'd', lt: 'd20' });
      throw new Error('killed');
    };
    await expect(store.clear()).rejects.toThrow(/killed/);
    await store.close();
    stores.splice(0);
    const again = await open([]);
    expect(again.incomplete).toBe(true);
    expect(again.fence).toBe(4);
    expect(again.docCount).toBe(0);
    expect(again.maxVersion).toBe(0);
    expect(await again.getMany(['d00', 'd30'])).toEqual([undefined, undefined]);
  });

  it('refuses data written by another version, saying what to do', async () => {
    const path = join(tmp.dir, 'old');
    const db = new Level<string, string>(path);
    await db.put('d1', '{"id":"1","v":5,"doc":{"id":"1"}}');
    await db.close();
    const err = await ReplicaStore.open(path).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(thrown(() => {
      throw err;
    }).code).toBe('SHX_BAD_CONFIG');
    expect((err as Error).message).toContain(path);
    expect((err as Error).message).toContain('another Shardex version');
  });
});

describe('reconcile (convergent recovery)', () => {
  it('removes an entry the leader does not have and restores the leader entry of another, log included', async () => {
    const store = await open([]);
    await store.apply([op('keep', 10), op('stray', 11), op('over', 12)]);
    await store.apply([op('over', 13)]);
    const changed = await store.reconcile(
      [
        { id: 'stray', leader: undefined },
        { id: 'over', leader: { id: 'over', version: 12, doc: { id: 'over', n: 12 } } },
      ],
      (v) => v > 100,
    );
    expect(changed.map((c) => c.id).sort()).toEqual(['over', 'stray']);
    expect(await store.versionOf('stray')).toBeUndefined();
    expect(await store.get('stray')).toBeUndefined();
    expect(await store.versionOf('over')).toBe(12);
    expect((await store.updatesAfter(0, 100)).map((e) => e.version)).toEqual([10, 12]);
    expect(store.docCount).toBe(2);
    expect(store.maxVersion).toBe(12);
    // The log's size (kept, not counted at open) follows what reconcile removed and restored.
    expect(store.logSize).toBe(2);
    await store.close();
    stores.splice(stores.indexOf(store), 1);
    expect((await open([])).logSize).toBe(2);
  });

  it('leaves an id alone whose version is newer than the ceiling (it came from the leader since)', async () => {
    const store = await open([]);
    await store.apply([op('x', 500)]);
    expect(await store.reconcile([{ id: 'x', leader: undefined }], (v) => v > 400)).toEqual([]);
    expect(await store.versionOf('x')).toBe(500);
  });
});

describe('bounded memory', () => {
  async function openWith(name: string, opts: { idCacheSize?: number; deleteRetentionMs?: number }): Promise<ReplicaStore> {
    const s = await ReplicaStore.open(join(tmp.dir, name), opts);
    stores.push(s);
    return s;
  }
  const knownIds = (s: ReplicaStore): number => (s as unknown as { known: Map<string, unknown> }).known.size;

  it('keeps only the recently touched ids in memory and reads the others from disk, with the same answers', async () => {
    const store = await openWith('lru', { idCacheSize: 100 });
    for (let b = 0; b < 10; b++) await store.apply(Array.from({ length: 100 }, (_, i) => op(`id${b * 100 + i}`, 1000 + b * 100 + i)));
    expect(knownIds(store)).toBeLessThanOrEqual(100);
    // id0 left memory long ago: its version comes from LevelDB, and the version rule still holds.
    expect(await store.versionOf('id0')).toBe(1000);
    expect(await store.apply([op('id0', 999)])).toEqual([]);
    expect((await store.apply([op('id0', 5000)])).map((o) => o.version)).toEqual([5000]);
    expect(store.docCount).toBe(1000);
  });

  it('never forgets an id between looking it up and deciding on it, even while memory is full (an older version never wins)', async () => {
    // Concurrent applies of the same ids, in any order, repeated, with room for 2 ids in memory:
    // an id evicted after its look-up and before its decision was taken as never written.
    const store = await openWith('evict', { idCacheSize: 2 });
    const ids = Array.from({ length: 40 }, (_, i) => `e${i}`);
    const newest = new Map<string, number>();
    let seed = 7;
    const rand = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const applies: Array<Promise<unknown>> = [];
    for (let i = 0; i < 400; i++) {
      const batch = Array.from({ length: 3 }, () => {
        const id = ids[rand(ids.length)]!;
        const version = 1 + rand(1000);
        newest.set(id, Math.max(newest.get(id) ?? 0, version));
        return op(id, version);
      });
      applies.push(store.apply(batch));
      // Applies keep coming while earlier ones are looked up, decided and written.
      if (rand(3) === 0) await new Promise((r) => setImmediate(r));
    }
    await Promise.all(applies);
    for (const [id, version] of newest) expect({ id, version: await store.versionOf(id) }).toEqual({ id, version });
    expect(store.docCount).toBe(newest.size);
    expect(knownIds(store)).toBeLessThanOrEqual(2);
  });

  it('opens without reading the documents: the live count and newest version come back', async () => {
    const store = await openWith('count', {});
    await store.apply(Array.from({ length: 300 }, (_, i) => op(`c${i}`, i + 1)));
    await store.apply(Array.from({ length: 50 }, (_, i) => ({ id: `c${i}`, version: 400 + i, doc: null })));
    await store.close();
    stores.splice(stores.indexOf(store), 1);
    const again = await openWith('count', {});
    expect(again.docCount).toBe(250);
    expect(again.maxVersion).toBe(449);
    expect(await again.versionOf('c0')).toBe(400);
  });
});

describe('delete retention (gc_deletes)', () => {
  it('keeps a tombstone within the retention, blocking an older add, and drops it after', async () => {
    const s = await ReplicaStore.open(join(tmp.dir, 'gc'), { deleteRetentionMs: 60_000 });
    stores.push(s);
    await s.apply([op('a', 1)]);
    await s.apply([{ id: 'a', version: 2, doc: null }]);
    expect(await s.purgeTombstones(Date.now() + 30_000)).toBe(0);
    expect(await s.apply([op('a', 1)])).toEqual([]);
    expect(await s.get('a')).toEqual({ id: 'a', version: 2, doc: null });
    expect(await s.purgeTombstones(Date.now() + 61_000)).toBe(1);
    expect(await s.get('a')).toBeUndefined();
    expect(await s.versionOf('a')).toBeUndefined();
    expect(s.docCount).toBe(0);
  });

  it('does not drop a tombstone that a later write replaced', async () => {
    const s = await ReplicaStore.open(join(tmp.dir, 'gc2'), { deleteRetentionMs: 1000 });
    stores.push(s);
    await s.apply([{ id: 'b', version: 2, doc: null }]);
    await s.apply([op('b', 3)]);
    expect(await s.purgeTombstones(Date.now() + 5000)).toBe(0);
    expect(await s.get('b')).toEqual({ id: 'b', version: 3, doc: { id: 'b', n: 3 } });
    expect(s.docCount).toBe(1);
  });
});

describe('the durable point an index segment is captured at', () => {
  it('comes right after a synced write, with every batch before it applied, also with durability async', async () => {
    const writes: StoreWrite[] = [];
    const store = await open(writes, 'async', 60_000);
    const seen: UpdateOp[][] = [];
    store.setSink((ops) => seen.push([...ops]));
    await store.apply([op('a', 1), op('b', 2)]);
    await store.apply([op('c', 3)]);
    expect(writes.every((w) => !w.sync)).toBe(true);
    const at = await store.atDurablePoint((seq) => ({ seq, applied: seen.flat().map((o) => o.id), writesBefore: writes.length }));
    // The callback ran within the synced write that made everything before it durable (its
    // onWrite report comes right after; the point is none of the batch's applies)...
    expect(writes.slice(at.writesBefore)).toEqual([{ versions: [], sync: true, applies: 0 }]);
    // ...with the sink told of every batch up to the point's sequence, and the journal agreeing.
    expect(at.applied).toEqual(['a', 'b', 'c']);
    expect(at.seq).toBe(store.changeSeq);
    expect(await store.changedSince(0)).toEqual(['a', 'b', 'c']);
    expect(await store.changedSince(at.seq)).toEqual([]);
  });
});

describe('the change journal', () => {
  it('is not kept by a store that says so (a reader copy), which still tells its sink', async () => {
    const store = await ReplicaStore.open(join(tmp.dir, 'copy'), { journalChanges: false });
    stores.push(store);
    const seen: string[] = [];
    store.setSink((ops) => seen.push(...ops.map((o) => o.id)));
    await store.apply([op('a', 1), op('b', 2)]);
    expect(seen).toEqual(['a', 'b']);
    expect(store.changeSeq).toBe(0);
    expect(await store.changedSince(0)).toEqual([]);
  });
});
