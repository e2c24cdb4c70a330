// A snapshot reader's store is filled with a commit point's entries as the leader stores them
// (ReplicaStore.loadCopy): only each entry's id and version are read from its text, and the store
// then answers as one that applied the same entries: documents, tombstones, counts, and later
// applies compared by version.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ReplicaStore, encodeEntry, entryHead, type UpdateOp } from '../src/ulog/index.js';
import { useTempStores } from './support/temp-stores.js';

describe('entryHead', () => {
  it("reads an entry's id, version and liveness as decoding the whole entry does, for any id and document", () => {
    const doc = fc.option(fc.dictionary(fc.string(), fc.jsonValue()), { nil: null });
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }), doc, (id, version, d) => {
        const text = encodeEntry({ id, version, doc: d });
        expect(entryHead(text)).toEqual({ id, version, live: d !== null });
      }),
      { numRuns: 2000 },
    );
  });

  it('reads ids that look like the layout around them', () => {
    for (const id of ['",\\"v\\":1,"doc":null}', 'a\\"b', '\\', '"', ',"doc":null}', '']) {
      expect(entryHead(encodeEntry({ id, version: 7, doc: null }))).toEqual({ id, version: 7, live: false });
      expect(entryHead(encodeEntry({ id, version: 8, doc: { id, t: ',"doc":null}' } }))).toEqual({ id, version: 8, live: true });
    }
    // A document whose text ends like a tombstone's is still a document.
    expect(entryHead(encodeEntry({ id: 'x', version: 3, doc: { a: ',"doc":null}' } }))).toMatchObject({ live: true });
  });
});

describe('ReplicaStore.loadCopy', () => {
  const tmp = useTempStores('copy');

  it("fills an empty store with another store's commit point, which then answers and applies as the source does", async () => {
    const source = await ReplicaStore.open(`${tmp.dir}/source`);
    tmp.stores.push(source);
    let v = 0;
    const ops: UpdateOp[] = [];
    for (let i = 0; i < 300; i++) ops.push({ id: `d${i}`, version: ++v, doc: { id: `d${i}`, n: i } });
    for (let i = 0; i < 300; i += 7) ops.push({ id: `d${i}`, version: ++v, doc: null });
    await source.apply(ops);
    const point = await source.commit();
    // After the commit point: not in the copy.
    await source.apply([{ id: 'late', version: ++v, doc: { id: 'late' } }]);

    const copy = await ReplicaStore.open(`${tmp.dir}/copy`, { logRetention: 1, journalChanges: false });
    tmp.stores.push(copy);
    const held = source.openCommit()!;
    expect(held.point).toEqual(point);
    const values: string[] = [];
    for await (const value of held.values()) values.push(value);
    for (let i = 0; i < values.length; i += 100) await copy.loadCopy(values.slice(i, i + 100));

    expect(copy.docCount).toBe(300 - 43);
    expect(copy.maxVersion).toBe(point.version);
    const ids = ['d0', 'd1', 'd7', 'd299', 'late', 'nope'];
    const fromCommit = new Map<string, unknown>();
    for await (const e of source.openCommit()!.entries()) fromCommit.set(e.id, e);
    expect(await copy.getMany(ids)).toEqual(ids.map((id) => fromCommit.get(id)));
    expect(await copy.versionOf('d7')).toBe(fromCommit.get('d7') && (fromCommit.get('d7') as UpdateOp).version);

    // Later applies are compared with the copied versions: an older one is dropped, a newer one lands.
    expect(await copy.apply([{ id: 'd1', version: 1, doc: { id: 'd1', stale: true } }])).toEqual([]);
    expect(await copy.apply([{ id: 'd7', version: ++v, doc: { id: 'd7', back: true } }])).toHaveLength(1);
    expect(copy.docCount).toBe(300 - 43 + 1);
    // Once something was applied, a copy is refused: it would bypass those comparisons.
    await expect(copy.loadCopy(values.slice(0, 1))).rejects.toThrow(/nothing was applied/);
  });

  it('keeps the count across a reopen', async () => {
    const copy = await ReplicaStore.open(tmp.dir, { logRetention: 1, journalChanges: false });
    await copy.loadCopy([encodeEntry({ id: 'a', version: 4, doc: { id: 'a' } }), encodeEntry({ id: 'b', version: 5, doc: null }), encodeEntry({ id: 'c', version: 2, doc: { id: 'c' } })]);
    await copy.close();
    const again = await ReplicaStore.open(tmp.dir, { logRetention: 1, journalChanges: false });
    tmp.stores.push(again);
    expect(again.docCount).toBe(2);
    expect((await again.getMany(['a', 'b', 'c'])).map((e) => e?.version)).toEqual([4, 5, 2]);
  });
});
