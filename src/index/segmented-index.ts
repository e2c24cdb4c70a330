// A replica's search index as Lucene keeps one: sealed segments, each an immutable ShardIndex
// loaded from its own file (only deletes change it), plus one mutable buffer taking every add.
// Writing a segment costs what the buffer holds, not what the replica holds, so segments can be
// written often; a merge folds several segments into one, built apart and swapped in.
//
// An id lives in exactly one part: an add first removes the id from the part holding it, so the
// parts' live documents are disjoint and their statistics (which count live documents only) sum
// to the statistics of one index holding them all. A search is then a small distributed search
// over the parts (src/distrib/search.ts does the same over shards): the parts' statistics are
// summed, every part scores with the sum, and their top hits merge in the one hit order. Its hits,
// scores, totals and sort values are those of a single ShardIndex holding the same documents.
//
// Pure: no I/O, no timers. Persistence (which segment is in which file, what was deleted from it
// since) is src/distrib/index-persistence.ts's.

import { ShardexError } from '../errors.js';
import type { StoredDoc } from './document.js';
import { SegmentProblem } from './segment-problem.js';
import { checkPage, countUpTo, ShardIndex, type SearchHit, type SearchRequest, type ShardIndexOptions, type ShardSearchResult } from './shard-index.js';
import type { CollectionSchema } from './schema.js';
import { mergeHitLists } from './sort.js';
import { mergeStats, type IndexStats } from './stats.js';

/** What a searcher of one replica needs (a ShardIndex or a SegmentedIndex). */
export interface ReplicaSearcher {
  readonly size: number;
  search(req?: SearchRequest, globalStats?: IndexStats): ShardSearchResult;
  collectStats(req?: Pick<SearchRequest, 'q' | 'sort' | 'defaultOperator'>): IndexStats;
  matcher(req?: Pick<SearchRequest, 'q' | 'filters' | 'defaultOperator'>): (id: string) => boolean;
}

/** A sealed segment: its index, its name (the persistence layer's), and the ids deleted from it since it was sealed. */
export interface Segment {
  readonly name: string;
  /** Replaced once its file is written by the same index loaded from the file (exact-size arrays outside the JS heap). */
  index: ShardIndex;
  /** Ids removed from the segment since it was written (replayed onto it when it is loaded again). */
  readonly deleted: Set<string>;
}

export class SegmentedIndex implements ReplicaSearcher {
  readonly schema: CollectionSchema;
  private readonly options: ShardIndexOptions;
  /** Sealed segments, oldest first. */
  private sealed: Segment[] = [];
  /** Takes every add; sealed by seal(). */
  private buffer: ShardIndex;
  /** Changes (adds and deletes) since the buffer was last sealed. */
  private changes = 0;
  /** Told when a search finds a segment's file damaged (the search itself fails: see guard()). */
  onDamage: ((problem: string) => void) | undefined;
  /**
   * collectStats' answers by request, until the next change: a replica answering searches
   * between writes sums its parts' statistics once per query, not on every search.
   */
  private readonly statsMemo = new Map<string, IndexStats>();

  constructor(schema: CollectionSchema, segments: readonly Segment[] = [], options: ShardIndexOptions = {}) {
    this.schema = schema;
    this.options = options;
    this.sealed = [...segments];
    this.buffer = new ShardIndex(schema, options);
  }

  /** Live documents in every part. */
  get size(): number {
    let n = this.buffer.size;
    for (const s of this.sealed) n += s.index.size;
    return n;
  }

  /** The sealed segments, oldest first. */
  get segments(): readonly Segment[] {
    return this.sealed;
  }

  /** Adds and deletes the buffer holds since it was last sealed (what seal() would write). */
  get unsealedChanges(): number {
    return this.changes;
  }

  has(id: string): boolean {
    return this.owner(id) !== undefined;
  }

  // ---- write path ----

  /** Adds (doc) and deletes (doc null) in order, as add() and delete() one by one would. */
  apply(ops: Iterable<{ readonly id: string; readonly doc: StoredDoc | null }>): void {
    for (const op of ops) {
      if (op.doc === null) this.delete(op.id);
      else this.add(op.id, op.doc);
    }
  }

