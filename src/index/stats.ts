// BM25 and the term statistics it needs, local or global.
//
// Global statistics are Elasticsearch's dfs_query_then_fetch: before the query phase the
// coordinator asks every shard for the statistics of the query's terms (collectStats), sums them
// (mergeStats) and sends the sum with the query, so every shard scores with the collection's
// N, avgdl and document frequencies and a sharded collection ranks exactly like one index.
// The shapes are plain JSON (lists, not objects keyed by user text) so they cross gRPC/HTTP as-is.

export const BM25_K1 = 1.2;
export const BM25_B = 0.75;

export interface FieldStats {
  /** Index field key: a field name, or `f.keyword` for the keyword view of an undeclared string field. */
  readonly field: string;
  /** Documents with at least one token in the field (BM25's N). */
  readonly docCount: number;
  /** Tokens of the field summed over those documents (avgdl = sumLength / docCount). */
  readonly sumLength: number;
}

export interface TermStats {
  readonly field: string;
  readonly term: string;
  /** Documents whose field holds the term (BM25's n). */
  readonly docFreq: number;
}

export interface SortFieldStats {
  /** A sort key naming an undeclared field's view: `f` (numbers) or `f.keyword` (strings). */
  readonly field: string;
  /** Documents with a value there; 0 over the whole collection means the field is unknown. */
  readonly docCount: number;
}

export interface IndexStats {
  readonly fields: readonly FieldStats[];
  readonly terms: readonly TermStats[];
  readonly sortFields: readonly SortFieldStats[];
}

/** Lucene's BM25 idf. */
export function bm25Idf(docCount: number, docFreq: number): number {
  return Math.log(1 + (docCount - docFreq + 0.5) / (docFreq + 0.5));
}

/** Lucene's BM25 with exact field lengths: idf * tf(k1+1) / (tf + k1(1 - b + b dl/avgdl)). */
export function bm25(tf: number, dl: number, avgdl: number, idf: number): number {
  return (idf * (tf * (BM25_K1 + 1))) / (tf + BM25_K1 * (1 - BM25_B + (BM25_B * dl) / avgdl));
}

/** Sums the statistics of every shard (mergeStats of one shard's stats is those stats). */
export function mergeStats(list: readonly IndexStats[]): IndexStats {
  const fields = new Map<string, { docCount: number; sumLength: number }>();
  const terms = new Map<string, { field: string; term: string; docFreq: number }>();
  const sortFields = new Map<string, number>();
  for (const stats of list) {
    for (const f of stats.fields) {
      const acc = fields.get(f.field);
      if (acc === undefined) fields.set(f.field, { docCount: f.docCount, sumLength: f.sumLength });
      else {
        acc.docCount += f.docCount;
        acc.sumLength += f.sumLength;
      }
    }
    for (const t of stats.terms) {
      const key = termKey(t.field, t.term);
      const acc = terms.get(key);
      if (acc === undefined) terms.set(key, { field: t.field, term: t.term, docFreq: t.docFreq });
      else acc.docFreq += t.docFreq;
    }
    for (const s of stats.sortFields) sortFields.set(s.field, (sortFields.get(s.field) ?? 0) + s.docCount);
  }
  return {
    fields: [...fields].map(([field, s]) => ({ field, docCount: s.docCount, sumLength: s.sumLength })),
    terms: [...terms.values()],
    sortFields: [...sortFields].map(([field, docCount]) => ({ field, docCount })),
  };
}

/**
 * Whether two sets of statistics hold the same numbers, in whatever order they are listed (two
 * replicas of a shard may list them in different orders when their segments differ).
 */
export function sameStats(a: IndexStats, b: IndexStats): boolean {
  return (
    sameEntries(a.fields, b.fields, (f) => f.field, (f) => `${f.docCount}/${f.sumLength}`) &&
    sameEntries(a.terms, b.terms, (t) => termKey(t.field, t.term), (t) => t.docFreq) &&
    sameEntries(a.sortFields, b.sortFields, (f) => f.field, (f) => f.docCount)
  );
}

function sameEntries<T>(a: readonly T[] | undefined, b: readonly T[] | undefined, key: (x: T) => string, value: (x: T) => string | number): boolean {
  if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
  if (a.length === 1) return key(a[0]!) === key(b[0]!) && value(a[0]!) === value(b[0]!);
  const values = new Map(a.map((x) => [key(x), value(x)]));
  // Each of b's entries takes one of a's, so duplicates cannot stand in for a missing entry.
  return values.size === a.length && b.every((y) => values.get(key(y)) === value(y) && values.delete(key(y)));
}

export function termKey(field: string, term: string): string {
  return `${field}\u0000${term}`;
}

/** Lookups made for statistics objects still in use (each part of a segmented index searches with the same one). */
const lookups = new WeakMap<IndexStats, StatsLookup>();

/** Global statistics indexed for lookups during one search. */
export class StatsLookup {
  private readonly fields = new Map<string, FieldStats>();
  private readonly terms = new Map<string, number>();
  private readonly sortFields = new Map<string, number>();

  /** The lookup of `stats`, made once per statistics object (which nothing changes once made). */
  static of(stats: IndexStats): StatsLookup {
    let l = lookups.get(stats);
    if (l === undefined) {
      l = new StatsLookup(stats);
      lookups.set(stats, l);
    }
    return l;
  }

  constructor(stats: IndexStats) {
    for (const f of stats.fields) this.fields.set(f.field, f);
    for (const t of stats.terms) this.terms.set(termKey(t.field, t.term), t.docFreq);
    for (const s of stats.sortFields) this.sortFields.set(s.field, s.docCount);
  }

  field(field: string): FieldStats | undefined {
    const f = this.fields.get(field);
    return f !== undefined && f.docCount > 0 ? f : undefined;
  }

  docFreq(field: string, term: string): number | undefined {
    return this.terms.get(termKey(field, term));
  }

  sortFieldDocCount(field: string): number | undefined {
    return this.sortFields.get(field);
  }
}
