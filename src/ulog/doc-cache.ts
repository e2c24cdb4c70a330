// The replica store's document cache (Solr's documentCache): the stored entries a page of hits
// read last, parsed, so that a search asked again (or a page of popular documents) returns its
// stored fields without reading and parsing them from LevelDB once more. Bounded by entries,
// least recently used first out; the store drops an id's entry whenever a batch writing that id
// is on disk, so the cache never answers with a document older than the store's.

import type { StoredEntry } from './replica-store.js';

/** Entries a replica's document cache holds by default (Solr's documentCache ships with 512). */
export const DEFAULT_DOC_CACHE_SIZE = 512;

/** A bounded LRU of stored entries by id; `null` remembers an id the store does not hold. */
export class DocCache {
  private readonly entries = new Map<string, StoredEntry | null>();

  constructor(readonly capacity: number) {}

  /** The cached entry of `id` (made the most recent), `null` for a known absence, undefined when not cached. */
  get(id: string): StoredEntry | null | undefined {
    const e = this.entries.get(id);
    if (e === undefined) return undefined;
    // Map keeps insertion order: re-inserting makes the id the most recent.
    this.entries.delete(id);
    this.entries.set(id, e);
    return e;
  }

  set(id: string, entry: StoredEntry | null): void {
    if (this.capacity <= 0) return;
    this.entries.delete(id);
    this.entries.set(id, entry);
    if (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value as string);
  }

  delete(id: string): void {
    this.entries.delete(id);
  }

  clear(): void {
    this.entries.clear();
  }

  get size(): number {
    return this.entries.size;
  }
}
