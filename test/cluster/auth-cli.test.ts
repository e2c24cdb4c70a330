// API keys through the built CLI (issue 13): `shardex dev` open by default and saying so, with
// --api-keys requiring keys (its own start-up requests included); the client commands send
// --api-key or SHARDEX_API_KEY; `shardex node` refuses to start open on an address other
// machines reach, and refuses a bad keys file or limit naming the flag.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, runCli as run } from '../support/cli-run.js';
import { http } from '../support/cluster.js';
import { killAllDev, startDev, stopDev, type DevProcess } from '../support/dev-process.js';
import { KEYS, bearer, keyEntries } from '../support/guarded-node.js';

let dir: string;
let keysFile: string;

beforeAll(async () => {
  for (const rel of ['node/cli.ts', 'node/run-node.ts', 'node/http/auth.ts', 'node/dev-threads.ts']) await assertBuilt(rel);
  dir = await mkdtemp(join(tmpdir(), 'shardex-auth-cli-'));
  keysFile = join(dir, 'keys.json');
  await writeFile(keysFile, JSON.stringify(keyEntries()));
});

afterAll(async () => {
  await killAllDev();
  await rm(dir, { recursive: true, force: true });
});

describe('shardex node', () => {
  it('refuses to start open on an address other machines reach, saying what to do (exit 2)', async () => {
    const r = await run(['node', '--zk', '127.0.0.1:1', '--host', '0.0.0.0', '--advertise-host', '127.0.0.1', '--port', '0', '--data', join(dir, 'n')]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain('--host 0.0.0.0 is reachable from other machines and no --api-keys are given');
    expect(r.stderr).toContain('--insecure');
  });

  // shardex reader takes --api-keys too (its /api/reader and /metrics), with the same checks.
  it.each(['node', 'reader'])('shardex %s refuses a malformed keys file, naming it and the flag (exit 2)', async (command) => {
    const bad = join(dir, `bad-${command}.json`);
    await writeFile(bad, JSON.stringify([{ name: 'ops', sha256: 'the-key-itself', roles: ['read'] }]));
    const r = await run([command, '--zk', '127.0.0.1:1', '--port', '0', '--data', join(dir, command), '--api-keys', bad]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`API keys file ${bad} (--api-keys)`);
    expect(r.stderr).toContain('sha256sum');
  });

  it('reads SHARDEX_API_KEYS_FILE, and refuses an empty one rather than run open (exit 2)', async () => {
    const r = await run(['node', '--zk', '127.0.0.1:1', '--port', '0', '--data', join(dir, 'n')], { SHARDEX_API_KEYS_FILE: '' });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain('--api-keys (or SHARDEX_API_KEYS_FILE) is empty');
  });

  it('refuses a limit out of its bounds, naming the flag (exit 2)', async () => {
    const r = await run(['node', '--zk', '127.0.0.1:1', '--api-keys', keysFile, '--max-result-window', '20000']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--max-result-window must be an integer from 1 to 10000');
  });
});

describe('shardex dev with --api-keys', () => {
  let dev: DevProcess;
  let url: string;

  beforeAll(async () => {
    dev = await startDev(['--nodes', '1', '--readers', '1', '--port', '0', '--shards', '1', '--replicas', '1', '--data', join(dir, 'dev-keys'), '--api-keys', keysFile]);
    url = dev.urls[0]!;
  });

  afterAll(async () => {
    if (dev) await stopDev(dev);
  });

  it('says in its banner that keys are required, and shows curl with the header', () => {
    const banner = dev.out.join('');
    expect(banner).toContain(`authentication: ON, 4 API key(s) from ${keysFile}`);
    expect(banner).toContain('-H "authorization: Bearer $SHARDEX_API_KEY"');
  });

  it('created its collection (its own requests carry a key) and answers 401 without one', async () => {
    expect((await http('GET', `${url}/api/cluster`)).status).toBe(401);
    const view = await http('GET', `${url}/api/cluster`, undefined, bearer(KEYS.reader));
    expect(view.status).toBe(200);
    expect(Object.keys(view.body.collections)).toContain('docs');
    expect((await http('GET', `${url}/health`)).status).toBe(200);
  });

  it('gives its snapshot readers the same keys: a reader answers 401 without one', async () => {
    const reader = /^ {2}reader1 {2}(http:\/\/\S+)/m.exec(dev.out.join(''))?.[1];
    expect(reader).toBeDefined();
    expect((await http('GET', `${reader}/api/reader`)).status).toBe(401);
    expect((await http('GET', `${reader}/api/reader`, undefined, bearer(KEYS.reader))).status).toBe(200);
    expect((await http('GET', `${reader}/health`)).status).toBe(200);
  });

  it('serves the client commands with --api-key or SHARDEX_API_KEY, and refuses them without (exit 1)', async () => {
    const added = await http('POST', `${url}/api/collections/docs/docs`, [{ id: 'cli-1', title: 'hello keys' }], bearer(KEYS.writer));
    expect(added.status, JSON.stringify(added.body)).toBe(200);
    const byFlag = await run(['get', 'docs', 'cli-1', '--url', url, '--api-key', KEYS.reader]);
    expect(byFlag.code, byFlag.stderr).toBe(0);
    expect(JSON.parse(byFlag.stdout)).toMatchObject({ id: 'cli-1' });
    const byEnv = await run(['get', 'docs', 'cli-1', '--url', url], { SHARDEX_API_KEY: KEYS.reader });
    expect(byEnv.code, byEnv.stderr).toBe(0);
    const without = await run(['get', 'docs', 'cli-1', '--url', url]);
    expect(without.code).toBe(1);
    expect(without.stderr).toContain('requires an API key');
  });
});

describe('shardex dev without keys', () => {
  it('runs open and says so in its banner', async () => {
    const dev = await startDev(['--nodes', '1', '--port', '0', '--shards', '1', '--replicas', '1', '--data', join(dir, 'dev-open')]);
    try {
      expect(dev.out.join('')).toContain('authentication: OFF, the cluster is open');
      expect((await http('GET', `${dev.urls[0]}/api/cluster`)).status).toBe(200);
    } finally {
      await stopDev(dev);
    }
  });
});
