// The tidy-up after an index checkpoint removes the files no commit names. It runs outside the
// checkpoint lock, so another checkpoint may write a segment while it lists the directory: that
// file is in the listing although its segment was not in the index when the tidy-up began. Here
// the listing is made to wait for such a checkpoint, every time; then checkpoints, merges and
// writes run side by side in random orders, with the directory's listings and removals delayed
// at random, and a restart must load what the last commit names (and the last commit point's
// files stay for readers).
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { pino } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { isSegmentFile, PersistedIndex, type CheckpointPolicy } from '../src/distrib/index-persistence.js';
import { ShardReplica } from '../src/distrib/replica.js';
import { parseSchema } from '../src/index/index.js';
import { ReplicaStore, type CommitPoint, type UpdateOp } from '../src/ulog/index.js';
import { useTempStores } from './support/temp-stores.js';

/** `run`: once, before the next listing of a directory is read; `jitter`: a delay of up to that many ms before each listing and removal. */
const fsHooks = vi.hoisted(() => ({ run: undefined as undefined | (() => Promise<void>), jitter: 0 }));

vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>();
  const pause = (): Promise<void> | undefined => (fsHooks.jitter > 0 ? new Promise((resolve) => setTimeout(resolve, Math.random() * fsHooks.jitter)) : undefined);
  const listed = (async (...args: Parameters<typeof fs.readdir>) => {
    const run = fsHooks.run;
    fsHooks.run = undefined;
    await run?.();
    await pause();
    return fs.readdir(...args);
  }) as typeof fs.readdir;
  const removed = (async (...args: Parameters<typeof fs.rm>) => {
    await pause();
    return fs.rm(...args);
  }) as typeof fs.rm;
  const mocked = { ...fs, readdir: listed, rm: removed };
  return { ...mocked, default: mocked };
});

const log = pino({ level: 'silent' });
const schema = parseSchema({ title: 'text' });
const FINGERPRINT = 'race-schema-1';

