// TLS and mutual TLS between nodes and readers (issue 13), with certificates the test makes
// (test/support/tls-certs.ts): a real gRPC server and client on 127.0.0.1. With a certificate the
// server speaks TLS only; with a CA as well, it serves only clients presenting a certificate
// issued by that CA, before any handler runs. The PEM files are checked at start, and every
// refusal names the flag and says what to do.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { PeerClients, PeerServer, checkCertificateHost, loadClientTls, loadTls, type ClientTlsMaterial, type PeerHandlers, type TlsMaterial } from '../src/transport/index.js';
import { silentLogger } from '../src/logger.js';
import { recordingHandlers } from './support/peer-handlers.js';
import { ShardexError } from '../src/errors.js';
import { ShardexClient } from '../src/client/index.js';
import { testPki, type CertFiles, type TestCa, type TestPki } from './support/tls-certs.js';

const log = silentLogger();

let pki: TestPki;
let ca: TestCa;
let otherCa: TestCa;
let server: CertFiles;
let client: CertFiles;
let stranger: CertFiles;

beforeAll(async () => {
  pki = await testPki();
  [ca, otherCa] = await Promise.all([pki.ca('cluster-ca'), pki.ca('other-ca')]);
  [server, client, stranger] = await Promise.all([ca.issue('node1'), ca.issue('client'), otherCa.issue('stranger')]);
});
afterAll(async () => {
  await pki?.remove();
});

const handlers = (calls: string[]): PeerHandlers => recordingHandlers(calls, [{ id: 'a' }]);

const servers: PeerServer[] = [];
const clients: PeerClients[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  for (const s of servers.splice(0)) await s.close();
});

async function serve(tls: TlsMaterial | undefined, calls: string[]): Promise<string> {
  const s = new PeerServer(handlers(calls), log, { ...(tls && { tls }) });
  servers.push(s);
  return `127.0.0.1:${await s.listen('127.0.0.1', 0)}`;
}

function peerClient(address: string, tls?: ClientTlsMaterial): PeerClients {
  const c = new PeerClients({ resolve: () => address, logger: log, callTimeoutMs: 5000, ...(tls && { tls }) });
  clients.push(c);
  return c;
}

async function rejection(p: Promise<unknown>): Promise<ShardexError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ShardexError);
  return err as ShardexError;
}

async function collect(c: PeerClients): Promise<unknown[]> {
  const out: unknown[] = [];
  for await (const chunk of c.streamCall('n1', 'copyShard', { collection: 'c', shard: 'shard1' })) out.push(chunk);
  return out;
}

const get = (c: PeerClients): Promise<unknown> => c.call('n1', 'get', { collection: 'c', shard: 'shard1', ids: ['a'] });
const update = { collection: 'c', shard: 'shard1', phase: 'FROMLEADER' as const, epoch: 1, ops: [], minRf: 1, from: 'n0' };

describe('gRPC over TLS (server certificate only)', () => {
  const tls = (): TlsMaterial => ({ cert: server.cert, key: server.key });

  it('serves a client that verifies the server against the CA', async () => {
    const calls: string[] = [];
    const c = peerClient(await serve(tls(), calls), { ca: ca.cert });
    expect(await get(c)).toEqual([{ id: 'a' }]);
    expect(calls).toEqual(['get']);
  });

  it('refuses a plaintext client: the call fails as unavailable, no handler runs', async () => {
    const calls: string[] = [];
    const err = await rejection(get(peerClient(await serve(tls(), calls))));
    expect(err.code).toBe('SHX_UNAVAILABLE');
    expect(calls).toEqual([]);
  });

  it('is refused by a client that trusts another CA', async () => {
    const calls: string[] = [];
    const err = await rejection(get(peerClient(await serve(tls(), calls), { ca: otherCa.cert })));
    expect(err.code).toBe('SHX_UNAVAILABLE');
    expect(calls).toEqual([]);
  });
});

describe('mutual TLS (server certificate and CA)', () => {
  const mtls = (): TlsMaterial => ({ cert: server.cert, key: server.key, ca: ca.cert });

  it('serves a client presenting a certificate from the CA: unary calls, the update stream, the copy stream', async () => {
    const calls: string[] = [];
    const c = peerClient(await serve(mtls(), calls), { ca: ca.cert, cert: client.cert, key: client.key });
    expect(await get(c)).toEqual([{ id: 'a' }]);
    expect(await c.call('n1', 'versions', { collection: 'c', shard: 'shard1' })).toEqual({ maxVersion: 7, trimmedThrough: 0 });
    const [outcome] = await c.send('n1', [update]);
    expect(outcome).toMatchObject({ ok: true });
    expect(await collect(c)).toEqual([[]]);
    expect(calls).toEqual(['get', 'versions', 'update', 'copyShard']);
  });

  it('refuses a client without a certificate, reads included, before any handler runs', async () => {
    const calls: string[] = [];
    const c = peerClient(await serve(mtls(), calls), { ca: ca.cert });
    expect((await rejection(get(c))).code).toBe('SHX_UNAVAILABLE');
    expect((await rejection(c.send('n1', [update]))).code).toBe('SHX_UNAVAILABLE');
    expect(calls).toEqual([]);
  });

  it('refuses a client whose certificate another CA issued', async () => {
    const calls: string[] = [];
    const c = peerClient(await serve(mtls(), calls), { ca: ca.cert, cert: stranger.cert, key: stranger.key });
    expect((await rejection(get(c))).code).toBe('SHX_UNAVAILABLE');
    expect((await rejection(collect(c))).code).toBe('SHX_UNAVAILABLE');
    expect(calls).toEqual([]);
  });

  it('refuses a plaintext client', async () => {
    const calls: string[] = [];
    expect((await rejection(get(peerClient(await serve(mtls(), calls))))).code).toBe('SHX_UNAVAILABLE');
    expect(calls).toEqual([]);
  });
});

