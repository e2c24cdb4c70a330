// Operator endpoints: health, the cluster view, Prometheus metrics.
import type { FastifyPluginAsync } from 'fastify';
import { clusterView } from '../../coordination/index.js';

export const adminRoutes: FastifyPluginAsync = async (app) => {
  // Readiness: 503 until the node has read the cluster state (load balancers wait for it).
  app.get('/health', { config: { access: 'public' } }, async (_req, reply) => {
    if (!app.shardex.ready) return reply.status(503).send({ status: 'starting', node: app.shardex.name });
    return { status: 'ok', node: app.shardex.name };
  });
  // Liveness: the process answers (a starting node is alive).
  app.get('/health/live', { config: { access: 'public' } }, async () => ({ status: 'alive', node: app.shardex.name }));
  // Every client routes with the cluster view: any valid key may read it.
  app.get('/api/cluster', { config: { access: 'any' } }, async () => {
    app.shardex.assertReady();
    return clusterView(app.shardex.coordinator);
  });
  // The caller's key goes on to the readers: readers with --api-keys take the same keys file.
  app.get('/api/readers', { config: { access: 'any' } }, async (req) => {
    const authorization = req.headers.authorization;
    const readers = await Promise.all(
      app.shardex.readers().map(async (r) => {
        try {
          const res = await fetch(`${r.http}/api/reader`, { signal: AbortSignal.timeout(2000), ...(authorization !== undefined && { headers: { authorization } }) });
          if (!res.ok) return { name: r.name, group: r.group ?? 'default', error: `answered ${res.status}: ${((await res.json().catch(() => ({}))) as { error?: string }).error ?? 'no message'}` };
          return (await res.json()) as object;
        } catch (err) {
          return { name: r.name, group: r.group ?? 'default', error: `not reachable: ${(err as Error).message}` };
        }
      }),
    );
    return { readers };
  });
  // A scraper needs a key, not a role: give it one with the least (read).
  app.get('/metrics', { config: { access: 'any' } }, async (_req, reply) => {
    void reply.header('content-type', app.shardex.metrics.contentType);
    return app.shardex.metricsText();
  });
};
