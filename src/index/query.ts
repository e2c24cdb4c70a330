// The parsed form of a query: resolved against the schema, independent of any shard's data and
// plain JSON, so a coordinator may parse once and every shard runs the same tree.
//
// Field keys name the index's structures: a text or keyword field by its name, the keyword view
// of an undeclared string field as `f.keyword`, a number or date field by its name.
// `field: null` on term/phrase/prefix means the default fields: every text field of the index
// (declared text fields and the text views of undeclared string fields), each clause summed.
//
// Scoring (Lucene's): term and phrase clauses score with BM25; prefix, range, exists, ids and
// `*` match with a constant score (1 x boost); a bool sums the scores of its matching
// must/should clauses. A bool without must clauses needs one should clause to match; a bool of
// only must_not clauses matches every document but those (with score 1, Solr's `*:* -x`).

export type Query =
  | AllQuery
  | NoneQuery
  | TermQuery
  | PhraseQuery
  | PrefixQuery
  | RangeQuery
  | ExistsQuery
  | IdsQuery
  | BoolQuery;

export interface AllQuery {
  readonly kind: 'all';
  readonly boost: number;
}

/** What a clause of only stop words or punctuation becomes: matches nothing, dropped from bools. */
export interface NoneQuery {
  readonly kind: 'none';
}

export interface TermQuery {
  readonly kind: 'term';
  readonly field: string | null;
  readonly term: string;
  readonly boost: number;
}

export interface PhraseQuery {
  readonly kind: 'phrase';
  readonly field: string | null;
  readonly terms: readonly string[];
  /** Position of each term relative to the first (stop words leave gaps). */
  readonly positions: readonly number[];
  readonly boost: number;
}

export interface PrefixQuery {
  readonly kind: 'prefix';
  readonly field: string | null;
  readonly prefix: string;
  readonly boost: number;
}

export type RangeQuery = NumberRangeQuery | KeywordRangeQuery;

/** Over number or date doc values (dates as epoch ms); a multi-valued doc matches if any value does. */
export interface NumberRangeQuery {
  readonly kind: 'range';
  readonly target: 'number';
  readonly field: string;
  readonly lower: number | null;
  readonly upper: number | null;
  readonly includeLower: boolean;
  readonly includeUpper: boolean;
  readonly boost: number;
}

/** Over the terms of a keyword field, compared as strings (UTF-16 code units). */
export interface KeywordRangeQuery {
  readonly kind: 'range';
  readonly target: 'keyword';
  readonly field: string;
  readonly lower: string | null;
  readonly upper: string | null;
  readonly includeLower: boolean;
  readonly includeUpper: boolean;
  readonly boost: number;
}

/** `field:*`: documents with at least one token (inverted) or value (number) in the field. */
export interface ExistsQuery {
  readonly kind: 'exists';
  readonly target: 'inverted' | 'number';
  readonly field: string;
  readonly boost: number;
}

export interface IdsQuery {
  readonly kind: 'ids';
  readonly ids: readonly string[];
  readonly boost: number;
}

export interface BoolQuery {
  readonly kind: 'bool';
  readonly must: readonly Query[];
  readonly should: readonly Query[];
  readonly mustNot: readonly Query[];
  readonly boost: number;
}

export const MATCH_ALL: AllQuery = { kind: 'all', boost: 1 };
export const MATCH_NONE: NoneQuery = { kind: 'none' };

/** A copy of `q` with its boost multiplied by `factor` (none stays none). */
export function withBoost(q: Query, factor: number): Query {
  if (q.kind === 'none' || factor === 1) return q;
  return { ...q, boost: q.boost * factor };
}
