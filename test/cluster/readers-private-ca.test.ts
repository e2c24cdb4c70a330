// GET /api/readers with readers on a private CA: the node asks each reader's https status with
// its own --tls-ca as the trust (Node's fetch knows only the system's CAs, and would show every
// reader as not reachable). A reader whose certificate another CA issued is shown as not
// reachable, and says why; the others are listed.
import { Agent } from 'node:https';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentFetch } from '../../src/client/transport.js';
import type { TlsMaterial } from '../../src/transport/index.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { testPki, type TestPki } from '../support/tls-certs.js';

describe('GET /api/readers with readers on a private CA', () => {
  let pki: TestPki;
  let tc: TestCluster;
  let agent: Agent;
  let get: (url: string) => Promise<Response>;

  beforeAll(async () => {
    pki = await testPki();
    const [ca, stranger] = await Promise.all([pki.ca('shardex-ca'), pki.ca('other-ca')]);
    const [nodeCert, readerCert, strangerCert] = await Promise.all([ca.issue('node1'), ca.issue('reader1'), stranger.issue('reader2')]);
    const tls = (c: { cert: Buffer; key: Buffer }, trusted: Buffer): TlsMaterial => ({ cert: c.cert, key: c.key, ca: trusted });
    tc = await startCluster({ nodes: 1, readers: 1, nodeOptions: { tls: tls(nodeCert, ca.cert) }, readerOptions: { tls: tls(readerCert, ca.cert) } });
    // A second reader with a certificate of another CA: nobody trusts it, it trusts nobody here.
    await tc.cluster.startReader(1, { tls: tls(strangerCert, stranger.cert) });
    agent = new Agent({ ca: ca.cert });
    const fetchTls = agentFetch(agent);
    get = (url) => fetchTls(url, { method: 'GET', signal: AbortSignal.timeout(10_000) });
  });

  afterAll(async () => {
    agent?.destroy();
    await tc?.stop();
    await pki?.remove();
  });

  it('lists the status of a reader whose certificate the node\'s --tls-ca issued', async () => {
    const node = tc.cluster.nodes[0]!.httpUrl;
    expect(node.startsWith('https://')).toBe(true);
    const res = await get(`${node}/api/readers`);
    expect(res.status).toBe(200);
    const { readers } = (await res.json()) as { readers: Array<{ name: string; error?: string; scans?: object }> };
    const byName = new Map(readers.map((r) => [r.name, r]));
    expect(byName.get('reader1')).toMatchObject({ name: 'reader1', group: 'default', scans: expect.any(Object) });
    expect(byName.get('reader1')!.error).toBeUndefined();
  });

  it('shows a reader with a certificate of another CA as not reachable, saying why', async () => {
    const res = await get(`${tc.cluster.nodes[0]!.httpUrl}/api/readers`);
    const { readers } = (await res.json()) as { readers: Array<{ name: string; error?: string }> };
    const stranger = readers.find((r) => r.name === 'reader2');
    expect(stranger?.error).toMatch(/^not reachable: .*(certificate|self[- ]signed)/i);
  });
});
