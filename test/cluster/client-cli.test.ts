// Issue 6, "what it must show" 5: `shardex import` through the built CLI (a child process)
// against a 3-node cluster: progress on stderr, bad lines reported with their line numbers
// while the good ones are written, exit code 1 for a file with bad lines; and the other
// client subcommands (export, get, cluster) with their exit codes.
// The 100,000 lines (short bodies). On the cluster `npm start` runs (each node in a worker thread).
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDocs } from '../../src/corpus.js';
import { startThreadedCluster, type ThreadedTestCluster } from '../support/cluster.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLI = join(ROOT, 'bin/shardex.js');
const LINES = 100_000;
const BAD = new Map<number, RegExp>([
  [10, /^line 10: not valid JSON/m],
  [20, /^line 20: document \d+ has no "id"; nothing was written$/m],
  [30, /^line 30: document \d+ is an array, not a JSON object; nothing was written$/m],
]);

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

interface Running {
  readonly child: ReturnType<typeof spawn>;
  readonly done: Promise<Run>;
  stderr(): string;
}

function start(args: string[]): Running {
  const child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
  const done = new Promise<Run>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
  return { child, done, stderr: () => stderr };
}

function run(args: string[]): Promise<Run> {
  const r = start(args);
  r.child.stdin!.end();
  return r.done;
}

