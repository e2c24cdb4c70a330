// The coordinator's memory of each shard's term statistics, by query: the dfs round is skipped
// when every shard's statistics for the query are remembered. Exactness does not rest on the
// memory being fresh: the query round carries each shard's remembered statistics, the shard
// compares them with its own (whichever replica or snapshot reader serves it), and a shard whose
// statistics changed answers with its new ones instead of hits (search.ts runs the query again).
import type { IndexStats } from '../index/index.js';

/** What distributedSearch reads and writes: one collection's shards. */
export interface ShardStatsMemo {
  get(shard: string, query: string): IndexStats | undefined;
  set(shard: string, query: string, stats: IndexStats): void;
}

/** The memo key of a search: what a shard's collectStats depends on (the query and the sort). */
export function statsQueryKey(req: { readonly q?: string | undefined; readonly sort?: string | undefined }): string {
  return JSON.stringify([req.q ?? null, req.sort ?? null]);
}

/** One node's (or client's) memory for all its collections, the oldest entries forgotten first. */
export class ShardStatsCache {
  private readonly entries = new Map<string, IndexStats>();

  constructor(private readonly maxEntries = 10_000) {}

  of(collection: string): ShardStatsMemo {
    const key = (shard: string, query: string): string => `${collection}\u0000${shard}\u0000${query}`;
    return {
      get: (shard, query) => this.entries.get(key(shard, query)),
      set: (shard, query, stats) => {
        const k = key(shard, query);
        this.entries.delete(k);
        this.entries.set(k, stats);
        if (this.entries.size > this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
      },
    };
  }
}
