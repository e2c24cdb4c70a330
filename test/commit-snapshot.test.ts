// A commit point's snapshot outlives the copies reading it: a commit taken while a snapshot reader
// copies the previous one does not close it under the copy (which then failed with "Snapshot is
// not open" and hung the reader's refresh).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { ReplicaStore, type UpdateOp } from '../src/ulog/index.js';

it('finishes every copy of a commit point while newer commits are taken', { timeout: 60_000 }, async () => {
  const dir = await mkdtemp(join(tmpdir(), 'shardex-commit-copy-'));
  const store = await ReplicaStore.open(dir);
  try {
    let v = 1;
    const write = (): Promise<UpdateOp[]> => store.apply(Array.from({ length: 4 }, (_, i) => ({ id: `k${i}`, version: v++, doc: { id: `k${i}`, n: v } })));
    await write();
    await store.commit();
    let stop = false;
    const committer = (async () => {
      while (!stop) {
        await write();
        await store.commit();
        await new Promise((r) => setTimeout(r, 3));
      }
    })();
    const counts: number[] = [];
    try {
      for (let i = 0; i < 1500; i++) {
        let n = 0;
        for await (const _ of store.openCommit()!.entries()) n++;
        counts.push(n);
        if (i % 3 === 0) await new Promise((r) => setTimeout(r, 1));
      }
    } finally {
      stop = true;
      await committer;
    }
    expect(counts.filter((n) => n !== 4)).toEqual([]);
  } finally {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  }
});
