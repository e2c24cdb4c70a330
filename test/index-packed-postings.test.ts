// Packed postings and forward index in segment files: every term's postings and positions and
// every document's forward entries survive the varint packing exactly (large gaps, large tfs,
// positions and term ids, single postings, empty fields and documents), a segment of the
// project's corpus answers every query, deletes, merges and compacts as the index it was written
// from, costs well under the 4 bytes an entry took before, and a damaged packed section is caught
// by its checksum.
import { crc32 } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { generateDocs } from '../src/corpus.js';
import { decodeSegment, encodeSegment, mergeIndexes, parseSchema, SEGMENT_FORMAT, ShardIndex, type SearchRequest, type ShardIndexState } from '../src/index/index.js';
import { forwardLength, packForward, packPostings, unpackForwardInto, unpackPositions, unpackPostings, type FlatForward, type FlatPostings } from '../src/index/postings-codec.js';

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

/** A flat forward index of `docs`, each a list of [slot, term ids] per field. */
function flatForward(docs: readonly (readonly [number, readonly number[]])[][]): FlatForward {
  const forward: number[] = [];
  const forwardStarts = [0];
  for (const fields of docs) {
    for (const [slot, ids] of fields) forward.push(slot, ids.length, ...ids);
    forwardStarts.push(forward.length);
  }
  return { forwardStarts: Int32Array.from(forwardStarts), forward: Int32Array.from(forward) };
}

/** `f` with each field's term ids in increasing order (the order a packed forward index gives them back in). */
function sortedIds(f: FlatForward): FlatForward {
  const forward = Int32Array.from(f.forward);
  for (let i = 0; i < forward.length; i += 2 + forward[i + 1]!) forward.subarray(i + 2, i + 2 + forward[i + 1]!).sort();
  return { forwardStarts: f.forwardStarts, forward };
}

/**
 * Expects `got` to be `want` but for the order of each field's term ids in the forward index (a
 * reopened segment gives them back sorted). Typed arrays are compared as bytes, naming the first
 * that differs: a diff of whole states would take minutes to print.
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
  walk({ ...got, ...sortedIds(got) }, { ...want, ...sortedIds(want) }, 'state');
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
    expect(packed.packed.length).toBe(0);
    expect(Array.from(packed.packedStarts)).toEqual([0]);
  });

  it('refuse positions that decrease within a posting rather than write them wrong', () => {
    expect(() => packPostings(flat([[[0, [5, 3]]]]), true)).toThrow(/decrease/);
  });
});

describe('the packed forward index', () => {
  function expectSameForward(f: FlatForward): void {
    const packed = packForward(f);
    const want = sortedIds(f);
    for (let d = 0; d < f.forwardStarts.length - 1; d++) {
      const out = new Int32Array(forwardLength(packed, d) + 2).fill(-7);
      unpackForwardInto(packed, d, out, 1);
      const entries = want.forward.subarray(want.forwardStarts[d], want.forwardStarts[d + 1]);
      expect(Array.from(out)).toEqual([-7, ...entries, -7]);
    }
  }

  it('keeps each field of a document as its set of term ids, up to the largest id and slot', () => {
    expectSameForward(flatForward([[[0, [5, 3, 200_000, 0]], [3, [MAX, 1, 2 ** 28 + 1, 2 ** 21]]], [[MAX, [MAX - 1]]]]));
  });

  it('keeps documents with no entries and fields with no terms (numeric columns) beside others', () => {
    expectSameForward(flatForward([[], [[4, []]], [], [[0, [9]], [4, []]], []]));
  });

  it('keeps a document with more terms than its sorting scratch first holds', () => {
    const ids = Array.from({ length: 5000 }, (_, i) => (i * 7919) % 5003);
    expectSameForward(flatForward([[[1, ids.slice(0, 10)]], [[0, ids], [1, ids.slice(0, 300)]], [[2, [1]]]]));
  });

  it('packs an empty index to nothing', () => {
    const packed = packForward(flatForward([]));
    expect(packed.packedForward.length).toBe(0);
    expect(Array.from(packed.forwardByteStarts)).toEqual([0]);
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
    expectSameState(reopened.exportState(), original.exportState());
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

  it('holds its forward index in under 1.5 bytes an entry, where it took 4', () => {
    const state = build(0, docs.length).exportState();
    const { state: stored } = decodeSegment(encode(build(0, docs.length)));
    expect(stored.forwardByteStarts.length).toBe(state.maxDoc + 1);
    expect(stored.packedForward.length).toBeLessThan(1.5 * state.forward.length);
  });

  it('holds its postings and positions in under 1.5 bytes an entry, where they took 4', () => {
    const state = build(0, docs.length).exportState();
    let entries = 0;
    for (const s of state.slots) if (s.kind === 'inverted') entries += s.state.postings.length + s.state.positions.length;
    const file = encode(build(0, docs.length));
    expect(file.length).toBeLessThan(4 * entries);
    const { state: stored } = decodeSegment(file);
    let packed = 0;
    for (const s of stored.slots) if (s.kind === 'inverted') packed += s.state.packed.length;
    expect(packed).toBeLessThan(1.5 * entries);
  });

  it('refuses a file of the previous format (a flat forward index), which is then rebuilt rather than misread', () => {
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

  it('is refused when a byte of the packed forward index is damaged', () => {
    const file = encode(build(0, 300));
    const headerLength = file.readUInt32LE(8);
    const header = JSON.parse(file.subarray(16, 16 + headerLength).toString('utf8')) as {
      state: { packedForward: { $a: number } };
      sections: { offset: number; bytes: number }[];
    };
    const section = header.state.packedForward.$a;
    const { offset, bytes } = header.sections[section]!;
    const damaged = Buffer.from(file);
    damaged[((16 + headerLength + 7) & ~7) + offset + (bytes >> 1)] ^= 0x01;
    expect(() => decodeSegment(damaged)).toThrow(new RegExp(`checksum of section ${section} does not match`));
  });
});
