// The replica store's document cache (Solr's documentCache): a page of hits read again comes
// from memory, and never older than the store. Every way a document changes (an apply, a delete,
// a peer sync's reconcile, a purged tombstone, a wipe before a full copy) drops its cached entry
// by the time the change is acknowledged; random scripts of writes fired while pages are being
// read must leave every id reading as an uncached read does.
import fc from 'fast-check';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DocCache } from '../src/ulog/doc-cache.js';
import { ReplicaStore, type StoredEntry, type UpdateOp } from '../src/ulog/index.js';
import { useTempStores } from './support/temp-stores.js';

const tmp = useTempStores('doc-cache');

const entry = (id: string, version: number): StoredEntry => ({ id, version, doc: { id, title: `v${version}` } });

describe('DocCache', () => {
  it('drops the least recently used entry past its capacity; a read makes an entry recent', () => {
    const c = new DocCache(2);
    c.set('a', entry('a', 1));
    c.set('b', entry('b', 1));
    expect(c.get('a')?.version).toBe(1);
    c.set('c', entry('c', 1));
    expect(c.get('b')).toBeUndefined();
    expect(c.get('a')?.version).toBe(1);
    expect(c.get('c')?.version).toBe(1);
    expect(c.size).toBe(2);
  });

  it('remembers an absent id as null, and forgets on delete and clear', () => {
    const c = new DocCache(4);
    c.set('gone', null);
    expect(c.get('gone')).toBeNull();
    c.delete('gone');
    expect(c.get('gone')).toBeUndefined();
    c.set('a', entry('a', 1));
    c.clear();
    expect(c.size).toBe(0);
  });

  it('holds nothing with a capacity of 0', () => {
    const c = new DocCache(0);
    c.set('a', entry('a', 1));
    expect(c.get('a')).toBeUndefined();
  });
});

describe("a replica store's document cache", () => {
  const open = async (name: string, docCacheSize?: number) => {
    const store = await ReplicaStore.open(join(tmp.dir, name), { deleteRetentionMs: 0, ...(docCacheSize !== undefined && { docCacheSize }) });
    tmp.stores.push(store);
    return store;
  };
  const op = (id: string, version: number, doc: boolean = true): UpdateOp => ({ id, version, doc: doc ? { id, title: `v${version}` } : null });

  it('answers a page read again from memory, the same parsed entries (not with a size of 0)', async () => {
    const cached = await open('cached');
    const uncached = await open('uncached', 0);
    for (const s of [cached, uncached]) await s.apply([op('a', 1), op('b', 2)]);
    const [first] = await cached.getMany(['a', 'b']);
    const [again] = await cached.getMany(['a', 'b']);
    expect(again).toBe(first);
    const [u1] = await uncached.getMany(['a']);
    const [u2] = await uncached.getMany(['a']);
    expect(u2).toEqual(u1);
    expect(u2).not.toBe(u1);
  });

  it('reads every change once it is acknowledged: apply, delete, reconcile, purged tombstone, wipe', async () => {
    const s = await open('changes');
    const read = async () => (await s.getMany(['a']))[0];
    expect(await read()).toBeUndefined();
    await s.apply([op('a', 1)]);
    expect((await read())?.version).toBe(1);
    await s.apply([op('a', 2)]);
    expect(await read()).toEqual({ id: 'a', version: 2, doc: { id: 'a', title: 'v2' } });
    await s.apply([op('a', 3, false)]);
    expect(await read()).toEqual({ id: 'a', version: 3, doc: null });
    // A peer sync makes the id hold its leader's entry.
    await s.reconcile([{ id: 'a', leader: { id: 'a', version: 2, doc: { id: 'a', title: 'leader' } } }], () => false);
    expect((await read())?.doc).toEqual({ id: 'a', title: 'leader' });
    await s.reconcile([{ id: 'a', leader: undefined }], () => false);
    expect(await read()).toBeUndefined();
    await s.apply([op('a', 4, false)]);
    expect((await read())?.version).toBe(4);
    expect(await s.purgeTombstones(Date.now() + 60_000)).toBe(1);
    expect(await read()).toBeUndefined();
    await s.apply([op('a', 5)]);
    expect((await read())?.version).toBe(5);
    await s.clear();
    expect(await read()).toBeUndefined();
  });

  type Step = { kind: 'apply'; id: number; live: boolean } | { kind: 'read'; ids: number[] } | { kind: 'reconcile'; id: number; live: boolean } | { kind: 'purge' } | { kind: 'pause' } | { kind: 'settle' };
  const id = fc.integer({ min: 0, max: 5 });
  const step: fc.Arbitrary<Step> = fc.oneof(
    { weight: 6, arbitrary: fc.record({ kind: fc.constant('apply' as const), id, live: fc.boolean() }) },
    { weight: 6, arbitrary: fc.record({ kind: fc.constant('read' as const), ids: fc.array(id, { minLength: 1, maxLength: 4 }) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('reconcile' as const), id, live: fc.boolean() }) },
    { weight: 1, arbitrary: fc.constant({ kind: 'purge' as const }) },
    { weight: 2, arbitrary: fc.constant({ kind: 'pause' as const }) },
    { weight: 1, arbitrary: fc.constant({ kind: 'settle' as const }) },
  );

  it('never answers older than the store once its writes are done, whatever reads ran beside them', { timeout: 120_000 }, async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 10, maxLength: 80 }), async (steps) => {
        // Room for three of the six ids: reads evict each other's entries too.
        const s = await open(`random-${run++}`, 3);
        const ids = [0, 1, 2, 3, 4, 5].map((i) => `i${i}`);
        let version = 0;
        let work: Array<Promise<unknown>> = [];
        // Every id read through the cache, against the store's own read of it (no cache on that path).
        const agree = async () => {
          await Promise.all(work);
          work = [];
          const cachedRead = await s.getMany(ids);
          const storeRead = await Promise.all(ids.map((x) => s.get(x)));
          expect(cachedRead).toEqual(storeRead);
        };
        for (const st of steps) {
          if (st.kind === 'apply') work.push(s.apply([op(`i${st.id}`, ++version, st.live)]));
          else if (st.kind === 'read') work.push(s.getMany(st.ids.map((i) => `i${i}`)));
          else if (st.kind === 'reconcile') {
            const leader = st.live ? { id: `i${st.id}`, version: ++version, doc: { id: `i${st.id}`, title: 'leader' } } : undefined;
            work.push(s.reconcile([{ id: `i${st.id}`, leader }], () => false));
          } else if (st.kind === 'purge') work.push(s.purgeTombstones(Date.now() + 60_000));
          else if (st.kind === 'pause') await new Promise((r) => setImmediate(r));
          else await agree();
        }
        await agree();
      }),
      { numRuns: 150 },
    );
  });
});
