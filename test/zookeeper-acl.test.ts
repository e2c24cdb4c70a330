// ZooKeeper digest auth (issue 13) against the test ZooKeeper: a store given `digest`
// ('user:password') authenticates its session with it and gives every znode it creates, the
// chroot included, Solr's DigestZkACLProvider ACL: all permissions for that user, read for
// everyone. Other sessions read but cannot change them; a replacement session after expiry
// authenticates again. Without `digest` znodes stay open, as before.
import { setTimeout as sleep } from 'node:timers/promises';
import zookeeper from 'node-zookeeper-client';
import { afterEach, describe, expect, it } from 'vitest';
import { ZooKeeperStore, checkDigest, digestId } from '../src/coordination/zookeeper-store.js';
import type { SessionState } from '../src/coordination/store.js';
import { TcpProxy, zkConnect, zkServer } from './support/zookeeper.js';

const DIGEST = 'shardex:s3cret-pass';
const buf = (s: string): Buffer => Buffer.from(s);

const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step().catch(() => undefined);
});

async function store(connectString: string, digest?: string, sessionTimeoutMs = 4000): Promise<ZooKeeperStore> {
  const s = await ZooKeeperStore.connect({ connectString, sessionTimeoutMs, ...(digest !== undefined && { digest }) });
  cleanup.push(() => s.close());
  return s;
}

/**
 * The ACL of an absolute path, as 'scheme:id=perms', read by a plain library client as the digest
 * user (ZooKeeper shows a digest's hash only to a session with ADMIN permission on the node).
 */
async function aclOf(path: string): Promise<string[]> {
  const client = zookeeper.createClient(zkServer(), { sessionTimeout: 4000, retries: 0 });
  client.addAuthInfo('digest', buf(DIGEST));
  await new Promise<void>((resolve) => {
    client.once('connected', () => resolve());
    client.connect();
  });
  try {
    const acls = await new Promise<zookeeper.ACL[]>((resolve, reject) => client.getACL(path, (err, a) => (err ? reject(err) : resolve(a))));
    // The library's ACL objects carry `permission` (its typings say `perms`).
    return acls.map((a) => `${a.id.scheme}:${a.id.id}=${(a as unknown as { permission: number }).permission}`).sort();
  } finally {
    client.close();
  }
}

async function until(what: string, probe: () => boolean, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

const PROTECTED = [`digest:${digestId(DIGEST)}=${zookeeper.Permission.ALL}`, `world:anyone=${zookeeper.Permission.READ}`].sort();

describe('ZooKeeper digest ACLs', () => {
  it('gives every znode it creates, the chroot included, all permissions for the user and read for everyone', async () => {
    const connect = zkConnect('acl');
    const chroot = connect.slice(connect.indexOf('/'));
    const s = await store(connect, DIGEST);
    await s.mkdirp('/collections/c');
    await s.create('/collections/c/state', buf('{}'), 'persistent');
    const seq = await s.create('/collections/c/n_', buf(''), 'ephemeral_sequential');
    for (const path of ['', '/collections', '/collections/c', '/collections/c/state', seq]) expect(await aclOf(chroot + path), path).toEqual(PROTECTED);
    // The creator, authenticated, changes and deletes what it made.
    expect(await s.set('/collections/c/state', buf('{"v":1}'))).toBe(1);
    await s.delete(seq);
  });

  it('lets a session without the digest (or with a wrong password) read, but not create, set or delete', async () => {
    const connect = zkConnect('acl');
    const owner = await store(connect, DIGEST);
    await owner.mkdirp('/live_nodes');
    await owner.create('/state', buf('{"a":1}'), 'persistent');
    for (const other of [await store(connect), await store(connect, 'shardex:wrong-password')]) {
      expect((await other.get('/state'))?.data.toString()).toBe('{"a":1}');
      expect(await other.children('/')).toEqual(expect.arrayContaining(['live_nodes', 'state']));
      await expect(other.set('/state', buf('{}'))).rejects.toMatchObject({ code: 'SHX_FORBIDDEN', message: expect.stringContaining('NO_AUTH at /state') });
      await expect(other.create('/live_nodes/x', buf(''), 'ephemeral')).rejects.toMatchObject({ code: 'SHX_FORBIDDEN' });
      await expect(other.delete('/state')).rejects.toMatchObject({ code: 'SHX_FORBIDDEN' });
    }
    expect((await owner.get('/state'))?.data.toString()).toBe('{"a":1}');
  });

  it('leaves znodes open without a digest', async () => {
    const connect = zkConnect('acl-open');
    const s = await store(connect);
    await s.create('/n', buf(''), 'persistent');
    expect(await aclOf(`${connect.slice(connect.indexOf('/'))}/n`)).toEqual([`world:anyone=${zookeeper.Permission.ALL}`]);
  });

  it('authenticates the new session it opens after the old one expired', async () => {
    const proxy = await TcpProxy.start(zkServer());
    cleanup.push(() => proxy.close());
    const connect = zkConnect('acl-expiry');
    const s = await store(proxy.address + connect.slice(zkServer().length), DIGEST, 2000);
    const observer = await store(connect);
    await s.create('/n', buf('1'), 'persistent');
    await s.create('/alive', buf(''), 'ephemeral');
    const states: SessionState[] = [];
    s.onSessionState((state) => states.push(state));
    const first = s.sessionId;
    proxy.blackhole();
    // The server expires a session it has not heard from for its timeout; then let the client learn it.
    // The server expires the session it no longer hears from: its ephemeral goes.
    let gone = false;
    while (!gone) {
      gone = !(await observer.exists('/alive'));
      if (!gone) await sleep(50);
    }
    proxy.heal();
    await until('a new session', () => states.includes('expired') && states.at(-1) === 'connected');
    expect(s.sessionId).not.toBe(first);
    expect(await s.set('/n', buf('2'))).toBe(1);
  });

  it('reads the digest file, and says what is wrong with a bad one without showing it', async () => {
    const { mkdtemp, rm, writeFile } = await import('node:fs/promises');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { readZkDigest } = await import('../src/node/run-node.js');
    const dir = await mkdtemp(join(tmpdir(), 'shardex-digest-'));
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const file = join(dir, 'zk.digest');
    await writeFile(file, `${DIGEST}\n`);
    expect(await readZkDigest(file)).toBe(DIGEST);
    await writeFile(file, 'no-colon-here\n');
    const bad = await readZkDigest(file).catch((e: Error) => e);
    expect(bad).toMatchObject({ code: 'SHX_BAD_CONFIG', message: expect.stringContaining(`the ZooKeeper digest file ${file} (--zk-digest-file) must hold one line user:password`) });
    expect((bad as Error).message).not.toContain('no-colon-here');
    await expect(readZkDigest(join(dir, 'missing'))).rejects.toMatchObject({ code: 'SHX_BAD_CONFIG', message: expect.stringContaining('cannot read the ZooKeeper digest file') });
    await expect(readZkDigest('')).rejects.toMatchObject({ message: expect.stringContaining('--zk-digest-file (or SHARDEX_ZK_DIGEST_FILE) is empty') });
  });

  it('takes only one-line user:password', () => {
    for (const bad of ['nocolon', ':password', 'user:', 'user:pa\nss']) expect(() => checkDigest(bad), bad).toThrow(/user:password/);
    expect(() => checkDigest(DIGEST)).not.toThrow();
    expect(() => checkDigest('user:pass:with:colons')).not.toThrow();
  });
});
