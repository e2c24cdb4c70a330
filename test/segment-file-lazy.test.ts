// A segment loaded from its file leaves each inverted field's packed postings on disk (past
// LAZY_SECTION_BYTES) and reads a term's bytes when it first decodes the term: it answers every
// query, deletes, exports (for a merge) and compacts exactly as the index it was written from and
// as the same bytes decoded in memory; a damaged byte in a section left on disk is still caught at
// load, by that section's checksum, and after load by the checksum of the term read; a truncated
// file is refused.
import { mkdtemp, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDocs } from '../src/corpus.js';
import { decodeSegment, LAZY_SECTION_BYTES, loadSegment, mergeIndexes, parseSchema, SegmentProblem, ShardIndex, writeSegment, type SearchRequest } from '../src/index/index.js';

const schema = parseSchema(undefined);
const QUERIES: SearchRequest[] = [
  { q: 'ka' },
  { q: 'body:shi OR body:gar', limit: 20 },
  { q: 'shi AND pol' },
  { q: '"ka ka"', limit: 5 },
  { q: 'quin*' },
  { q: '*', sort: 'price desc', limit: 15 },
  { q: 'ka', filters: ['category:cat-d'] },
];

let dir: string;
let original: ShardIndex;
let path: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'shardex-lazy-'));
  original = new ShardIndex(schema);
  for (const d of generateDocs({ count: 2000, seed: 5 })) original.add(String(d.id), d);
  original.delete(String([...generateDocs({ count: 1, seed: 5 })][0]!.id));
  path = join(dir, 'seg');
  await writeSegment(path, original.exportState(), { seq: 3, fingerprint: 'f' });
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function load(p = path): Promise<ShardIndex> {
  const l = await loadSegment(p, schema, 'f');
  if (!l.ok) throw new Error(l.problem);
  return l.index;
}

describe('a segment loaded from its file', () => {
  it('has packed postings large enough to be left in the file', async () => {
    const { state } = decodeSegment(await readFile(path));
    const sizes = state.slots.flatMap((s) => (s.kind === 'inverted' && s.state.packed instanceof Uint8Array ? [s.state.packed.length] : []));
    expect(Math.max(...sizes)).toBeGreaterThanOrEqual(LAZY_SECTION_BYTES);
  });

  it('answers every query as the index it was written from and as its bytes decoded in memory', async () => {
    const loaded = await load();
    const inMemory = ShardIndex.restore(schema, decodeSegment(await readFile(path)).state);
    for (const req of QUERIES) {
      const want = original.search(req);
      expect(want.total).toBeGreaterThan(0);
      expect(loaded.search(req)).toEqual(want);
      expect(inMemory.search(req)).toEqual(want);
    }
  });

  it('deletes, merges and compacts as the index it was written from', async () => {
    const loaded = await load();
    const ids = original.liveIds();
    const copy = ShardIndex.restore(schema, original.exportState());
    for (let i = 0; i < ids.length; i += 3) {
      expect(loaded.delete(ids[i]!)).toBe(true);
      copy.delete(ids[i]!);
    }
    for (const req of QUERIES) expect(loaded.search(req)).toEqual(copy.search(req));
    // A merge exports the whole field (its postings read from the file at once).
    const merged = mergeIndexes(schema, [loaded]);
    for (const req of QUERIES) expect(merged.search(req)).toEqual(copy.search(req));
    loaded.compact();
    for (const req of QUERIES) expect(loaded.search(req)).toEqual(copy.search(req));
  });

  it('is refused at load when a byte of a section left in the file is damaged', async () => {
    const bytes = await readFile(path);
    const { state } = decodeSegment(bytes);
    const packed = state.slots.flatMap((s) => (s.kind === 'inverted' && s.state.packed instanceof Uint8Array && s.state.packed.length >= LAZY_SECTION_BYTES ? [s.state.packed] : []))[0]!;
    const at = packed.byteOffset - bytes.byteOffset + Math.floor(packed.length / 2);
    const damaged = Buffer.from(bytes);
    damaged[at] ^= 0x40;
    const p = join(dir, 'damaged');
    await writeFile(p, damaged);
    const l = await loadSegment(p, schema, 'f');
    expect(l.ok).toBe(false);
    if (!l.ok) expect(l.problem).toMatch(/^the checksum of section \d+ does not match$/);
  });

  it('never answers from a term whose bytes were damaged in the file after it was loaded: that search fails, the others answer', async () => {
    const p = join(dir, 'damaged-later');
    const bytes = await readFile(path);
    await writeFile(p, bytes);
    const loaded = await load(p);
    // Flip a run of bytes amid each section left in the file, as a disk going bad would.
    const { state } = decodeSegment(bytes);
    const damaged = Buffer.from(bytes);
    for (const s of state.slots) {
      if (s.kind !== 'inverted' || !(s.state.packed instanceof Uint8Array) || s.state.packed.length < LAZY_SECTION_BYTES) continue;
      const mid = s.state.packed.byteOffset - bytes.byteOffset + (s.state.packed.length >> 1);
      for (let i = mid; i < mid + 64; i++) damaged[i] ^= 0x5a;
    }
    await writeFile(p, damaged);
    const words = [...new Set([...generateDocs({ count: 200, seed: 5 })].flatMap((d) => d.body.split(' ')))];
    let failed = 0;
    for (const w of words) {
      let got;
      try {
        got = loaded.search({ q: `body:${w}`, limit: 1000 });
      } catch (err) {
        expect(err).toBeInstanceOf(SegmentProblem);
        expect((err as Error).message).toMatch(/the checksum of a term's postings in section \d+ does not match \(the file changed after it was loaded\)/);
        failed++;
        continue;
      }
      expect(got, w).toEqual(original.search({ q: `body:${w}`, limit: 1000 }));
    }
    expect(failed).toBeGreaterThan(0);
    expect(failed).toBeLessThan(words.length);
  });

  it('is refused at load when the file was cut short', async () => {
    const p = join(dir, 'short');
    await writeFile(p, await readFile(path));
    await truncate(p, Math.floor((await readFile(path)).length * 0.7));
    const l = await loadSegment(p, schema, 'f');
    expect(l.ok).toBe(false);
    if (!l.ok) expect(l.problem).toMatch(/^truncated: section \d+ ends at byte \d+, the file has \d+$/);
  });
});
