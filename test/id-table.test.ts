// A segment's ids in its file: the id table finds every id it holds and no other, gives each
// document's id back (long and non-ASCII ids too), refuses arrays that do not make a table; and a
// reopened segment, which reads its ids through the table, looks ids up, deletes, replaces,
// lists, answers and compacts exactly as the index it was written from.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeSegment, encodeSegment, IdTable, parseSchema, ShardIndex, type ShardIndexState } from '../src/index/index.js';

const reopen = (state: ShardIndexState, schema = parseSchema(undefined)): ShardIndex =>
  ShardIndex.restore(schema, decodeSegment(Buffer.concat(encodeSegment(state, { seq: 1, fingerprint: 'f' }))).state);

describe('IdTable', () => {
  it('finds every id it holds at its document, and nothing else', () => {
    fc.assert(
      fc.property(fc.uniqueArray(fc.string({ minLength: 1, maxLength: 12, unit: 'binary' }), { maxLength: 300 }), fc.array(fc.boolean(), { maxLength: 300 }), fc.array(fc.string({ maxLength: 12 }), { maxLength: 30 }), (ids, holes, others) => {
        // '' marks a document deleted when the table was made.
        const docs = ids.map((id, d) => (holes[d] === true ? '' : id));
        const table = new IdTable(IdTable.build(docs));
        expect(table.count).toBe(docs.length);
        docs.forEach((id, d) => {
          expect(table.idOf(d)).toBe(id);
          if (id !== '') expect(table.find(id)).toBe(d);
        });
        const held = new Set(docs.filter((id) => id !== ''));
        for (const other of [...others, ...ids]) if (!held.has(other)) expect(table.find(other)).toBe(-1);
        expect(table.find('')).toBe(-1);
      }),
      { numRuns: 200 },
    );
  });

  it('gives back ids longer than one decoding chunk, and ids sharing a hash slot', () => {
    const long = 'x'.repeat(10_000) + 'é' + 'y'.repeat(5_000);
    const ids = [long, 'a', 'b', 'ab', 'ba', '🙂', long.slice(1)];
    const table = new IdTable(IdTable.build(ids));
    ids.forEach((id, d) => {
      expect(table.idOf(d)).toBe(id);
      expect(table.find(id)).toBe(d);
    });
    expect(table.find(long + 'z')).toBe(-1);
  });

  it('refuses arrays that do not make a table', () => {
    const ok = IdTable.build(['a', 'bb']);
    expect(() => new IdTable({ ...ok, starts: Int32Array.of(0, 1) })).toThrow(/do not span/);
    expect(() => new IdTable({ ...ok, slots: new Int32Array(3) })).toThrow(/power of two/);
    expect(() => new IdTable({ ...ok, slots: new Int32Array(1) })).toThrow(/power of two/);
    // A table whose slots are all taken (damaged) answers "absent" instead of probing forever.
    expect(new IdTable({ ...ok, slots: Int32Array.of(1, 1) }).find('zz')).toBe(-1);
  });
});

describe('a reopened segment reads its ids through the table', () => {
  const schema = parseSchema(undefined);
  const build = (): ShardIndex => {
    const ix = new ShardIndex(schema);
    for (let i = 0; i < 200; i++) ix.add(`doc-${i}`, { title: `red fox ${i % 7}`, n: i });
    for (let i = 0; i < 200; i += 5) ix.delete(`doc-${i}`);
    return ix;
  };

  it('looks ids up, lists and answers as the index it was written from', () => {
    const original = build();
    const reopened = reopen(original.exportState(), schema);
    expect(reopened.size).toBe(original.size);
    expect(reopened.liveIds().sort()).toEqual(original.liveIds().sort());
    for (let i = 0; i < 210; i++) expect(reopened.has(`doc-${i}`)).toBe(original.has(`doc-${i}`));
    for (const q of ['fox', 'title:3', '*']) {
      for (const sort of [undefined, 'id asc', 'n desc']) expect(reopened.search({ q, sort, limit: 20 })).toEqual(original.search({ q, sort, limit: 20 }));
    }
  });

  it('deletes, replaces and compacts as the index it was written from, and exports the same ids', () => {
    const original = build();
    const reopened = reopen(original.exportState(), schema);
    for (const ix of [original, reopened]) {
      expect(ix.delete('doc-1')).toBe(true);
      expect(ix.delete('doc-1')).toBe(false);
      expect(ix.delete('doc-0')).toBe(false);
      ix.add('doc-2', { title: 'blue whale', n: -1 });
      ix.add('doc-0', { title: 'back again', n: 0 });
    }
    expect(reopened.has('doc-1')).toBe(false);
    expect(reopened.has('doc-0')).toBe(true);
    expect(reopened.search({ q: 'whale' }).hits.map((h) => h.id)).toEqual(['doc-2']);
    expect(reopened.search({ q: 'fox', limit: 500 })).toEqual(original.search({ q: 'fox', limit: 500 }));
    // Delete most documents: the index compacts itself, renumbering what is left.
    for (let i = 3; i < 200; i++) if (i % 9 !== 0) for (const ix of [original, reopened]) ix.delete(`doc-${i}`);
    original.compact();
    reopened.compact();
    expect(reopened.liveIds().sort()).toEqual(original.liveIds().sort());
    expect(reopened.search({ q: '*', sort: 'id asc', limit: 100 })).toEqual(original.search({ q: '*', sort: 'id asc', limit: 100 }));
    expect(reopened.has('doc-9')).toBe(true);
    expect(reopened.has('doc-10')).toBe(false);
    // Written again and reopened: the same documents.
    const again = reopen(reopened.exportState(), schema);
    expect(again.liveIds().sort()).toEqual(original.liveIds().sort());
  });
});
