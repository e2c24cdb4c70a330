// The HTTP API: one fastify instance per node, one plugin per resource. Every error leaves
// as {"error": "<what was wrong>", "code": "SHX_..."} with its catalog status; fastify's own
// errors (bad JSON, body too large, wrong content type) are mapped here, once.
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyReply } from 'fastify';
import sjson from 'secure-json-parse';
import type { Logger } from 'pino';
import { ShardexError } from '../../errors.js';
import type { ShardexNode } from '../shardex-node.js';
import { adminRoutes } from './admin.js';
import { collectionRoutes } from './collections.js';
import { docRoutes } from './docs.js';
import { readBalanceRoutes } from './read-balance.js';
import { searchRoutes } from './search.js';

export interface HttpOptions {
  readonly bodyLimit: number;
  readonly logger: Logger;
}

declare module 'fastify' {
  interface FastifyInstance {
    shardex: ShardexNode;
  }
}

const SJSON = { protoAction: 'error', constructorAction: 'error' } as const;
// secure-json-parse's message for both "__proto__" and "constructor": {"prototype": ...}.
const FORBIDDEN_KEY = 'Object contains forbidden prototype property';

/**
 * Parses one JSON text. A "__proto__" or "constructor.prototype" key is refused (never
 * stripped or applied), and said so: the text is valid JSON, it is the key that is refused.
 */
function parseJsonText(text: string, what: string, code: 'SHX_BAD_REQUEST' | 'SHX_BAD_DOCUMENT', details?: Record<string, unknown>): unknown {
  try {
    return sjson.parse(text, undefined, SJSON);
  } catch (err) {
    const message = (err as Error).message;
    if (message === FORBIDDEN_KEY) {
      throw new ShardexError(code, `${what} has a "__proto__" or "constructor.prototype" key, which is refused (it could change object prototypes); rename the field; nothing was written`, details && { details });
    }
    throw new ShardexError(code, `${what} is not valid JSON (${message}); nothing was written`, details && { details });
  }
}

/** Parses a JSON body (replaces fastify's parser, so that every message is ours). */
export function parseJsonBody(text: string): unknown {
  if (text.trim().length === 0) throw new ShardexError('SHX_BAD_REQUEST', 'body is empty; send a JSON array of documents');
  return parseJsonText(text, 'body', 'SHX_BAD_REQUEST');
}

/** An NDJSON body: its documents, and the line each came from (so that refusals name the line). */
export class NdjsonBatch {
  constructor(
    readonly docs: unknown[],
    readonly lines: number[],
  ) {}
}

/** Parses NDJSON: one JSON value per non-empty line; names the bad line. */
export function parseNdjson(text: string): NdjsonBatch {
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
    out.push(parseJsonText(raw, `line ${line}`, 'SHX_BAD_DOCUMENT', { line }));
    lines.push(line);
  }
  return new NdjsonBatch(out, lines);
}

const FASTIFY_ERRORS: Record<string, (e: FastifyError) => ShardexError> = {
  FST_ERR_CTP_INVALID_JSON_BODY: (e) => new ShardexError('SHX_BAD_REQUEST', `body is not valid JSON: ${e.message}`),
  FST_ERR_CTP_EMPTY_JSON_BODY: () => new ShardexError('SHX_BAD_REQUEST', 'body is empty; send a JSON array of documents'),
  FST_ERR_CTP_BODY_TOO_LARGE: (e) => new ShardexError('SHX_BODY_TOO_LARGE', `${e.message}; split the batch into smaller requests`),
  FST_ERR_CTP_INVALID_MEDIA_TYPE: (e) =>
    new ShardexError('SHX_UNSUPPORTED_MEDIA', `${e.message}; send application/json or application/x-ndjson`),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: (e) => new ShardexError('SHX_BAD_REQUEST', e.message),
};

export function toShardexHttpError(err: unknown): ShardexError {
  if (err instanceof ShardexError) return err;
  const fe = err as FastifyError;
  const mapped = fe.code ? FASTIFY_ERRORS[fe.code] : undefined;
  if (mapped) return mapped(fe);
  if (fe.validation) return new ShardexError('SHX_BAD_REQUEST', fe.message);
  if (err instanceof SyntaxError) return new ShardexError('SHX_BAD_REQUEST', `body is not valid JSON: ${err.message}`);
  if (typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) return new ShardexError('SHX_BAD_REQUEST', fe.message);
  return new ShardexError('SHX_INTERNAL', fe.message ?? String(err), { cause: err });
}

export async function buildHttp(node: ShardexNode, opts: HttpOptions): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: opts.logger.child({ component: 'http' }) as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: opts.bodyLimit,
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
          : toShardexHttpError(err);
      void (reply as FastifyReply).status(e.status).send(e.toJSON());
    },
  });
  app.decorate('shardex', node);
  // Only JSON and NDJSON bodies: anything else (text/plain included) is 415, not a string.
  app.removeContentTypeParser(['application/json', 'text/plain']);
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    try {
      done(null, parseJsonBody(body as string));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
  app.addContentTypeParser(['application/x-ndjson', 'application/ndjson'], { parseAs: 'string' }, (_req, body, done) => {
    try {
      done(null, parseNdjson(body as string));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
  app.setErrorHandler((err, req, reply) => {
    const e = toShardexHttpError(err);
    // A retryable 503 (starting, no leader yet) is a condition that passes, not a fault.
    if (e.status >= 500 && !e.retryable) req.log.error({ err, code: e.code }, 'request failed');
    else if (e.status >= 500) req.log.debug({ code: e.code, msg: e.message }, 'request refused for now');
    if (e.retryable && e.status === 503) void reply.header('retry-after', '1');
    void reply.status(e.status).send(e.toJSON());
  });
  app.setNotFoundHandler((req, reply) => {
    void reply.status(404).send({ error: `no route ${req.method} ${req.url}; see the README for the API`, code: 'SHX_NOT_FOUND' });
  });
  // A node that has not read the cluster state yet would answer as if it were empty (a false
  // "collection does not exist"): until then, everything but health and metrics is SHX_STARTING.
  app.addHook('onRequest', async (req) => {
    if (!node.ready && !req.url.startsWith('/health') && !req.url.startsWith('/metrics')) node.assertReady();
  });
  await app.register(adminRoutes);
  await app.register(collectionRoutes);
  await app.register(docRoutes);
  await app.register(searchRoutes);
  await app.register(readBalanceRoutes);
  return app as unknown as FastifyInstance;
}
