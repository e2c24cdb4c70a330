// Filter clauses as bitsets cached per index (Lucene's LRUQueryCache, per segment): a filter
// repeated across searches is evaluated once per index state and then read a bit at a time,
// led or advanced by the query's own clauses.
//
// An entry holds the filter's matches among the documents below the maxDoc it was built at.
// Document numbers are never reused for other content but by ShardIndex.compact() (which clears
// the cache), and a deleted number never becomes live again, so the entry stays exact for those
// documents as long as maxDoc has not moved: later deletes are masked by the live bits at read
// time (see BitsetCursor). An add moves maxDoc and the entry is built again. Bounded by entries
// and by bits, least recently used first out.

import type { Matches } from './matches.js';

export interface CachedFilter {
  readonly bits: Uint32Array;
  /** Documents set in `bits` (those since deleted included). */
  readonly count: number;
}

interface Entry extends CachedFilter {
  readonly maxDoc: number;
}

export class FilterCache {
  private readonly entries = new Map<string, Entry>();
  private words = 0;

  constructor(
    /** Filters kept at most. */
    readonly maxEntries = 64,
    /** 32-bit words of bitsets kept at most (4 MiB by default: 32 filters of a million documents). */
    readonly maxWords = 1 << 20,
  ) {}

  /** Entries held. */
  get size(): number {
    return this.entries.size;
  }

  /** The filter under `key` for an index of `maxDoc` documents: cached, or made from `evaluate()` (its live matches, increasing). */
  get(key: string, maxDoc: number, evaluate: () => Matches): CachedFilter {
    const hit = this.entries.get(key);
    if (hit !== undefined) {
      this.entries.delete(key);
      if (hit.maxDoc === maxDoc) {
        this.entries.set(key, hit);
        return hit;
      }
      this.words -= hit.bits.length;
    }
    const m = evaluate();
    const bits = new Uint32Array((maxDoc + 31) >>> 5);
    for (let i = 0; i < m.size; i++) {
      const d = m.docs[i];
      bits[d >>> 5] |= 1 << (d & 31);
    }
    const entry: Entry = { bits, count: m.size, maxDoc };
    // One bitset larger than the whole budget is used for this search and not kept.
    if (bits.length > this.maxWords || this.maxEntries === 0) return entry;
    this.entries.set(key, entry);
    this.words += bits.length;
    for (const [k, e] of this.entries) {
      if (this.entries.size <= this.maxEntries && this.words <= this.maxWords) break;
      this.entries.delete(k);
      this.words -= e.bits.length;
    }
    return entry;
  }

  clear(): void {
    this.entries.clear();
    this.words = 0;
  }
}
