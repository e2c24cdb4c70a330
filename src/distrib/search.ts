// The distributed query, as Solr runs it plus Elasticsearch's dfs phase:
//   dfs     every shard reports the statistics of the query's terms; they are summed, so
//           that every shard scores with global document frequencies and field lengths
//           (a sharded collection ranks exactly like a 1-shard one); a collection of one shard
//           skips it (its own statistics are the global ones);
//   query   every shard returns its top offset+limit ids with sort values, scored with the
//           global statistics; the coordinator merges them into the page;
//   fetch   only the shards owning the page's ids are asked for their stored fields.
// A small page (offset + limit at most FETCH_WITH_QUERY_MAX) has its stored fields returned with
// the query round instead (Elasticsearch's query_and_fetch): each shard reads its few top
// documents at once, read at the same moment as the hits, and the fetch round is not needed.
// Shards are asked in parallel; with `partial`, a shard that fails is reported, not fatal.
import { ShardexError } from '../errors.js';
import {
  DEFAULT_LIMIT,
  mergeStats,
  parseFieldList,
  parseSort,
  projectFields,
  type CollectionSchema,
  type IndexStats,
  type SearchRequest,
  type ReplicaSearcher,
  type ShardSearchResult,
  type StoredDoc,
} from '../index/index.js';
import type { ReplicaStore } from '../ulog/index.js';
import { mergeSearchResults } from './search-merge.js';

export interface SearchParams {
  readonly q?: string;
  readonly filters?: readonly string[];
  readonly sort?: string;
  readonly offset?: number;
  readonly limit?: number;
  readonly fields?: string;
  /** Report failed shards instead of failing the request (Solr's shards.tolerant). */
  readonly partial?: boolean;
  /** Add each phase's time to the response (Solr's debug=timing). */
  readonly timing?: boolean;
  /** Set by the coordinator for a small page: the query round also returns the hits' stored fields. */
  readonly fetchInQuery?: boolean;
}

/** Pages up to this size (offset + limit) are fetched with the query round. */
export const FETCH_WITH_QUERY_MAX = 20;

/** A shard's query round: its top hits, and their stored fields when the coordinator asked for them. */
export interface ShardQueryResult extends ShardSearchResult {
  readonly docs?: StoredDoc[];
}

/** Where a search's time went, in ms on the coordinator (`timing=true`). */
export interface SearchTiming {
  /** The dfs round: every shard's term statistics, summed. */
  readonly dfsMs: number;
  /** The query round: every shard's top hits. */
  readonly queryMs: number;
  /** Merging the shards' hits into the page. */
  readonly mergeMs: number;
  /** The fetch round: the page's stored fields from the shards owning them. */
  readonly fetchMs: number;
}

/** One shard's side of the three phases (local call or gRPC to the serving replica). */
export interface ShardSearcher {
  readonly shard: string;
  stats(params: SearchParams): Promise<IndexStats>;
  /** `stats`: the summed statistics to score with; absent, the shard's own (one shard: the same). */
  query(params: SearchParams, stats: IndexStats | undefined): Promise<ShardQueryResult>;
  fetch(ids: readonly string[], fields: string | undefined): Promise<StoredDoc[]>;
}

export interface SearchResponse {
  readonly total: number;
  readonly hits: Array<Record<string, unknown> & { id: string; score: number }>;
  readonly shards: { total: number; ok: number; failed: number; errors?: Record<string, string> };
  readonly tookMs: number;
  readonly timing?: SearchTiming;
}

