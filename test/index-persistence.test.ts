// The persisted search index: a segment file gives back the very index it was written from (same
// hits, scores, totals, sort values, and the same behaviour under later writes); a replica opens
// from its segment plus the changes journaled after it; a damaged, truncated or foreign segment
// is detected, rebuilt from the documents, and queries return exactly what they did before.
import { readdir, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pino } from 'pino';
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import { COMMIT_FILE, isIndexFile, isSegmentFile, loadSegments, PersistedIndex, type PersistedIndexOptions } from '../src/distrib/index-persistence.js';
import { ShardReplica } from '../src/distrib/replica.js';
import { IN_THREAD, writeCheckpointFiles, type CheckpointWriter, type MergeJob } from '../src/distrib/segment-merge.js';
import { decodeSegment, encodeSegment, LAZY_SECTION_BYTES, parseSchema, SegmentedIndex, ShardIndex, type SearchRequest, type StoredDoc } from '../src/index/index.js';
import { ReplicaStore, type UpdateOp } from '../src/ulog/index.js';
import { useTempStores } from './support/temp-stores.js';

const log = pino({ level: 'silent' });
const schema = parseSchema({ title: 'text', tag: 'keyword', price: 'number', at: 'date' });
const FINGERPRINT = 'test-schema-1';

const WORDS = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta', 'iota', 'kappa', 'lambda', 'mu'];
function doc(i: number): StoredDoc {
  const w = (k: number): string => WORDS[(i * 7 + k * 3) % WORDS.length]!;
  return {
    id: `d${i}`,
    title: `${w(0)} ${w(1)} ${w(2)} ${i % 5 === 0 ? 'rare' : ''}`,
    tag: i % 3 === 0 ? ['red', 'blue'] : `tag${i % 4}`,
    price: i % 6 === 0 ? [i, i * 2] : i * 1.5,
    at: new Date(Date.UTC(2026, 0, 1 + (i % 28))).toISOString(),
    // Undeclared: text + keyword (short string), number, long text only.
    note: `note ${w(3)} ${i}`,
    rank: i % 11,
    body: `${w(4)} `.repeat(30) + 'x'.repeat(300),
  };
}

const QUERIES: SearchRequest[] = [
  { q: 'alpha' },
  { q: 'title:"alpha delta"', limit: 20 },
  { q: 'alpha OR rare', sort: 'price desc', limit: 15 },
  { q: '*', filters: ['tag:red'], sort: 'tag asc,id asc', limit: 30 },
  { q: 'note:delta', sort: 'rank desc,at asc', limit: 25 },
  { q: 'price:[10 TO 40]', sort: 'price asc', limit: 50 },
  { q: 'note.keyword:"note alpha 12"' },
  { q: 'body:eta', limit: 5, offset: 3 },
];

/** Each query's answer, or the error it gives (an empty index knows no field to sort by). */
const results = (index: ShardIndex | SegmentedIndex): unknown[] =>
  QUERIES.map((q) => {
    try {
      return index.search(q);
    } catch (err) {
      return { error: (err as Error).message };
    }
  });

function sampleIndex(): ShardIndex {
  const index = new ShardIndex(schema);
  for (let i = 0; i < 400; i++) index.add(`d${i}`, doc(i));
  // Replacements and deletes leave dead documents and dead postings in the state.
  for (let i = 0; i < 400; i += 9) index.add(`d${i}`, doc(i + 1000));
  for (let i = 3; i < 400; i += 13) index.delete(`d${i}`);
  return index;
}

function roundTrip(index: ShardIndex): ShardIndex {
  const file = Buffer.concat(encodeSegment(index.exportState(), { seq: 7, fingerprint: FINGERPRINT }));
  const { state, info } = decodeSegment(file);
  expect(info).toEqual({ seq: 7, fingerprint: FINGERPRINT });
  return ShardIndex.restore(schema, state);
}

describe('segment file', () => {
  it('gives back the index it was written from: hits, scores, totals and sort values', () => {
    const index = sampleIndex();
    const restored = roundTrip(index);
    expect(restored.size).toBe(index.size);
    expect(results(restored)).toEqual(results(index));
    expect(restored.collectStats({ q: 'alpha beta' })).toEqual(index.collectStats({ q: 'alpha beta' }));
  });

  it('keeps behaving as the original under later adds, replacements and deletes (and a compaction)', () => {
    const index = sampleIndex();
    const restored = roundTrip(index);
    for (const target of [index, restored]) {
      for (let i = 0; i < 300; i += 2) target.add(`d${i}`, doc(i + 2000));
      for (let i = 400; i < 450; i++) target.add(`d${i}`, doc(i));
      for (let i = 1; i < 450; i += 4) target.delete(`d${i}`);
      target.compact();
    }
    expect(restored.size).toBe(index.size);
    expect(results(restored)).toEqual(results(index));
  });

  it('refuses a state written for other declared fields', () => {
    const file = Buffer.concat(encodeSegment(sampleIndex().exportState(), { seq: 1, fingerprint: FINGERPRINT }));
    const other = parseSchema({ title: 'keyword', tag: 'keyword', price: 'number', at: 'date' });
    expect(() => ShardIndex.restore(other, decodeSegment(file).state)).toThrow(/does not fit this collection/);
  });
});