describe('PEM files at start', () => {
  const files = () => ({ cert: server.certFile, key: server.keyFile, ca: ca.certFile });

  async function refusal(p: Promise<unknown>): Promise<string> {
    const err = await rejection(p);
    expect(err.code).toBe('SHX_BAD_CONFIG');
    return err.message;
  }

  it('loads a certificate, its key and the CA that issued it; nothing given is no TLS', async () => {
    const tls = await loadTls(files());
    expect(tls?.cert.equals(server.cert)).toBe(true);
    expect(tls?.key.equals(server.key)).toBe(true);
    expect(tls?.ca?.equals(ca.cert)).toBe(true);
    expect(await loadTls({})).toBeUndefined();
  });

  it('names the flag of a file that cannot be read', async () => {
    const missing = join(pki.dir, 'missing.crt');
    const message = await refusal(loadTls({ ...files(), cert: missing }));
    expect(message).toContain(`cannot read the certificate file ${missing} (--tls-cert)`);
  });

  it('refuses a file that holds no PEM certificate, and a key that is not one', async () => {
    const junk = join(pki.dir, 'junk.pem');
    await writeFile(junk, 'not a certificate\n');
    expect(await refusal(loadTls({ ...files(), cert: junk }))).toContain(`${junk} (--tls-cert) holds no PEM certificate`);
    expect(await refusal(loadTls({ ...files(), key: junk }))).toContain(`${junk} (--tls-key) holds no usable private key`);
    expect(await refusal(loadTls({ ...files(), ca: junk }))).toContain(`${junk} (--tls-ca) holds no PEM certificate`);
  });

  it('refuses a key that is not the certificate’s', async () => {
    expect(await refusal(loadTls({ ...files(), key: client.keyFile }))).toContain(`the private key in ${client.keyFile} (--tls-key) is not the key of the certificate`);
  });

  it('refuses a certificate the CA did not issue (peers would refuse it)', async () => {
    const message = await refusal(loadTls({ cert: stranger.certFile, key: stranger.keyFile, ca: ca.certFile }));
    expect(message).toContain(`is not issued by a CA in ${ca.certFile} (--tls-ca)`);
  });

  it('needs both the certificate and the key, and a CA only with them', async () => {
    expect(await refusal(loadTls({ cert: server.certFile }))).toContain('--tls-cert needs --tls-key');
    expect(await refusal(loadTls({ key: server.keyFile }))).toContain('--tls-key needs --tls-cert');
    expect(await refusal(loadTls({ ca: ca.certFile }))).toContain('--tls-ca needs --tls-cert and --tls-key');
  });

  it('checks that the certificate names the advertised host', async () => {
    const tls = (await loadTls(files()))!;
    expect(() => checkCertificateHost(tls, '127.0.0.1', '--tls-cert', '--advertise-host')).not.toThrow();
    expect(() => checkCertificateHost(tls, 'localhost', '--tls-cert', '--advertise-host')).not.toThrow();
    expect(() => checkCertificateHost(tls, 'node7.example', '--tls-cert', '--advertise-host')).toThrow(/not valid for --advertise-host node7\.example.*DNS:node7\.example/);
  });

  it('gives a client the CA alone, or a certificate as well (from any CA)', async () => {
    const names = { cert: '--cert', key: '--key', ca: '--ca' };
    expect(await loadClientTls({ ca: ca.certFile }, names)).toEqual({ ca: ca.cert });
    const own = await loadClientTls({ ca: ca.certFile, cert: stranger.certFile, key: stranger.keyFile }, names);
    expect(own?.cert?.equals(stranger.cert)).toBe(true);
    expect(await loadClientTls({}, names)).toBeUndefined();
    expect(await refusal(loadClientTls({ cert: client.certFile }, names))).toContain('--cert needs --key');
  });
});

describe('the client\'s tls option', () => {
  const refused = (tls: unknown): ShardexError => {
    let err: unknown;
    try {
      new ShardexClient({ urls: 'https://127.0.0.1:1', tls: tls as never });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ShardexError);
    expect((err as ShardexError).code).toBe('SHX_BAD_CONFIG');
    return err as ShardexError;
  };

  it('takes ca, cert and key as PEM text or bytes', async () => {
    const c = new ShardexClient({ urls: 'https://127.0.0.1:1', tls: { ca: ca.cert.toString(), cert: client.cert, key: client.key } });
    await c.close();
  });

  it('refuses an unknown key, a value that is not PEM text or bytes, and a certificate without its key', () => {
    expect(refused({ cacert: ca.cert }).message).toContain("unknown tls option 'cacert'");
    expect(refused({ ca: 42 }).message).toContain('tls.ca must be PEM text or its bytes');
    expect(refused({ cert: client.cert }).message).toContain('tls.cert needs tls.key');
  });
});
