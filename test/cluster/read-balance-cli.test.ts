// Issue 12: `shardex read-balance set|get|erase` and `shardex read-slots [--reset]` through the
// built CLI (a child process; run `npm run build` first) against a 2-node cluster, with their
// output and exit codes: 0 ok, 1 refused by the cluster, 2 usage.
import { spawn } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type TestCluster } from '../support/cluster.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLI = join(ROOT, 'bin/shardex.js');

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

function run(args: string[]): Promise<Run> {
  const child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('shardex read-balance and read-slots', () => {
  let tc: TestCluster;
  let url: string;

  beforeAll(async () => {
    const [built, source] = await Promise.all([stat(join(ROOT, 'dist/node/cli-client.js')).catch(() => undefined), stat(join(ROOT, 'src/node/cli-client.ts'))]);
    if (!built || built.mtimeMs < source.mtimeMs) throw new Error('dist/ is older than src/: run `npm run build` before this test');
    tc = await startCluster({ nodes: 2, nodeOptions: { readBalance: { pollMs: 100 } } });
    url = tc.urls[0]!;
  });
  afterAll(async () => tc?.stop());

  it('sets, lists and erases settings', async () => {
    const set = await run(['read-balance', 'set', 'report', 'primary', '--weight', '2', '--slots', '3', '--url', url]);
    expect(set.stderr).toBe('');
    expect(set.code).toBe(0);
    expect(JSON.parse(set.stdout)).toEqual({ setting: { priority: 'report', target: 'primary', weight: 2, slots: 3 } });
    // Same (priority, target): updated, not added.
    expect((await run(['read-balance', 'set', 'report', 'primary', '--weight', '4', '--slots', '1', '--url', url])).code).toBe(0);
    expect((await run(['read-balance', 'set', 'report', 'lowcost', '--weight', '9', '--slots', '2', '--url', tc.urls[1]!])).code).toBe(0);

    const all = await run(['read-balance', 'get', '--url', url]);
    expect(all.code).toBe(0);
    expect(JSON.parse(all.stdout)).toEqual({
      settings: [
        { priority: 'report', target: 'lowcost', weight: 9, slots: 2 },
        { priority: 'report', target: 'primary', weight: 4, slots: 1 },
      ],
    });
    expect(JSON.parse((await run(['read-balance', 'get', '--target', 'primary', '--url', url])).stdout).settings).toHaveLength(1);
    expect(JSON.parse((await run(['read-balance', 'get', '--priority', 'nobody', '--url', url])).stdout)).toEqual({ settings: [] });

    const erased = await run(['read-balance', 'erase', 'report', 'lowcost', '--url', url]);
    expect(erased.code).toBe(0);
    expect(JSON.parse(erased.stdout)).toEqual({ removed: 1 });
    const again = await run(['read-balance', 'erase', 'report', 'lowcost', '--url', url]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/there is no read-balance setting for "report" on target "lowcost"; GET \/api\/read-balance lists them/);
  });

  it("prints every node's slots, and resets them", async () => {
    expect((await run(['read-balance', 'set', 'cli', 'primary', '--weight', '1', '--slots', '5', '--url', url])).code).toBe(0);
    // Every node applies it from coordination: the other one at its next poll.
    await expect
      .poll(async () => (await run(['read-slots', '--url', url])).stdout, { timeout: 30_000, interval: 100 })
      .toMatch(/^node2 +cli +primary +weight 1 +up +limit 5 +taken 0 +free 5 +queued 0$/m);
    const lines = await run(['read-slots', '--url', url]);
    expect(lines.code).toBe(0);
    expect(lines.stdout).toMatch(/^node1 +cli +primary +weight 1 +up +limit 5 +taken 0 +free 5 +queued 0$/m);

    const reset = await run(['read-slots', '--reset', '--node', 'node2', '--json', '--url', url]);
    expect(reset.code).toBe(0);
    const body = JSON.parse(reset.stdout) as { nodes: Array<{ node: string; slots: Array<{ priority: string; taken: number }> }> };
    expect(body.nodes.map((n) => n.node)).toEqual(['node2']);
    expect(body.nodes[0]!.slots.find((r) => r.priority === 'cli')).toMatchObject({ taken: 0 });

    const unknown = await run(['read-slots', '--node', 'node9', '--url', url]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/no live data node is named "node9"/);
  });

  it('exits 2 on a usage error and 1 on a setting the cluster refuses, naming the field', async () => {
    const notNumber = await run(['read-balance', 'set', 'report', 'primary', '--weight', 'high', '--slots', '1', '--url', url]);
    expect(notNumber.code).toBe(2);
    expect(notNumber.stderr).toMatch(/--weight must be an integer >= 0/);
    const missing = await run(['read-balance', 'set', 'report', 'primary', '--weight', '1', '--url', url]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/--slots/);
    const badName = await run(['read-balance', 'set', 'no spaces', 'primary', '--weight', '1', '--slots', '1', '--url', url]);
    expect(badName.code).toBe(1);
    expect(badName.stderr).toMatch(/bad read-balance setting: priority a priority name must match/);
    const tooBig = await run(['read-balance', 'set', 'report', 'primary', '--weight', '2000000', '--slots', '1', '--url', url]);
    expect(tooBig.code).toBe(1);
    expect(tooBig.stderr).toMatch(/weight .*<=1000000/);
  });

  it('a node refuses a bad --read-priority or --read-queue-size as a usage error naming the flag', async () => {
    const priority = await run(['node', '--zk', '127.0.0.1:1', '--read-priority', 'no spaces']);
    expect(priority.code).toBe(2);
    expect(priority.stderr).toMatch(/--read-priority/);
    const size = await run(['node', '--zk', '127.0.0.1:1', '--read-queue-size', '-3']);
    expect(size.code).toBe(2);
    expect(size.stderr).toMatch(/--read-queue-size must be an integer from 0 to 1000000/);
  });
});
