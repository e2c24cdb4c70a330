// API keys and roles (issue 13, "what it must show" 1, the HTTP part): every endpoint with no
// key, a wrong key, and a key of each role; a refused request changes nothing; the keys file is
// validated; keys never reach the logs; the smart client sends its key.
import { Writable } from 'node:stream';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShardexClient } from '../src/client/index.js';
import { buildHttp } from '../src/node/http/app.js';
import { ApiKeyRing, keyDigest, loadApiKeys, parseApiKeys, type Access } from '../src/node/http/auth.js';
import { checkOpenBinding, isLoopback } from '../src/node/run-node.js';
import { KEYS, KEY_ROLES, bearer, keyEntries, startGuardedNode, type GuardedNode } from './support/guarded-node.js';

const C = 'books';
let g: GuardedNode;

beforeAll(async () => {
  // Two nodes, one shard each: writes and reads through node1 reach node2's shard over gRPC.
  g = await startGuardedNode({ apiKeys: keyEntries() }, { nodes: 2, collection: C });
  const seed = await g.app.inject({ method: 'POST', url: `/api/collections/${C}/docs`, headers: bearer(KEYS.writer), payload: [{ id: 'k1', title: 'dune' }, { id: 'k2', title: 'emma' }] });
  expect(seed.statusCode, seed.body).toBe(200);
});

afterAll(async () => {
  await g?.stop();
});

interface Endpoint {
  readonly method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** The route as registered. */
  readonly route: string;
  /** The request sent (when allowed, it must not remove the test's data). */
  readonly url: string;
  readonly body?: unknown;
  readonly access: Access;
}

// Every route and what it needs: the README's table.
const ENDPOINTS: Endpoint[] = [
  { method: 'GET', route: '/health', url: '/health', access: 'public' },
  { method: 'GET', route: '/health/live', url: '/health/live', access: 'public' },
  { method: 'GET', route: '/', url: '/', access: 'public' },
  { method: 'GET', route: '/api/cluster', url: '/api/cluster', access: 'any' },
  { method: 'GET', route: '/api/readers', url: '/api/readers', access: 'any' },
  { method: 'GET', route: '/metrics', url: '/metrics', access: 'any' },
  { method: 'GET', route: '/api/collections/:c', url: `/api/collections/${C}`, access: 'read' },
  { method: 'GET', route: '/api/collections/:c/docs/:id', url: `/api/collections/${C}/docs/k1`, access: 'read' },
  { method: 'GET', route: '/api/collections/:c/search', url: `/api/collections/${C}/search?q=dune`, access: 'read' },
  { method: 'POST', route: '/api/collections/:c/search', url: `/api/collections/${C}/search`, body: { q: 'dune' }, access: 'read' },
  { method: 'GET', route: '/api/collections/:c/export', url: `/api/collections/${C}/export?shard=shard1`, access: 'read' },
  { method: 'POST', route: '/api/collections/:c/docs', url: `/api/collections/${C}/docs`, body: [{ id: 'new-1', title: 'new' }], access: 'write' },
  { method: 'DELETE', route: '/api/collections/:c/docs/:id', url: `/api/collections/${C}/docs/gone-1`, access: 'write' },
  { method: 'POST', route: '/api/collections/:c/commit', url: `/api/collections/${C}/commit`, access: 'write' },
  { method: 'POST', route: '/api/collections', url: '/api/collections', body: { name: 'other' }, access: 'admin' },
  { method: 'PATCH', route: '/api/collections/:c', url: `/api/collections/${C}`, body: {}, access: 'admin' },
  { method: 'DELETE', route: '/api/collections/:c', url: '/api/collections/nope', access: 'admin' },
  { method: 'POST', route: '/api/collections/:c/rebalance-leaders', url: `/api/collections/${C}/rebalance-leaders?wait=2s`, access: 'admin' },
  { method: 'PUT', route: '/api/read-balance/:priority/:target', url: '/api/read-balance/bulk/primary', body: { weight: 1, slots: 4 }, access: 'admin' },
  { method: 'GET', route: '/api/read-balance', url: '/api/read-balance', access: 'admin' },
  { method: 'DELETE', route: '/api/read-balance/:priority/:target', url: '/api/read-balance/none/primary', access: 'admin' },
  { method: 'DELETE', route: '/api/read-balance/:priority', url: '/api/read-balance/none', access: 'admin' },
  { method: 'GET', route: '/api/read-slots', url: '/api/read-slots', access: 'admin' },
  { method: 'POST', route: '/api/read-slots/reset', url: '/api/read-slots/reset', access: 'admin' },
];

