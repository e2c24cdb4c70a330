// The cluster secret: with one, a peer server refuses every call without it (versions, the log,
// commit, the update stream, the copy stream, get and search) before any handler runs; clients
// with the secret are served.
import { afterEach, describe, expect, it } from 'vitest';
import { PeerClients, PeerServer, type PeerHandlers } from '../src/transport/index.js';
import { keyDigest, readAccessOf } from '../src/node/http/auth.js';
import { silentLogger } from '../src/logger.js';
import { recordingHandlers } from './support/peer-handlers.js';
import { rejected as thrown } from './support/errors.js';
import type { StoredEntry } from '../src/ulog/index.js';
import { ShardexError } from '../src/errors.js';

const log = silentLogger();
const SECRET = 'correct horse battery staple';

const handlers = (calls: string[]): PeerHandlers => recordingHandlers(calls);

const servers: PeerServer[] = [];
const clients: PeerClients[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  for (const s of servers.splice(0)) await s.close();
});

async function serve(secret: string | undefined, calls: string[]): Promise<string> {
  const server = new PeerServer(handlers(calls), log, { ...(secret !== undefined && { secret }) });
  servers.push(server);
  return `127.0.0.1:${await server.listen('127.0.0.1', 0)}`;
}

function client(address: string, secret?: string): PeerClients {
  const c = new PeerClients({ resolve: () => address, logger: log, callTimeoutMs: 5000, ...(secret !== undefined && { secret }) });
  clients.push(c);
  return c;
}

async function collect(c: PeerClients): Promise<unknown[]> {
  const out: unknown[] = [];
  for await (const chunk of c.streamCall('n1', 'copyShard', { collection: 'c', shard: 'shard1' })) out.push(chunk);
  return out;
}


const search = { collection: 'c', shard: 'shard1', kind: 'query', params: { q: '*', limit: 10 } };
const update = { collection: 'c', shard: 'shard1', phase: 'FROMLEADER' as const, epoch: 1, ops: [], minRf: 1, from: 'n0' };

describe('cluster secret', () => {
  it('serves calls that carry the secret', async () => {
    const calls: string[] = [];
    const c = client(await serve(SECRET, calls), SECRET);
    expect(await c.call('n1', 'versions', { collection: 'c', shard: 'shard1' })).toEqual({ maxVersion: 7, trimmedThrough: 0 });
    expect(await collect(c)).toEqual([[]]);
    const [outcome] = await c.send('n1', [update]);
    expect(outcome).toMatchObject({ ok: true });
    expect(await c.call('n1', 'get', { collection: 'c', shard: 'shard1', ids: ['a'] })).toEqual([]);
    expect(await c.call('n1', 'search', search)).toEqual({});
    expect(calls).toEqual(['versions', 'copyShard', 'update', 'get', 'search']);
  });

  it.each([
    ['no secret', undefined],
    ['a wrong secret', 'correct horse battery stapler'],
  ])('refuses every call with %s before any handler runs, reads included', async (_what, secret) => {
    const calls: string[] = [];
    const c = client(await serve(SECRET, calls), secret);
    const unary = await thrown(c.call('n1', 'versions', { collection: 'c', shard: 'shard1' }));
    expect(unary).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
    expect(unary.message).toContain('--cluster-secret-file');
    expect(await thrown(c.call('n1', 'updatesAfter', { collection: 'c', shard: 'shard1', after: 0, limit: 10 }))).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
    expect(await thrown(collect(c))).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
    const sent = await thrown(c.send('n1', [update]));
    expect(sent.message).toContain('cluster secret');
    expect(await thrown(c.call('n1', 'commit', { collection: 'c', shard: 'shard1' }))).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
    expect(await thrown(c.call('n1', 'get', { collection: 'c', shard: 'shard1', ids: ['a'] }))).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
    expect(await thrown(c.call('n1', 'search', search))).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
    expect(calls).toEqual([]);
  });

  it('refuses a call without the secret before its request is checked', async () => {
    const c = client(await serve(SECRET, []));
    expect(await thrown(c.call('n1', 'get', { not: 'a get request' }))).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
  });

  describe('reads from smart clients (read access by API key)', () => {
    const KEY = 'reader-key-0123456789abcdef';
    const WRITE_ONLY = 'writer-key-0123456789abcdef';
    const access = readAccessOf([
      { name: 'reads', sha256: keyDigest(KEY).toString('hex'), roles: ['read'] },
      { name: 'writes', sha256: keyDigest(WRITE_ONLY).toString('hex'), roles: ['write'] },
    ]);
    async function serveWithAccess(calls: string[], readAccess = access): Promise<string> {
      const server = new PeerServer(handlers(calls), log, { secret: SECRET, readAccess });
      servers.push(server);
      return `127.0.0.1:${await server.listen('127.0.0.1', 0)}`;
    }
    function keyed(address: string, key: string | undefined): PeerClients {
      const c = new PeerClients({ resolve: () => address, logger: log, callTimeoutMs: 5000, ...(key !== undefined && { authorization: `Bearer ${key}` }) });
      clients.push(c);
      return c;
    }

    it('serves get and search to a key with the read role, and nothing else without the secret', async () => {
      const calls: string[] = [];
      const c = keyed(await serveWithAccess(calls), KEY);
      expect(await c.call('n1', 'get', { collection: 'c', shard: 'shard1', ids: ['a'] })).toEqual([]);
      expect(await c.call('n1', 'search', search)).toEqual({});
      expect(await thrown(c.call('n1', 'versions', { collection: 'c', shard: 'shard1' }))).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
      expect(await thrown(c.call('n1', 'commit', { collection: 'c', shard: 'shard1' }))).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
      expect(await thrown(collect(c))).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
      expect((await thrown(c.send('n1', [update]))).message).toContain('cluster secret');
      expect(calls).toEqual(['get', 'search']);
    });

    it('refuses a read without a key (401) or with a key without the read role (403)', async () => {
      const calls: string[] = [];
      const address = await serveWithAccess(calls);
      expect(await thrown(keyed(address, undefined).call('n1', 'get', { collection: 'c', shard: 'shard1', ids: ['a'] }))).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
      expect(await thrown(keyed(address, 'not-a-key-0123456789abcdef').call('n1', 'search', search))).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
      const forbidden = await thrown(keyed(address, WRITE_ONLY).call('n1', 'get', { collection: 'c', shard: 'shard1', ids: ['a'] }));
      expect(forbidden).toMatchObject({ code: 'SHX_FORBIDDEN' });
      expect(forbidden.message).toContain('read role');
      expect(calls).toEqual([]);
    });

    it('serves reads to anyone where the process has no API keys (its HTTP API is open too)', async () => {
      const calls: string[] = [];
      const c = keyed(await serveWithAccess(calls, readAccessOf(undefined)), undefined);
      expect(await c.call('n1', 'get', { collection: 'c', shard: 'shard1', ids: ['a'] })).toEqual([]);
      expect(await thrown(c.call('n1', 'versions', { collection: 'c', shard: 'shard1' }))).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
      expect(calls).toEqual(['get']);
    });
  });

  it('checks nothing when the server has no secret', async () => {
    const calls: string[] = [];
    const c = client(await serve(undefined, calls), 'anything');
    expect(await c.call('n1', 'versions', { collection: 'c', shard: 'shard1' })).toMatchObject({ maxVersion: 7 });
    expect(calls).toEqual(['versions']);
  });
});

