// Merges in the node's merge thread (src/distrib/segment-merge.ts): a worker thread, so the
// modules are the built ones (a worker runs JavaScript), all of them from dist/ so that the
// errors the worker's answers become are the classes the replica checks for.
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { threadId } from 'node:worker_threads';
import { pino } from 'pino';
import { beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, ROOT } from './support/cli-run.js';
import { useTempStores } from './support/temp-stores.js';

type Persistence = typeof import('../src/distrib/index-persistence.js');
type Merge = typeof import('../src/distrib/segment-merge.js');
type Replica = typeof import('../src/distrib/replica.js');
type Ulog = typeof import('../src/ulog/index.js');
type Index = typeof import('../src/index/index.js');

const built = async <T>(rel: string): Promise<T> => {
  await assertBuilt(rel);
  return (await import(pathToFileURL(join(ROOT, 'dist', rel.replace(/\.ts$/, '.js'))).href)) as T;
};

let P: Persistence;
let M: Merge;
let R: Replica;
let U: Ulog;
let I: Index;
beforeAll(async () => {
  await assertBuilt('distrib/merge-worker.ts');
  [P, M, R, U, I] = await Promise.all([
    built<Persistence>('distrib/index-persistence.ts'),
    built<Merge>('distrib/segment-merge.ts'),
    built<Replica>('distrib/replica.ts'),
    built<Ulog>('ulog/index.ts'),
    built<Index>('index/index.ts'),
  ]);
});

const FIELDS = { title: 'text', tag: 'keyword', n: 'number' };
const WORDS = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta'];
const doc = (i: number): Record<string, unknown> => ({
  title: `${WORDS[i % 8]} ${WORDS[(i * 3) % 8]} ${i % 7 === 0 ? 'rare' : ''}`,
  tag: `t${i % 5}`,
  n: i,
  body: `${WORDS[(i * 5) % 8]} `.repeat(40),
});
const QUERIES = [{ q: 'alpha' }, { q: 'title:"beta gamma"', limit: 30 }, { q: 'rare OR delta', sort: 'n desc', limit: 40 }, { q: '*', filters: ['tag:t2'], sort: 'n asc', limit: 50 }, { q: 'body:eta' }];

