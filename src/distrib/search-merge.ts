// Merging phase 1 of a distributed search (Solr's QueryComponent.mergeIds): every shard returns
// its top offset+limit hits with their sort values; the page is the offset..offset+limit slice of
// their union in the one hit order (sort keys, missing values last, then id ascending: shards
// and this merge use the same compareHits, so a page never depends on which shard a hit came
// from). total is the sum of the shards' totals (a lower bound if one shard's is). An id returned by two shards (possible while a
// shard splits) counts once, where it ranks best, as Solr keeps the first it sees. The result
// says which shard owns each id of the page, for phase 2 (fetching stored fields).

import { ShardexError } from '../errors.js';
import { mergeHitLists, type SearchHit, type ShardSearchResult, type SortSpec } from '../index/index.js';

export interface ShardResponse {
  /** The shard's name (or any key the caller uses to route phase 2). */
  readonly shard: string;
  readonly result: ShardSearchResult;
}

export interface MergedHit extends SearchHit {
  readonly shard: string;
}

export interface MergedPage {
  /** A lower bound when totalRelation is 'gte' (a shard stopped counting). */
  readonly total: number;
  readonly totalRelation?: 'gte';
  /** The page, best first. */
  readonly hits: MergedHit[];
  /** The page's ids per shard, in page order: what phase 2 asks each shard for. */
  readonly idsByShard: Map<string, string[]>;
}

export function mergeSearchResults(responses: readonly ShardResponse[], sort: SortSpec, offset: number, limit: number): MergedPage {
  if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(limit) || limit < 0) {
    throw new ShardexError('SHX_BAD_REQUEST', `offset and limit must be non-negative integers, got ${offset} and ${limit}`);
  }
  let total = 0;
  let exact = true;
  const lists: MergedHit[][] = [];
  for (const { shard, result } of responses) {
    total += result.total;
    exact &&= result.totalRelation === undefined;
    lists.push(
      result.hits.map((hit) => {
        if (hit.sortValues.length !== sort.length) {
          throw new ShardexError('SHX_INTERNAL', `shard ${shard} returned ${hit.sortValues.length} sort values for a sort of ${sort.length} keys`);
        }
        return { id: hit.id, score: hit.score, sortValues: hit.sortValues, shard };
      }),
    );
  }
  const { hits, duplicates } = mergeHitLists(lists, sort, offset, limit);
  total -= duplicates;
  const idsByShard = new Map<string, string[]>();
  for (const hit of hits) {
    const ids = idsByShard.get(hit.shard);
    if (ids === undefined) idsByShard.set(hit.shard, [hit.id]);
    else ids.push(hit.id);
  }
  return { total, hits, idsByShard, ...(!exact && { totalRelation: 'gte' as const }) };
}
