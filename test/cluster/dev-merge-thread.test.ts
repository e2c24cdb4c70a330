// A node merges its index segments on its merge thread, not on its event loop: `shardex dev` run
// from the built CLI, with `--merge-segments-per-tier 2` so that two checkpoints make a merge.
// Every merge's log line names the worker thread that wrote the merged file (a merge run on the
// node's own thread names none), and every document is still found after the merges.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http } from '../support/cluster.js';
import { devLogLines, killAllDev, startDev, stopDev, type DevProcess } from '../support/dev-process.js';
import { pollUntil } from '../support/poll.js';

const DEADLINE_MS = 30_000;
const BATCH = 50;
const BATCHES = 3;

/** The log lines with message `msg` about the docs collection's replica. */
const logged = (dataDir: string, msg: string): Promise<Array<Record<string, unknown>>> => devLogLines(dataDir, msg, 'docs');

describe('shardex dev with a merge tier of two segments', () => {
  let dataDir: string;
  let dev: DevProcess;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'shardex-merge-thread-'));
    dev = await startDev(['--port', '0', '--data', dataDir, '--nodes', '1', '--shards', '1', '--replicas', '1', '--merge-segments-per-tier', '2']);
  });

  afterAll(async () => {
    await killAllDev();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('merges on its merge thread, and every document is still found', async () => {
    const url = dev.urls[0]!;
    // Each batch is checkpointed (by age) into a segment of its own before the next goes in.
    for (let b = 0; b < BATCHES; b++) {
      const docs = Array.from({ length: BATCH }, (_, k) => ({ id: `d${b * BATCH + k}`, title: `batch ${b} item ${k}` }));
      const r = await http('POST', `${url}/api/collections/docs/docs`, docs);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      await pollUntil(`checkpoint ${b + 1} of the docs replica`, async () => ((await logged(dataDir, 'replica index checkpoint written')).length > b ? true : undefined), { ms: DEADLINE_MS });
    }
    const merges = await pollUntil('a merge of the docs replica', async () => {
      const m = await logged(dataDir, 'replica index segments merged');
      return m.length > 0 ? m : undefined;
    }, { ms: DEADLINE_MS });
    for (const m of merges) expect(m.thread, JSON.stringify(m)).toEqual(expect.any(Number));
    const all = await http('GET', `${url}/api/collections/docs/search?q=batch&limit=0`);
    expect(all.status, JSON.stringify(all.body)).toBe(200);
    expect(all.body.total).toBe(BATCH * BATCHES);
    expect(await stopDev(dev)).toBe(0);
  });
});
