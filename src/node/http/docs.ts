// /api/collections/:c/docs and /commit: writes, deletes, real-time get.
import type { FastifyPluginAsync } from 'fastify';
import { checkId, toAddOps } from '../../distrib/documents.js';
import { ShardexError } from '../../errors.js';
import { Deadline, MAX_REQUEST_TIMEOUT_MS } from '../../distrib/deadline.js';
import { isBalanceName } from '../../read/balance-settings.js';
import { parseMinVersion } from '../../read/eventual.js';
import type { CancelSignal } from '../../read/balancer-runtime.js';
import { type BalancedRead, type ReadOptions } from '../shardex-node.js';
import { NdjsonBatch } from './app.js';
import { checkCollectionName } from './collections.js';
import { checkBatchLimits, checkQueryLimits } from './limits.js';
import { responseEnd } from './read-balance.js';

function parseMinRf(v: unknown): number {
  if (v === undefined) return 1;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new ShardexError('SHX_BAD_REQUEST', `minRf must be a positive integer, got ${JSON.stringify(v)}`);
  return n;
}

function parseBool(name: string, v: unknown): boolean | undefined {
  if (v === undefined) return undefined;
  if (v === 'true') return true;
  if (v === 'false') return false;
  throw new ShardexError('SHX_BAD_REQUEST', `${name} must be true or false, got ${JSON.stringify(v)}`);
}

export interface ReadQuery extends BalanceQuery {
  distrib?: string | string[];
  consistency?: string | string[];
  scanType?: string | string[];
  minVersion?: string | string[];
}

/** A query parameter that may be given once: `a=1&a=2` arrives as a list, and is refused. */
function once(name: string, v: string | string[] | undefined): string | undefined {
  if (Array.isArray(v)) throw new ShardexError('SHX_BAD_REQUEST', `${name} is given ${v.length} times; give it once`);
  return v;
}

export interface BalanceQuery {
  priority?: unknown;
  timeoutMs?: unknown;
}

type Writable<T> = { -readonly [K in keyof T]: T[K] };

/**
 * The balancing options of a read: `priority` (a name) and `timeoutMs` (queue time counts against
 * it), set on `into`. Every get and search passes here: properties are assigned, not spread.
 */
function setBalanceOptions(q: BalanceQuery, into: Writable<BalancedRead>): void {
  const priority = q.priority;
  if (priority !== undefined) {
    if (!isBalanceName(priority)) {
      throw new ShardexError('SHX_BAD_REQUEST', `priority must be a name matching [A-Za-z0-9_.-]{1,64}, got ${JSON.stringify(priority)}; GET /api/read-balance lists the configured priorities`);
    }
    into.priority = priority;
  }
  if (q.timeoutMs !== undefined) into.timeoutMs = parseTimeoutMs(q.timeoutMs, MAX_REQUEST_TIMEOUT_MS);
}

/** A `timeoutMs` parameter: whole milliseconds from 1 to `max`; `more` ends the refusal's message. */
function parseTimeoutMs(v: unknown, max: number, more = ''): number {
  const ms = typeof v === 'number' ? v : typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN;
  if (!Number.isInteger(ms) || ms < 1 || ms > max) {
    throw new ShardexError('SHX_BAD_REQUEST', `timeoutMs must be an integer from 1 to ${max} (milliseconds), got ${JSON.stringify(v)}${more}`);
  }
  return ms;
}

/** The balancing options of a read: `priority` (a name) and `timeoutMs` (queue time counts against it). */
export function parseBalanceOptions(q: BalanceQuery): BalancedRead {
  const o: Writable<BalancedRead> = {};
  setBalanceOptions(q, o);
  return o;
}

/**
 * The read options of a get or search: distrib, consistency, scanType, minVersion, priority,
 * timeoutMs; and `endSignal`, the response's end, for a read the balancer may hold slots for.
 */
export function parseReadOptions(q: ReadQuery, endSignal?: () => CancelSignal): ReadOptions & { distrib?: boolean } {
  const o: Writable<ReadOptions & { distrib?: boolean }> = {};
  const distrib = parseBool('distrib', once('distrib', q.distrib));
  if (distrib !== undefined) o.distrib = distrib;
  const consistency = once('consistency', q.consistency);
  if (consistency !== undefined) {
    if (consistency !== 'immediate' && consistency !== 'eventual') throw new ShardexError('SHX_BAD_REQUEST', `consistency must be immediate or eventual, got ${JSON.stringify(consistency)}`);
    o.consistency = consistency;
  }
  const scanType = once('scanType', q.scanType);
  if (scanType !== undefined) o.scanType = scanType;
  const minVersion = once('minVersion', q.minVersion);
  if (minVersion !== undefined) {
    parseMinVersion(minVersion);
    o.minVersion = minVersion;
  }
  setBalanceOptions(q, o);
  if (endSignal) o.endSignal = endSignal;
  return o;
}

/** The write route: its bodies' nesting is checked with their sizes (checkBatchLimits), not when parsed. */
export const DOCS_ROUTE = '/api/collections/:c/docs';

