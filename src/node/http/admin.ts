// Operator endpoints: health, the cluster view, Prometheus metrics.
import type { FastifyPluginAsync } from 'fastify';
import type { CollectionState, Coordinator } from '../../coordination/index.js';

/** The cluster as GET /api/cluster shows it. */
export function clusterView(coord: Coordinator): unknown {
  // fromEntries defines own properties: a collection named "__proto__" is listed, not assigned as a prototype.
  const collections = Object.fromEntries([...coord.collections()].map(([name, state]) => [name, collectionView(coord, state)]));
  return {
    nodes: coord.liveNodes().map((n) => ({ name: n.name, http: n.http, grpc: n.grpc, role: n.role, ...(n.group && { group: n.group }) })),
    collections,
  };
}

function collectionView(coord: Coordinator, state: CollectionState): unknown {
  const shards: Record<string, unknown> = {};
  for (const s of state.shards) {
    shards[s.name] = {
      range: s.range,
      leader: coord.leader(state.name, s.name)?.node ?? null,
      replicas: s.replicas.map((r) => ({ node: r.node, state: coord.isLive(r.node) ? r.state : 'down' })),
    };
  }
  return { router: state.router, numShards: state.numShards, replicationFactor: state.replicationFactor, shards };
}

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
