// The config schema through the built CLI (`npm run build` first): `shardex dev` (what `npm start`
// runs, each node in its own thread) started from a YAML config file, with a flag and an
// environment variable over it, creates its collection with the file's fields and autoCommit and
// gives its nodes (read priority, read deadline, limits) and readers (snapshot expiry) the file's
// tunables; bad files, keys and values stop a process at start with exit code 2 and a message
// naming the key, the flag or the variable.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.js';
import { ROOT, assertBuilt, runCli } from '../support/cli-run.js';
import { http } from '../support/cluster.js';
import { killAllDev, startDev, stopDev, type DevProcess } from '../support/dev-process.js';

let dir: string;
beforeAll(async () => {
  await assertBuilt('node/config.ts');
  await assertBuilt('node/dev-threads.ts');
  dir = await mkdtemp(join(tmpdir(), 'shardex-config-cli-'));
});
afterAll(async () => {
  await killAllDev();
  await rm(dir, { recursive: true, force: true });
});

describe('shardex dev --config FILE', () => {
  let dev: DevProcess | undefined;
  let url: string;

  beforeAll(async () => {
    const config = join(dir, 'dev.yaml');
    await writeFile(
      config,
      [
        'nodes: 1',
        'replicas: 1',
        'shards: 1 # --shards 2 below wins',
        'readers: 1',
        'fields:',
        '  title: text',
        '  price: number',
        'autoCommit: "off"',
        'snapshotExpiry: 1234',
        'maxBatchDocs: 2 # SHARDEX_MAX_BATCH_DOCS=3 below wins',
        'forwardRetries: 2',
        'readPriority: report',
        'readTimeout: 300',
        '',
      ].join('\n'),
    );
    // The child inherits this process's environment: set only for its start.
    process.env.SHARDEX_MAX_BATCH_DOCS = '3';
    try {
      dev = await startDev(['--config', config, '--shards', '2', '--port', '0', '--data', join(dir, 'data')]);
    } finally {
      delete process.env.SHARDEX_MAX_BATCH_DOCS;
    }
    url = dev.urls[0]!;
  });

  afterAll(async () => {
    if (dev) await stopDev(dev);
  });

  it('creates its collection with the fields and autoCommit of the file, and the shards of the flag', async () => {
    const res = await http('GET', `${url}/api/collections/docs`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ numShards: 2, replicationFactor: 1, autoCommitMs: 0, fields: { title: 'text', price: 'number' } });
    const bad = await http('POST', `${url}/api/collections/docs/docs`, [{ id: '1', price: 'cheap' }]);
    expect(bad.status).toBe(400);
    expect(bad.body.code).toBe('SHX_BAD_DOCUMENT');
  });

  it('gives its readers the snapshot expiry of the file', async () => {
    const res = await http('GET', `${url}/api/readers`);
    expect(res.body.readers).toEqual([expect.objectContaining({ name: 'reader1', snapshotExpiryMs: 1234 })]);
  });

  it('takes a limit from the environment over the file', async () => {
    const docs = (n: number) => Array.from({ length: n }, (_, i) => ({ id: `d${i}`, title: 'x', price: i }));
    expect((await http('POST', `${url}/api/collections/docs/docs`, docs(3))).status).toBe(200);
    const over = await http('POST', `${url}/api/collections/docs/docs`, docs(4));
    expect(over.status).toBe(400);
    expect(over.body).toMatchObject({ code: 'SHX_LIMIT_EXCEEDED', limit: 'maxBatchDocs', value: 3 });
  });

  it("gives its nodes the file's read priority and read deadline", async () => {
    // No free slot for the default priority: a read that names none waits, until its deadline.
    expect((await http('PUT', `${url}/api/read-balance/report/primary`, { weight: 1, slots: 0 })).status).toBe(200);
    const read = await http('GET', `${url}/api/collections/docs/docs/d1`);
    expect(read.status).toBe(504);
    expect(read.body.code).toBe('SHX_TIMEOUT');
    expect((await http('GET', `${url}/api/collections/docs/docs/d1?priority=other`)).status).toBe(200);
  });
});

