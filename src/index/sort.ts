// Sort specs written as in Solr (`price desc,ts asc`; default `score desc`) and the one ordering
// of hits that shards and the coordinator's merge share: keys in turn, a missing value after
// every present one whatever the direction (Elasticsearch's `_last`), strings by UTF-16 code
// units, then the document id ascending as the final, stable tie-break.

import { ShardexError } from '../errors.js';
import { ID_FIELD, resolveField, SCORE_FIELD, type CollectionSchema } from './schema.js';

export type SortOrder = 'asc' | 'desc';

export interface SortKey {
  /** `score`, `id`, a keyword/number/date field, `f` (an undeclared field's numbers) or `f.keyword`. */
  readonly field: string;
  readonly order: SortOrder;
  readonly type: 'score' | 'id' | 'number' | 'keyword';
  /** An undeclared field's view: whether it exists is known only from the documents. */
  readonly dynamic: boolean;
}

export type SortSpec = readonly SortKey[];

/** A hit's value for one sort key: a score, a number (dates as epoch ms), a string, or null when missing. */
export type SortValue = number | string | null;

export const DEFAULT_SORT: SortSpec = [{ field: SCORE_FIELD, order: 'desc', type: 'score', dynamic: false }];

function sortError(message: string, position: number): ShardexError {
  return new ShardexError('SHX_BAD_REQUEST', `invalid sort: ${message} at position ${position}`, { details: { param: 'sort', position } });
}

/** Parses `field dir[, field dir...]`; empty or absent means `score desc`. */
export function parseSort(spec: string | null | undefined, schema: CollectionSchema): SortSpec {
  if (spec === undefined || spec === null || spec.trim() === '') return DEFAULT_SORT;
  if (typeof spec !== 'string') throw sortError('the sort must be a string such as "price desc,ts asc"', 0);
  const keys: SortKey[] = [];
  let offset = 0;
  for (const item of spec.split(',')) {
    const lead = item.length - item.trimStart().length;
    const at = offset + lead;
    const words = item.trim().split(/\s+/);
    offset += item.length + 1;
    if (words.length === 1 && words[0] === '') throw sortError('empty sort clause', at);
    if (words.length === 1) throw sortError(`'${words[0]}' needs a direction, asc or desc`, at + words[0].length);
    if (words.length > 2) throw sortError(`expected 'field asc' or 'field desc', got '${item.trim()}'`, at);
    const [field, dir] = words;
    const lower = dir.toLowerCase();
    if (lower !== 'asc' && lower !== 'desc') throw sortError(`direction must be asc or desc, got '${dir}'`, at + item.trim().indexOf(dir, field.length));
    keys.push(sortKey(field, lower, schema, at));
  }
  return keys;
}

function sortKey(field: string, order: SortOrder, schema: CollectionSchema, at: number): SortKey {
  if (field === SCORE_FIELD) return { field, order, type: 'score', dynamic: false };
  if (field === ID_FIELD) return { field, order, type: 'id', dynamic: false };
  const f = resolveField(schema, field);
  if (typeof f === 'string') throw sortError(`cannot sort on ${f}`, at);
  switch (f.kind) {
    case 'id':
      return { field, order, type: 'id', dynamic: false };
    case 'dynamic':
      return { field, order, type: 'number', dynamic: true };
    case 'dynamic-keyword':
      return { field, order, type: 'keyword', dynamic: true };
    case 'declared':
      if (f.def.type === 'text') throw sortError(`cannot sort on '${field}': it is a text field (sort on a keyword, number or date field)`, at);
      return { field, order, type: f.def.type === 'keyword' ? 'keyword' : 'number', dynamic: false };
  }
}

/** Solr's sort syntax for a parsed spec. */
export function formatSort(sort: SortSpec): string {
  return sort.map((k) => `${k.field} ${k.order}`).join(',');
}

/** Orders two values of one key: missing last, then ascending or descending. */
export function compareSortValue(a: SortValue, b: SortValue, order: SortOrder): number {
  if (a === null || (typeof a === 'number' && Number.isNaN(a))) return b === null || (typeof b === 'number' && Number.isNaN(b)) ? 0 : 1;
  if (b === null || (typeof b === 'number' && Number.isNaN(b))) return -1;
  const c = a < b ? -1 : a > b ? 1 : 0;
  return order === 'desc' ? -c : c;
}

export function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The order of hits: each sort key in turn, then id ascending. */
export function compareHits(sort: SortSpec, a: { readonly id: string; readonly sortValues: readonly SortValue[] }, b: { readonly id: string; readonly sortValues: readonly SortValue[] }): number {
  for (let k = 0; k < sort.length; k++) {
    const c = compareSortValue(a.sortValues[k], b.sortValues[k], sort[k].order);
    if (c !== 0) return c;
  }
  return compareIds(a.id, b.id);
}

/**
 * The offset..offset+limit page of the union of several hit lists (each in hit order), in hit
 * order. An id found in more than one list counts once, where it ranks best; `duplicates` says
 * how many were dropped so.
 */
export function mergeHitLists<T extends { readonly id: string; readonly sortValues: readonly SortValue[] }>(
  lists: readonly (readonly T[])[],
  sort: SortSpec,
  offset: number,
  limit: number,
): { hits: T[]; duplicates: number } {
  const all: T[] = [];
  for (const list of lists) for (const hit of list) all.push(hit);
  all.sort((a, b) => compareHits(sort, a, b));
  const seen = new Set<string>();
  const hits: T[] = [];
  const end = offset + limit;
  let duplicates = 0;
  let rank = 0;
  for (const hit of all) {
    if (seen.has(hit.id)) {
      duplicates++;
      continue;
    }
    seen.add(hit.id);
    if (rank >= offset && rank < end) hits.push(hit);
    rank++;
  }
  return { hits, duplicates };
}
