// The distributed query, as Solr runs it plus Elasticsearch's dfs phase:
//   dfs     every shard reports the statistics of the query's terms; they are summed, so
//           that every shard scores with global document frequencies and field lengths
//           (a sharded collection ranks exactly like a 1-shard one); a collection of one shard
//           skips it (its own statistics are the global ones); a coordinator that remembers
//           every shard's statistics for the query (ShardStatsMemo) skips it too, and sends each
//           shard the statistics it remembers of it: the shard checks them against its own before
//           scoring and answers `statsChanged` if they differ, and the query round runs again
//           with the new sum (so at most two rounds before the query, as with the dfs round);
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
  sameStats,
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
import { statsQueryKey, type ShardStatsMemo } from './shard-stats-cache.js';

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
  /** Count `total` exactly (true, the default), at least up to a number, or as false = 0 (Elasticsearch's track_total_hits). */
  readonly trackTotalHits?: boolean | number;
  /** Set by the coordinator for a small page: the query round also returns the hits' stored fields. */
  readonly fetchInQuery?: boolean;
}

/** Pages up to this size (offset + limit) are fetched with the query round. */
export const FETCH_WITH_QUERY_MAX = 20;

/** A shard's query round: its top hits, and their stored fields when the coordinator asked for them. */
export interface ShardQueryResult extends ShardSearchResult {
  readonly docs?: StoredDoc[];
  /** With `timing`: the shard's own time serving the round (search plus stored fields), in ms. */
  readonly servedMs?: number;
}

/** A shard's answer to a query round whose remembered statistics of it are no longer its own. */
export interface StatsChanged {
  readonly statsChanged: IndexStats;
}

/** Where a search's time went, in ms on the coordinator (`timing=true`). */
export interface SearchTiming {
  /** The dfs round: every shard's term statistics, summed (0 when they were remembered). */
  readonly dfsMs: number;
  /** The query round (two when a shard's statistics had changed): every shard's top hits. */
  readonly queryMs: number;
  /** Merging the shards' hits into the page. */
  readonly mergeMs: number;
  /** The fetch round: the page's stored fields from the shards owning them. */
  readonly fetchMs: number;
  /** Rounds of calls to the shards: dfs, query (once or twice) and fetch, each when run. */
  readonly rounds: number;
  /**
   * The last query round by shard: its time as the coordinator saw it (call to answer) and the
   * shard's own time serving it; the difference is the transport (gRPC, encoding, queueing).
   */
  readonly shards: Record<string, { queryMs: number; servedMs?: number }>;
}

/** One shard's side of the three phases (local call or gRPC to the serving replica). */
export interface ShardSearcher {
  readonly shard: string;
  stats(params: SearchParams): Promise<IndexStats>;
  /**
   * `stats`: the summed statistics to score with; absent, the shard's own (one shard: the same).
   * `expect`: the shard's own statistics that sum was made of, checked by the shard first.
   */
  query(params: SearchParams, stats: IndexStats | undefined, expect?: IndexStats): Promise<ShardQueryResult | StatsChanged>;
  fetch(ids: readonly string[], fields: string | undefined): Promise<StoredDoc[]>;
}

export interface SearchResponse {
  /** With `totalRelation: 'gte'`, a lower bound (the count stopped past trackTotalHits). */
  readonly total: number;
  readonly totalRelation?: 'gte';
  readonly hits: Array<Record<string, unknown> & { id: string; score: number }>;
  readonly shards: { total: number; ok: number; failed: number; errors?: Record<string, string> };
  readonly tookMs: number;
  readonly timing?: SearchTiming;
}

