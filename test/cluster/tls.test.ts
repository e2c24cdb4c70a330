// Inter-node trust on real processes (issue 13): two `shardex node`s and a `shardex reader` with
// --tls-cert/--tls-key/--tls-ca (https, and mutual TLS on gRPC) and --zk-digest-file (ZooKeeper
// digest auth, ACLs on every znode), with certificates the test makes. The smart client, trusting
// the test CA and presenting a certificate of it, writes over https and reads back, from the
// leaders and (eventual, over mutual TLS) from the reader. Plain http, plain gRPC, gRPC without a
// certificate or with one of another CA, and ZooKeeper writes without the digest are refused.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { Agent } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShardexClient } from '../../src/client/index.js';
import { agentFetch } from '../../src/client/transport.js';
import { ZooKeeperStore } from '../../src/coordination/zookeeper-store.js';
import { ShardexError } from '../../src/errors.js';
import { silentLogger } from '../../src/logger.js';
import { PeerClients, type ClientTlsMaterial } from '../../src/transport/index.js';
import { assertBuilt, runCli } from '../support/cli-run.js';
import { NodeProcesses, type NodeProcess } from '../support/processes.js';
import { testPki, type CertFiles, type TestCa, type TestPki } from '../support/tls-certs.js';
import { until } from '../support/zk-cluster.js';
import { zkConnect } from '../support/zookeeper.js';

const C = 'secure';
const DIGEST = 'shardex:9f1c2e7d4b5a6e8f0a1b2c3d';

let pki: TestPki;
let ca: TestCa;
let nodeCert: CertFiles;
let readerCert: CertFiles;
let clientCert: CertFiles;
let stranger: CertFiles;
let dir: string;
let digestFile: string;
let procs: NodeProcesses;
let n1: NodeProcess;
let reader: NodeProcess;
let client: ShardexClient;
const connect = zkConnect('tls');
const peers: PeerClients[] = [];

/** fetch that trusts the test CA, for requests the smart client does not make (collection admin). */
let caFetch: ReturnType<typeof agentFetch>;
let caAgent: Agent;

function tlsArgs(cert: CertFiles): string[] {
  return ['--tls-cert', cert.certFile, '--tls-key', cert.keyFile, '--tls-ca', ca.certFile, '--zk-digest-file', digestFile];
}

async function json(method: string, url: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await caFetch(url, { method, ...(body !== undefined && { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }) });
  return { status: res.status, body: await res.json() };
}

function grpcClient(tls?: ClientTlsMaterial): PeerClients {
  const c = new PeerClients({ resolve: () => n1.grpc, logger: silentLogger(), callTimeoutMs: 5000, ...(tls && { tls }) });
  peers.push(c);
  return c;
}

async function refusal(p: Promise<unknown>): Promise<ShardexError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ShardexError);
  return err as ShardexError;
}

beforeAll(async () => {
  for (const rel of ['node/cli.ts', 'node/run-node.ts', 'transport/tls.ts', 'transport/grpc.ts', 'coordination/zookeeper-store.ts', 'read/snapshot-reader.ts']) await assertBuilt(rel);
  pki = await testPki();
  const other = await pki.ca('other-ca');
  ca = await pki.ca('cluster-ca');
  [nodeCert, readerCert, clientCert, stranger] = await Promise.all([ca.issue('node'), ca.issue('reader'), ca.issue('client'), other.issue('stranger')]);
  dir = await mkdtemp(join(tmpdir(), 'shardex-tls-cluster-'));
  digestFile = join(dir, 'zk.digest');
  await writeFile(digestFile, `${DIGEST}\n`);
  caAgent = new Agent({ ca: ca.cert });
  caFetch = agentFetch(caAgent);
  procs = new NodeProcesses(connect, { zkTimeoutMs: 4000, args: tlsArgs(nodeCert) });
  [n1, , reader] = await Promise.all([procs.start('n1'), procs.start('n2'), procs.startReader('r1', tlsArgs(readerCert))]);
  const created = await json('POST', `${n1.http}/api/collections`, { name: C, numShards: 2, replicationFactor: 2 });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  client = new ShardexClient({ urls: n1.http, tls: { ca: ca.cert, cert: clientCert.cert, key: clientCert.key }, maxRetries: 20, backoff: (n) => Math.min(100 * n, 500) });
  await until('both shards to have an active leader', 30_000, async () => {
    const view = await json('GET', `${n1.http}/api/cluster`);
    const shards = Object.values(view.body.collections?.[C]?.shards ?? {}) as Array<{ leader: string | null; replicas: Array<{ state: string }> }>;
    return shards.length === 2 && shards.every((s) => s.leader !== null && s.replicas.every((r) => r.state === 'active')) ? true : undefined;
  });
});

afterAll(async () => {
  for (const p of peers.splice(0)) p.close();
  await client?.close();
  caAgent?.destroy();
  await procs?.stopAll();
  if (dir) await rm(dir, { recursive: true, force: true });
  await pki?.remove();
});

