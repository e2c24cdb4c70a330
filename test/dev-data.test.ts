// The dev cluster's data dir (src/node/dev-data.ts): node data without a coordinator is refused
// with what to do, never started empty beside it; --reset wipes only what looks like ours.
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDevCoordinator, wipeDataDir } from '../src/node/dev-data.js';
import { silentLogger } from '../src/logger.js';
import type { ShardexError } from '../src/errors.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'shardex-devdata-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('the dev data dir', () => {
  it('refuses node data with no coordinator/, naming the dir and --reset', async () => {
    await mkdir(join(dir, 'node1', 'books', 'shard1'), { recursive: true });
    const err = (await openDevCoordinator(dir, silentLogger()).then(
      () => undefined,
      (e: unknown) => e,
    )) as ShardexError | undefined;
    expect(err?.code).toBe('SHX_BAD_CONFIG');
    expect(err?.message).toContain(dir);
    expect(err?.message).toContain('--reset');
    expect(await readdir(dir)).toEqual(['node1']);
  });

  it('wipes what looks like a Shardex data dir, and refuses one that does not', async () => {
    await mkdir(join(dir, 'node1'), { recursive: true });
    expect(await wipeDataDir(dir)).toBe(true);
    await mkdir(dir, { recursive: true });
    const other = join(dir, 'other');
    await mkdir(other);
    await writeFile(join(other, 'precious.txt'), 'keep me');
    const err = (await wipeDataDir(other).then(
      () => undefined,
      (e: unknown) => e,
    )) as ShardexError | undefined;
    expect(err?.code).toBe('SHX_BAD_CONFIG');
    expect(await readdir(other)).toEqual(['precious.txt']);
  });
});
