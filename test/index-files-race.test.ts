// The tidy-up after an index checkpoint removes the files no commit names. It runs outside the
// checkpoint lock, so another checkpoint may write a segment while it lists the directory: that
// file is in the listing although its segment was not in the index when the tidy-up began. Here
// the listing is made to wait for such a checkpoint, every time.
import { readdir } from 'node:fs/promises';
import { pino } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { isSegmentFile, PersistedIndex } from '../src/distrib/index-persistence.js';
import { ShardReplica } from '../src/distrib/replica.js';
import { parseSchema } from '../src/index/index.js';
import { ReplicaStore, type UpdateOp } from '../src/ulog/index.js';
import { useTempStores } from './support/temp-stores.js';

/** Run, once, before the next listing of a directory is read. */
const beforeListing = vi.hoisted(() => ({ run: undefined as undefined | (() => Promise<void>) }));

vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>();
  const listed = (async (...args: Parameters<typeof fs.readdir>) => {
    const run = beforeListing.run;
    beforeListing.run = undefined;
    await run?.();
    return fs.readdir(...args);
  }) as typeof fs.readdir;
  return { ...fs, readdir: listed, default: { ...fs, readdir: listed } };
});

const log = pino({ level: 'silent' });
const schema = parseSchema({ title: 'text' });
const FINGERPRINT = 'race-schema-1';

describe('the tidy-up after an index checkpoint', () => {
  const tmp = useTempStores('index-race');

  async function openReplica(): Promise<{ replica: ShardReplica; index: PersistedIndex; report: { method: string } }> {
    const store = await ReplicaStore.open(tmp.dir);
    tmp.stores.push(store);
    const replica = new ShardReplica('c', 'shard1', store, log);
    // No merges: every checkpoint adds one segment.
    const { index, report } = await PersistedIndex.open({ dir: tmp.dir, schema, fingerprint: FINGERPRINT, store, log, policy: { maxChanges: 1, segmentsPerTier: 100, idleMergeMs: 3_600_000 } });
    replica.index = index;
    return { replica, index, report };
  }

  let version = 0;
  const batch = (b: number): UpdateOp[] => Array.from({ length: 20 }, (_, i) => ({ id: `d${b}-${i}`, version: ++version, doc: { id: `d${b}-${i}`, title: `word${i} batch${b}` } }));

  it('keeps the file of a segment checkpointed while it lists the directory, and a restart loads that commit', async () => {
    const { replica, index } = await openReplica();
    await replica.apply(batch(0));
    await index.checkpoint();

    await replica.apply(batch(1));
    // The tidy-up of this checkpoint lists the directory once a third segment is on disk and committed.
    let during = false;
    beforeListing.run = async () => {
      await replica.apply(batch(2));
      during = await index.maybeCheckpoint();
    };
    await index.checkpoint();
    await index.settled();
    expect(during).toBe(true);
    expect(beforeListing.run).toBeUndefined();

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
});