describe('the tidy-up after an index checkpoint', () => {
  const tmp = useTempStores('index-race');

  // No merges by default: every checkpoint adds one segment.
  const NO_MERGES = { maxChanges: 1, segmentsPerTier: 100, idleMergeMs: 3_600_000 };

  async function openReplica(policy: Partial<CheckpointPolicy> = NO_MERGES, dir = tmp.dir): Promise<{ replica: ShardReplica; index: PersistedIndex; report: { method: string; problem?: string } }> {
    const store = await ReplicaStore.open(dir);
    tmp.stores.push(store);
    const replica = new ShardReplica('c', 'shard1', store, log);
    const { index, report } = await PersistedIndex.open({ dir, schema, fingerprint: FINGERPRINT, store, log, policy });
    replica.index = index;
    return { replica, index, report };
  }

  let version = 0;
  // The directories of the property's runs.
  const dirs: string[] = [];
  const batch = (b: number): UpdateOp[] => Array.from({ length: 20 }, (_, i) => ({ id: `d${b}-${i}`, version: ++version, doc: { id: `d${b}-${i}`, title: `word${i} batch${b}` } }));

  it('keeps the file of a segment checkpointed while it lists the directory, and a restart loads that commit', async () => {
    const { replica, index } = await openReplica();
    await replica.apply(batch(0));
    await index.checkpoint();

    await replica.apply(batch(1));
    // The tidy-up of this checkpoint lists the directory once a third segment is on disk and committed.
    let during = false;
    fsHooks.run = async () => {
      await replica.apply(batch(2));
      during = await index.maybeCheckpoint();
    };
    await index.checkpoint();
    await index.settled();
    expect(during).toBe(true);
    expect(fsHooks.run).toBeUndefined();

    const names = index.index.segments.map((s) => s.name);
    expect(names).toHaveLength(3);
    expect((await readdir(tmp.dir)).filter(isSegmentFile).sort()).toEqual([...names].sort());

    // kill -9 here: the commit names the three files, and the next open loads them without reading a document again.
    for (const s of tmp.stores.splice(0)) await s.close();
    const reopened = await openReplica();
    expect(reopened.report).toMatchObject({ method: 'loaded', replayed: 0, segments: 3 });
    expect(reopened.index.index.size).toBe(60);
    expect(reopened.index.index.search({ q: 'batch2' }).total).toBe(20);
  });

  type Step = { readonly kind: 'write'; readonly ids: readonly number[]; readonly del: boolean } | { readonly kind: 'checkpoint' | 'commit point' | 'merge' | 'idle merge' | 'settle' | 'pause' | 'restart' };
  const step: fc.Arbitrary<Step> = fc.oneof(
    { weight: 4, arbitrary: fc.record({ kind: fc.constant('write' as const), ids: fc.array(fc.nat(59), { minLength: 1, maxLength: 12 }), del: fc.boolean() }) },
    { weight: 3, arbitrary: fc.constant({ kind: 'checkpoint' as const }) },
    { weight: 1, arbitrary: fc.constantFrom({ kind: 'commit point' as const }, { kind: 'merge' as const }, { kind: 'idle merge' as const }, { kind: 'settle' as const }, { kind: 'pause' as const }, { kind: 'restart' as const }) },
  );

  it('keeps every file the last commit names while checkpoints, merges and writes run side by side, so a restart loads it with the same answers, and a restart between them loses no write', async () => {
    fsHooks.jitter = 3;
    try {
      await fc.assert(
        fc.asyncProperty(fc.array(step, { minLength: 5, maxLength: 40 }), async (steps) => {
          for (const s of tmp.stores.splice(0)) await s.close();
          const dir = await mkdtemp(join(tmpdir(), 'shardex-index-race-'));
          dirs.push(dir);
          // Merges of two segments at once, however small.
          const policy = { maxChanges: 1, segmentsPerTier: 2, floorSegmentDocs: 4, idleMergeMs: 0 };
          let { replica, index } = await openReplica(policy, dir);
          const live = new Set<string>();
          let running: Promise<unknown>[] = [];
          let point: CommitPoint | undefined;
          const ids = (ix: PersistedIndex): string[] => ix.index.search({ q: '*', sort: 'id asc', limit: 100 }).hits.map((h) => h.id);
          // At least one write: an index that never held a document has no commit to load.
          for (const s of [{ kind: 'write' as const, ids: [60], del: false }, ...steps]) {
            if (s.kind === 'write') {
              const ops = s.ids.map((i) => ({ id: `d${i}`, version: ++version, doc: s.del ? null : { id: `d${i}`, title: `word${i % 7} v${version}` } }));
              await replica.apply(ops);
              for (const op of ops) op.doc === null ? live.delete(op.id) : live.add(op.id);
            } else if (s.kind === 'checkpoint') running.push(index.maybeCheckpoint());
            else if (s.kind === 'commit point') running.push(index.commit().then((p) => (point = p)));
            else if (s.kind === 'merge' || s.kind === 'idle merge') running.push(index.merge({ idle: s.kind === 'idle merge' }));
            else if (s.kind === 'settle') await index.settled();
            else if (s.kind === 'pause') await new Promise((resolve) => setTimeout(resolve, 2));
            else {
              // kill -9 once what runs is done (every write was synced): the journal after the last commit is replayed.
              await Promise.all(running);
              running = [];
              point = undefined;
              for (const s of tmp.stores.splice(0)) await s.close();
              ({ replica, index } = await openReplica(policy, dir));
              expect(ids(index)).toEqual([...live].sort());
            }
          }
          await Promise.all(running);
          await index.checkpoint();
          // Merges started by the last checkpoints, and their own checkpoints.
          for (let i = 0; i < 20 && (await index.merge()); i++);
          await index.settled();
          // The last commit point's files stay for readers to copy, whatever was merged or checkpointed since.
          if (point !== undefined) {
            const held = await index.openCommitted(point);
            expect(held).toBeDefined();
            for (const f of held!.files) {
              expect((await stat(join(dir, f.name))).size).toBe(f.bytes);
              await f.handle.close();
            }
          }
          const answers = index.index.search({ q: '*', sort: 'id asc', limit: 100 });
          expect(ids(index)).toEqual([...live].sort());

          for (const s of tmp.stores.splice(0)) await s.close();
          const reopened = await openReplica(NO_MERGES, dir);
          expect(reopened.report).toMatchObject({ method: 'loaded', replayed: 0 });
          expect(reopened.report.problem).toBeUndefined();
          expect(reopened.index.index.search({ q: '*', sort: 'id asc', limit: 100 })).toEqual(answers);
          expect((await readdir(dir)).filter(isSegmentFile).sort()).toEqual(reopened.index.index.segments.map((s) => s.name).sort());
        }),
        { numRuns: 40 },
      );
    } finally {
      fsHooks.jitter = 0;
      for (const s of tmp.stores.splice(0)) await s.close();
      for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
    }
  });
});