describe('a cluster with TLS, mutual TLS and ZooKeeper ACLs', () => {
  it('serves https, and advertises https URLs', () => {
    expect(n1.http).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(reader.http).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
  });

  it('takes writes over https from a client that trusts the test CA, and reads them back', async () => {
    const docs = Array.from({ length: 20 }, (_, i) => ({ id: `doc-${i}`, title: `secure document ${i}` }));
    const added = await client.add(C, docs);
    expect(added.added).toBe(20);
    expect(await client.get(C, 'doc-7')).toMatchObject({ id: 'doc-7', title: 'secure document 7' });
    expect((await client.search(C, 'secure')).total).toBe(20);
  });

  it('serves eventual reads from the reader, which copied the shards over mutual TLS gRPC', async () => {
    await client.commit(C);
    const res = await client.search(C, 'secure', { consistency: 'eventual' });
    expect(res.total).toBe(20);
    expect(Object.values(res.servedBy ?? {}).map((s) => s.node)).toEqual(['r1', 'r1']);
  });

  it('refuses plain http on the https port, and a client that does not trust the CA', async () => {
    const port = new URL(n1.http).port;
    await expect(fetch(`http://127.0.0.1:${port}/health`)).rejects.toThrow();
    const untrusting = new ShardexClient({ urls: n1.http, maxRetries: 0 });
    try {
      const err = await refusal(untrusting.connect());
      expect(err.code).toBe('SHX_UNAVAILABLE');
      expect(err.message).toMatch(/certificate/i);
    } finally {
      await untrusting.close();
    }
  });

  it('serves gRPC to a client with a certificate of the CA, and refuses plain gRPC, no certificate and another CA’s', async () => {
    const get = (c: PeerClients) => c.call('n1', 'get', { collection: C, shard: 'shard1', ids: ['doc-1'] });
    expect(await get(grpcClient({ ca: ca.cert, cert: clientCert.cert, key: clientCert.key }))).toBeDefined();
    expect((await refusal(get(grpcClient()))).code).toBe('SHX_UNAVAILABLE');
    expect((await refusal(get(grpcClient({ ca: ca.cert })))).code).toBe('SHX_UNAVAILABLE');
    expect((await refusal(get(grpcClient({ ca: ca.cert, cert: stranger.cert, key: stranger.key })))).code).toBe('SHX_UNAVAILABLE');
  });

  it('lets ZooKeeper clients without the digest read the cluster state but not change it', async () => {
    const anonymous = await ZooKeeperStore.connect({ connectString: connect, sessionTimeoutMs: 4000 });
    try {
      const state = await anonymous.get(`/collections/${C}/state`);
      expect(state).toBeDefined();
      await expect(anonymous.set(`/collections/${C}/state`, Buffer.from('{}'))).rejects.toThrow(/NO_AUTH.*--zk-digest-file/);
      await expect(anonymous.create('/live_nodes/intruder', Buffer.alloc(0), 'ephemeral')).rejects.toThrow(/NO_AUTH/);
      await expect(anonymous.delete(`/collections/${C}/state`)).rejects.toThrow(/NO_AUTH/);
    } finally {
      await anonymous.close();
    }
    const wrong = await ZooKeeperStore.connect({ connectString: connect, sessionTimeoutMs: 4000, digest: 'shardex:not-the-password' });
    try {
      await expect(wrong.set(`/collections/${C}/state`, Buffer.from('{}'))).rejects.toThrow(/NO_AUTH/);
    } finally {
      await wrong.close();
    }
    // The smart client watching ZooKeeper needs no digest: it only reads.
    const watching = new ShardexClient({ zk: connect, zkSessionTimeoutMs: 4000, tls: { ca: ca.cert } });
    try {
      expect(await watching.get(C, 'doc-3')).toMatchObject({ id: 'doc-3' });
    } finally {
      await watching.close();
    }
  });

  it('a node without the digest cannot join: it stops, naming --zk-digest-file', async () => {
    const r = await runCli(['node', '--zk', connect, '--port', '0', '--grpc-port', '0', '--data', join(dir, 'intruder'), '--zk-timeout', '4000', '--tls-cert', nodeCert.certFile, '--tls-key', nodeCert.keyFile, '--tls-ca', ca.certFile], {}, 30_000);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toContain('NO_AUTH at /live_nodes/');
    expect(r.stderr).toContain('--zk-digest-file');
  });
});

describe('TLS flags at start (exit 2, naming the flag)', () => {
  const base = (): string[] => ['node', '--zk', '127.0.0.1:1', '--port', '0', '--data', join(dir, 'bad')];

  it('refuses a certificate file that cannot be read, and a certificate that does not name the advertised host (from the env variables)', async () => {
    const missing = join(dir, 'missing.crt');
    const [unreadable, misnamed] = await Promise.all([
      runCli([...base(), '--tls-cert', missing, '--tls-key', nodeCert.keyFile]),
      runCli([...base(), '--advertise-host', 'node9.example'], { SHARDEX_TLS_CERT_FILE: nodeCert.certFile, SHARDEX_TLS_KEY_FILE: nodeCert.keyFile, SHARDEX_TLS_CA_FILE: ca.certFile }),
    ]);
    expect(unreadable.code, unreadable.stderr).toBe(2);
    expect(unreadable.stderr).toContain(`cannot read the certificate file ${missing} (--tls-cert)`);
    expect(misnamed.code, misnamed.stderr).toBe(2);
    expect(misnamed.stderr).toContain('is not valid for --advertise-host (default: --host) node9.example');
  });
});