const send = (e: Endpoint, headers: Record<string, string> = {}) =>
  g.app.inject({ method: e.method, url: e.url, headers, ...(e.body !== undefined && { payload: e.body as object }) });

const allows = (key: keyof typeof KEYS, access: Access): boolean => access === 'public' || access === 'any' || KEY_ROLES[key].includes(access as never);

describe('the endpoint table', () => {
  it('lists every route the node serves, with the access it declares', () => {
    const served = g.app.routeAccess.map((r) => `${r.method} ${r.url} ${r.access}`).sort();
    expect(served).toEqual(ENDPOINTS.map((e) => `${e.method} ${e.route} ${e.access}`).sort());
  });
});

describe('a request without a valid key', () => {
  for (const e of ENDPOINTS.filter((x) => x.access !== 'public')) {
    it(`${e.method} ${e.route}: 401 with a Bearer challenge, nothing changed (no key, a wrong key, a malformed header)`, async () => {
      const before = await g.stored();
      for (const headers of [{}, bearer('not-a-key'), { authorization: KEYS.admin }, { authorization: `Basic ${KEYS.admin}` }, bearer(keyDigest(KEYS.admin).toString('hex'))]) {
        const res = await send(e, headers);
        expect(res.statusCode, `${JSON.stringify(headers)}: ${res.body}`).toBe(401);
        expect(res.headers['www-authenticate']).toMatch(/^Bearer realm="shardex"/);
        expect(res.json()).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
        expect(res.json().error).toContain('Authorization: Bearer KEY');
      }
      expect(await g.stored()).toEqual(before);
    });
  }

  it('gets /health and /health/live answered (load balancers poll them without keys)', async () => {
    for (const e of ENDPOINTS.filter((x) => x.access === 'public')) expect((await send(e)).statusCode, e.url).toBe(200);
  });

  it('is 401 on a path that is no route, and 404 with a valid key (paths are not revealed)', async () => {
    expect((await g.app.inject({ method: 'GET', url: '/api/nothing-here' })).statusCode).toBe(401);
    expect((await g.app.inject({ method: 'GET', url: '/api/nothing-here', headers: bearer(KEYS.reader) })).statusCode).toBe(404);
  });

  it('is 401 even while the answer would otherwise be about the request (bad JSON, too large)', async () => {
    const res = await g.app.inject({ method: 'POST', url: `/api/collections/${C}/docs`, headers: { 'content-type': 'application/json' }, payload: '[{' });
    expect(res.statusCode).toBe(401);
  });
});

describe('a key without the role the endpoint needs', () => {
  for (const key of ['reader', 'writer', 'admin'] as const) {
    for (const e of ENDPOINTS.filter((x) => !allows(key, x.access))) {
      it(`${e.method} ${e.route} with the ${KEY_ROLES[key].join(',')} key: 403 naming the role, nothing changed`, async () => {
        const before = await g.stored();
        const res = await send(e, bearer(KEYS[key]));
        expect(res.statusCode, res.body).toBe(403);
        expect(res.json()).toMatchObject({ code: 'SHX_FORBIDDEN' });
        expect(res.json().error).toContain(`the ${e.access} role`);
        expect(res.json().error).toContain(`"${key}"`);
        expect(res.headers['www-authenticate']).toContain('insufficient_scope');
        expect(await g.stored()).toEqual(before);
      });
    }
  }
});

