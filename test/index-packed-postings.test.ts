// Packed postings in segment files: every term's postings and positions survive the varint
// packing exactly (large gaps, large tfs and positions, single postings, empty fields), a segment
// of the project's corpus answers every query, deletes (without a forward index: late, see
// InvertedField), merges and compacts as the index it was written from, costs well under the 4
// bytes an entry took before, and a damaged packed section is caught by its checksum.
import { crc32 } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { generateDocs } from '../src/corpus.js';
import { decodeSegment, encodeSegment, mergeIndexes, parseSchema, SEGMENT_FORMAT, ShardIndex, type SearchRequest, type ShardIndexState } from '../src/index/index.js';
import { packPostings, unpackPositions, unpackPostings, type FlatPostings } from '../src/index/postings-codec.js';

/** Flat postings of `terms`, each a list of [doc, positions or tf] (positions for text fields). */
function flat(terms: readonly (readonly [number, readonly number[] | number][])[]): FlatPostings {
  const postings: number[] = [];
  const positions: number[] = [];
  const postingStarts = [0];
  const positionStarts = [0];
  for (const term of terms) {
    for (const [doc, p] of term) {
      postings.push(doc, typeof p === 'number' ? p : p.length);
      if (typeof p !== 'number') positions.push(...p);
    }
    postingStarts.push(postings.length);
    positionStarts.push(positions.length);
  }
  return { postingStarts: Int32Array.from(postingStarts), postings: Int32Array.from(postings), positionStarts: Int32Array.from(positionStarts), positions: Int32Array.from(positions) };
}

function expectSame(f: FlatPostings, withPositions: boolean): void {
  const packed = packPostings(f, withPositions);
  for (let t = 0; t < f.postingStarts.length - 1; t++) {
    expect(Array.from(unpackPostings(packed, t))).toEqual(Array.from(f.postings.subarray(f.postingStarts[t], f.postingStarts[t + 1])));
    if (withPositions) expect(Array.from(unpackPositions(packed, t))).toEqual(Array.from(f.positions.subarray(f.positionStarts[t], f.positionStarts[t + 1])));
  }
}

const MAX = 2 ** 31 - 1;

/**
 * Expects `got` to be `want`. Typed arrays are compared as bytes, naming the first that differs: a
 * diff of whole states would take minutes to print.
 */
function expectSameState(got: ShardIndexState, want: ShardIndexState): void {
  const walk = (g: unknown, w: unknown, path: string): void => {
    if (ArrayBuffer.isView(w)) {
      const bytes = (v: ArrayBufferView): Buffer => Buffer.from(v.buffer, v.byteOffset, v.byteLength);
      expect(ArrayBuffer.isView(g) && bytes(g).equals(bytes(w)), `${path} differs`).toBe(true);
    } else if (w !== null && typeof w === 'object') {
      expect(Object.keys(g as object), path).toEqual(Object.keys(w));
      for (const k of Object.keys(w)) walk((g as Record<string, unknown>)[k], (w as Record<string, unknown>)[k], `${path}.${k}`);
    } else {
      expect(g, path).toBe(w);
    }
  };
  walk(got, want, 'state');
}

/** Expects the same live documents and statistics in `got` and `want` (their postings may still hold different dead documents). */
function expectSameStats(got: ShardIndexState, want: ShardIndexState): void {
  expect(Buffer.from(got.live).equals(Buffer.from(want.live))).toBe(true);
  got.slots.forEach((g, i) => {
    const w = want.slots[i]!;
    expect(g.key).toBe(w.key);
    if (g.kind !== 'inverted' || w.kind !== 'inverted') return;
    expect([g.state.docCount, g.state.sumLength], g.key).toEqual([w.state.docCount, w.state.sumLength]);
    expect(Array.from(g.state.lengths), g.key).toEqual(Array.from(w.state.lengths));
    expect(g.state.terms, g.key).toEqual(w.state.terms);
    expect(Array.from(g.state.docFreq), g.key).toEqual(Array.from(w.state.docFreq));
  });
}

