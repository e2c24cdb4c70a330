// Request ids and per-route metrics for the HTTP APIs of nodes and readers (issue 13, observability).
// - The request id: the caller's `x-request-id` when it is a plausible id (src/request-id.ts),
//   else a new one; it is the request's fastify id (so `req.log` binds it as `reqId`), it goes
//   back in the response's `x-request-id`, and the handler runs inside it, so that every log
//   line of the request's work and every gRPC call it makes to other nodes carry it.
// - Metrics: a count and a latency histogram per method, route pattern (the route's URL as
//   registered, e.g. /api/collections/:c/docs/:id, never the raw URL, whose ids would make a
//   series each) and status code; requests that match no route share one `route` label.
// Not encapsulated (fastify's skip-override, as fastify-plugin does): the hooks apply to every
// route, and to requests the auth and limit hooks refuse, when it is registered before them.
import type { FastifyPluginAsync } from 'fastify';
import type { Registry } from 'prom-client';
import { requestBoundLogger } from '../../logger.js';
import { REQUEST_ID_HEADER, requestIdFrom, withRequestId } from '../../request-id.js';
import { httpMetrics } from '../metrics.js';

/** The `route` label of requests that match no route (404s). */
export const UNMATCHED_ROUTE = '(unmatched)';

export interface ObservabilityOptions {
  /** Where the per-route series go: the process's registry (a node's, a reader's). */
  readonly registry: Registry;
}

export const observability: FastifyPluginAsync<ObservabilityOptions> = async (app, opts) => {
  const metrics = httpMetrics(opts.registry);
  app.setGenReqId((raw) => requestIdFrom(raw.headers[REQUEST_ID_HEADER]));
  app.setChildLoggerFactory((logger, bindings, opts) => requestBoundLogger(logger.child(bindings, opts)));
  app.addHook('onRequest', (req, reply, done) => {
    void reply.header(REQUEST_ID_HEADER, req.id);
    done();
  });
  // Entered again just before the handler: body parsing may continue in another async context.
  app.addHook('preHandler', (req, _reply, done) => withRequestId(req.id, done));
  app.addHook('onResponse', (req, reply, done) => {
    const labels = { method: req.method, route: req.routeOptions.url ?? UNMATCHED_ROUTE, status_code: String(reply.statusCode) };
    metrics.requests.inc(labels);
    metrics.duration.observe(labels, reply.elapsedTime / 1000);
    done();
  });
};

(observability as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;