export async function distributedSearch(schema: CollectionSchema, shards: readonly ShardSearcher[], params: SearchParams, memo?: ShardStatsMemo): Promise<SearchResponse> {
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

  let rounds = 0;
  let global: IndexStats | undefined;
  // Each shard's own statistics when they come from the memo (the query round checks them).
  let remembered: Map<string, IndexStats> | undefined;
  const statsKey = statsQueryKey(params);
  if (shards.length > 1) {
    remembered = memo && rememberedStats(memo, shards, statsKey);
    if (remembered) global = mergeStats([...remembered.values()]);
    else {
      rounds++;
      const statsList = await Promise.all(
        live().map(async (s) => {
          const stats = await settle(s.shard, s.stats(params));
          if (stats) memo?.set(s.shard, statsKey, stats);
          return stats;
        }),
      );
      global = mergeStats(statsList.filter((x): x is IndexStats => x !== undefined));
    }
  }
  const tDfs = performance.now();
  const queryParams = offset + limit <= FETCH_WITH_QUERY_MAX ? { ...params, fetchInQuery: true } : params;
  const shardTimes: Record<string, { queryMs: number; servedMs?: number }> = {};
  const queryRound = async (stats: IndexStats | undefined, expect: Map<string, IndexStats> | undefined) => {
    rounds++;
    const replies = await Promise.all(
      live().map(async (s) => {
        const sent = performance.now();
        const result = await settle(s.shard, s.query(queryParams, stats, expect?.get(s.shard)));
        const servedMs = result && 'servedMs' in result ? result.servedMs : undefined;
        shardTimes[s.shard] = { queryMs: ms(performance.now() - sent), ...(servedMs !== undefined && { servedMs }) };
        return result && { shard: s.shard, result };
      }),
    );
    return replies.filter((r): r is { shard: string; result: ShardQueryResult | StatsChanged } => r !== undefined && !failed.has(r.shard));
  };
  let replies = await queryRound(global, remembered);
  if (remembered && replies.some((r) => 'statsChanged' in r.result)) {
    // Unchecked this time: like the dfs round, the statistics are one round old when scored with.
    for (const r of replies) {
      if (!('statsChanged' in r.result)) continue;
      remembered.set(r.shard, r.result.statsChanged);
      memo?.set(r.shard, statsKey, r.result.statsChanged);
    }
    replies = await queryRound(mergeStats(live().map((s) => remembered.get(s.shard)!)), undefined);
  }
  const responses = replies as Array<{ shard: string; result: ShardQueryResult }>;
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
  if ([...page.idsByShard.keys()].some((shard) => fetched.get(shard) === undefined)) rounds++;
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
    ...(page.totalRelation !== undefined && { totalRelation: page.totalRelation }),
    hits,
    shards: {
      total: shards.length,
      ok: shards.length - failed.size,
      failed: failed.size,
      ...(failed.size > 0 && { errors: Object.fromEntries([...failed].map(([s, e]) => [s, e.message])) }),
    },
    tookMs: ms(performance.now() - t0),
    ...(params.timing && { timing: { dfsMs: ms(tDfs - t0), queryMs: ms(tQuery - tDfs), mergeMs: ms(tMerge - tQuery), fetchMs: ms(performance.now() - tMerge), rounds, shards: shardTimes } }),
  };
}

const ms = (x: number): number => Math.round(x * 100) / 100;

/** Every shard's statistics for the query from the memo, or undefined if one is missing. */
function rememberedStats(memo: ShardStatsMemo, shards: readonly ShardSearcher[], key: string): Map<string, IndexStats> | undefined {
  const out = new Map<string, IndexStats>();
  for (const s of shards) {
    const stats = memo.get(s.shard, key);
    if (stats === undefined) return undefined;
    out.set(s.shard, stats);
  }
  return out;
}

/** One phase of a distributed search, as a shard's replica (or a snapshot reader) receives it. */
export type ShardPhaseRequest =
  | { kind: 'stats'; collection: string; shard: string; params: SearchParams }
  | { kind: 'query'; collection: string; shard: string; params: SearchParams; stats?: IndexStats | undefined; expect?: IndexStats | undefined }
  | { kind: 'fetch'; collection: string; shard: string; ids: string[]; fields?: string };

/** A shard's phase 1 asks for the top offset+limit; the coordinator applies the offset. */
function shardRequest(params: SearchParams): SearchRequest {
  return {
    ...(params.q !== undefined && { q: params.q }),
    ...(params.filters && { filters: params.filters }),
    ...(params.sort !== undefined && { sort: params.sort }),
    ...(params.trackTotalHits !== undefined && { trackTotalHits: params.trackTotalHits }),
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
      const t0 = performance.now();
      const request = shardRequest(req.params);
      if (req.expect !== undefined) {
        const own = index.collectStats(request);
        if (!sameStats(own, req.expect)) return { statsChanged: own } satisfies StatsChanged;
      }
      const hits = index.search(request, req.stats);
      const docs = req.params.fetchInQuery ? await storedFields(store, hits.hits.map((h) => h.id), req.params.fields) : undefined;
      return { ...hits, ...(docs && { docs }), ...(req.params.timing && { servedMs: ms(performance.now() - t0) }) } satisfies ShardQueryResult;
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
