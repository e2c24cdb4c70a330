// A term dictionary as a segment file holds it: the table over the file's arrays finds every term
// (keyed or not) at its id and no other, gives every term's string back, never writes into the
// file's arrays (a change copies them first), refuses arrays that do not make a table; and a
// reopened segment's fields answer prefix and keyword-sort queries, which read term strings, as
// the index they were written from.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeSegment, encodeSegment, parseSchema, ShardIndex } from '../src/index/index.js';
import { exactKey, hashRange, TermTable, type TermTableArrays } from '../src/index/term-table.js';

const copyOf = (a: TermTableArrays): TermTableArrays => ({ slots: a.slots.slice(), chars: a.chars.slice(), starts: a.starts.slice(), keys: a.keys.slice() });
const find = (t: TermTable, term: string): number => t.find(term, 0, term.length, hashRange(term, 0, term.length), exactKey(term, 0, term.length));

// Keyed terms (1-10 lower-case letters and digits) and others (longer, upper case, non-ASCII).
const term = fc.oneof(fc.stringMatching(/^[a-z0-9]{1,10}$/), fc.string({ minLength: 1, maxLength: 14, unit: 'binary' }));

describe('a term dictionary from a segment file', () => {
  it('finds every term at its id, no other, and gives every string back', () => {
    fc.assert(
      fc.property(fc.uniqueArray(term, { maxLength: 400 }), fc.array(term, { maxLength: 40 }), (terms, others) => {
        const written = new TermTable();
        written.adopt(terms);
        const table = TermTable.fromArrays(copyOf(written.arrays()));
        expect(table.size).toBe(terms.length);
        terms.forEach((t, id) => expect(find(table, t)).toBe(id));
        const held = new Set(terms);
        for (const o of others) if (!held.has(o)) expect(find(table, o)).toBe(-1);
        expect(table.terms).toEqual(terms);
      }),
      { numRuns: 200 },
    );
  });

  it('copies the file arrays before it changes (adds, retains)', () => {
    const written = new TermTable();
    written.adopt(['alpha', 'beta', 'Gamma', 'déjà', 'x'.repeat(30)]);
    const file = copyOf(written.arrays());
    const before = copyOf(file);
    const table = TermTable.fromArrays(file);
    for (let i = 0; i < 100; i++) table.add(`new${i}`, hashRange(`new${i}`, 0, `new${i}`.length), exactKey(`new${i}`, 0, `new${i}`.length));
    expect(find(table, 'new42')).toBe(47);
    expect(find(table, 'déjà')).toBe(3);
    table.retain(Int32Array.from({ length: table.size }, (_, id) => (id === 1 ? -1 : id > 1 ? id - 1 : id)));
    expect(find(table, 'beta')).toBe(-1);
    expect(find(table, 'Gamma')).toBe(1);
    expect(table.terms.slice(0, 3)).toEqual(['alpha', 'Gamma', 'déjà']);
    expect(file).toEqual(before);
  });

  it('refuses arrays that do not make a table', () => {
    const t = new TermTable();
    t.adopt(['a', 'b', 'c']);
    const a = copyOf(t.arrays());
    expect(() => TermTable.fromArrays({ ...a, starts: a.starts.subarray(0, 3) })).toThrow(/starts/);
    expect(() => TermTable.fromArrays({ ...a, slots: new Int32Array(6) })).toThrow(/power of two/);
    expect(() => TermTable.fromArrays({ ...a, slots: new Int32Array(4) })).toThrow(/power of two/);
  });
});

describe('a reopened segment reads its terms through the dictionary', () => {
  it('answers term, prefix, range and keyword-sort queries as the index it was written from', () => {
    const schema = parseSchema({ title: 'text', tag: 'keyword' });
    const ix = new ShardIndex(schema);
    const words = ['red', 'Rouge', 'rot', 'rosso', 'röd', 'rojo', 'crimson', 'scarlet', 'ruby2', 'rgb255000000'];
    for (let i = 0; i < 120; i++) ix.add(`d${i}`, { title: `${words[i % words.length]} ${words[(i * 7) % words.length]}`, tag: words[(i * 3) % words.length]!, n: i });
    ix.delete('d5');
    const reopened = ShardIndex.restore(schema, decodeSegment(Buffer.concat(encodeSegment(ix.exportState(), { seq: 1, fingerprint: 'f' }))).state);
    for (const q of ['ro*', 'tag:[r TO s]', 'tag:röd']) expect(ix.search({ q }).total).toBeGreaterThan(0);
    for (const q of ['red', 'ro*', 'title:r*', 'tag:röd', 'tag:[r TO s]', 'rgb255000000', 'rouge']) {
      for (const sort of [undefined, 'tag asc', 'tag desc']) expect(reopened.search({ q, sort, limit: 200 })).toEqual(ix.search({ q, sort, limit: 200 }));
    }
  });
});
