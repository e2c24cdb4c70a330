// /api/collections: create and delete collections.
import type { FastifyPluginAsync } from 'fastify';
import { z } from 'zod';
import { ShardexError } from '../../errors.js';
import { MAX_SHARDS, parseRouterName } from '../../hashrange/index.js';
import { parseSchema } from '../../index/index.js';
import { parseDuration } from '../../read/index.js';

export const COLLECTION_NAME = /^[A-Za-z0-9_-]{1,64}$/;

const CreateCollection = z
  .object({
    name: z.string().regex(COLLECTION_NAME, 'must match [A-Za-z0-9_-]{1,64}'),
    numShards: z.number().int().min(1).max(MAX_SHARDS),
    replicationFactor: z.number().int().min(1).max(64).default(1),
    router: z.string().default('compositeId'),
    fields: z.record(z.string(), z.string()).optional(),
    autoCommit: z.union([z.string(), z.number()]).optional(),
  })
  .strict();

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
  app.post('/api/collections', async (req, reply) => {
    const parsed = CreateCollection.safeParse(req.body);
    if (!parsed.success) throw new ShardexError('SHX_BAD_REQUEST', zodMessage(parsed.error, 'bad collection definition'));
    const b = parsed.data;
    // A schema that does not parse is the caller's error: reject it before anything is created.
    parseSchema(b.fields);
    // Like Solr's autoCommit: on by default (15 s); "off" leaves commits to the client.
    const autoCommitMs = b.autoCommit === 'off' ? 0 : parseDuration(b.autoCommit ?? '15s', 'autoCommit');
    const state = await app.shardex.createCollection({
      name: b.name,
      numShards: b.numShards,
      replicationFactor: b.replicationFactor,
      router: parseRouterName(b.router),
      ...(b.fields && { fields: b.fields }),
      autoCommitMs,
    });
    return reply.status(201).send(state);
  });

  app.delete<{ Params: { c: string } }>('/api/collections/:c', async (req) => {
    await app.shardex.deleteCollection(checkCollectionName(req.params.c));
    return { deleted: req.params.c };
  });
};