describe('packed postings', () => {
  it('keep documents across large gaps, up to the largest document number', () => {
    expectSame(flat([[[0, 1], [1, 1], [2 ** 21 + 3, 2], [2 ** 28 + 7, 1], [MAX - 1, 3], [MAX, 1]]]), false);
  });

  it('keep tfs beyond one, two, four and five varint bytes', () => {
    expectSame(flat([[[3, 127], [4, 128], [5, 2 ** 21 + 1], [6, 2 ** 28 + 1], [7, MAX]]]), false);
  });

  it('keep positions beyond 2^21 and 2^28, repeated ones, and each posting starting over', () => {
    const f = flat([
      [[0, [0, 5, 5, 2 ** 21 + 9]], [2 ** 28, [2 ** 28 + 1, MAX]], [2 ** 28 + 1, [0]]],
      [[9, [MAX]]],
    ]);
    expectSame(f, true);
  });

  it('keep a term with one posting beside terms with many', () => {
    expectSame(flat([[[42, [7]]], Array.from({ length: 300 }, (_, d) => [d * 3, [d, d + 1]] as [number, number[]]), [[MAX, [1, 2, 3]]]]), true);
  });

  it('pack an empty field to nothing', () => {
    const packed = packPostings(flat([]), true);
    expect((packed.packed as Uint8Array).length).toBe(0);
    expect(Array.from(packed.packedStarts)).toEqual([0]);
  });

  it('refuse positions that decrease within a posting rather than write them wrong', () => {
    expect(() => packPostings(flat([[[0, [5, 3]]]]), true)).toThrow(/decrease/);
  });
});

