// A node that has not read the cluster state yet gives no false definite answers (issue 10,
// item 5): every request that needs the state gets a retryable 503 SHX_STARTING, /health says
// "starting" (readiness) while /health/live answers (liveness); once started, both are 200.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClusterCoordinator } from '../src/coordination/index.js';
import { MemoryZNodeServer } from '../src/coordination/memory-store.js';
import { buildHttp } from '../src/node/http/app.js';
import { silentLogger } from '../src/logger.js';
import { ShardexNode } from '../src/node/shardex-node.js';

let dir: string;
let node: ShardexNode;
let server: MemoryZNodeServer;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'shardex-ready-'));
  server = new MemoryZNodeServer();
  const coordinator = new ClusterCoordinator({ store: server.connect({ chroot: '/shardex' }), logger: silentLogger() });
  node = new ShardexNode({ name: 'n1', httpPort: 0, grpcPort: 0, dataDir: dir, coordinator, logger: silentLogger() });
});

afterAll(async () => {
  await node.stop().catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
});

describe('a node that has not read the cluster state', () => {
  it('answers requests that need it with a retryable 503 SHX_STARTING, saying nothing was done', async () => {
    const app = await buildHttp(node, { bodyLimit: 1024 * 1024, logger: silentLogger() });
    try {
      const write = await app.inject({ method: 'POST', url: '/api/collections/books/docs', payload: [{ id: '1' }] });
      expect(write.statusCode).toBe(503);
      expect(write.headers['retry-after']).toBe('1');
      expect(write.json()).toMatchObject({ code: 'SHX_STARTING' });
      expect(write.json().error).toContain('nothing was done');
      for (const url of ['/api/collections/books/docs/1', '/api/collections/books/search?q=x', '/api/cluster']) {
        const res = await app.inject({ method: 'GET', url });
        expect(res.statusCode, url).toBe(503);
        expect(res.json().code, url).toBe('SHX_STARTING');
      }
    } finally {
      await app.close();
    }
  });

  it('is not ready on /health (readiness) and alive on /health/live (liveness)', async () => {
    const app = await buildHttp(node, { bodyLimit: 1024 * 1024, logger: silentLogger() });
    try {
      const health = await app.inject({ method: 'GET', url: '/health' });
      expect(health.statusCode).toBe(503);
      expect(health.json()).toEqual({ status: 'starting', node: 'n1' });
      expect((await app.inject({ method: 'GET', url: '/health/live' })).statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });
});

describe('once started', () => {
  it('is ready, and an unknown collection is then a definite 404', async () => {
    await node.start();
    const health = await fetch(`${node.httpUrl}/health`);
    expect(health.status).toBe(200);
    const res = await fetch(`${node.httpUrl}/api/collections/books/docs/1`);
    expect(res.status).toBe(404);
    expect(((await res.json()) as { code: string }).code).toBe('SHX_COLLECTION_NOT_FOUND');
  });
});
