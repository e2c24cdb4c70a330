// A snapshot reader's own HTTP API: its health, its status (what a node's GET /api/readers
// shows) and its Prometheus series. The same guard as a data node's API (src/node/http/auth.ts):
// with API keys, everything but /health needs a valid key; the same request ids and per-route
// series (observability.ts); errors in the catalog's shape.
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { AUTHORIZATION_REDACTION, guardRoutes, type ApiKey } from '../node/http/auth.js';
import { answerErrorsAsCatalog } from '../node/http/error-replies.js';
import { observability } from '../node/http/observability.js';
import { portError, type TlsMaterial } from '../transport/index.js';

export interface ReaderHttpOptions {
  readonly host: string;
  readonly port: number;
  readonly logger: Logger;
  readonly metrics: Registry;
  /** PEM certificate and key: https only. */
  readonly tls?: Pick<TlsMaterial, 'cert' | 'key'>;
  /** The keys file's entries (`--api-keys`); absent: open to whoever reaches the port. */
  readonly apiKeys?: readonly ApiKey[];
  health(): object;
  status(): unknown;
}

/** Nothing a reader's HTTP API takes has a body: this is all it reads of one. */
const BODY_LIMIT = 64 * 1024;

/** Builds and starts the reader's HTTP API; the port it listens on is `app.server.address()`. */
export async function startReaderHttp(o: ReaderHttpOptions): Promise<FastifyInstance> {
  const app = Fastify({
    ...(o.tls && { https: { cert: o.tls.cert, key: o.tls.key } }),
    loggerInstance: o.logger.child({ component: 'http' }, { redact: AUTHORIZATION_REDACTION }) as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: BODY_LIMIT,
  }) as unknown as FastifyInstance;
  answerErrorsAsCatalog(app, BODY_LIMIT);
  // First: every answer, refusals included, carries the request id and is counted.
  await app.register(observability, { registry: o.metrics });
  guardRoutes(app, o.apiKeys);
  app.get('/health', { config: { access: 'public' } }, async () => o.health());
  // What a node's GET /api/readers (any valid key) shows of this reader.
  app.get('/api/reader', { config: { access: 'any' } }, async () => o.status());
  // A scraper needs a key, not a role, as on the nodes.
  app.get('/metrics', { config: { access: 'any' } }, async (_req, reply) => {
    void reply.header('content-type', o.metrics.contentType);
    return o.metrics.metrics();
  });
  await app.listen({ host: o.host, port: o.port }).catch(async (err: Error) => {
    await app.close().catch(() => undefined);
    throw portError('HTTP', o.host, o.port, err);
  });
  return app;
}
