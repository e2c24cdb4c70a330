// `npm start` is `shardex dev`: the local cluster with each node in its own worker thread around
// one embedded coordinator. Started here as a child process, as a user starts it: it serves
// writes, reads and eventual searches, stops on Ctrl-C (SIGINT), and keeps its data for the
// next start. Its gRPC ports take replication calls only with the run's own cluster secret.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ShardexError } from '../../src/errors.js';
import { silentLogger } from '../../src/logger.js';
import { PeerClients } from '../../src/transport/index.js';
import { http } from '../support/cluster.js';
import { killAllDev, startDev, stopDev, type DevProcess } from '../support/dev-process.js';

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** A base port whose HTTP, gRPC and reader ports (base..+2, +100, +1000..+1002, +1100) are all free. */
async function freeBase(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const base = 20_000 + Math.floor(Math.random() * 20_000);
    const ports = [0, 1, 2, 100, 1000, 1001, 1002, 1100].map((d) => base + d);
    if ((await Promise.all(ports.map(portFree))).every(Boolean)) return base;
  }
  throw new Error('no free range of ports on 127.0.0.1');
}

function startDevOn(base: number, dataDir: string): Promise<DevProcess> {
  return startDev(['--port', String(base), '--data', dataDir, '--readers', '1']);
}

describe('shardex dev (npm start)', () => {
  let base: number;
  let dataDir: string;
  let dev: DevProcess | undefined;

  beforeAll(async () => {
    base = await freeBase();
    dataDir = await mkdtemp(join(tmpdir(), 'shardex-dev-'));
    dev = await startDevOn(base, dataDir);
  });

  afterAll(async () => {
    if (dev) await stopDev(dev);
    await killAllDev();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('prints where to send requests', () => {
    const text = dev!.out.join('');
    for (let i = 0; i < 3; i++) expect(text).toContain(`http://127.0.0.1:${base + i}`);
    expect(text).toContain('collection "docs": 2 shards x 2 replicas');
    expect(text).toContain('curl -s');
  });

  it("refuses replication calls from a process without the run's cluster secret, and serves reads", async () => {
    const nodes = (await http('GET', `http://127.0.0.1:${base}/api/cluster`)).body.nodes as Array<{ name: string; grpc: string; role: string }>;
    const node = nodes.find((n) => n.role === 'data')!;
    const peers = new PeerClients({ resolve: () => node.grpc, logger: silentLogger(), callTimeoutMs: 5000 });
    try {
      const refused = await peers.call(node.name, 'versions', { collection: 'docs', shard: 'shard1' }).then(
        () => undefined,
        (err: unknown) => err as ShardexError,
      );
      expect(refused).toMatchObject({ code: 'SHX_UNAUTHORIZED' });
      expect(await peers.call(node.name, 'get', { collection: 'docs', shard: 'shard1', ids: ['nothing-here'] })).toBeDefined();
    } finally {
      peers.close();
    }
  });

  it('takes writes on any node and serves reads and searches from every node', async () => {
    const w = await http('POST', `http://127.0.0.1:${base}/api/collections/docs/docs`, [{ id: 'a1', title: 'threads everywhere' }, { id: 'b2', title: 'another one' }]);
    expect(w.status).toBe(200);
    expect(w.body.rf).toBeGreaterThanOrEqual(1);
    if (w.body.rf < 2) {
      // Seen once in CI under load: a replica missed the write. The leader must then have marked it
      // down (it recovers); show why in the output, and require below that it ends up holding the
      // documents all the same.
      const log = await readFile(join(dataDir, 'shardex.log'), 'utf8').catch(() => '');
      process.stderr.write(`dev cluster acknowledged with rf ${w.body.rf}; warnings in its log:\n${log.split('\n').filter((l) => /"level":(40|50)/.test(l)).join('\n')}\n`);
    }
    // Each document is on exactly the two nodes that host its shard (distrib=false), with the version written.
    const deadline = Date.now() + 30_000;
    for (const id of ['a1', 'b2']) {
      let holders = 0;
      for (;;) {
        holders = 0;
        for (let i = 0; i < 3; i++) {
          const r = await http('GET', `http://127.0.0.1:${base + i}/api/collections/docs/docs/${id}?distrib=false`);
          if (r.status === 200 && r.body._version_ === w.body.versions[id]) holders++;
        }
        if (holders === 2 || Date.now() > deadline) break;
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(holders, `replicas holding ${id}`).toBe(2);
    }
    for (let i = 0; i < 3; i++) {
      const r = await http('GET', `http://127.0.0.1:${base + i}/api/collections/docs/docs/a1`);
      expect(r.body).toMatchObject({ id: 'a1', title: 'threads everywhere', _version_: w.body.versions.a1 });
    }
    const s = await http('GET', `http://127.0.0.1:${base + 2}/api/collections/docs/search?q=threads`);
    expect(s.body.hits.map((h: { id: string }) => h.id)).toEqual(['a1']);
  });

  it('serves eventual searches from its snapshot reader after a commit', async () => {
    expect((await http('POST', `http://127.0.0.1:${base}/api/collections/docs/commit`)).status).toBe(200);
    // The reader copies the new commit point once its snapshot is older than the expiry (5 s).
    const deadline = Date.now() + 30_000;
    let res = await http('GET', `http://127.0.0.1:${base + 1}/api/collections/docs/search?q=threads&consistency=eventual`);
    while (res.body.total !== 1 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
      res = await http('GET', `http://127.0.0.1:${base + 1}/api/collections/docs/search?q=threads&consistency=eventual`);
    }
    expect(res.body.total).toBe(1);
    for (const s of Object.values(res.body.servedBy) as Array<{ node: string; fallback: boolean }>) expect(s).toMatchObject({ node: 'reader1', fallback: false });
  });

  it('stops on Ctrl-C with exit code 0 and finds its documents again at the next start', async () => {
    expect(await stopDev(dev!)).toBe(0);
    dev = await startDevOn(base, dataDir);
    const r = await http('GET', `http://127.0.0.1:${base + 2}/api/collections/docs/docs/b2`);
    expect(r.body).toMatchObject({ id: 'b2', title: 'another one' });
  });
});
