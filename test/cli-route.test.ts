// `shardex route` and `shardex ranges` (issue 2, item 2), run from the built CLI as a user runs them.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const CLI = fileURLToPath(new URL('../bin/shardex.js', import.meta.url));

function shardex(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

describe('shardex route', () => {
  it("prints one JSON line per id with Solr's hash and shard", async () => {
    const r = await shardex('route', '--shards', '4', 'b', 'c', 'd/32!baz', 'foo/0!e', 'contact');
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.map((l) => l.shard)).toEqual(['shard1', 'shard2', 'shard3', 'shard4', 'shard2']);
    expect(lines[0]).toEqual({ id: 'b', hash: 0x95de7e03 | 0, shard: 'shard1' });
    expect(lines[4]).toEqual({ id: 'contact', hash: -541354036, shard: 'shard2' });
  });

  it('routes with the plain hash router when asked', async () => {
    const r = await shardex('route', '--shards', '4', '--router', 'hash', 'contact!0000000KISS');
    expect(JSON.parse(r.stdout)).toMatchObject({ id: 'contact!0000000KISS' });
    expect(JSON.parse(r.stdout).hash).not.toBe(0xdfbbe260 | 0);
    const composite = await shardex('route', '--shards', '4', 'contact!0000000KISS');
    expect(JSON.parse(composite.stdout).hash).toBe(0xdfbbe260 | 0);
  });

  it('exits 2 with a message for a bad shard count or router', async () => {
    const zero = await shardex('route', '--shards', '0', 'x');
    expect(zero.code).toBe(2);
    expect(zero.stderr).toMatch(/--shards must be an integer from 1 to 256/);
    const router = await shardex('route', '--shards', '2', '--router', 'implicit', 'x');
    expect(router.code).toBe(2);
    expect(router.stderr).toMatch(/unknown router "implicit"/);
  });
});

describe('shardex ranges', () => {
  it('prints the compositeId ranges, one per line', async () => {
    const r = await shardex('ranges', '--shards', '3');
    expect(r.stdout.trim().split('\n')).toEqual(['shard1 80000000-d554ffff', 'shard2 d5550000-2aa9ffff', 'shard3 2aaa0000-7fffffff']);
  });

  it('prints the plain hash ranges with --router hash', async () => {
    const r = await shardex('ranges', '--shards', '3', '--router', 'hash');
    expect(r.stdout.trim().split('\n')).toEqual(['shard1 80000000-d5555555', 'shard2 d5555556-2aaaaaab', 'shard3 2aaaaaac-7fffffff']);
  });

  it('prints 2 shards as 80000000-ffffffff and 0-7fffffff', async () => {
    const r = await shardex('ranges', '--shards', '2');
    expect(r.stdout.trim().split('\n')).toEqual(['shard1 80000000-ffffffff', 'shard2 0-7fffffff']);
  });
});