describe('a replica index on disk', () => {
  const tmp = useTempStores('segment');
  const stores = tmp.stores;

  /**
   * Opens the replica in tmp.dir. With `ahead` its segments are read before its store opens, as a
   * node does (PersistedIndex.readCommitted side by side with ReplicaStore.open). `more`: a
   * policy, another logger.
   */
  async function openReplica(
    fingerprint = FINGERPRINT,
    ahead = false,
    dir = tmp.dir,
    more: Pick<Partial<PersistedIndexOptions>, 'policy' | 'log' | 'merger' | 'writer'> = {},
  ): Promise<{ replica: ShardReplica; index: PersistedIndex; report: Awaited<ReturnType<typeof PersistedIndex.open>>['report'] }> {
    const committed = ahead ? PersistedIndex.readCommitted({ dir, schema, fingerprint }) : undefined;
    const store = await ReplicaStore.open(dir);
    stores.push(store);
    const replica = new ShardReplica('c', 'shard1', store, more.log ?? log);
    const { index, report } = await PersistedIndex.open({ dir, schema, fingerprint, store, log, ...more }, committed);
    replica.index = index;
    return { replica, index, report };
  }

  /** Closes the store without writing a segment: what kill -9 leaves (every apply was synced). */
  async function crash(): Promise<void> {
    for (const s of stores.splice(0)) await s.close();
  }

  /** The replica's segment files, oldest first. */
  async function segmentFiles(): Promise<string[]> {
    return (await readdir(tmp.dir)).filter(isSegmentFile).sort();
  }

  let version = 0;
  const put = (i: number, variant = 0): UpdateOp => ({ id: `d${i}`, version: ++version, doc: doc(i + variant) });
  const del = (i: number): UpdateOp => ({ id: `d${i}`, version: ++version, doc: null });

  /** The same documents indexed from scratch: what every opened replica must answer like. */
  async function expected(): Promise<unknown[]> {
    const store = stores[0]!;
    const fresh = new ShardIndex(schema);
    for await (const e of store.entries()) if (e.doc !== null) fresh.add(e.id, e.doc as StoredDoc);
    return results(fresh);
  }

  it.each([
    ['after its store opened', false],
    ['read while its store opens, as a node does', true],
  ])('opens from its segment and replays only the documents changed after it (segments %s)', async (_when, ahead) => {
    let { replica, index, report } = await openReplica(FINGERPRINT, ahead);
    expect(report.method).toBe('rebuilt');
    await replica.apply(Array.from({ length: 300 }, (_, i) => put(i)));
    expect(await index.checkpoint()).toBeGreaterThan(0);
    await replica.apply([put(5, 1000), put(6, 1000), del(7), put(301), del(8), put(8, 2000)]);
    const before = results(index.index);
    await crash();

    ({ replica, index, report } = await openReplica(FINGERPRINT, ahead));
    expect(report.method).toBe('loaded');
    expect(report.replayed).toBe(5);
    expect(results(index.index)).toEqual(before);
    expect(results(index.index)).toEqual(await expected());
  });

  it('replays nothing after a clean checkpoint, and a rebuilt index is written at once', async () => {
    let { replica, index } = await openReplica();
    await replica.apply(Array.from({ length: 50 }, (_, i) => put(i)));
    // Lose the segment's writes entirely: the journal alone cannot rebuild, so the open rebuilds and writes.
    await crash();
    let report;
    ({ replica, index, report } = await openReplica());
    expect(report).toMatchObject({ method: 'rebuilt', replayed: 50 });
    expect(report.segmentBytes).toBeGreaterThan(0);
    await crash();
    ({ replica, index, report } = await openReplica());
    expect(report).toMatchObject({ method: 'loaded', replayed: 0 });
    expect(index.index.size).toBe(50);
  });

  const firstSegment = async (): Promise<string> => join(tmp.dir, (await segmentFiles())[0]!);
  const commitFile = async (): Promise<string> => join(tmp.dir, COMMIT_FILE);
  const flip = (at: (length: number) => number) => async (path: string): Promise<void> => {
    const b = await readFile(path);
    b[at(b.length)] ^= 0xff;
    await writeFile(path, b);
  };
  it.each([
    ['a flipped byte in a section', firstSegment, flip((n) => n - 100), /checksum of section/],
    ['a flipped byte in the header', firstSegment, flip(() => 20), /header checksum|does not decode/],
    ['a truncated segment', firstSegment, async (path: string) => truncate(path, Math.floor((await stat(path)).size / 2)), /truncated/],
    ['a file that is not a segment', firstSegment, async (path: string) => writeFile(path, 'hello'), /not a Shardex segment/],
    ['a missing segment', firstSegment, async (path: string) => rm(path), /ENOENT|no segment file/],
    ['a flipped byte in the commit', commitFile, flip((n) => n - 3), /commit checksum/],
    ['a truncated commit', commitFile, async (path: string) => truncate(path, 30), /truncated/],
  ])('detects %s, rebuilds from the documents and answers exactly as before', async (_what, target, damage, problem) => {
    let { replica, index, report } = await openReplica();
    await replica.apply(Array.from({ length: 200 }, (_, i) => put(i)));
    await index.checkpoint();
    await replica.apply([del(3), put(4, 500), put(250)]);
    await index.checkpoint();
    const before = results(index.index);
    await crash();
    await damage(await target());

    // Read while the store opens, as a node does.
    ({ replica, index, report } = await openReplica(FINGERPRINT, true));
    expect(report.method).toBe('rebuilt');
    expect(report.problem).toMatch(problem);
    expect(results(index.index)).toEqual(before);
    // The rebuilt index is on disk again, and nothing of the damaged files is left.
    expect((await readdir(tmp.dir)).filter(isIndexFile).sort()).toEqual([...(await segmentFiles()), COMMIT_FILE].sort());
    await crash();
    ({ report } = await openReplica());
    expect(report.method).toBe('loaded');
  });

  it('ignores and removes a segment file a crash cut short before a commit named it, and writes that name again whole', async () => {
    let { replica, index, report } = await openReplica();
    await replica.apply(Array.from({ length: 100 }, (_, i) => put(i)));
    await index.checkpoint();
    const [written] = await segmentFiles();
    await replica.apply([put(150), del(2)]);
    const before = results(index.index);
    await crash();
    // The next checkpoint's segment, half written under its own name when the process died.
    const next = written!.replace(/\d+(?=\.seg$)/, (n) => String(Number(n) + 1).padStart(n.length, '0'));
    const whole = await readFile(join(tmp.dir, written!));
    await writeFile(join(tmp.dir, next), whole.subarray(0, whole.length >> 1));

    ({ replica, index, report } = await openReplica());
    expect(report).toMatchObject({ method: 'loaded', replayed: 2, segments: 1 });
    expect(await segmentFiles()).toEqual([written]);
    expect(results(index.index)).toEqual(before);
    await index.checkpoint();
    expect(await segmentFiles()).toEqual([written, next]);
    await crash();
    ({ index, report } = await openReplica());
    expect(report).toMatchObject({ method: 'loaded', replayed: 0, segments: 2 });
    expect(results(index.index)).toEqual(before);
  });

  it.each([false, true])('does not use a commit newer than its store (store lost writes the segments hold; read ahead: %s)', async (ahead) => {
    // Replica A's index holds more changes than replica B's store: B's files replaced by A's.
    const other = join(tmp.dir, 'b');
    const a = await openReplica(FINGERPRINT, false, join(tmp.dir, 'a'));
    await a.replica.apply(Array.from({ length: 30 }, (_, i) => put(i)));
    await a.replica.apply([put(40)]);
    await a.index.checkpoint();
    const b = await openReplica(FINGERPRINT, false, other);
    await b.replica.apply([put(1)]);
    await b.index.checkpoint();
    await crash();
    for (const name of (await readdir(join(tmp.dir, 'a'))).filter(isIndexFile)) await writeFile(join(other, name), await readFile(join(tmp.dir, 'a', name)));

    const { index, report } = await openReplica(FINGERPRINT, ahead, other);
    expect(report.method).toBe('rebuilt');
    expect(report.problem).toMatch(/its sequence \d+ is newer than the store's \d+/);
    expect(index.index.size).toBe(1);
    expect(index.index.has('d40')).toBe(false);
  });

  it('does not load a segment written for another schema', async () => {
    const { replica, index } = await openReplica();
    await replica.apply([put(1), put(2)]);
    await index.checkpoint();
    await crash();
    const { report } = await openReplica('another-schema');
    expect(report).toMatchObject({ method: 'rebuilt', replayed: 2 });
    expect(report.problem).toMatch(/another schema/);
  });

  it('removes the segment before a reset, so old data never comes back', async () => {
    let { replica, index } = await openReplica();
    await replica.apply([put(1), put(2), put(3)]);
    await index.checkpoint();
    await replica.reset();
    expect((await readdir(tmp.dir)).filter(isIndexFile)).toEqual([]);
    await replica.apply([put(9)]);
    await crash();
    let report;
    ({ index, report } = await openReplica());
    expect(index.index.size).toBe(1);
    expect(index.index.has('d9')).toBe(true);
    expect(report.method).toBe('rebuilt');
  });

  it('keeps the index and the documents in step when a write lands while a reset runs', async () => {
    const { replica, index } = await openReplica();
    await replica.apply([put(1), put(2)]);
    await index.checkpoint();
    // A full copy resets the replica; a write arrives meanwhile (the leader's fan-out goes on).
    const resetting = replica.reset();
    const landing = replica.apply([put(7)]);
    await Promise.all([resetting, landing]);
    const stored = (await replica.store.get('d7')) !== undefined;
    expect(index.index.has('d7')).toBe(stored);
    expect(index.index.has('d1')).toBe(false);
    expect((await replica.store.get('d1'))).toBeUndefined();
  });

  it('does not rebuild a damaged index from documents a reset is removing: old documents never come back', async () => {
    let gate: Promise<void> | undefined;
    const writer: CheckpointWriter = {
      writeCheckpoint: async (files) => {
        await gate;
        return IN_THREAD.writeCheckpoint(files);
      },
    };
    let { replica, index } = await openReplica(FINGERPRINT, false, tmp.dir, { writer });
    await replica.apply([put(1), put(2), put(3)]);
    await index.checkpoint();
    await replica.apply([put(4)]);
    // A checkpoint holds the index's lock while its write waits.
    let open!: () => void;
    gate = new Promise((r) => (open = r));
    const writing = index.checkpoint();
    // A full copy resets the replica: its clear waits for the lock. Meanwhile a search finds a
    // damaged segment in the old index, and asks for a rebuild (queued behind the clear).
    const clear = index.clear.bind(index);
    index.clear = () => {
      const cleared = clear();
      void index.rebuildDamaged('a term checksum did not match (test)');
      return cleared;
    };
    const resetting = replica.reset();
    await new Promise((r) => setTimeout(r, 20));
    open();
    gate = undefined;
    await Promise.all([resetting, writing]);
    await index.settled();
    // The copy brings the leader's documents, then a checkpoint and a crash.
    await replica.apply([put(9)]);
    await index.checkpoint();
    expect(index.index.size).toBe(1);
    await crash();
    ({ index } = await openReplica());
    expect(index.index.size).toBe(1);
    expect(index.index.has('d9')).toBe(true);
    expect(index.index.has('d1')).toBe(false);
  });

  it('writes a segment when the policy says so, and not before', async () => {
    const store = await ReplicaStore.open(tmp.dir);
    stores.push(store);
    const replica = new ShardReplica('c', 'shard1', store, log);
    const { index } = await PersistedIndex.open({ dir: tmp.dir, schema, fingerprint: FINGERPRINT, store, log, policy: { maxChanges: 10, maxAgeMs: 60_000 } });
    replica.index = index;
    await replica.apply([put(1), put(2)]);
    expect(await index.maybeCheckpoint()).toBe(false);
    // A recovering replica writes by the count of changes only, not by their age.
    expect(await index.maybeCheckpoint(Date.now() + 61_000, { byAge: false })).toBe(false);
    expect(await index.maybeCheckpoint(Date.now() + 61_000)).toBe(true);
    await replica.apply(Array.from({ length: 10 }, (_, i) => put(i + 10)));
    expect(await index.maybeCheckpoint(Date.now(), { byAge: false })).toBe(true);
    expect(await index.maybeCheckpoint(Date.now() + 120_000)).toBe(false);
  });

  it('begins the next checkpoint once the last one is committed, while the work after that commit still runs', async () => {
    const { replica, index } = await openReplica();
    const store = stores[0]!;
    // The journal's trim, the last step after a commit, waits until released.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const trim = store.dropChangesThrough.bind(store);
    const trimmed: number[] = [];
    store.dropChangesThrough = async (seq: number): Promise<void> => {
      await held;
      trimmed.push(seq);
      return trim(seq);
    };
    await replica.apply([put(1), put(2)]);
    expect(await index.maybeCheckpoint(Date.now() + 1_000)).toBe(true);
    await replica.apply([put(3), del(1)]);
    expect(await index.maybeCheckpoint(Date.now() + 2_000)).toBe(true);
    expect(trimmed).toEqual([]);
    // Both commits are on disk: a crash now replays nothing, whatever the journal still holds.
    release();
    await index.settled();
    expect(trimmed).toHaveLength(2);
    expect(trimmed[0]).toBeLessThan(trimmed[1]!);
    expect(await store.changedSince(0)).toEqual([]);
    const before = results(index.index);
    await crash();
    const again = await openReplica();
    expect(again.report).toMatchObject({ method: 'loaded', replayed: 0 });
    expect(results(again.index.index)).toEqual(before);
    expect(before).toEqual(await expected());
  });

  it('discards without writing: waits for the checkpoint running, and writes nothing after (the replica is being removed)', async () => {
    // The checkpoint's files are written once released.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const writer: CheckpointWriter = { writeCheckpoint: async (files) => held.then(() => writeCheckpointFiles(files)) };
    const { replica, index } = await openReplica(FINGERPRINT, false, tmp.dir, { writer });
    const store = stores[0]!;
    await replica.apply([put(1), put(2)]);
    const running = index.maybeCheckpoint(Date.now() + 1_000);
    let discarded = false;
    const discarding = index.discard().then(() => (discarded = true));
    await new Promise((r) => setTimeout(r, 50));
    expect(discarded).toBe(false);
    release();
    await discarding;
    expect(await running).toBe(true);
    // The tidy-up after that commit was dropped (the journal is not trimmed): the directory goes next.
    expect(await store.changedSince(0)).toEqual(['d1', 'd2']);
    const files = (await readdir(tmp.dir)).sort();
    await replica.apply([put(3)]);
    expect(await index.maybeCheckpoint(Date.now() + 10_000)).toBe(false);
    expect(await index.checkpoint()).toBe(0);
    expect(await index.merge()).toBe(false);
    expect((await readdir(tmp.dir)).sort()).toEqual(files);
  });

  it("leaves the commit's temporary file alone after a commit: the next checkpoint may be writing it", async () => {
    const { replica, index } = await openReplica();
    await replica.apply([put(1), put(2)]);
    expect(await index.maybeCheckpoint(Date.now() + 1_000)).toBe(true);
    // The next checkpoint's commit, half written, while the work after the last commit runs.
    const tmpCommit = join(tmp.dir, `${COMMIT_FILE}.tmp`);
    await writeFile(tmpCommit, 'being written');
    await index.settled();
    expect(await readFile(tmpCommit, 'utf8')).toBe('being written');
    // The next commit replaces it, whole.
    await replica.apply([put(3)]);
    expect(await index.checkpoint()).toBeGreaterThan(0);
    expect((await readdir(tmp.dir)).filter((n) => n.startsWith(COMMIT_FILE))).toEqual([COMMIT_FILE]);
  });

  /** Runs `body` on a replica whose index reads Date.now() from `clock.now` (the checkpoint policy's ages). */
  async function onClock(
    options: (clock: { now: number }) => Pick<PersistedIndexOptions, 'policy' | 'onSegmentWritten'>,
    body: (clock: { now: number }, replica: ShardReplica, index: PersistedIndex) => Promise<void>,
  ): Promise<void> {
    const clock = { now: Date.now() };
    const spy = vi.spyOn(Date, 'now').mockImplementation(() => clock.now);
    try {
      const store = await ReplicaStore.open(tmp.dir);
      stores.push(store);
      const replica = new ShardReplica('c', 'shard1', store, log);
      const { index } = await PersistedIndex.open({ dir: tmp.dir, schema, fingerprint: FINGERPRINT, store, log, ...options(clock) });
      replica.index = index;
      await body(clock, replica, index);
    } finally {
      spy.mockRestore();
    }
  }

  it("counts a checkpoint's age from its capture, not from when its slow write ended", async () => {
    // Writing the segment "takes" 6 s (a busy node): the clock moves while the file is written.
    await onClock(
      (clock) => ({ policy: { maxAgeMs: 5_000 }, onSegmentWritten: () => (clock.now += 6_000) }),
      async (clock, replica, index) => {
        await replica.apply([put(1)]);
        const captured = clock.now;
        expect(await index.checkpoint()).toBeGreaterThan(0);
        await replica.apply([put(2)]);
        // 6 s after the capture, 0 s after the write ended: due (the journal to replay grows meanwhile).
        expect(await index.maybeCheckpoint(captured + 6_000)).toBe(true);
        expect(await index.maybeCheckpoint(clock.now + 1_000)).toBe(false);
      },
    );
  });

  it('by default, writes any change once the last checkpoint was captured 0.3 s ago, or after 10,000 changes (README)', async () => {
    await onClock(
      () => ({}),
      async (clock, replica, index) => {
        await replica.apply([put(1)]);
        const captured = clock.now;
        await index.checkpoint();
        await replica.apply([put(2)]);
        expect(await index.maybeCheckpoint(captured + 299)).toBe(false);
        expect(await index.maybeCheckpoint(captured + 300)).toBe(true);
        await replica.apply(Array.from({ length: 9_999 }, (_, i) => put(i + 10)));
        expect(await index.maybeCheckpoint(clock.now, { byAge: false })).toBe(false);
        await replica.apply([put(20_000)]);
        expect(await index.maybeCheckpoint(clock.now, { byAge: false })).toBe(true);
      },
    );
  });

  it('merges the smallest segments of a full tier, removes their files, and loads the merge after a crash', async () => {
    const policy = { maxChanges: 1, segmentsPerTier: 4 };
    const opened = await openReplica(FINGERPRINT, false, tmp.dir, { policy });
    const { replica } = opened;
    let { index } = opened;
    for (let b = 0; b < 5; b++) {
      await replica.apply(Array.from({ length: 30 }, (_, i) => put(b * 20 + i, b)));
      await index.checkpoint();
    }
    await replica.apply([del(1), del(99)]);
    expect(index.index.segments).toHaveLength(5);
    const before = results(index.index);
    expect(await index.merge()).toBe(true);
    // The four smallest became one: 5 - 4 + 1 segments, the same answers, and only their files on disk.
    expect(index.index.segments).toHaveLength(2);
    expect(results(index.index)).toEqual(before);
    expect(results(index.index)).toEqual(await expected());
    expect(await segmentFiles()).toEqual(index.index.segments.map((s) => s.name).sort());
    expect(await index.merge()).toBe(false);
    await crash();
    let report;
    ({ index, report } = await openReplica(FINGERPRINT, false, tmp.dir, { policy }));
    expect(report).toMatchObject({ method: 'loaded', segments: 2, replayed: 0 });
    expect(results(index.index)).toEqual(before);
  });

  /** Flips a byte amid the packed postings of field `key` in the segment file `path`: a section left in the file, read a term at a time by searches and whole by a merge or a compaction. */
  async function damagePostings(path: string, key: string): Promise<void> {
    const b = await readFile(path);
    const headerLength = b.readUInt32LE(8);
    const header = JSON.parse(b.subarray(16, 16 + headerLength).toString('utf8')) as {
      state: { slots: { key: string; state: { packed?: { $a: number } } }[] };
      sections: { offset: number; bytes: number }[];
    };
    const { offset, bytes } = header.sections[header.state.slots.find((x) => x.key === key)!.state.packed!.$a]!;
    expect(bytes).toBeGreaterThanOrEqual(LAZY_SECTION_BYTES);
    b[((16 + headerLength + 7) & ~7) + offset + (bytes >> 1)] ^= 0xff;
    await writeFile(path, b);
  }

  it.each([
    ['a merge', async (index: PersistedIndex) => expect(await index.merge()).toBe(false)],
    ['a compaction (more of its documents deleted than live)', async (_index: PersistedIndex, replica: ShardReplica) => replica.apply(Array.from({ length: 1200 }, (_, i) => del(i)))],
    [
      "a search (a term's own checksum)",
      async (index: PersistedIndex) => {
        const failed = WORDS.flatMap((w) => {
          try {
            index.index.search({ q: `body:${w}` });
            return [];
          } catch (err) {
            return [err];
          }
        });
        // The damaged term's search fails as unavailable (retryable), never with a wrong answer.
        expect(failed.length).toBeGreaterThan(0);
        for (const err of failed) expect(err).toMatchObject({ code: 'SHX_UNAVAILABLE' });
      },
    ],
  ])('finds a segment file damaged after it was loaded when %s reads it, rebuilds from the documents while writes go on, and answers as they do', async (_what, readWhole) => {
    const lines: string[] = [];
    const logged = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
    const policy = { maxChanges: 1, segmentsPerTier: 2 };
    const { replica, index } = await openReplica(FINGERPRINT, false, tmp.dir, { policy, log: logged });
    const store = stores.at(-1)!;
    // Two segments whose body postings (about 33 bytes a document) stay in their files.
    for (let b = 0; b < 2; b++) {
      await replica.apply(Array.from({ length: 2200 }, (_, i) => put(b * 2200 + i)));
      await index.checkpoint();
    }
    const damaged = (await segmentFiles())[0]!;
    await damagePostings(join(tmp.dir, damaged), 'body');

    await readWhole(index, replica);
    // Writes go on while the rebuild reads the documents: those it did not read reach the new index too.
    const rebuilt = (): boolean => lines.some((l) => l.includes('replica index rebuilt from the stored documents'));
    let k = 0;
    for (; !rebuilt() && k < 20_000; k++) await replica.apply([k % 3 === 2 ? del(3000 + k) : put(3000 + k, 700)]);
    expect(rebuilt()).toBe(true);
    expect(k).toBeGreaterThan(0);
    expect(lines.find((l) => l.includes('"level":40') && l.includes('is damaged'))).toMatch(/the checksum of (a term's postings in )?section \d+ does not match/);
    expect(results(index.index)).toEqual(await expected());
    let stored = 0;
    for await (const e of store.entries()) if (e.doc !== null) stored++;
    expect(index.index.size).toBe(stored);

    // The next checkpoint writes the new index; the damaged file goes, and a restart loads the new one.
    await index.checkpoint();
    expect(await segmentFiles()).not.toContain(damaged);
    const before = results(index.index);
    await crash();
    const reopened = await openReplica(FINGERPRINT, false, tmp.dir, { policy });
    expect(reopened.report).toMatchObject({ method: 'loaded', replayed: 0 });
    expect(results(reopened.index.index)).toEqual(before);
  });

  it('puts a merge off while the node says so, and starts it at the first check that allows it, with nothing new to write', async () => {
    const store = await ReplicaStore.open(tmp.dir);
    stores.push(store);
    const replica = new ShardReplica('c', 'shard1', store, log);
    const { index } = await PersistedIndex.open({ dir: tmp.dir, schema, fingerprint: FINGERPRINT, store, log, policy: { maxChanges: 1, segmentsPerTier: 4 } });
    replica.index = index;
    for (let b = 0; b < 5; b++) {
      await replica.apply(Array.from({ length: 30 }, (_, i) => put(b * 20 + i, b)));
      expect(await index.maybeCheckpoint(Date.now(), { merge: false })).toBe(true);
    }
    // Nothing to write, merges still held: five segments stay.
    expect(await index.maybeCheckpoint(Date.now(), { merge: false })).toBe(false);
    await Promise.resolve();
    expect(index.index.segments).toHaveLength(5);
    const before = results(index.index);
    // Allowed again: the held merge starts although no checkpoint was due.
    expect(await index.maybeCheckpoint()).toBe(false);
    await vi.waitFor(() => expect(index.index.segments).toHaveLength(2), { timeout: 10_000 });
    expect(results(index.index)).toEqual(before);
  });

  it('merges its small segments into one once nothing changed for idleMergeMs, once per quiet spell', async () => {
    const policy = { maxChanges: 1, idleMergeMs: 3_000 };
    const { replica, index } = await openReplica(FINGERPRINT, false, tmp.dir, { policy });
    for (let b = 0; b < 3; b++) {
      await replica.apply(Array.from({ length: 30 }, (_, i) => put(b * 20 + i, b)));
      expect(await index.maybeCheckpoint()).toBe(true);
    }
    // Three segments below the floor (1,000 documents), fewer than a tier's 10: a busy replica keeps them.
    await index.settled();
    expect(index.index.segments).toHaveLength(3);
    const before = results(index.index);
    const last = Date.now();
    expect(await index.maybeCheckpoint(last + 2_999)).toBe(false);
    await Promise.resolve();
    await Promise.resolve();
    expect(index.index.segments).toHaveLength(3);
    // Quiet for idleMergeMs: merged into one, with the same answers, and committed.
    expect(await index.maybeCheckpoint(last + 3_000)).toBe(false);
    await vi.waitFor(() => expect(index.index.segments).toHaveLength(1), { timeout: 10_000 });
    expect(results(index.index)).toEqual(before);
    await index.settled();
    expect(await segmentFiles()).toEqual(index.index.segments.map((s) => s.name));
    // Once per quiet spell: quieter still, nothing more.
    expect(await index.maybeCheckpoint(last + 60_000)).toBe(false);
    // A new segment later: merged again only after the next quiet spell.
    await replica.apply([put(500)]);
    expect(await index.maybeCheckpoint(last + 4_000)).toBe(true);
    expect(index.index.segments).toHaveLength(2);
    await index.settled();
    expect(await index.maybeCheckpoint(Date.now() + 1_000)).toBe(false);
    await Promise.resolve();
    await Promise.resolve();
    expect(index.index.segments).toHaveLength(2);
    expect(await index.maybeCheckpoint(Date.now() + 3_500)).toBe(false);
    await vi.waitFor(() => expect(index.index.segments).toHaveLength(1), { timeout: 10_000 });
    expect(results(index.index)).toEqual(await expected());
  });

  it('rewrites a segment many of whose documents were deleted', async () => {
    const store = await ReplicaStore.open(tmp.dir);
    stores.push(store);
    const replica = new ShardReplica('c', 'shard1', store, log);
    const { index } = await PersistedIndex.open({ dir: tmp.dir, schema, fingerprint: FINGERPRINT, store, log, policy: { floorSegmentDocs: 10 } });
    replica.index = index;
    await replica.apply(Array.from({ length: 100 }, (_, i) => put(i)));
    await index.checkpoint();
    const [first] = await segmentFiles();
    await replica.apply(Array.from({ length: 30 }, (_, i) => del(i)));
    await index.checkpoint();
    expect(await index.merge()).toBe(true);
    expect(index.index.segments).toHaveLength(1);
    expect(index.index.segments[0]!.deleted.size).toBe(0);
    expect(await segmentFiles()).not.toContain(first);
    expect(results(index.index)).toEqual(await expected());
  });

  it('writes every segment a rebuild sealed, also when the documents fill the last one exactly', async () => {
    const open = async (): Promise<Awaited<ReturnType<typeof PersistedIndex.open>>> => {
      const store = await ReplicaStore.open(tmp.dir);
      stores.push(store);
      const replica = new ShardReplica('c', 'shard1', store, log);
      const opened = await PersistedIndex.open({ dir: tmp.dir, schema, fingerprint: FINGERPRINT, store, log, policy: { maxSegmentDocs: 2 } });
      replica.index = opened.index;
      return opened;
    };
    const { index } = await open();
    await stores[0]!.apply(Array.from({ length: 4 }, (_, i) => put(i)));
    expect(index.index.size).toBe(4);
    // No checkpoint was written: the next open rebuilds.
    await crash();
    let { report } = await open();
    expect(report).toMatchObject({ method: 'rebuilt', segments: 2 });
    expect(report.segmentBytes).toBeGreaterThan(0);
    expect(await segmentFiles()).toHaveLength(2);
    await crash();
    ({ report } = await open());
    expect(report).toMatchObject({ method: 'loaded', segments: 2, replayed: 0 });
  });

  it('waits for a running merge at close, writes a last checkpoint, and nothing after', async () => {
    const { replica, index } = await openReplica();
    for (let b = 0; b < 12; b++) {
      await replica.apply([put(b)]);
      await index.checkpoint();
    }
    await replica.apply([put(100)]);
    const merging = index.merge();
    expect(await index.close()).toBeGreaterThan(0);
    expect(await merging).toBe(false);
    await replica.apply([put(101)]);
    expect(await index.checkpoint()).toBe(0);
    await crash();
    const { report } = await openReplica();
    // d101 came after the close: it is replayed from the journal.
    expect(report).toMatchObject({ method: 'loaded', replayed: 1 });
  });

  it('keeps the file of a merge when a checkpoint that began before the merge swapped in ends after it', async () => {
    let { replica, index } = await openReplica();
    for (let b = 0; b < 10; b++) {
      await replica.apply([put(b)]);
      await index.checkpoint();
    }
    for (let round = 0; round < 5; round++) {
      // The checkpoint captures its segments first; the merge swaps some of them out while it writes.
      await replica.apply(Array.from({ length: 30 }, (_, i) => put(100 + round * 30 + i)));
      const checkpoint = index.checkpoint();
      const merged = index.merge();
      await Promise.all([checkpoint, merged]);
      await replica.apply([put(1000 + round)]);
      await index.checkpoint();
    }
    const before = results(index.index);
    await crash();
    let report;
    ({ index, report } = await openReplica());
    // Every segment the last commit names is on disk.
    expect(report.problem).toBeUndefined();
    expect(report.method).toBe('loaded');
    expect(results(index.index)).toEqual(before);
  });

  it('drops a merge that a reset overtook', async () => {
    const { replica, index } = await openReplica();
    for (let b = 0; b < 12; b++) {
      await replica.apply([put(b)]);
      await index.checkpoint();
    }
    const merging = index.merge();
    await replica.reset();
    expect(await merging).toBe(false);
    expect(index.index.size).toBe(0);
    expect((await readdir(tmp.dir)).filter(isIndexFile)).toEqual([]);
  });

  it('drops a merge whose source files a reset removed while it read them, finding no damage in that', async () => {
    const lines: string[] = [];
    const logged = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
    let resetDone!: () => void;
    const reset = new Promise<void>((resolve) => (resetDone = resolve));
    // The merge reads its sources only once the reset removed them.
    const merger = { merge: async (job: MergeJob, s: typeof schema) => (await reset, IN_THREAD.merge(job, s)) };
    const { replica, index } = await openReplica(FINGERPRINT, false, tmp.dir, { log: logged, merger });
    for (let b = 0; b < 12; b++) {
      await replica.apply([put(b)]);
      await index.checkpoint();
    }
    const merging = index.merge();
    await replica.reset();
    resetDone();
    expect(await merging).toBe(false);
    await index.checkpoint();
    expect(lines.filter((l) => l.includes('damaged'))).toEqual([]);
    expect(index.index.size).toBe(0);
    expect((await readdir(tmp.dir)).filter(isIndexFile)).toEqual([]);
  });

  it("keeps a commit point's segments, with that point's deletes, until the next commit point, and opens them for copying", async () => {
    const store = await ReplicaStore.open(tmp.dir);
    stores.push(store);
    const replica = new ShardReplica('c', 'shard1', store, log);
    const { index } = await PersistedIndex.open({ dir: tmp.dir, schema, fingerprint: FINGERPRINT, store, log, policy: { maxChanges: 1, segmentsPerTier: 4 } });
    replica.index = index;
    for (let b = 0; b < 3; b++) {
      await replica.apply(Array.from({ length: 30 }, (_, i) => put(b * 30 + i)));
      await index.checkpoint();
    }
    // Unsealed at the commit: the commit point seals and writes it.
    await replica.apply([put(200), put(201), del(4)]);
    const point = await replica.commit();
    expect(store.lastCommit).toEqual(point);
    const atCommit = results(index.index);

    // After the commit point: deletes and replacements in its segments, new segments, a merge of all of them.
    await replica.apply([del(1), del(31), put(62, 5000), put(300)]);
    for (let b = 0; b < 4; b++) {
      await replica.apply([put(400 + b)]);
      await index.checkpoint();
    }
    expect(await index.merge()).toBe(true);
    const current = results(index.index);
    expect(current).not.toEqual(atCommit);

    const committed = await index.openCommitted(point);
    expect(committed).toBeDefined();
    expect(committed!.fingerprint).toBe(FINGERPRINT);
    const names = committed!.files.map((f) => f.name);
    // The merge replaced the commit point's segments; their files stay for readers.
    expect(names.some((n) => index.index.segments.every((s) => s.name !== n))).toBe(true);
    const loaded = await loadSegments(tmp.dir, committed!.files, schema, FINGERPRINT);
    if (!loaded.ok) throw new Error(loaded.problem);
    // Exactly the commit point: d4 deleted, d1 and d31 not yet, d62 as it was.
    expect(results(new SegmentedIndex(schema, loaded.segments) as unknown as ShardIndex)).toEqual(atCommit);
    expect(committed!.files.find((f) => f.deleted.includes('d4'))).toBeDefined();
    expect(committed!.files.flatMap((f) => f.deleted)).not.toContain('d1');

    // A newer commit point: the old one is not served any more, its files go, and what was opened still reads.
    const next = await replica.commit();
    expect(await index.openCommitted(point)).toBeUndefined();
    // The files no commit names go after the commit, not before the next checkpoint may begin.
    await index.settled();
    const gone = names.filter((n) => index.index.segments.every((s) => s.name !== n));
    expect(gone.length).toBeGreaterThan(0);
    for (const n of gone) expect(await segmentFiles()).not.toContain(n);
    const f0 = committed!.files.find((f) => gone.includes(f.name))!;
    const buf = Buffer.alloc(f0.bytes);
    expect((await f0.handle.read(buf, 0, f0.bytes, 0)).bytesRead).toBe(f0.bytes);
    await Promise.all(committed!.files.map((f) => f.handle.close()));
    const again = await index.openCommitted(next);
    expect(again!.files.map((f) => f.name).sort()).toEqual(index.index.segments.map((s) => s.name).sort());
    await Promise.all(again!.files.map((f) => f.handle.close()));
    expect(results(index.index)).toEqual(current);
  });

  it('gives no segments for a commit point taken by the store alone, or after a reset', async () => {
    const { replica, index } = await openReplica();
    await replica.apply([put(1), put(2)]);
    const bare = await replica.store.commit();
    expect(await index.openCommitted(bare)).toBeUndefined();
    const point = await replica.commit();
    const c = await index.openCommitted(point);
    expect(c?.files.length).toBe(1);
    await Promise.all(c!.files.map((f) => f.handle.close()));
    await replica.reset();
    expect(await index.openCommitted(point)).toBeUndefined();
  });

  it('answers as the documents do, through any mix of writes, checkpoints, merges, commit points and resets running side by side, and after a crash', { timeout: 180_000 }, async () => {
    type Step = { kind: 'put' | 'del'; at: number[] } | { kind: 'resend'; back: number } | { kind: 'checkpoint' | 'merge' | 'commit' | 'reset' | 'pause' };
    const step: fc.Arbitrary<Step> = fc.oneof(
      { weight: 6, arbitrary: fc.record({ kind: fc.constant('put' as const), at: fc.array(fc.nat(59), { minLength: 1, maxLength: 8 }) }) },
      { weight: 2, arbitrary: fc.record({ kind: fc.constant('del' as const), at: fc.array(fc.nat(59), { minLength: 1, maxLength: 3 }) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('resend' as const), back: fc.nat(30) }) },
      { weight: 2, arbitrary: fc.constantFrom({ kind: 'checkpoint' as const }, { kind: 'merge' as const }, { kind: 'commit' as const }, { kind: 'pause' as const }) },
      { weight: 1, arbitrary: fc.constant({ kind: 'reset' as const }) },
    );
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 5, maxLength: 40 }), async (steps) => {
        const dir = join(tmp.dir, `run${run++}`);
        const policy = { maxChanges: 5, segmentsPerTier: 3 };
        const open = async (): Promise<{ replica: ShardReplica; index: PersistedIndex }> => {
          const store = await ReplicaStore.open(dir, { idCacheSize: 8 });
          stores.push(store);
          const replica = new ShardReplica('c', 'shard1', store, log);
          const { index } = await PersistedIndex.open({ dir, schema, fingerprint: FINGERPRINT, store, log, policy });
          replica.index = index;
          return { replica, index };
        };
        let { replica, index } = await open();
        const sent: UpdateOp[] = [];
        const work: Array<Promise<unknown>> = [];
        for (const s of steps) {
          if (s.kind === 'put' || s.kind === 'del') {
            const ops = s.at.map((i) => (s.kind === 'put' ? put(i, version) : del(i)));
            sent.push(...ops);
            work.push(replica.apply(ops));
          } else if (s.kind === 'resend') {
            // A retried or reordered update: an older version is dropped, never applied again.
            const op = sent[sent.length - 1 - Math.min(s.back, sent.length - 1)];
            if (op) work.push(replica.apply([op]));
          } else if (s.kind === 'checkpoint') work.push(index.checkpoint());
          else if (s.kind === 'merge') work.push(index.merge());
          else if (s.kind === 'commit') work.push(replica.commit());
          else if (s.kind === 'reset') work.push(replica.reset());
          else await new Promise((r) => setImmediate(r));
        }
        await Promise.all(work);
        await index.merge();
        const now = results(index.index);
        expect(now).toEqual(await expected());
        // kill -9 after the last write: whatever the last checkpoint held, the journal makes up the rest.
        await crash();
        ({ replica, index } = await open());
        expect(results(index.index)).toEqual(now);
        await index.close();
        await crash();
      }),
      { numRuns: 60 },
    );
  });
});
