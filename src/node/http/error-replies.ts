// How an HTTP answer carries an error, for every HTTP API of the cluster (a node's and a
// reader's): {"error": "<what was wrong>", "code": "SHX_..."} with its catalog status; fastify's
// own errors (bad JSON, body too large, wrong content type) are mapped here, once.
import type { FastifyError, FastifyInstance } from 'fastify';
import { ShardexError } from '../../errors.js';
import { limitExceeded } from './limits.js';

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

/** Every error `app` answers, and every path it has no route for, in the catalog's shape. */
export function answerErrorsAsCatalog(app: FastifyInstance, bodyLimit: number): void {
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
}
