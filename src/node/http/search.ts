// /api/collections/:c/search: the distributed query, by GET (query string) or POST (JSON).
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import { z } from 'zod';
import type { SearchParams } from '../../distrib/search.js';
import { ShardexError } from '../../errors.js';
import type { ReadOptions } from '../shardex-node.js';
import { checkCollectionName, zodMessage } from './collections.js';
import { parseReadOptions } from './docs.js';
import { checkQueryLimits, checkResultWindow } from './limits.js';
import { responseEnd } from './read-balance.js';

const intText = (name: string) =>
  z.union([z.number(), z.string()]).transform((v, ctx) => {
    const n = typeof v === 'number' ? v : Number(v);
    if (!Number.isInteger(n) || n < 0) {
      ctx.addIssue({ code: 'custom', message: `${name} must be a non-negative integer, got ${JSON.stringify(v)}` });
      return z.NEVER;
    }
    return n;
  });

/** trackTotalHits: true, false or a non-negative integer, as JSON or as query-string text. */
const trackText = z.union([z.boolean(), z.number(), z.string()]).transform((v, ctx) => {
  if (v === true || v === 'true') return true;
  if (v === false || v === 'false') return false;
  const n = typeof v === 'number' ? v : v.trim() === '' ? NaN : Number(v);
  if (!Number.isSafeInteger(n) || n < 0) {
    ctx.addIssue({ code: 'custom', message: `trackTotalHits must be true, false or a non-negative integer, got ${JSON.stringify(v)}` });
    return z.NEVER;
  }
  return n;
});

const boolText = z.union([z.boolean(), z.enum(['true', 'false'])]).transform((v) => v === true || v === 'true');
const stringList = z.union([z.string(), z.array(z.string())]).transform((v) => (Array.isArray(v) ? v : [v]));

const SearchQuery = z
  .object({
    q: z.string().optional(),
    filter: stringList.optional(),
    filters: stringList.optional(),
    sort: z.string().optional(),
    offset: intText('offset').optional(),
    limit: intText('limit').optional(),
    fields: z.union([z.string(), z.array(z.string())]).transform((v) => (Array.isArray(v) ? v.join(',') : v)).optional(),
    partial: boolText.optional(),
    timing: boolText.optional(),
    trackTotalHits: trackText.optional(),
    consistency: z.enum(['immediate', 'eventual']).optional(),
    scanType: z.string().optional(),
    minVersion: z.union([z.string(), z.number()]).transform(String).optional(),
    // Checked with the other read options (parseReadOptions), so that every read says the same.
    priority: z.unknown().optional(),
    timeoutMs: z.unknown().optional(),
  })
  .strict();

export function parseSearchParams(input: unknown): SearchParams & { read: ReadOptions } {
  const parsed = SearchQuery.safeParse(input ?? {});
  if (!parsed.success) throw new ShardexError('SHX_BAD_REQUEST', zodMessage(parsed.error, 'bad search request'));
  const p = parsed.data;
  const filters = [...(p.filter ?? []), ...(p.filters ?? [])];
  return {
    ...(p.q !== undefined && { q: p.q }),
    ...(filters.length > 0 && { filters }),
    ...(p.sort !== undefined && { sort: p.sort }),
    ...(p.offset !== undefined && { offset: p.offset }),
    ...(p.limit !== undefined && { limit: p.limit }),
    ...(p.fields !== undefined && { fields: p.fields }),
    ...(p.partial !== undefined && { partial: p.partial }),
    ...(p.timing === true && { timing: true }),
    ...(p.trackTotalHits !== undefined && { trackTotalHits: p.trackTotalHits }),
    read: parseReadOptions({
      ...(p.consistency !== undefined && { consistency: p.consistency }),
      ...(p.scanType !== undefined && { scanType: p.scanType }),
      ...(p.minVersion !== undefined && { minVersion: p.minVersion }),
      ...(p.priority !== undefined && { priority: p.priority }),
      ...(p.timeoutMs !== undefined && { timeoutMs: p.timeoutMs }),
    }),
  };
}

export const searchRoutes: FastifyPluginAsync = async (app) => {
  const search = (c: string, input: unknown, reply: FastifyReply) => {
    const { read, ...params } = parseSearchParams(input);
    checkResultWindow(params.offset, params.limit, app.limits);
    app.shardex.collectionState(c);
    checkQueryLimits(params, app.shardex.schemaOf(c), app.limits);
    return app.shardex.search(c, params, { ...read, endSignal: responseEnd(reply) });
  };
  app.get<{ Params: { c: string } }>('/api/collections/:c/search', { config: { access: 'read' } }, async (req, reply) => search(checkCollectionName(req.params.c), req.query, reply));
  app.post<{ Params: { c: string } }>('/api/collections/:c/search', { config: { access: 'read' } }, async (req, reply) => search(checkCollectionName(req.params.c), req.body, reply));
};
