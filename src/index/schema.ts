// A collection's fields, by type, and how every document value and every query field name maps
// onto the index's structures.
//
// Declared types:
//   text     analyzed, scored with BM25; phrases; not sortable
//   keyword  exact values (not analyzed), scored with BM25 over values; sortable; ranges by string
//   number   float64 doc values: equality, ranges, sorting (constant score when matched)
//   date     ISO 8601 instants (or epoch ms), stored as epoch ms: equality, ranges, sorting
//
// Undeclared fields follow Elasticsearch's dynamic mapping, decided per value so that the result
// never depends on which document came first (shards see documents in different orders):
//   - a string (or boolean, as "true"/"false") is indexed as text under `f` AND, if at most 256
//     characters long (ES's ignore_above), as a keyword under `f.keyword`. So `f:value` and
//     `f:"a phrase"` search the analyzed text, and exact matching, ranges by string and sorting
//     by string use `f.keyword:"Exact Value"`.
//   - a number is indexed as a number under `f`: `f:[1 TO 5]`, `sort=f asc`; `f:5` matches the
//     number 5 as well as the text token "5".
//   - a string that is a strict ISO 8601 date or date-time (ES's date detection, its default
//     strict_date_optional_time) is indexed as a date: its epoch ms among `f`'s numbers, and not
//     as text or keyword. `f:2024-07-14`, `f:[2024-01-01 TO 2024-02-01]` and `sort=f desc` match
//     and sort it as an instant. Dates and numbers share `f`'s numbers, so an open-ended date
//     range (`f:[* TO 2024-01-01]`) also matches plain numbers below that instant's epoch ms.
// Field names ending in `.keyword` are therefore reserved, as are `id` (the document id, queried
// with `id:value`) and `score`.

import { ShardexError } from '../errors.js';
import { Analyzer, type AnalyzerOptions } from './analyzer.js';

export type FieldType = 'text' | 'keyword' | 'number' | 'date';

export const FIELD_TYPES: readonly FieldType[] = ['text', 'keyword', 'number', 'date'];
export const KEYWORD_SUFFIX = '.keyword';
export const ID_FIELD = 'id';
export const SCORE_FIELD = 'score';
/** Keys of a stored document that are not fields of it. */
export const RESERVED_DOC_KEYS: ReadonlySet<string> = new Set([ID_FIELD, '_version_', '_shard_']);

export interface FieldDef {
  readonly name: string;
  readonly type: FieldType;
  /** Multiplies every scoring clause on this field (default 1). */
  readonly boost: number;
}

export interface CollectionSchema {
  readonly fields: ReadonlyMap<string, FieldDef>;
  /** The analyzer of every text field, at index and at query time. */
  readonly analyzer: Analyzer;
}

/** Field names a query can spell without escaping. */
const FIELD_NAME = /^[\p{L}\p{N}_][\p{L}\p{N}_.\-]*$/u;
const MAX_FIELD_NAME = 256;

/**
 * Validates a collection's field declarations: `{"title": "text", "price": "number"}`, a type
 * may also be written `{"type": "text", "boost": 2}`. Undefined or null declares nothing (every
 * field is dynamic).
 */
export function parseSchema(input: unknown, options: AnalyzerOptions = {}): CollectionSchema {
  const fields = new Map<string, FieldDef>();
  if (input !== undefined && input !== null) {
    if (typeof input !== 'object' || Array.isArray(input)) {
      throw schemaError(`the schema must be an object mapping field names to types (${FIELD_TYPES.join(', ')}), got ${describe(input)}`);
    }
    for (const [name, spec] of Object.entries(input)) {
      const nameProblem = fieldNameProblem(name);
      if (nameProblem !== undefined) throw schemaError(`field '${name}': ${nameProblem}`, name);
      fields.set(name, parseFieldSpec(name, spec));
    }
  }
  return { fields, analyzer: new Analyzer(checkAnalyzerOptions(options)) };
}

