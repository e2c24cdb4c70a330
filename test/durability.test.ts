// Durability of one replica store: with `request` every apply resolves only after a synced batch
// holds it; concurrent applies share one sync (group commit); `async` syncs on its interval; the
// fence and the data format survive a reopen; convergent recovery's reconcile.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Level } from 'level';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ReplicaStore, type StoreWrite, type UpdateOp } from '../src/ulog/index.js';
import { thrown } from './support/errors.js';

let dir: string;
const stores: ReplicaStore[] = [];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'shardex-durability-'));
});

afterEach(async () => {
  for (const s of stores.splice(0)) await s.close().catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
});

async function open(writes: StoreWrite[], mode: 'request' | 'async' = 'request', syncIntervalMs = 5000, name = 'r'): Promise<ReplicaStore> {
  const s = await ReplicaStore.open(join(dir, name), { durability: { mode, syncIntervalMs }, onWrite: (w) => writes.push(w) });
  stores.push(s);
  return s;
}

const op = (id: string, version: number): UpdateOp => ({ id, version, doc: { id, n: version } });

describe('durability request', () => {
  it('resolves an apply only after a synced batch that holds its versions', async () => {
    const writes: StoreWrite[] = [];
    const store = await open(writes);
    const acked: number[] = [];
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        store.apply([op(`d${i}`, i + 1)]).then(() => {
          // At the moment the apply resolves, a synced write with its version has completed.
          const synced = writes.filter((w) => w.sync).flatMap((w) => w.versions);
          expect(synced).toContain(i + 1);
          acked.push(i + 1);
        }),
      ),
    );
    expect(acked).toHaveLength(20);
    expect(writes.every((w) => w.sync)).toBe(true);
  });

  it('merges concurrent applies into fewer synced batches (group commit)', async () => {
    const writes: StoreWrite[] = [];
    const store = await open(writes);
    await Promise.all(Array.from({ length: 100 }, (_, i) => store.apply([op(`g${i}`, i + 1)])));
    const batches = writes.filter((w) => w.versions.length > 0);
    expect(batches.reduce((n, w) => n + w.applies, 0)).toBe(100);
    expect(batches.length).toBeLessThan(100);
    expect(Math.max(...batches.map((w) => w.applies))).toBeGreaterThan(1);
  });

  it('applies issued while a batch is being written go to disk together in the next one', async () => {
    const writes: StoreWrite[] = [];
    const store = await open(writes);
    const first = store.apply([op('a', 1)]);
    // The first batch is now queued; these join it or the one after it, never one sync each.
    const rest = Array.from({ length: 10 }, (_, i) => store.apply([op(`b${i}`, i + 2)]));
    await Promise.all([first, ...rest]);
    expect(writes.filter((w) => w.versions.length > 0).length).toBeLessThanOrEqual(2);
  });
});

describe('durability async', () => {
  it('writes without sync and syncs on its interval', async () => {
    const writes: StoreWrite[] = [];
    const store = await open(writes, 'async', 100);
    await store.apply([op('a', 1)]);
    expect(writes[0]).toMatchObject({ sync: false, versions: [1] });
    const deadline = Date.now() + 10_000;
    while (!writes.some((w) => w.sync) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(writes.some((w) => w.sync)).toBe(true);
  });

  it('can be switched to request at run time', async () => {
    const writes: StoreWrite[] = [];
    const store = await open(writes, 'async', 60_000);
    await store.apply([op('a', 1)]);
    store.setDurability({ mode: 'request', syncIntervalMs: 5000 });
    await store.apply([op('b', 2)]);
    expect(writes.map((w) => w.sync)).toEqual([false, true]);
  });
});

describe('fence and format across a reopen', () => {
  it('keeps the newest fence; an older one never replaces it', async () => {
    const store = await open([]);
    await store.apply([op('a', 1)], { fence: 5 });
    await store.apply([], { fence: 3 });
    expect(store.fence).toBe(5);
    await store.close();
    stores.splice(0);
    const again = await open([]);
    expect(again.fence).toBe(5);
  });

  it('keeps the fence through a reset (full copy)', async () => {
    const store = await open([]);
    await store.apply([], { fence: 9 });
    await store.clear();
    expect(store.fence).toBe(9);
    await store.close();
    stores.splice(0);
    expect((await open([])).fence).toBe(9);
  });

  it('refuses data written by another version, saying what to do', async () => {
    const path = join(dir, 'old');
    const db = new Level<string, string>(path);
    await db.put('d1', '{"id":"1","v":5,"doc":{"id":"1"}}');
    await db.close();
    const err = await ReplicaStore.open(path).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(thrown(() => {
      throw err;
    }).code).toBe('SHX_BAD_CONFIG');
    expect((err as Error).message).toContain(path);
    expect((err as Error).message).toContain('another Shardex version');
  });
});

describe('reconcile (convergent recovery)', () => {
  it('removes an entry the leader does not have and restores the leader entry of another, log included', async () => {
    const store = await open([]);
    await store.apply([op('keep', 10), op('stray', 11), op('over', 12)]);
    await store.apply([op('over', 13)]);
    const changed = await store.reconcile(
      [
        { id: 'stray', leader: undefined },
        { id: 'over', leader: { id: 'over', version: 12, doc: { id: 'over', n: 12 } } },
      ],
      (v) => v > 100,
    );
    expect(changed.map((c) => c.id).sort()).toEqual(['over', 'stray']);
    expect(store.versionOf('stray')).toBeUndefined();
    expect(await store.get('stray')).toBeUndefined();
    expect(store.versionOf('over')).toBe(12);
    expect((await store.updatesAfter(0, 100)).map((e) => e.version)).toEqual([10, 12]);
    expect(store.docCount).toBe(2);
    expect(store.maxVersion).toBe(12);
  });

  it('leaves an id alone whose version is newer than the ceiling (it came from the leader since)', async () => {
    const store = await open([]);
    await store.apply([op('x', 500)]);
    expect(await store.reconcile([{ id: 'x', leader: undefined }], (v) => v > 400)).toEqual([]);
    expect(store.versionOf('x')).toBe(500);
  });
});