/** A loopback port nobody listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

function build(): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn('npm', ['run', 'build'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')));
    child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout: output, stderr: '' }));
  });
}

describe('shardex client commands against a 3-node cluster', () => {
  let tc: ThreadedTestCluster;
  let dir: string;
  let file: string;
  let url: string;
  const good = new Set<string>();

  beforeAll(async () => {
    const built = await build();
    if (built.code !== 0) throw new Error(`npm run build failed:\n${built.stdout}`);
    dir = await mkdtemp(join(tmpdir(), 'shardex-cli-'));
    tc = await startThreadedCluster({ nodes: 3, collection: { name: 'docs', numShards: 4, replicationFactor: 2, router: 'compositeId' } });
    url = tc.urls[1]!;
    const lines: string[] = [];
    let n = 0;
    for (const doc of generateDocs({ count: LINES, seed: 41, words: 10 })) {
      n++;
      if (n === 10) lines.push('{"id": "broken", ');
      else if (n === 20) lines.push(JSON.stringify({ title: doc.title }));
      else if (n === 30) lines.push(JSON.stringify([doc]));
      else {
        lines.push(JSON.stringify(doc));
        good.add(doc.id);
      }
    }
    file = join(dir, 'docs.ndjson');
    await writeFile(file, lines.join('\n') + '\n');
  });

  afterAll(async () => {
    await tc?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  // 100,000 lines through a 3-node cluster on 2 cores: about 30 s, more on a loaded machine.
  it('import writes the good lines, reports each bad line by number, and exits 1', { timeout: 180_000 }, async () => {
    const r = await run(['import', 'docs', file, '--url', url, '--batch-size', '250']);
    for (const pattern of BAD.values()) expect(r.stderr).toMatch(pattern);
    expect(r.stderr).toMatch(new RegExp(`^done: ${(LINES - BAD.size).toLocaleString('en-US')} docs written \\| [\\d,]+ docs/s \\| 3 bad line\\(s\\) \\| 0 failed \\| in \\d+`, 'm'));
    expect(r.code).toBe(1);
  });

  it('export writes every document as NDJSON to stdout', async () => {
    const r = await run(['export', 'docs', '--url', url, '--batch-size', '700']);
    expect(r.code).toBe(0);
    const ids = r.stdout.trim().split('\n').map((l) => (JSON.parse(l) as { id: string }).id);
    expect(ids.length).toBe(good.size);
    expect(new Set(ids)).toEqual(good);
    expect(r.stderr).toContain(`exported ${good.size.toLocaleString('en-US')} document(s) from 4 shard(s)`);
  });

  it('import from stdin prints progress lines while it runs and exits 0 when every line is good', async () => {
    const p = start(['import', 'docs', '-', '--url', url, '--progress-interval', '20', '--batch-size', '50']);
    const docs = [...generateDocs({ count: 200, seed: 42, start: 100_000 })];
    p.child.stdin!.write(docs.slice(0, 100).map((d) => JSON.stringify(d) + '\n').join(''));
    // The importer waits for more input; its progress ticker keeps reporting meanwhile.
    await expect.poll(() => /^100 docs written \| [\d,]+ docs\/s \| 0 bad line\(s\) \| 0 failed$/m.test(p.stderr()), { timeout: 30_000 }).toBe(true);
    p.child.stdin!.end(docs.slice(100).map((d) => JSON.stringify(d) + '\n').join(''));
    const r = await p.done;
    expect(r.stderr).toMatch(/^done: 200 docs written \|/m);
    expect(r.code).toBe(0);
  });

  it('get prints a document, and exits 1 for one that does not exist', async () => {
    const id = [...good][7]!;
    const found = await run(['get', 'docs', id, '--url', url]);
    expect(found.code).toBe(0);
    expect(JSON.parse(found.stdout)).toMatchObject({ id, _shard_: expect.stringMatching(/^shard[1-4]$/) });
    const missing = await run(['get', 'docs', 'no-such-doc', '--url', url]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('not found');
  });

  it('search prints the result, counting the total as far as --track-total-hits asks', async () => {
    // The most frequent title word: every shard's segments hold more matches than the count asks for.
    const freq = new Map<string, number>();
    for (const d of generateDocs({ count: 5000, seed: 41, words: 10 })) for (const w of new Set(d.title.split(' '))) freq.set(w, (freq.get(w) ?? 0) + 1);
    const word = [...freq].sort((a, b) => b[1] - a[1])[0]![0];
    const exact = await run(['search', 'docs', word, '--url', url, '--limit', '3']);
    expect(exact.code, exact.stderr).toBe(0);
    const all = JSON.parse(exact.stdout) as { total: number; totalRelation?: string; hits: unknown[] };
    expect(all.totalRelation).toBeUndefined();
    expect(all.total).toBeGreaterThan(10_000);
    const bounded = await run(['search', 'docs', word, '--url', url, '--limit', '3', '--track-total-hits', '10']);
    expect(bounded.code, bounded.stderr).toBe(0);
    const some = JSON.parse(bounded.stdout) as { total: number; totalRelation?: string; hits: unknown[] };
    expect(some.hits).toEqual(all.hits);
    expect(some.totalRelation).toBe('gte');
    expect(some.total).toBeGreaterThanOrEqual(10);
    expect(some.total).toBeLessThanOrEqual(all.total);
    const bad = await run(['search', 'docs', word, '--url', url, '--track-total-hits', 'many']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('must be true, false or an integer >= 0');
  });

  it('cluster prints shards, ranges, leaders and replica states', async () => {
    const r = await run(['cluster', '--url', url]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('3 live data node(s), 0 reader(s)');
    expect(r.stdout).toContain('readers: none');
    expect(r.stdout).toContain('collection docs: router compositeId, 4 shard(s) x 2 replica(s)');
    expect(r.stdout).toMatch(/^ {2}shard1 {2}80000000-bfffffff {2}leader node\d +replicas node\d \(active\), node\d \(active\)$/m);
    expect(r.stdout).toMatch(/^ {2}shard3 {2}0-3fffffff {9}leader node\d/m);
  });

  it('exits 2 on a usage error and 1 when no node answers', async () => {
    expect((await run(['import', 'docs'])).code).toBe(2);
    expect((await run(['get', 'docs', 'x', '--url', url, '--zk', '127.0.0.1:2181'])).code).toBe(2);
    const down = await run(['get', 'docs', 'x', '--url', `http://127.0.0.1:${await closedPort()}`]);
    expect(down.code).toBe(1);
    expect(down.stderr).toContain('could not read the cluster state');
  });
});