export const docRoutes: FastifyPluginAsync = async (app) => {
  app.post<{ Params: { c: string }; Querystring: { minRf?: string; timeoutMs?: string } }>(DOCS_ROUTE, { config: { access: 'write' } }, async (req) => {
    const c = checkCollectionName(req.params.c);
    app.shardex.collectionState(c);
    const minRf = parseMinRf(req.query.minRf);
    const body = req.body;
    const ndjson = body instanceof NdjsonBatch ? body : undefined;
    const docs = ndjson ? ndjson.docs : Array.isArray(body) ? body : body !== null && typeof body === 'object' ? [body] : undefined;
    if (!docs) throw new ShardexError('SHX_BAD_REQUEST', 'body must be a JSON array of documents, one document object, or NDJSON');
    // Sizes, then admission: every document, whole, before any phase starts.
    checkBatchLimits(docs, Array.isArray(body) ? 2 : 1, app.limits, ndjson?.lines);
    const ops = toAddOps(docs, app.shardex.schemaOf(c), ndjson?.lines);
    const res = await app.shardex.update(c, ops, minRf, updateDeadline(req.query.timeoutMs));
    return {
      added: ops.length,
      rf: res.rf,
      versions: res.versions,
      ...(!res.minRfMet && { minRfMet: false, warning: `achieved replication factor ${res.rf} is below minRf ${minRf}` }),
    };
  });

  app.delete<{ Params: { c: string; id: string }; Querystring: { minRf?: string; timeoutMs?: string } }>('/api/collections/:c/docs/:id', { config: { access: 'write' } }, async (req) => {
    const c = checkCollectionName(req.params.c);
    app.shardex.collectionState(c);
    const id = checkId(req.params.id);
    const minRf = parseMinRf(req.query.minRf);
    const res = await app.shardex.update(c, [{ id, doc: null }], minRf, updateDeadline(req.query.timeoutMs));
    return { id, version: res.versions[id], rf: res.rf, ...(!res.minRfMet && { minRfMet: false }) };
  });

  app.get<{ Params: { c: string; id: string }; Querystring: ReadQuery }>('/api/collections/:c/docs/:id', { config: { access: 'read' } }, async (req, reply) => {
    const c = checkCollectionName(req.params.c);
    const got = await app.shardex.get(c, req.params.id, parseReadOptions(req.query, responseEnd(reply)));
    if (got?.servedBy) void reply.header('x-shardex-served-by', JSON.stringify(got.servedBy));
    if (got?.readBalance) void reply.header('x-shardex-read-balance', JSON.stringify(got.readBalance));
    if (!got?.entry) return reply.status(404).send({ error: `document '${req.params.id}' not found in '${c}'`, code: 'SHX_NOT_FOUND' });
    return { ...got.entry.doc, _version_: got.entry.version, _shard_: got.shard };
  });

  type ExportQuery = { [K in 'shard' | 'after' | 'limit' | 'distrib' | 'q' | 'filter' | 'fields']?: string | string[] } & BalanceQuery;
  app.get<{ Params: { c: string }; Querystring: ExportQuery }>(
    '/api/collections/:c/export',
    { config: { access: 'read' } },
    async (req, reply) => {
      const c = checkCollectionName(req.params.c);
      const shard = once('shard', req.query.shard);
      const after = once('after', req.query.after);
      if (!shard) throw new ShardexError('SHX_BAD_REQUEST', 'export needs ?shard=<shard name>; GET /api/cluster lists the shards');
      const limitText = once('limit', req.query.limit);
      const limit = limitText === undefined ? 1000 : Number(limitText);
      if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) throw new ShardexError('SHX_BAD_REQUEST', `limit must be an integer from 1 to 10000, got ${JSON.stringify(limitText)}`);
      const distrib = parseBool('distrib', once('distrib', req.query.distrib));
      const balance = parseBalanceOptions(req.query);
      const q = once('q', req.query.q);
      const fields = once('fields', req.query.fields);
      const filters = req.query.filter === undefined ? undefined : Array.isArray(req.query.filter) ? req.query.filter : [req.query.filter];
      app.shardex.collectionState(c);
      checkQueryLimits({ q, filters }, app.shardex.schemaOf(c), app.limits);
      return app.shardex.exportShard(
        { collection: c, shard, limit, ...(after !== undefined && { after }), ...(q !== undefined && { q }), ...(filters && { filters }), ...(fields !== undefined && { fields }) },
        { ...(distrib !== undefined && { distrib }), ...balance, endSignal: responseEnd(reply) },
      );
    },
  );

  app.post<{ Params: { c: string } }>('/api/collections/:c/commit', { config: { access: 'write' } }, async (req) => {
    const c = checkCollectionName(req.params.c);
    return { commit: await app.shardex.commit(c) };
  });
};

/**
 * An update's `timeoutMs`: how long its sender waits. The forwards to the shard leaders, and
 * their retries, end by then; the leader's fan-out to its replicas does not (see update-processor).
 */
function updateDeadline(v: unknown): Deadline | undefined {
  return v === undefined ? undefined : Deadline.after(parseTimeoutMs(v, MAX_REQUEST_TIMEOUT_MS, '; nothing was done'), { what: 'the update' });
}