  /** Indexes `doc` under `id`, replacing any earlier version wherever it is; a bad document changes nothing. */
  add(id: string, doc: StoredDoc): void {
    // The buffer checks the document before it changes anything; an older copy in a segment goes
    // only once the new one is in.
    const inBuffer = this.buffer.has(id);
    this.buffer.add(id, doc);
    if (!inBuffer) this.removeSealed(id);
    this.changed();
  }

  /** Removes the document; false when there was none. */
  delete(id: string): boolean {
    this.changed();
    return this.buffer.delete(id) || this.removeSealed(id);
  }

  /** After every change to the parts' documents: one more change to seal, and no remembered statistics. */
  private changed(): void {
    this.changes++;
    this.statsMemo.clear();
  }

  /**
   * Seals the buffer as a new segment named `name` and starts an empty one; returns the new
   * segment (undefined when the buffer holds no document: its deletes are in the other
   * segments' lists already). The segment is trimmed to exact-size arrays unless `trim` is
   * false: a caller that writes it to a file and serves it from there at once would only throw
   * the trimmed copy away.
   */
  seal(name: string, { trim = true }: { readonly trim?: boolean } = {}): Segment | undefined {
    this.changes = 0;
    this.statsMemo.clear();
    if (this.buffer.size === 0) {
      this.buffer = new ShardIndex(this.schema, this.options);
      return undefined;
    }
    if (trim) this.buffer.trim();
    const segment: Segment = { name, index: this.buffer, deleted: new Set() };
    this.sealed.push(segment);
    this.buffer = new ShardIndex(this.schema, this.options);
    return segment;
  }

  /** Segments holding no live document (every one deleted): dropped at once, returned so their files can go. */
  dropEmpty(): Segment[] {
    const empty = this.sealed.filter((s) => s.index.size === 0);
    if (empty.length > 0) {
      this.sealed = this.sealed.filter((s) => s.index.size > 0);
      this.statsMemo.clear();
    }
    return empty;
  }

  /**
   * Replaces the segments `sources` with `merged`, which was built from their documents while
   * writes went on: an id of `merged` that meanwhile moved to a newer part or was deleted is
   * removed from it (and listed in its deletes). `merged` takes the place of the newest source.
   */
  replace(sources: readonly Segment[], merged: Segment): void {
    this.statsMemo.clear();
    const from = new Set(sources);
    const sourceIndexes = new Set(sources.map((s) => s.index));
    for (const id of merged.index.liveIds()) {
      const owner = this.owner(id);
      if (owner === undefined || !sourceIndexes.has(owner)) {
        merged.index.delete(id);
        merged.deleted.add(id);
      }
    }
    const at = Math.max(...sources.map((s) => this.sealed.indexOf(s)));
    const next: Segment[] = [];
    this.sealed.forEach((s, i) => {
      if (i === at) next.push(merged);
      else if (!from.has(s)) next.push(s);
    });
    this.sealed = next;
  }

  // ---- read path ----

  search(req: SearchRequest = {}, globalStats?: IndexStats): ShardSearchResult {
    return this.guard(() => this.searchParts(req, globalStats));
  }

