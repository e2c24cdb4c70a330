// /api/collections: create and delete collections, and rebalance their leaders.
import type { FastifyPluginAsync } from 'fastify';
import { z } from 'zod';
import { ShardexError } from '../../errors.js';
import { MAX_SHARDS, parseRouterName } from '../../hashrange/index.js';
import { parseSchema } from '../../index/index.js';
import type { CollectionState } from '../../coordination/index.js';
import { parseDuration } from '../../read/index.js';

export const COLLECTION_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const MAX_REBALANCE_WAIT_MS = 5 * 60_000;

const CreateCollection = z
  .object({
    name: z.string().regex(COLLECTION_NAME, 'must match [A-Za-z0-9_-]{1,64}'),
    numShards: z.number().int().min(1).max(MAX_SHARDS),
    replicationFactor: z.number().int().min(1).max(64).default(1),
    router: z.string().default('compositeId'),
    fields: z.record(z.string(), z.string()).optional(),
    autoCommit: z.union([z.string(), z.number()]).optional(),
    durability: z.enum(['request', 'async']).optional(),
    syncInterval: z.union([z.string(), z.number()]).optional(),
  })
  .strict();

const UpdateCollection = z
  .object({
    durability: z.enum(['request', 'async']).optional(),
    syncInterval: z.union([z.string(), z.number()]).optional(),
    autoCommit: z.union([z.string(), z.number()]).optional(),
  })
  .strict();

/** Elasticsearch's index.translog.sync_interval: at least 100 ms; default 5 s. */
function parseSyncInterval(v: string | number | undefined): number | undefined {
  if (v === undefined) return undefined;
  const ms = parseDuration(v, 'syncInterval');
  if (ms < 100) throw new ShardexError('SHX_BAD_REQUEST', `syncInterval must be at least 100ms, got ${JSON.stringify(v)}`);
  return ms;
}

const parseAutoCommit = (v: string | number | undefined): number | undefined => (v === undefined ? undefined : v === 'off' ? 0 : parseDuration(v, 'autoCommit'));

/** A collection as GET /api/collections/:c shows it: its settings with their defaults, and its shards. */
function describeCollection(state: CollectionState): object {
  return { ...state, durability: state.durability ?? 'request', syncIntervalMs: state.syncIntervalMs ?? 5000 };
}

/** Turns a zod failure into one message naming each bad field. */
export function zodMessage(err: z.ZodError, what: string): string {
  return `${what}: ` + err.issues.map((i) => `${i.path.join('.') || '(body)'} ${i.message}`).join('; ');
}

export function checkCollectionName(name: string): string {
  if (!COLLECTION_NAME.test(name)) {
    throw new ShardexError('SHX_BAD_REQUEST', `collection name ${JSON.stringify(name)} must match [A-Za-z0-9_-]{1,64}`);
  }
  return name;
}

export const collectionRoutes: FastifyPluginAsync = async (app) => {
  app.post('/api/collections', { config: { access: 'admin' } }, async (req, reply) => {
    const parsed = CreateCollection.safeParse(req.body);
    if (!parsed.success) throw new ShardexError('SHX_BAD_REQUEST', zodMessage(parsed.error, 'bad collection definition'));
    const b = parsed.data;
    // A schema that does not parse is the caller's error: reject it before anything is created.
    parseSchema(b.fields);
    // Like Solr's autoCommit: on by default (15 s); "off" leaves commits to the client.
    const autoCommitMs = parseAutoCommit(b.autoCommit ?? '15s')!;
    const syncIntervalMs = parseSyncInterval(b.syncInterval);
    const state = await app.shardex.createCollection({
      name: b.name,
      numShards: b.numShards,
      replicationFactor: b.replicationFactor,
      router: parseRouterName(b.router),
      ...(b.fields && { fields: b.fields }),
      autoCommitMs,
      durability: b.durability ?? 'request',
      ...(syncIntervalMs !== undefined && { syncIntervalMs }),
    });
    return reply.status(201).send(describeCollection(state));
  });

  app.get<{ Params: { c: string } }>('/api/collections/:c', { config: { access: 'read' } }, async (req) => describeCollection(app.shardex.collectionState(checkCollectionName(req.params.c))));

  // Settings that may change on a live collection (Elasticsearch's dynamic index settings).
  app.patch<{ Params: { c: string } }>('/api/collections/:c', { config: { access: 'admin' } }, async (req) => {
    const c = checkCollectionName(req.params.c);
    app.shardex.collectionState(c);
    const parsed = UpdateCollection.safeParse(req.body);
    if (!parsed.success) throw new ShardexError('SHX_BAD_REQUEST', zodMessage(parsed.error, 'bad collection update'));
    const syncIntervalMs = parseSyncInterval(parsed.data.syncInterval);
    const autoCommitMs = parseAutoCommit(parsed.data.autoCommit);
    const state = await app.shardex.coordinator.updateCollection(c, {
      ...(parsed.data.durability !== undefined && { durability: parsed.data.durability }),
      ...(syncIntervalMs !== undefined && { syncIntervalMs }),
      ...(autoCommitMs !== undefined && { autoCommitMs }),
    });
    return describeCollection(state);
  });

  // Solr's REBALANCELEADERS: `wait` (a duration, default 30s, at most 5m) is how long to wait for the handovers.
  app.post<{ Params: { c: string }; Querystring: { wait?: string } }>('/api/collections/:c/rebalance-leaders', { config: { access: 'admin' } }, async (req) => {
    const c = checkCollectionName(req.params.c);
    app.shardex.collectionState(c);
    const waitMs = parseDuration(req.query.wait ?? '30s', 'wait');
    if (waitMs > MAX_REBALANCE_WAIT_MS) throw new ShardexError('SHX_BAD_REQUEST', `wait must be at most 5m, got ${JSON.stringify(req.query.wait)}; ask again to wait longer`);
    return app.shardex.rebalanceLeaders(c, waitMs);
  });

  app.delete<{ Params: { c: string } }>('/api/collections/:c', { config: { access: 'admin' } }, async (req) => {
    await app.shardex.deleteCollection(checkCollectionName(req.params.c));
    return { deleted: req.params.c };
  });
};
