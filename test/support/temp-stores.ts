// A fresh temp dir per test and the replica stores a test opens in it, closed and removed after
// each test (even a failing one).
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach } from 'vitest';
import type { ReplicaStore } from '../../src/ulog/index.js';

export interface TempStores {
  /** This test's directory. */
  readonly dir: string;
  /** Stores to close after the test (push each one opened). */
  readonly stores: ReplicaStore[];
}

/** Registers the hooks in the calling describe (or file); read `dir` inside a test. */
export function useTempStores(prefix: string): TempStores {
  const state = { dir: '', stores: [] as ReplicaStore[] };
  beforeEach(async () => {
    state.dir = await mkdtemp(join(tmpdir(), `shardex-${prefix}-`));
  });
  afterEach(async () => {
    for (const s of state.stores.splice(0)) await s.close().catch(() => undefined);
    await rm(state.dir, { recursive: true, force: true });
  });
  return state;
}

/** Bytes of the LevelDB table files under `dir`, at any depth (a closed store's, or a node's data dir). */
export async function tableBytes(dir: string): Promise<number> {
  let total = 0;
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) total += await tableBytes(path);
    else if (e.name.endsWith('.ldb') || e.name.endsWith('.sst')) total += (await stat(path)).size;
  }
  return total;
}