  private searchParts(req: SearchRequest, globalStats: IndexStats | undefined): ShardSearchResult {
    const parts = this.parts();
    if (parts.length === 1) return parts[0]!.search(req, globalStats);
    // Parsed once for every part; a bad request fails as one index's search would, before any statistics are read.
    const parsed = this.buffer.parsed(req);
    const { offset, limit } = checkPage(req);
    const { sort } = parsed;
    const stats = globalStats ?? this.collectStats(req);
    // As ShardIndex.search, the top offset+limit (the caller cuts the page): each part's, merged.
    const k = offset + limit;
    const perPart: SearchRequest = { ...parsed, offset: 0, limit: k };
    const byScore = sort.length === 1 && sort[0]!.type === 'score' && sort[0]!.order === 'desc';
    const byNumber = sort[0]!.type === 'number';
    const track = countUpTo(req.trackTotalHits);
    let total = 0;
    let exact = true;
    let page: SearchHit[] = [];
    // The largest parts first: their hits set the bar (the k-th best score so far) that the
    // smaller ones' hits must reach, and once the total is counted as far as asked, the later
    // parts only look for hits that can still make the page (Lucene's collector across leaves).
    // A page sorted by a number column sets a bar the same way (the k-th best value so far), for
    // the documents past those a part counts (its share of trackTotalHits).
    for (const p of [...parts].sort((a, b) => b.size - a.size)) {
      const full = k > 0 && page.length === k;
      const floor = byScore && full ? page[k - 1]!.score : -Infinity;
      const left = Math.max(0, track - total);
      const value = byNumber && full ? page[k - 1]!.sortValues[0] : undefined;
      // Counted as far as asked, and already a lower bound: a part whose values cannot reach the
      // bar adds nothing the answer needs.
      if (typeof value === 'number' && left === 0 && !exact && !p.mayReach(sort[0]!, value)) continue;
      const r = p.search(track === Infinity ? perPart : { ...perPart, trackTotalHits: left }, stats, floor, typeof value === 'number' ? value : undefined);
      total += r.total;
      exact &&= r.totalRelation === undefined;
      // The parts' ids are disjoint: a part with no hit leaves the page as it is.
      if (r.hits.length > 0) page = page.length === 0 ? r.hits : mergeHitLists([page, r.hits], sort, 0, k).hits;
    }
    return { total, hits: page, ...(!exact && { totalRelation: 'gte' as const }) };
  }

  collectStats(req: Pick<SearchRequest, 'q' | 'sort' | 'defaultOperator'> = {}): IndexStats {
    return this.guard(() => {
      const parts = this.parts();
      if (parts.length === 1) return parts[0]!.collectStats(req);
      const key = statsKey(req);
      const known = key === undefined ? undefined : this.statsMemo.get(key);
      if (known !== undefined) return known;
      // Parsed once for every part (a bad query fails as one index's would).
      const parsed = this.buffer.parsed(req);
      const stats = frozenStats(mergeStats(parts.map((p) => p.collectStats(parsed))));
      if (key !== undefined) {
        if (this.statsMemo.size >= STATS_MEMO_ENTRIES) this.statsMemo.delete(this.statsMemo.keys().next().value as string);
        this.statsMemo.set(key, stats);
      }
      return stats;
    });
  }

  matcher(req: Pick<SearchRequest, 'q' | 'filters' | 'defaultOperator'> = {}): (id: string) => boolean {
    // The parts read their postings here; the matchers they return only look ids up.
    const matchers = this.guard(() => this.parts().map((p) => p.matcher(req)));
    return (id) => matchers.some((m) => m(id));
  }

  /**
   * Runs a read; a segment file found damaged on the way (a term's bytes whose checksum does not
   * match) fails it as unavailable, never with wrong answers, and is reported to onDamage.
   */
  private guard<T>(read: () => T): T {
    try {
      return read();
    } catch (err) {
      if (!(err instanceof SegmentProblem)) throw err;
      this.onDamage?.(err.message);
      throw new ShardexError('SHX_UNAVAILABLE', "this replica's search index is damaged on disk and is being rebuilt from its documents; retry (another replica may answer)", { cause: err });
    }
  }

  /** The part holding `id`, if any. */
  private owner(id: string): ShardIndex | undefined {
    if (this.buffer.has(id)) return this.buffer;
    for (let i = this.sealed.length - 1; i >= 0; i--) if (this.sealed[i]!.index.has(id)) return this.sealed[i]!.index;
    return undefined;
  }

  private removeSealed(id: string): boolean {
    for (let i = this.sealed.length - 1; i >= 0; i--) {
      const s = this.sealed[i]!;
      if (s.index.delete(id)) {
        s.deleted.add(id);
        return true;
      }
    }
    return false;
  }

  /** The parts a search reads: segments with live documents, and the buffer (always: it reports bad requests). */
  private parts(): ShardIndex[] {
    const parts: ShardIndex[] = [];
    for (const s of this.sealed) if (s.index.size > 0) parts.push(s.index);
    parts.push(this.buffer);
    return parts;
  }
}

/** Queries whose statistics a SegmentedIndex remembers between two changes (the oldest forgotten first). */
const STATS_MEMO_ENTRIES = 256;