describe('copy stream errors', () => {
  it('reach the client when the handler fails after streaming started', async () => {
    const calls: string[] = [];
    const h = handlers(calls);
    const server = new PeerServer(
      {
        ...h,
        copyShard: async function* () {
          yield [] as StoredEntry[];
          throw new ShardexError('SHX_INTERNAL', 'Snapshot is not open');
        },
      },
      log,
    );
    servers.push(server);
    const c = client(`127.0.0.1:${await server.listen('127.0.0.1', 0)}`);
    expect((await thrown(collect(c))).message).toContain('Snapshot is not open');
  });
});

describe('the cluster secret file and the open-binding rule', () => {
  it('reads one line of at least 16 characters, and says what is wrong otherwise', async () => {
    const { mkdtemp, writeFile, rm } = await import('node:fs/promises');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { readClusterSecret, MIN_SECRET_LENGTH } = await import('../src/node/run-node.js');
    const dir = await mkdtemp(join(tmpdir(), 'shardex-secret-'));
    try {
      const file = join(dir, 'cluster.secret');
      await writeFile(file, `${SECRET}\n`);
      expect(await readClusterSecret(file)).toBe(SECRET);
      await writeFile(file, 'short\n');
      const short = await thrown(readClusterSecret(file));
      expect(short).toMatchObject({ code: 'SHX_BAD_CONFIG' });
      expect(short.message).toContain(`at least ${MIN_SECRET_LENGTH} characters`);
      await writeFile(file, `${SECRET}\nsecond line of it\n`);
      expect((await thrown(readClusterSecret(file))).message).toContain('one line');
      expect((await thrown(readClusterSecret(join(dir, 'missing')))).message).toContain('cannot read the cluster secret file');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses a process reachable from other machines without a secret unless --insecure', async () => {
    const { checkClusterSecret } = await import('../src/node/run-node.js');
    expect(() => checkClusterSecret('0.0.0.0', undefined, undefined)).toThrow(/--cluster-secret-file.*--insecure/);
    expect(() => checkClusterSecret('0.0.0.0', undefined, true)).not.toThrow();
    expect(() => checkClusterSecret('0.0.0.0', SECRET, undefined)).not.toThrow();
    expect(() => checkClusterSecret('127.0.0.1', undefined, undefined)).not.toThrow();
  });
});