describe('a segment file of the corpus', () => {
  const schema = parseSchema({ title: 'text', body: 'text', category: 'keyword', price: 'number', ts: 'date', empty: 'text', none: 'keyword' });
  const docs = [...generateDocs({ count: 1000, seed: 3 })];
  const byFrequency = (() => {
    const counts = new Map<string, number>();
    for (const d of docs) for (const w of d.body.split(' ')) counts.set(w, (counts.get(w) ?? 0) + 1);
    return [...counts.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).map(([w]) => w);
  })();
  const w = (rank: number): string => byFrequency[rank - 1]!;
  const queries: SearchRequest[] = [
    { q: w(1) },
    { q: w(40), limit: 50 },
    { q: w(byFrequency.length) },
    { q: `${w(3)} OR ${w(60)}`, limit: 30 },
    { q: `${w(2)} AND ${w(25)}` },
    { q: `"${w(1)} ${w(2)}"`, limit: 40 },
    { q: `title:"${docs[7]!.title}"` },
    { q: w(10), filters: ['category:cat-c'], sort: 'price desc' },
    { q: '*', sort: 'category asc,price asc', limit: 25 },
    { q: `empty:${w(1)} OR none:x` },
  ];

  function build(from: number, to: number): ShardIndex {
    const index = new ShardIndex(schema);
    for (const d of docs.slice(from, to)) index.add(d.id, d);
    for (let i = from; i < to; i += 17) index.delete(docs[i]!.id);
    return index;
  }

  const encode = (index: ShardIndex): Buffer => Buffer.concat(encodeSegment(index.exportState(), { seq: 1, fingerprint: 'f' }));
  const load = (file: Buffer): ShardIndex => ShardIndex.restore(schema, decodeSegment(file).state);

  it('answers every query exactly as the index it was written from, phrases read before single terms too', () => {
    const index = build(0, docs.length);
    const restored = load(encode(index));
    // Phrases first: positions are decoded before the same terms' postings.
    for (const q of [...queries].reverse()) expect(restored.search(q)).toEqual(index.search(q));
    for (const q of queries) expect(restored.search(q)).toEqual(index.search(q));
  });

  it('merges, deletes and compacts from packed segments as from the indexes they were written from', () => {
    const a = build(0, 500);
    const b = build(500, docs.length);
    const merged = mergeIndexes(schema, [a, b]);
    const mergedFromFiles = mergeIndexes(schema, [load(encode(a)), load(encode(b))]);
    for (const target of [merged, mergedFromFiles]) {
      for (let i = 0; i < docs.length; i += 5) target.delete(docs[i]!.id);
      target.compact();
    }
    for (const q of queries) expect(mergedFromFiles.search(q)).toEqual(merged.search(q));
  });

  it('deletes documents, one with many terms and ones with none among them, then compacts, as the index it was written from', () => {
    const many = { id: 'many', body: Array.from({ length: 3000 }, (_, i) => `t${i * 37}`).join(' '), title: byFrequency.slice(0, 50).join(' '), price: 3 };
    const build2 = (): ShardIndex => {
      const index = build(0, docs.length);
      index.add(many.id, many);
      index.add('numbers-only', { price: 7, ts: '2024-01-02T00:00:00Z' });
      index.add('nothing', {});
      return index;
    };
    const original = build2();
    const reopened = load(encode(build2()));
    // Every third document still live (build() deleted every 17th): more deleted than live, short of a compaction.
    const gone = ['many', 'numbers-only', 'nothing', ...docs.filter((_, i) => i % 3 === 1 && i % 17 !== 0).map((d) => d.id)];
    for (const target of [original, reopened]) for (const id of gone) expect(target.delete(id)).toBe(true);
    // The original rewrote its terms with many dead postings; the reopened one keeps them until it
    // compacts. Its statistics are the same, exact ones.
    expectSameStats(reopened.exportState(), original.exportState());
    for (const q of [...queries, { q: 't37 OR t74' }]) expect(reopened.search(q)).toEqual(original.search(q));
    for (const target of [original, reopened]) target.compact();
    expectSameState(reopened.exportState(), original.exportState());
    for (const q of queries) expect(reopened.search(q)).toEqual(original.search(q));
  });

  it('merges into the same state from reopened segments as from the indexes they were written from', () => {
    const a = build(0, 400);
    const b = build(400, docs.length);
    const fromFiles = [load(encode(a)), load(encode(b))];
    for (const id of [docs[3]!.id, docs[450]!.id, docs[999]!.id]) for (const index of [a, b, ...fromFiles]) index.delete(id);
    expectSameState(mergeIndexes(schema, fromFiles).exportState(), mergeIndexes(schema, [a, b]).exportState());
  });

  it('holds its postings and positions in under 1.5 bytes an entry, where they took 4', () => {
    const state = build(0, docs.length).exportState();
    let entries = 0;
    for (const s of state.slots) if (s.kind === 'inverted') entries += s.state.postings.length + s.state.positions.length;
    const file = encode(build(0, docs.length));
    expect(file.length).toBeLessThan(4 * entries);
    const { state: stored } = decodeSegment(file);
    let packed = 0;
    for (const s of stored.slots) if (s.kind === 'inverted') packed += (s.state.packed as Uint8Array).length;
    expect(packed).toBeLessThan(1.5 * entries);
  });

  it('refuses a file of the previous format (with a forward index), which is then rebuilt rather than misread', () => {
    const file = encode(build(0, 100));
    const headerLength = file.readUInt32LE(8);
    const header = JSON.parse(file.subarray(16, 16 + headerLength).toString('utf8')) as { format: number };
    const older = Buffer.from(JSON.stringify({ ...header, format: SEGMENT_FORMAT - 1 }), 'utf8');
    expect(older.length).toBe(headerLength);
    const old = Buffer.from(file);
    older.copy(old, 16);
    old.writeUInt32LE(crc32(older), 12);
    expect(() => decodeSegment(old)).toThrow(`written in segment format ${SEGMENT_FORMAT - 1}, this version reads ${SEGMENT_FORMAT}`);
  });

  it('is refused when a byte of a packed postings section is damaged', () => {
    const file = encode(build(0, 300));
    // The header (JSON after the magic, its length and checksum) names the body's packed section.
    const headerLength = file.readUInt32LE(8);
    const header = JSON.parse(file.subarray(16, 16 + headerLength).toString('utf8')) as {
      state: { slots: { key: string; state: { packed: { $a: number } } }[] };
      sections: { offset: number; bytes: number }[];
    };
    const section = header.state.slots.find((s) => s.key === 'body')!.state.packed.$a;
    const { offset, bytes } = header.sections[section]!;
    const at = ((16 + headerLength + 7) & ~7) + offset + (bytes >> 1);
    const damaged = Buffer.from(file);
    damaged[at] ^= 0x10;
    expect(() => decodeSegment(damaged)).toThrow(new RegExp(`checksum of section ${section} does not match`));
  });


});