/** The memo key of a statistics request given as text (a request holding parsed objects is not remembered). */
function statsKey(req: Pick<SearchRequest, 'q' | 'sort' | 'defaultOperator'>): string | undefined {
  if ((req.q !== undefined && typeof req.q !== 'string') || (req.sort !== undefined && typeof req.sort !== 'string')) return undefined;
  return `${req.q ?? ''}\u0000${req.sort ?? ''}\u0000${req.defaultOperator ?? ''}`;
}

/** Statistics handed out more than once: frozen, so that no caller can change what the next one gets. */
function frozenStats(s: IndexStats): IndexStats {
  for (const list of [s.fields, s.terms, s.sortFields]) {
    for (const x of list) Object.freeze(x);
    Object.freeze(list);
  }
  return Object.freeze(s);
}

/** When segments are merged: size tiers, after Lucene's TieredMergePolicy (much simplified). */
export interface MergePolicy {
  /** A tier holding this many segments gets its smallest ones merged; default 10. */
  readonly segmentsPerTier: number;
  /** A merge never makes a segment of more live documents than this, nor picks one of more than half of it; default 50,000 (a merge blocks the event loop for about 0.6 s per 50,000 documents). */
  readonly maxSegmentDocs: number;
  /** Segments of fewer documents are one tier; each tier above is ten times larger; default 1,000. */
  readonly floorSegmentDocs: number;
  /** A segment whose deleted documents (at least floorSegmentDocs) outnumber its live ones by this factor is rewritten alone; default 0.25. */
  readonly reclaimDeletes: number;
}

export const DEFAULT_MERGE_POLICY: MergePolicy = { segmentsPerTier: 10, maxSegmentDocs: 50_000, floorSegmentDocs: 1_000, reclaimDeletes: 0.25 };

/**
 * The segments to merge next, or undefined. A segment with many deletes is rewritten alone. Else
 * segments are grouped in tiers by size (below floorSegmentDocs, then each ten times larger),
 * and the smallest tier with segmentsPerTier segments has its smallest ones merged (at least two,
 * at most segmentsPerTier, within maxSegmentDocs): every document is merged about once per tier,
 * and the segments stay about segmentsPerTier per tier. `idle` (the index takes no writes): the
 * segments below floorSegmentDocs are merged into one however few they are (at least two), as
 * Lucene merges a commit's small segments: each is a fixed cost to every search, and after a
 * burst of writes up to segmentsPerTier - 1 of them would stay. Pure: it looks only at sizes and
 * deletes.
 */
export function pickMerge(segments: readonly Segment[], policy: MergePolicy = DEFAULT_MERGE_POLICY, { idle = false }: { readonly idle?: boolean } = {}): Segment[] | undefined {
  const live = segments.filter((s) => s.index.size > 0);
  const wasteful = live.find((s) => s.deleted.size >= policy.floorSegmentDocs && s.deleted.size > policy.reclaimDeletes * s.index.size);
  if (wasteful !== undefined) return [wasteful];
  if (idle) {
    const small = live.filter((s) => s.index.size < policy.floorSegmentDocs);
    if (small.length >= 2) return small;
  }
  const tierOf = (docs: number): number => (docs < policy.floorSegmentDocs ? 0 : 1 + Math.floor(Math.log10(docs / policy.floorSegmentDocs)));
  const tiers = new Map<number, Segment[]>();
  for (const s of live) {
    if (s.index.size > policy.maxSegmentDocs / 2) continue;
    const t = tierOf(s.index.size);
    const list = tiers.get(t);
    if (list === undefined) tiers.set(t, [s]);
    else list.push(s);
  }
  for (const t of [...tiers.keys()].sort((a, b) => a - b)) {
    const tier = tiers.get(t)!;
    if (tier.length < policy.segmentsPerTier) continue;
    tier.sort((a, b) => a.index.size - b.index.size);
    const picked: Segment[] = [];
    let docs = 0;
    for (const s of tier) {
      if (picked.length === policy.segmentsPerTier || docs + s.index.size > policy.maxSegmentDocs) break;
      picked.push(s);
      docs += s.index.size;
    }
    if (picked.length >= 2) return picked;
  }
  return undefined;
}
