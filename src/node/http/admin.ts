// Operator endpoints: health, the cluster view, Prometheus metrics.
import type { FastifyPluginAsync } from 'fastify';
import { clusterView } from '../../coordination/index.js';

export const adminRoutes: FastifyPluginAsync = async (app) => {
  app.get('/health', async () => ({ status: 'ok', node: app.shardex.name }));
  app.get('/api/cluster', async () => clusterView(app.shardex.coordinator));
  app.get('/api/readers', async () => {
    const readers = await Promise.all(
      app.shardex.readers().map(async (r) => {
        try {
          const res = await fetch(`${r.http}/api/reader`, { signal: AbortSignal.timeout(2000) });
          return (await res.json()) as object;
        } catch (err) {
          return { name: r.name, group: r.group ?? 'default', error: `not reachable: ${(err as Error).message}` };
        }
      }),
    );
    return { readers };
  });
  app.get('/metrics', async (_req, reply) => {
    void reply.header('content-type', app.shardex.metrics.contentType);
    return app.shardex.metricsText();
  });
};