describe('the merge thread', () => {
  const tmp = useTempStores('merge-thread');
  let version = 0;
  const put = (i: number, variant = 0): import('../src/ulog/index.js').UpdateOp => ({ id: `d${i}`, version: ++version, doc: { id: `d${i}`, ...doc(i + variant) } });
  const del = (i: number): import('../src/ulog/index.js').UpdateOp => ({ id: `d${i}`, version: ++version, doc: null });

  /** `thread`, noting the worker each merge was given to. */
  function watched(thread: import('../src/distrib/segment-merge.js').MergeThread, seen: Array<number | undefined>): import('../src/distrib/segment-merge.js').SegmentMerger {
    return {
      merge: (job, schema) => {
        const merged = thread.merge(job, schema);
        seen.push(thread.threadId);
        return merged;
      },
    };
  }

  async function openReplica(merger: import('../src/distrib/segment-merge.js').SegmentMerger, lines: string[] = [], writer?: import('../src/distrib/segment-merge.js').CheckpointWriter) {
    const fingerprint = M.schemaFingerprint(FIELDS);
    const schema = M.schemaOfFingerprint(fingerprint);
    const store = await U.ReplicaStore.open(tmp.dir);
    tmp.stores.push(store);
    const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
    const replica = new R.ShardReplica('c', 'shard1', store, log);
    const { index } = await P.PersistedIndex.open({ dir: tmp.dir, schema, fingerprint, store, log, merger, ...(writer && { writer }), policy: { maxChanges: 1, segmentsPerTier: 4 } });
    replica.index = index;
    return { replica, index, store, schema };
  }

  /** What the documents in `store` answer, indexed from scratch. */
  async function expected(store: import('../src/ulog/index.js').ReplicaStore, schema: import('../src/index/index.js').CollectionSchema): Promise<unknown[]> {
    const fresh = new I.ShardIndex(schema);
    for await (const e of store.entries()) if (e.doc !== null) fresh.add(e.id, e.doc as import('../src/index/index.js').StoredDoc);
    return QUERIES.map((q) => fresh.search(q));
  }

  it('merges in a worker thread while writes go on, answers as the documents do, and a restart loads the merge', async () => {
    expect(M.MergeThread.available).toBe(true);
    const thread = new M.MergeThread({ log: pino({ level: 'silent' }) });
    const seen: Array<number | undefined> = [];
    try {
      const lines: string[] = [];
      const { replica, index, store, schema } = await openReplica(watched(thread, seen), lines);
      for (let b = 0; b < 5; b++) {
        await replica.apply(Array.from({ length: 200 }, (_, i) => put(b * 150 + i, b)));
        await index.checkpoint();
      }
      expect(index.index.segments).toHaveLength(5);
      const merging = index.merge();
      // The merge runs on another thread; meanwhile documents of its sources are replaced and deleted.
      await replica.apply([put(3, 5000), del(4), del(155), put(160, 5000), put(2000)]);
      expect(await merging).toBe(true);
      expect(seen).toHaveLength(1);
      expect(seen[0]).toBeDefined();
      expect(seen[0]).not.toBe(threadId);
      // The log names the thread that wrote the merge (how a node's log shows its merges leave its event loop).
      const merged = lines.map((l) => JSON.parse(l) as { msg: string; thread?: number }).filter((l) => l.msg === 'replica index segments merged');
      expect(merged.map((l) => l.thread)).toEqual([seen[0]]);
      // Four sources became one; the fifth stays, and the merge's commit sealed the writes made meanwhile.
      expect(index.index.segments).toHaveLength(3);
      const answers = QUERIES.map((q) => index.index.search(q));
      expect(answers).toEqual(await expected(store, schema));
      // Only the merged segments' files stay, and they load after a restart.
      await index.close();
      const names = index.index.segments.map((s) => s.name).sort();
      expect((await readdir(tmp.dir)).filter(P.isSegmentFile).sort()).toEqual(names);
      await store.close();
      tmp.stores.length = 0;
      const again = await openReplica(thread);
      expect(again.index.index.segments.map((s) => s.name).sort()).toEqual(names);
      expect(QUERIES.map((q) => again.index.index.search(q))).toEqual(answers);
    } finally {
      await thread.close();
    }
  });

  it("writes a checkpoint's files in its worker thread, byte for byte as the calling thread writes them, and a restart loads them", async () => {
    const thread = new M.MergeThread({ log: pino({ level: 'silent' }) });
    const seen: Array<number | undefined> = [];
    const writes: import('../src/distrib/segment-merge.js').CheckpointFiles[] = [];
    const writer: import('../src/distrib/segment-merge.js').CheckpointWriter = {
      writeCheckpoint: (files) => {
        writes.push(files);
        const written = thread.writeCheckpoint(files);
        seen.push(thread.threadId);
        return written;
      },
    };
    try {
      const lines: string[] = [];
      const { replica, index, store, schema } = await openReplica(M.IN_THREAD, lines, writer);
      const here = async (files: import('../src/distrib/segment-merge.js').CheckpointFiles): Promise<void> => {
        // The same files written by this thread, beside the worker's: the same bytes.
        const mine = await M.IN_THREAD.writeCheckpoint({ ...files, segments: files.segments.map((f) => ({ ...f, path: `${f.path}.here` })), commitPath: `${files.commitPath}.here` });
        expect(mine.segments.length).toBe(files.segments.length);
        for (const f of files.segments) expect((await readFile(`${f.path}.here`)).equals(await readFile(f.path))).toBe(true);
        expect((await readFile(`${files.commitPath}.here`)).equals(await readFile(files.commitPath))).toBe(true);
      };
      await replica.apply(Array.from({ length: 200 }, (_, i) => put(i)));
      expect(await index.checkpoint()).toBeGreaterThan(0);
      await here(writes[0]!);
      await replica.apply([put(3, 5000), del(4), put(500)]);
      expect(await index.checkpoint()).toBeGreaterThan(0);
      await here(writes[1]!);
      expect(seen).toHaveLength(2);
      for (const t of seen) {
        expect(t).toBeDefined();
        expect(t).not.toBe(threadId);
      }
      await index.settled();
      const written = lines.map((l) => JSON.parse(l) as { msg: string; thread?: number }).filter((l) => l.msg === 'replica index checkpoint written');
      expect(written.map((l) => l.thread)).toEqual(seen);
      const answers = QUERIES.map((q) => index.index.search(q));
      expect(answers).toEqual(await expected(store, schema));
      // What a kill -9 leaves: the worker's files are what a restart opens.
      await store.close();
      tmp.stores.length = 0;
      const again = await openReplica(M.IN_THREAD);
      expect(QUERIES.map((q) => again.index.index.search(q))).toEqual(answers);
    } finally {
      await thread.close();
    }
  });

  it('fails a merge whose source file is damaged as damage: the replica rebuilds its index from the documents', async () => {
    const thread = new M.MergeThread({ log: pino({ level: 'silent' }) });
    const lines: string[] = [];
    try {
      const { replica, index, store, schema } = await openReplica(thread, lines);
      for (let b = 0; b < 4; b++) {
        await replica.apply(Array.from({ length: 200 }, (_, i) => put(b * 200 + i)));
        await index.checkpoint();
      }
      const victim = join(tmp.dir, index.index.segments[0]!.name);
      const bytes = await readFile(victim);
      bytes[bytes.length >> 1] ^= 0xff;
      await writeFile(victim, bytes);
      expect(await index.merge()).toBe(false);
      const damage = lines.find((l) => l.includes('is damaged'));
      expect(damage).toMatch(/segment shardex-seg-\d+\.seg: .*checksum/);
      for (let k = 0; k < 200 && !lines.some((l) => l.includes('replica index rebuilt from the stored documents')); k++) await new Promise((r) => setTimeout(r, 25));
      expect(lines.some((l) => l.includes('replica index rebuilt from the stored documents'))).toBe(true);
      expect(QUERIES.map((q) => index.index.search(q))).toEqual(await expected(store, schema));
    } finally {
      await thread.close();
    }
  });

  it('ends its worker once idle and starts another for the next merge; once closed it refuses merges', async () => {
    const thread = new M.MergeThread({ log: pino({ level: 'silent' }), idleMs: 0 });
    const seen: Array<number | undefined> = [];
    const { replica, index, store, schema } = await openReplica(watched(thread, seen));
    const fill = async (from: number): Promise<void> => {
      for (let b = 0; b < 4; b++) {
        await replica.apply(Array.from({ length: 50 }, (_, i) => put(from + b * 50 + i)));
        await index.checkpoint();
      }
    };
    await fill(0);
    expect(await index.merge()).toBe(true);
    for (let k = 0; k < 200 && thread.threadId !== undefined; k++) await new Promise((r) => setTimeout(r, 10));
    expect(thread.threadId).toBeUndefined();
    await fill(1000);
    await fill(2000);
    expect(await index.merge()).toBe(true);
    expect(seen).toHaveLength(2);
    expect(seen.every((id) => id !== undefined && id !== threadId)).toBe(true);
    expect(seen[1]).not.toBe(seen[0]);
    expect(QUERIES.map((q) => index.index.search(q))).toEqual(await expected(store, schema));
    await thread.close();
    await expect(thread.merge({ sources: [], out: join(tmp.dir, 'x.seg'), seq: 0, fingerprint: M.schemaFingerprint(FIELDS) }, schema)).rejects.toThrow(/closed/);
  });
});