describe('the threaded dev cluster from code, built (what `npm start` runs, as a test can start it)', () => {
  let cluster: { start(): Promise<void>; stop(): Promise<void>; readonly nodes: Array<{ readonly http: string }> } | undefined;
  afterAll(async () => {
    await cluster?.stop();
  });

  it('creates its collection with every part of its spec: fields, autoCommit, durability', async () => {
    // Its worker threads run the built module (a worker cannot load TypeScript under Node 20).
    const { ThreadedDevCluster } = (await import(join(ROOT, 'dist/node/dev-threads.js'))) as typeof import('../../src/node/dev-threads.js');
    cluster = new ThreadedDevCluster({
      nodes: 1,
      readers: 0,
      port: 0,
      dataDir: join(dir, 'threads'),
      logFile: join(dir, 'threads.log'),
      logger: silentLogger(),
      node: { maxInFlight: 4, forwardRetries: 1 },
      collection: { name: 'shop', numShards: 2, replicationFactor: 1, router: 'hash', fields: { price: 'number' }, autoCommitMs: 2000, durability: 'async', syncIntervalMs: 500 },
    });
    await cluster.start();
    const res = await http('GET', `${cluster.nodes[0]!.http}/api/collections/shop`);
    expect(res.body).toMatchObject({ router: 'hash', fields: { price: 'number' }, autoCommitMs: 2000, durability: 'async', syncIntervalMs: 500 });
  });
});

describe('refused at start (exit 2), naming what was wrong', () => {
  it('an unknown key in the dev config file', async () => {
    const config = join(dir, 'unknown.yaml');
    await writeFile(config, 'nodes: 1\nmaxInflight: 4\n');
    const r = await runCli(['dev', '--config', config, '--port', '0', '--data', join(dir, 'never')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`config file ${config}: key \`maxInflight\` is not an option of \`shardex dev\` (did you mean \`maxInFlight\`?)`);
  });

  it('a bad value in a node config file (JSON)', async () => {
    const config = join(dir, 'node.json');
    await writeFile(config, JSON.stringify({ zk: '127.0.0.1:1', maxInFlight: 0 }));
    const r = await runCli(['node', '--config', config]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`config file ${config}: key \`maxInFlight\` must be an integer from 1 to 10000, got 0`);
  });

  it('a config file that does not parse', async () => {
    const config = join(dir, 'broken.yaml');
    await writeFile(config, 'zk: [127.0.0.1:1\n');
    const r = await runCli(['reader', '--config', config]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`config file ${config} is not valid YAML`);
  });

  it('a bad environment variable, naming it', async () => {
    const r = await runCli(['reader', '--zk', '127.0.0.1:1'], { SHARDEX_MAX_SCANS: 'many' });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("SHARDEX_MAX_SCANS must be an integer from 1 to 1024, got 'many'");
  });

  it('a bad flag, naming it, even when the file has a good value', async () => {
    const config = join(dir, 'good.yaml');
    await writeFile(config, 'zk: 127.0.0.1:1\nreplicaRetries: 2\n');
    const r = await runCli(['node', '--config', config, '--replica-retries', 'x']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("--replica-retries must be an integer from 0 to 1000, got 'x'");
  });
});

describe('--help', () => {
  it('shows every tunable with its default and its variable', async () => {
    const r = await runCli(['node', '--help']);
    expect(r.code).toBe(0);
    const help = r.stdout.replace(/\s+/g, ' ');
    for (const [flag, env] of [
      ['--max-in-flight', 'SHARDEX_MAX_IN_FLIGHT'],
      ['--forward-retries', 'SHARDEX_FORWARD_RETRIES'],
      ['--replica-retries', 'SHARDEX_REPLICA_RETRIES'],
      ['--config', 'SHARDEX_CONFIG'],
    ]) {
      expect(help).toContain(flag);
      expect(help).toContain(`env ${env}`);
    }
  });
});