export async function distributedSearch(schema: CollectionSchema, shards: readonly ShardSearcher[], params: SearchParams): Promise<SearchResponse> {
  const t0 = performance.now();
  // Parse errors are the caller's: surface them before any shard is asked.
  const sort = parseSort(params.sort, schema);
  const offset = params.offset ?? 0;
  const limit = params.limit ?? 10;
  const failed = new Map<string, ShardexError>();
  const settle = async <T>(shard: string, p: Promise<T>): Promise<T | undefined> => {
    try {
      return await p;
    } catch (err) {
      const e = err instanceof ShardexError ? err : new ShardexError('SHX_INTERNAL', String(err));
      // Bad input fails the same way on every shard: never hide it behind `partial`.
      if (!params.partial || (e.status >= 400 && e.status < 500 && e.code !== 'SHX_BUSY')) throw e;
      failed.set(shard, e);
      return undefined;
    }
  };
  const live = (): ShardSearcher[] => shards.filter((s) => !failed.has(s.shard));

  let global: IndexStats | undefined;
  if (shards.length > 1) {
    const statsList = await Promise.all(live().map((s) => settle(s.shard, s.stats(params))));
    global = mergeStats(statsList.filter((x): x is IndexStats => x !== undefined));
  }
  const tDfs = performance.now();
  const queryParams = offset + limit <= FETCH_WITH_QUERY_MAX ? { ...params, fetchInQuery: true } : params;
  const phase1 = await Promise.all(
    live().map(async (s) => {
      const result = await settle(s.shard, s.query(queryParams, global));
      return result && { shard: s.shard, result };
    }),
  );
  const responses = phase1.filter((r): r is { shard: string; result: ShardQueryResult } => r !== undefined && !failed.has(r.shard));
  if (responses.length === 0 && shards.length > 0) {
    const first = [...failed.values()][0];
    throw new ShardexError(first?.code ?? 'SHX_UNAVAILABLE', `every shard failed: ${[...failed].map(([s, e]) => `${s}: ${e.message}`).join('; ')}`);
  }
  const tQuery = performance.now();
  const page = mergeSearchResults(responses, sort, offset, limit);
  const tMerge = performance.now();

  const byShard = new Map(shards.map((s) => [s.shard, s]));
  const fetched = new Map(responses.map((r) => [r.shard, r.result.docs]));
  const stored = new Map<string, StoredDoc>();
  await Promise.all(
    [...page.idsByShard].map(async ([shard, ids]) => {
      const docs = fetched.get(shard) ?? (await settle(shard, byShard.get(shard)!.fetch(ids, params.fields)));
      for (const d of docs ?? []) stored.set(String(d.id), d);
    }),
  );
  const hits = page.hits.flatMap((h) => {
    const doc = stored.get(h.id);
    // A document deleted between the phases is left out rather than shown without fields.
    return doc ? [{ ...doc, id: h.id, score: h.score }] : [];
  });
  return {
    total: page.total,
    hits,
    shards: {
      total: shards.length,
      ok: shards.length - failed.size,
      failed: failed.size,
      ...(failed.size > 0 && { errors: Object.fromEntries([...failed].map(([s, e]) => [s, e.message])) }),
    },
    tookMs: ms(performance.now() - t0),
    ...(params.timing && { timing: { dfsMs: ms(tDfs - t0), queryMs: ms(tQuery - tDfs), mergeMs: ms(tMerge - tQuery), fetchMs: ms(performance.now() - tMerge) } }),
  };
}

const ms = (x: number): number => Math.round(x * 100) / 100;

/** One phase of a distributed search, as a shard's replica (or a snapshot reader) receives it. */
export type ShardPhaseRequest =
  | { kind: 'stats'; collection: string; shard: string; params: SearchParams }
  | { kind: 'query'; collection: string; shard: string; params: SearchParams; stats?: IndexStats | undefined }
  | { kind: 'fetch'; collection: string; shard: string; ids: string[]; fields?: string };

/** A shard's phase 1 asks for the top offset+limit; the coordinator applies the offset. */
function shardRequest(params: SearchParams): SearchRequest {
  return {
    ...(params.q !== undefined && { q: params.q }),
    ...(params.filters && { filters: params.filters }),
    ...(params.sort !== undefined && { sort: params.sort }),
    offset: 0,
    limit: (params.offset ?? 0) + (params.limit ?? DEFAULT_LIMIT),
  };
}

/** Serves one search phase from a shard's index and document store (node replica or reader copy). */
export async function servePhase(req: ShardPhaseRequest, index: ReplicaSearcher, store: Pick<ReplicaStore, 'getMany'>): Promise<unknown> {
  switch (req.kind) {
    case 'stats':
      return index.collectStats(shardRequest(req.params));
    case 'query': {
      const result: ShardQueryResult = index.search(shardRequest(req.params), req.stats);
      if (!req.params.fetchInQuery) return result;
      return { ...result, docs: await storedFields(store, result.hits.map((h) => h.id), req.params.fields) };
    }
    case 'fetch':
      return storedFields(store, req.ids, req.fields);
  }
}

/** The stored fields of `ids` (those still stored), projected to `fields`. */
async function storedFields(store: Pick<ReplicaStore, 'getMany'>, ids: readonly string[], fields: string | undefined): Promise<StoredDoc[]> {
  const entries = await store.getMany(ids);
  const wanted = parseFieldList(fields);
  const out: StoredDoc[] = [];
  entries.forEach((e, i) => {
    if (e && e.doc !== null) out.push(projectFields(ids[i]!, e.doc as StoredDoc, wanted));
  });
  return out;
}
