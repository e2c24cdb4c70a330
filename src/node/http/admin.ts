// Operator endpoints: health, the cluster view, the readers' status, Prometheus metrics.
import { Agent } from 'node:https';
import type { FastifyPluginAsync } from 'fastify';
import { agentFetch } from '../../client/transport.js';
import { clusterView } from '../../coordination/index.js';

export interface AdminRoutesOptions {
  /** PEM CA(s) (`--tls-ca`) that readers' https certificates are verified against; absent: the system's. */
  readonly trustedCa?: Buffer;
}

export const adminRoutes: FastifyPluginAsync<AdminRoutesOptions> = async (app, opts) => {
  // Node's fetch knows only the system's CAs: readers on a private CA are asked through an agent that trusts it.
  const agent = opts.trustedCa && new Agent({ ca: opts.trustedCa, keepAlive: true });
  const readerFetch = agent ? agentFetch(agent) : fetch;
  if (agent) app.addHook('onClose', async () => agent.destroy());
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
          const res = await readerFetch(`${r.http}/api/reader`, { signal: AbortSignal.timeout(2000), ...(authorization !== undefined && { headers: { authorization } }) });
          if (!res.ok) return { name: r.name, group: r.group ?? 'default', error: `answered ${res.status}: ${((await res.json().catch(() => ({}))) as { error?: string }).error ?? 'no message'}` };
          return (await res.json()) as object;
        } catch (err) {
          // fetch's own message is "fetch failed": what went wrong is its cause.
          const cause = (err as { cause?: unknown }).cause;
          const why = cause instanceof Error ? `${(err as Error).message}: ${cause.message}` : (err as Error).message;
          return { name: r.name, group: r.group ?? 'default', error: `not reachable: ${why}` };
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
