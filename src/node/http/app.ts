// The HTTP API: one fastify instance per node, one plugin per resource. Every error leaves
// as {"error": "<what was wrong>", "code": "SHX_..."} with its catalog status; fastify's own
// errors (bad JSON, body too large, wrong content type) are mapped here, once.
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import sjson from 'secure-json-parse';
import type { Logger } from 'pino';
import { ShardexError } from '../../errors.js';
import type { ShardexNode } from '../shardex-node.js';
import { adminRoutes } from './admin.js';
import { ApiKeyRing, authenticateRequests, type Access, type ApiKey } from './auth.js';
import { collectionRoutes } from './collections.js';
import { DOCS_ROUTE, docRoutes } from './docs.js';
import { checkJsonDepth, limitExceeded, limitRequestsPerConnection, resolveLimits, type HttpLimits } from './limits.js';
import { observability } from './observability.js';
import { clusterPageRoutes } from './page.js';
import { readBalanceRoutes } from './read-balance.js';
import { searchRoutes } from './search.js';

export interface HttpOptions {
  /** Largest request body in bytes (`--max-body-bytes`). */
  readonly bodyLimit: number;
  readonly logger: Logger;
  /** The keys file's entries (`--api-keys`); absent: the API is open to whoever reaches it. */
  readonly apiKeys?: readonly ApiKey[];
  /** Limits other than the body size (limits.ts: flags and defaults). */
  readonly limits?: Partial<HttpLimits>;
  /** PEM certificate and key (`--tls-cert`, `--tls-key`): serve https only. */
  readonly https?: { readonly cert: Buffer; readonly key: Buffer };
}

declare module 'fastify' {
  interface FastifyInstance {
    shardex: ShardexNode;
    /** This node's request limits, every one resolved. */
    limits: HttpLimits;
    /** Every route and the access it needs (auth.ts), in registration order. */
    routeAccess: readonly RouteAccess[];
  }
}

export interface RouteAccess {
  readonly method: string;
  readonly url: string;
  readonly access: Access;
}

const SJSON = { protoAction: 'error', constructorAction: 'error' } as const;
// secure-json-parse's message for both "__proto__" and "constructor": {"prototype": ...}.
const FORBIDDEN_KEY = 'Object contains forbidden prototype property';

/**
 * Parses one JSON text. A "__proto__" or "constructor.prototype" key is refused (never
 * stripped or applied), and said so: the text is valid JSON, it is the key that is refused.
 */
function parseJsonText(text: string, maxDepth: number | undefined, what: string, code: 'SHX_BAD_REQUEST' | 'SHX_BAD_DOCUMENT', details?: Record<string, unknown>): unknown {
  let value: unknown;
  try {
    value = sjson.parse(text, undefined, SJSON);
  } catch (err) {
    const message = (err as Error).message;
    if (message === FORBIDDEN_KEY) {
      throw new ShardexError(code, `${what} has a "__proto__" or "constructor.prototype" key, which is refused (it could change object prototypes); rename the field; nothing was written`, details && { details });
    }
    throw new ShardexError(code, `${what} is not valid JSON (${message}); nothing was written`, details && { details });
  }
  if (maxDepth !== undefined) checkJsonDepth(value, maxDepth, what, details);
  return value;
}

/**
 * Parses a JSON body (replaces fastify's parser, so that every message is ours), refusing one
 * that nests deeper than `maxDepth` (undefined: the route checks depth itself).
 */
export function parseJsonBody(text: string, maxDepth: number | undefined): unknown {
  if (text.trim().length === 0) throw new ShardexError('SHX_BAD_REQUEST', 'body is empty; send a JSON array of documents');
  return parseJsonText(text, maxDepth, 'body', 'SHX_BAD_REQUEST');
}

/** An NDJSON body: its documents, and the line each came from (so that refusals name the line). */
export class NdjsonBatch {
  constructor(
    readonly docs: unknown[],
    readonly lines: number[],
  ) {}
}

/** Parses NDJSON: one JSON value per non-empty line (each nesting at most maxDepth, as parseJsonBody); names the bad line. */
export function parseNdjson(text: string, maxDepth: number | undefined): NdjsonBatch {
  const out: unknown[] = [];
  const lines: number[] = [];
  let line = 0;
  let start = 0;
  while (start <= text.length) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    line++;
    const raw = text.slice(start, end).trim();
    start = end + 1;
    if (raw.length === 0) continue;
    out.push(parseJsonText(raw, maxDepth, `line ${line}`, 'SHX_BAD_DOCUMENT', { line }));
    lines.push(line);
  }
  return new NdjsonBatch(out, lines);
}

const FASTIFY_ERRORS: Record<string, (e: FastifyError, bodyLimit: number) => ShardexError> = {
  FST_ERR_CTP_INVALID_JSON_BODY: (e) => new ShardexError('SHX_BAD_REQUEST', `body is not valid JSON: ${e.message}`),
  FST_ERR_CTP_EMPTY_JSON_BODY: () => new ShardexError('SHX_BAD_REQUEST', 'body is empty; send a JSON array of documents'),
  FST_ERR_CTP_BODY_TOO_LARGE: (_e, bodyLimit) => limitExceeded('maxBodyBytes', bodyLimit, 'the request body is too large', 'split the batch into smaller requests', 'nothing was written'),
  FST_ERR_CTP_INVALID_MEDIA_TYPE: (e) =>
    new ShardexError('SHX_UNSUPPORTED_MEDIA', `${e.message}; send application/json or application/x-ndjson`),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: (e) => new ShardexError('SHX_BAD_REQUEST', e.message),
};