function parseFieldSpec(name: string, spec: unknown): FieldDef {
  if (typeof spec === 'string') return { name, type: parseType(name, spec), boost: 1 };
  if (typeof spec === 'object' && spec !== null && !Array.isArray(spec)) {
    const { type, boost, ...rest } = spec as Record<string, unknown>;
    const extra = Object.keys(rest);
    if (extra.length > 0) throw schemaError(`field '${name}': unknown option '${extra[0]}' (allowed: type, boost)`, name);
    if (typeof type !== 'string') throw schemaError(`field '${name}': "type" must be one of ${FIELD_TYPES.join(', ')}`, name);
    let b = 1;
    if (boost !== undefined) {
      if (typeof boost !== 'number' || !Number.isFinite(boost) || boost <= 0) {
        throw schemaError(`field '${name}': "boost" must be a positive number, got ${describe(boost)}`, name);
      }
      b = boost;
    }
    return { name, type: parseType(name, type), boost: b };
  }
  throw schemaError(`field '${name}': the type must be one of ${FIELD_TYPES.join(', ')}, got ${describe(spec)}`, name);
}

function parseType(name: string, type: string): FieldType {
  if ((FIELD_TYPES as readonly string[]).includes(type)) return type as FieldType;
  throw schemaError(`field '${name}': unknown type '${type}' (expected one of ${FIELD_TYPES.join(', ')})`, name);
}

function checkAnalyzerOptions(options: AnalyzerOptions): AnalyzerOptions {
  const sw = options.stopWords;
  if (sw === undefined || sw === null || sw === 'english') return options;
  if (!Array.isArray(sw) || !sw.every((w) => typeof w === 'string')) {
    throw schemaError(`stopWords must be 'english' or a list of words, got ${describe(sw)}`);
  }
  return options;
}

export function fieldNameProblem(name: string): string | undefined {
  if (name.length === 0) return 'a field name cannot be empty';
  if (name.length > MAX_FIELD_NAME) return `a field name is at most ${MAX_FIELD_NAME} characters`;
  if (name === ID_FIELD || name === SCORE_FIELD) return `'${name}' is reserved`;
  if (name.endsWith(KEYWORD_SUFFIX)) return `names ending in '${KEYWORD_SUFFIX}' are reserved for the exact-value view of undeclared string fields`;
  if (!FIELD_NAME.test(name)) return 'a field name starts with a letter, digit or _ and holds only letters, digits, _, . and -';
  return undefined;
}

function schemaError(message: string, field?: string): ShardexError {
  return new ShardexError('SHX_BAD_REQUEST', `invalid schema: ${message}`, field === undefined ? undefined : { details: { field } });
}

export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}...` : value);
  if (typeof value === 'object') return 'an object';
  return `${typeof value} ${String(value)}`;
}

// ---- how a query names a field ----

/** What a field name in a query refers to. */
export type QueryField =
  | { readonly kind: 'id' }
  | { readonly kind: 'declared'; readonly def: FieldDef }
  /** Undeclared `f`: text view `f` and number view `f`. */
  | { readonly kind: 'dynamic'; readonly name: string }
  /** Undeclared `f.keyword`: the keyword view of `f`'s strings. */
  | { readonly kind: 'dynamic-keyword'; readonly key: string };

/** Resolves a field name used in a query or a sort; a string describing the problem if it cannot be used. */
export function resolveField(schema: CollectionSchema, name: string): QueryField | string {
  if (name === ID_FIELD) return { kind: 'id' };
  const def = schema.fields.get(name);
  if (def !== undefined) return { kind: 'declared', def };
  if (name.endsWith(KEYWORD_SUFFIX)) {
    const base = name.slice(0, -KEYWORD_SUFFIX.length);
    const baseDef = schema.fields.get(base);
    if (baseDef !== undefined) return `'${name}' does not exist: '${base}' is declared as ${baseDef.type}, only undeclared string fields have a '${KEYWORD_SUFFIX}' view`;
    const problem = fieldNameProblem(base);
    if (problem !== undefined) return `'${name}' is not a valid field: ${problem}`;
    return { kind: 'dynamic-keyword', key: name };
  }
  if (name === SCORE_FIELD) return `'${SCORE_FIELD}' is not a field`;
  if (!FIELD_NAME.test(name)) return `'${name}' is not a valid field name`;
  return { kind: 'dynamic', name };
}
