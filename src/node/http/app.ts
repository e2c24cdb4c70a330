// The HTTP API: one fastify instance per node, one plugin per resource. Every error leaves
// as {"error": "<what was wrong>", "code": "SHX_..."} with its catalog status (error-replies.ts).
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import sjson from 'secure-json-parse';
import type { Logger } from 'pino';
import { ShardexError } from '../../errors.js';
import type { ShardexNode } from '../shardex-node.js';
import { adminRoutes } from './admin.js';
import { AUTHORIZATION_REDACTION, guardRoutes, type ApiKey, type RouteAccess } from './auth.js';
import { collectionRoutes } from './collections.js';
import { DOCS_ROUTE, docRoutes } from './docs.js';
import { answerErrorsAsCatalog, toShardexHttpError } from './error-replies.js';
import { checkBatchCount, checkJsonDepth, limitRequestsPerConnection, resolveLimits, type HttpLimits } from './limits.js';
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
  /** PEM CA(s) (`--tls-ca`) the node's own https calls (a reader's status) verify against; absent: the system's. */
  readonly trustedCa?: Buffer;
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

export async function buildHttp(node: ShardexNode, opts: HttpOptions): Promise<FastifyInstance> {
  const { maxBodyBytes: bodyLimit, ...limits } = resolveLimits({ ...opts.limits, maxBodyBytes: opts.bodyLimit });
  const app = Fastify({
    ...(opts.https && { https: { cert: opts.https.cert, key: opts.https.key } }),
    loggerInstance: opts.logger.child({ component: 'http' }, { redact: AUTHORIZATION_REDACTION }) as FastifyBaseLogger,
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
      if (req.routeOptions.url === DOCS_ROUTE) checkBatchCount(body as string, false, limits);
      done(null, parseJsonBody(body as string, maxDepthOf(req)));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
  app.addContentTypeParser(['application/x-ndjson', 'application/ndjson'], { parseAs: 'string' }, (req, body, done) => {
    try {
      if (req.routeOptions.url === DOCS_ROUTE) checkBatchCount(body as string, true, limits);
      done(null, parseNdjson(body as string, maxDepthOf(req)));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
  answerErrorsAsCatalog(app as unknown as FastifyInstance, bodyLimit);
  // First: every answer, refusals included, carries the request id and is counted.
  await app.register(observability, { registry: node.metrics });
  // In this order: a connection over its limit costs nothing more; a caller without a key
  // learns nothing, not even that the node is starting.
  app.addHook('onRequest', limitRequestsPerConnection(limits.maxRequestsPerConnection));
  // Every route says who may call it (a route that does not is refused as it is added).
  app.decorate('routeAccess', guardRoutes(app as unknown as FastifyInstance, opts.apiKeys));
  // A node that has not read the cluster state yet would answer as if it were empty (a false
  // "collection does not exist"): until then, everything but health and metrics is SHX_STARTING.
  app.addHook('onRequest', async (req) => {
    if (!node.ready && !req.url.startsWith('/health') && !req.url.startsWith('/metrics')) node.assertReady();
  });
  await app.register(adminRoutes, { ...(opts.trustedCa && { trustedCa: opts.trustedCa }) });
  await app.register(collectionRoutes);
  await app.register(docRoutes);
  await app.register(searchRoutes);
  await app.register(readBalanceRoutes);
  await app.register(clusterPageRoutes);
  return app as unknown as FastifyInstance;
}