/** Any error as the catalog's; `bodyLimit` goes into the body-size message. */
export function toShardexHttpError(err: unknown, bodyLimit: number): ShardexError {
  if (err instanceof ShardexError) return err;
  const fe = err as FastifyError;
  const mapped = fe.code ? FASTIFY_ERRORS[fe.code] : undefined;
  if (mapped) return mapped(fe, bodyLimit);
  if (fe.validation) return new ShardexError('SHX_BAD_REQUEST', fe.message);
  if (err instanceof SyntaxError) return new ShardexError('SHX_BAD_REQUEST', `body is not valid JSON: ${err.message}`);
  if (typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) return new ShardexError('SHX_BAD_REQUEST', fe.message);
  return new ShardexError('SHX_INTERNAL', fe.message ?? String(err), { cause: err });
}

export async function buildHttp(node: ShardexNode, opts: HttpOptions): Promise<FastifyInstance> {
  const { maxBodyBytes: bodyLimit, ...limits } = resolveLimits({ ...opts.limits, maxBodyBytes: opts.bodyLimit });
  const app = Fastify({
    ...(opts.https && { https: { cert: opts.https.cert, key: opts.https.key } }),
    // Nothing here logs headers; should anything ever log a request's, its key stays out.
    loggerInstance: opts.logger.child({ component: 'http' }, { redact: { paths: ['req.headers.authorization', 'headers.authorization'], censor: '[redacted]' } }) as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit,
    // Ids up to 512 UTF-8 bytes travel percent-encoded in paths (up to 12 characters per
    // code point): let every id reach the handler, which names what is wrong with it.
    routerOptions: { maxParamLength: 16 * 1024 },
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    // Errors the router raises before any route runs (a path that is not percent-encoded
    // UTF-8, e.g. a lone surrogate) leave in the same {"error", "code"} shape as all others.
    frameworkErrors: (err, _req, reply) => {
      const e =
        err.code === 'FST_ERR_BAD_URL'
          ? new ShardexError('SHX_BAD_REQUEST', `${err.message}: the path must be percent-encoded UTF-8 (an id with a lone surrogate has no UTF-8 form)`)
          : toShardexHttpError(err, bodyLimit);
      void (reply as FastifyReply).status(e.status).send(e.toJSON());
    },
  });
  app.decorate('shardex', node);
  app.decorate('limits', limits);
  // Only JSON and NDJSON bodies: anything else (text/plain included) is 415, not a string.
  app.removeContentTypeParser(['application/json', 'text/plain']);
  // A batch of documents has its nesting checked in the pass over its values that the size
  // limits make anyway (checkBatchLimits): one walk over a large body, not two.
  const maxDepthOf = (req: FastifyRequest): number | undefined => (req.routeOptions.url === DOCS_ROUTE ? undefined : limits.maxJsonDepth);
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    try {
      done(null, parseJsonBody(body as string, maxDepthOf(req)));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
  app.addContentTypeParser(['application/x-ndjson', 'application/ndjson'], { parseAs: 'string' }, (req, body, done) => {
    try {
      done(null, parseNdjson(body as string, maxDepthOf(req)));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
  app.setErrorHandler((err, req, reply) => {
    const e = toShardexHttpError(err, bodyLimit);
    // A retryable 503 (starting, no leader yet) is a condition that passes, not a fault.
    if (e.status >= 500 && !e.retryable) req.log.error({ err, code: e.code }, 'request failed');
    else if (e.status >= 500) req.log.debug({ code: e.code, msg: e.message }, 'request refused for now');
    if (e.retryable && (e.status === 503 || e.code === 'SHX_TOO_MANY_REQUESTS')) void reply.header('retry-after', '1');
    void reply.status(e.status).send(e.toJSON());
  });
  app.setNotFoundHandler((req, reply) => {
    void reply.status(404).send({ error: `no route ${req.method} ${req.url}; see the README for the API`, code: 'SHX_NOT_FOUND' });
  });
  // First: every answer, refusals included, carries the request id and is counted.
  await app.register(observability);
  // In this order: a connection over its limit costs nothing more; a caller without a key
  // learns nothing, not even that the node is starting.
  app.addHook('onRequest', limitRequestsPerConnection(limits.maxRequestsPerConnection));
  if (opts.apiKeys !== undefined) {
    const ring = new ApiKeyRing(opts.apiKeys);
    app.addHook('onRequest', authenticateRequests(ring));
    app.log.info({ keys: ring.size }, 'API keys required');
  } else {
    app.log.info('no API keys configured: the HTTP API is open to anyone who can reach it');
  }
  // A node that has not read the cluster state yet would answer as if it were empty (a false
  // "collection does not exist"): until then, everything but health and metrics is SHX_STARTING.
  app.addHook('onRequest', async (req) => {
    if (!node.ready && !req.url.startsWith('/health') && !req.url.startsWith('/metrics')) node.assertReady();
  });
  // Every route says who may call it: one that does not is a mistake, refused as it is added.
  const routeAccess: RouteAccess[] = [];
  app.decorate('routeAccess', routeAccess);
  app.addHook('onRoute', (route) => {
    const access = route.config?.access;
    if (access === undefined) throw new Error(`route ${String(route.method)} ${route.url} declares no config.access (see src/node/http/auth.ts)`);
    for (const method of [route.method].flat()) if (method !== 'HEAD') routeAccess.push({ method, url: route.url, access });
  });
  await app.register(adminRoutes);
  await app.register(collectionRoutes);
  await app.register(docRoutes);
  await app.register(searchRoutes);
  await app.register(readBalanceRoutes);
  await app.register(clusterPageRoutes);
  return app as unknown as FastifyInstance;
}
