// One zod schema per node-to-node RPC request: what a peer sends is checked at the boundary, so
// that the handlers behind it get typed requests instead of casts of JSON. Deep structures owned
// by other parts (search parameters' details, term statistics) are checked for their shape here
// and by their owners when used.
import { z } from 'zod';

const name = z.string().min(1).max(1024);
const id = z.string().min(1).max(4096);
const ShardRef = z.object({ collection: name, shard: name });

/** What an eventual read asks of a snapshot reader (src/read's EventualOptions). */
const eventual = z.object({ busyTimeoutMs: z.number().nonnegative(), minVersion: z.number().nonnegative().optional() }).optional();

const SearchParams = z.looseObject({
  q: z.string().optional(),
  filters: z.array(z.string()).optional(),
  sort: z.string().optional(),
  offset: z.number().int().nonnegative().optional(),
  limit: z.number().int().nonnegative().optional(),
  fields: z.string().optional(),
  partial: z.boolean().optional(),
  trackTotalHits: z.union([z.boolean(), z.number().int().nonnegative()]).optional(),
});

export const GetRequest = ShardRef.extend({ ids: z.array(id).max(10_000), eventual });

export const SearchRequest = z.discriminatedUnion('kind', [
  ShardRef.extend({
    kind: z.literal('export'),
    after: z.string().optional(),
    limit: z.number().int().min(1).max(10_000),
    q: z.string().optional(),
    filters: z.array(z.string()).optional(),
    fields: z.string().optional(),
  }),
  ShardRef.extend({ kind: z.literal('stats'), params: SearchParams, eventual }),
  // No stats: a collection of one shard scores with the shard's own.
  // expect: the shard's own statistics the coordinator summed into `stats` (checked before scoring).
  ShardRef.extend({ kind: z.literal('query'), params: SearchParams, stats: z.record(z.string(), z.unknown()).optional(), expect: z.record(z.string(), z.unknown()).optional(), eventual }),
  ShardRef.extend({ kind: z.literal('fetch'), ids: z.array(id).max(10_000), fields: z.string().optional(), eventual }),
]);

export const CommitRequest = ShardRef;
/** `leadCheck`: instead, whether this replica may take over the leadership of `replica` (leader balance). */
export const VersionsRequest = ShardRef.extend({ replica: name.optional(), leadCheck: z.boolean().optional() });
/**
 * The update log after `after`: its entries (default), only their versions (`versionsOnly`: what
 * peer sync compares with its own log), their digest (`digest`: count and hash of the versions up
 * to `upto`), or only the entries of the versions in `only`.
 */
export const UpdatesAfterRequest = ShardRef.extend({
  after: z.number().nonnegative(),
  limit: z.number().int().min(1),
  upto: z.number().nonnegative().optional(),
  versionsOnly: z.boolean().optional(),
  digest: z.boolean().optional(),
  only: z.array(z.number().nonnegative()).max(10_000).optional(),
});
/**
 * A full copy of a shard: its current entries, or (`commit`) those of its latest commit point,
 * in arrays of entries. With `commit` and `raw` (a snapshot reader) the stream is CopyMessage's
 * instead: a header naming the commit point (and, with `segments`, its index segment files), the
 * files' bytes, then the entries as stored.
 */
export const CopyShardRequest = ShardRef.extend({ commit: z.boolean().optional(), segments: z.boolean().optional(), raw: z.boolean().optional() });

/** The first message of a raw copy: the commit point copied, and its segment files (null: none, copy the documents). */
export const CopyStreamHeader = z.object({
  commit: z.object({ version: z.number().int().nonnegative(), at: z.number() }).nullable(),
  segments: z
    .object({
      fingerprint: z.string(),
      files: z.array(z.object({ name: z.string().min(1), bytes: z.number().int().nonnegative(), deleted: z.array(z.string()) })),
    })
    .nullable(),
});
/** A piece of a segment file (data in base64), in the header's order. */
export const CopyStreamFile = z.object({ file: z.string().min(1), data: z.string() });
/** Entries as their store keeps them (encodeEntry's text), after the files. */
export const CopyStreamRaw = z.object({ raw: z.array(z.string()) });
export const CopyMessage = z.union([CopyStreamHeader, CopyStreamFile, CopyStreamRaw]);
export type CopyStreamHeader = z.infer<typeof CopyStreamHeader>;
export type CopyStreamFile = z.infer<typeof CopyStreamFile>;
export type CopyStreamRaw = z.infer<typeof CopyStreamRaw>;
export type CopyMessage = z.infer<typeof CopyMessage>;

export type GetRequest = z.infer<typeof GetRequest>;
export type SearchRequest = z.infer<typeof SearchRequest>;
export type CommitRequest = z.infer<typeof CommitRequest>;
export type VersionsRequest = z.infer<typeof VersionsRequest>;
export type UpdatesAfterRequest = z.infer<typeof UpdatesAfterRequest>;
export type CopyShardRequest = z.infer<typeof CopyShardRequest>;

/** The message of a request that does not fit its schema: each bad field, named. */
export function requestProblem(method: string, err: z.ZodError): string {
  return `malformed ${method} request from a peer: ${err.issues.map((i) => `${i.path.join('.') || '(body)'} ${i.message}`).join('; ')}`;
}
