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
//
// A query whose scores are not needed (a sort on a field) is cached as a filter is once it
// recurs among the last searches (Lucene's UsageTrackingQueryCachingPolicy, simplified): a
// one-off query does not pay for a bitset, nor push a filter out.

import type { Matches } from './matches.js';

export interface CachedFilter {
  readonly bits: Uint32Array;
  /** Documents set in `bits` (those since deleted included). */
  readonly count: number;
}

interface Entry extends CachedFilter {
  readonly maxDoc: number;
}

/** Uses remembered for repeated(): the last this many keys asked... */
const HISTORY = 256;
/** ...of at most this many characters (a longer query is never cached: the history stays small). */
const HISTORY_KEY_MAX = 2048;

export class FilterCache {
  private readonly entries = new Map<string, Entry>();
  private words = 0;
  private readonly history: string[] = [];
  private readonly uses = new Map<string, number>();

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

  /**
   * Records a use of `key` on an index of `maxDoc` documents; whether it is cached for that
   * maxDoc or was used before at that maxDoc among the last uses (on an index taking adds, a
   * query is never repeated: a bitset there would be built again at every search).
   */
  repeated(key: string, maxDoc: number): boolean {
    if (this.entries.get(key)?.maxDoc === maxDoc) return true;
    if (key.length > HISTORY_KEY_MAX) return false;
    key = `${maxDoc} ${key}`;
    const before = this.uses.get(key) ?? 0;
    this.uses.set(key, before + 1);
    this.history.push(key);
    if (this.history.length > HISTORY) {
      const old = this.history.shift()!;
      const n = this.uses.get(old)! - 1;
      if (n === 0) this.uses.delete(old);
      else this.uses.set(old, n);
    }
    return before > 0;
  }

  clear(): void {
    this.entries.clear();
    this.words = 0;
  }
}
