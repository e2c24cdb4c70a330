// A fresh temp dir per test and the replica stores a test opens in it, closed and removed after
// each test (even a failing one).
import { mkdtemp, rm } from 'node:fs/promises';
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