describe('a key with the role', () => {
  for (const key of ['reader', 'writer', 'admin', 'all'] as const) {
    it(`passes with the ${KEY_ROLES[key].join(',')} key on every endpoint its roles allow`, async () => {
      for (const e of ENDPOINTS.filter((x) => allows(key, x.access))) {
        const res = await send(e, bearer(KEYS[key]));
        expect([401, 403], `${e.method} ${e.url}: ${res.body}`).not.toContain(res.statusCode);
        expect(res.statusCode, `${e.method} ${e.url}: ${res.body}`).toBeLessThan(500);
      }
    });
  }

  it('writes through one node into the shard another node leads, and reads it back (forwarding is gRPC)', async () => {
    const ids = Array.from({ length: 20 }, (_, i) => `fw-${i}`);
    const res = await fetch(`${g.tc.urls[1]}/api/collections/${C}/docs`, {
      method: 'POST',
      headers: { ...bearer(KEYS.writer), 'content-type': 'application/json' },
      body: JSON.stringify(ids.map((id) => ({ id, title: 'forwarded' }))),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const shards = new Set<string>();
    for (const id of ids) {
      const got = await fetch(`${g.tc.urls[0]}/api/collections/${C}/docs/${id}`, { headers: bearer(KEYS.reader) });
      expect(got.status).toBe(200);
      shards.add(((await got.json()) as { _shard_: string })._shard_);
    }
    expect(shards.size).toBe(2);
  });

  it('takes the scheme in any case (RFC 7235)', async () => {
    const res = await g.app.inject({ method: 'GET', url: '/api/cluster', headers: { authorization: `bearer ${KEYS.reader}` } });
    expect(res.statusCode).toBe(200);
  });
});

describe('the keys file', () => {
  const good = { name: 'ops', sha256: keyDigest('k').toString('hex'), roles: ['read'] };
  const refused: Array<[string, unknown, string]> = [
    ['not an array', { keys: [] }, 'not a JSON array'],
    ['empty', [], 'lists no keys'],
    ['a key in place of its sha256', [{ ...good, sha256: 'my-secret-key' }], 'sha256sum'],
    ['an unknown role', [{ ...good, roles: ['superuser'] }], 'entry 0.roles.0'],
    ['no roles', [{ ...good, roles: [] }], 'at least one of read, write, admin'],
    ['an unknown field', [{ ...good, key: 'x' }], 'entry 0'],
    ['a name twice', [good, { ...good, sha256: keyDigest('j').toString('hex') }], 'names "ops" twice'],
    ['a key twice', [good, { ...good, name: 'other' }], 'same sha256'],
  ];
  for (const [what, json, says] of refused) {
    it(`is refused when ${what}, with a message naming --api-keys`, () => {
      expect(() => parseApiKeys(json, 'keys.json')).toThrow(expect.objectContaining({ code: 'SHX_BAD_CONFIG', message: expect.stringContaining(says) }));
      expect(() => parseApiKeys(json, 'keys.json')).toThrow(/keys\.json \(--api-keys\)/);
    });
  }

  it('is refused when missing or not JSON, without quoting its content', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'shardex-keys-'));
    try {
      await expect(loadApiKeys(join(dir, 'absent.json'))).rejects.toThrow(/cannot read the API keys file .*absent\.json \(--api-keys\)/);
      await writeFile(join(dir, 'bad.json'), 'SECRET-KEY-PASTED-HERE');
      const err = await loadApiKeys(join(dir, 'bad.json')).then(
        () => {
          throw new Error('a file that is not JSON was accepted');
        },
        (e: Error) => e,
      );
      expect(err.message).toContain('is not valid JSON');
      expect(err.message).not.toContain('SECRET');
      await writeFile(join(dir, 'good.json'), JSON.stringify([good]));
      expect(await loadApiKeys(join(dir, 'good.json'))).toEqual([good]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('takes upper-case hex digests', () => {
    const ring = new ApiKeyRing(parseApiKeys([{ ...good, sha256: good.sha256.toUpperCase() }], 'keys.json'));
    expect(ring.authenticate('Bearer k')?.name).toBe('ops');
  });
});

describe('a node without keys', () => {
  it('starts only on a loopback address, or with --insecure', () => {
    const open = { bodyLimit: 1024 };
    for (const host of ['127.0.0.1', '127.8.9.10', 'localhost', '::1', '[::1]', '::ffff:127.0.0.1']) {
      expect(isLoopback(host), host).toBe(true);
      expect(() => checkOpenBinding(host, open, undefined)).not.toThrow();
    }
    for (const host of ['0.0.0.0', '::', '10.1.2.3', '::ffff:10.1.2.3', 'node1.example']) {
      expect(isLoopback(host), host).toBe(false);
      expect(() => checkOpenBinding(host, open, undefined)).toThrow(expect.objectContaining({ code: 'SHX_BAD_CONFIG', message: expect.stringContaining('--insecure') }));
      expect(() => checkOpenBinding(host, open, true)).not.toThrow();
      expect(() => checkOpenBinding(host, { ...open, apiKeys: keyEntries() }, undefined)).not.toThrow();
    }
  });
});

describe('the logs', () => {
  it('never hold a key or its digest, whatever the request', async () => {
    const lines: string[] = [];
    const sink = new Writable({ write: (chunk: Buffer, _enc, done) => (lines.push(chunk.toString()), done()) });
    const app = await buildHttp(g.node, { bodyLimit: 1024 * 1024, apiKeys: keyEntries(), logger: pino({ level: 'trace' }, sink) });
    try {
      for (const e of ENDPOINTS) {
        for (const key of Object.values(KEYS)) await app.inject({ method: e.method, url: e.url, headers: bearer(key), ...(e.body !== undefined && { payload: e.body as object }) });
        await app.inject({ method: e.method, url: e.url, headers: bearer('wrong-key-for-the-log-test') });
      }
    } finally {
      await app.close();
    }
    const text = lines.join('');
    expect(text.length).toBeGreaterThan(0);
    for (const key of [...Object.values(KEYS), 'wrong-key-for-the-log-test']) {
      expect(text).not.toContain(key);
      expect(text).not.toContain(keyDigest(key).toString('hex'));
    }
  });
});

describe('the smart client', () => {
  it('sends its apiKey: writes, reads and searches pass', async () => {
    const client = new ShardexClient({ urls: g.tc.urls, apiKey: KEYS.all, refreshIntervalMs: 0 });
    try {
      await client.add(C, [{ id: 'cl-1', title: 'client' }]);
      expect(await client.get(C, 'cl-1')).toMatchObject({ id: 'cl-1' });
      expect((await client.search(C, 'title:client')).total).toBe(1);
    } finally {
      await client.close();
    }
  });

  it('without a key fails at once with SHX_UNAUTHORIZED (not as an unreachable cluster)', async () => {
    const client = new ShardexClient({ urls: g.tc.urls, refreshIntervalMs: 0 });
    try {
      await expect(client.get(C, 'k1')).rejects.toMatchObject({ code: 'SHX_UNAUTHORIZED' });
    } finally {
      await client.close();
    }
  });

  it('with a read key gets SHX_FORBIDDEN for a write, which is not retried', async () => {
    const client = new ShardexClient({ urls: g.tc.urls, apiKey: KEYS.reader, refreshIntervalMs: 0 });
    try {
      await expect(client.add(C, [{ id: 'ro-1' }])).rejects.toMatchObject({ code: 'SHX_FORBIDDEN' });
    } finally {
      await client.close();
    }
  });

  it('refuses an apiKey that is not a printable string, without showing it', () => {
    expect(() => new ShardexClient({ urls: g.tc.urls, apiKey: 'has space\n' })).toThrow(expect.objectContaining({ code: 'SHX_BAD_CONFIG', message: expect.not.stringContaining('has space') }));
    expect(() => new ShardexClient({ urls: g.tc.urls, apiKey: 42 as unknown as string })).toThrow(/apiKey must be a string/);
  });
});
