// The one document checker (admission): what a document may hold, checked against the
// collection's schema before anything is written, at the node that receives a request and again
// at the shard leader, so that applying a logged update to the index can never fail. Also the
// stored-field projection of search results (`fields=id,title`).

import { ShardexError } from '../errors.js';
import { loneSurrogateIndex, utf8Length } from '../hashrange/murmur3.js';
import { describe, KEYWORD_SUFFIX, RESERVED_DOC_KEYS, type CollectionSchema, type FieldDef } from './schema.js';
import { toDate, toNumber } from './values.js';

export type StoredDoc = Record<string, unknown>;

export const MAX_ID_BYTES = 512;

/** Why `id` cannot be a document id (a phrase completing "the document ..."), or undefined when it can. */
export function idProblem(id: unknown): string | undefined {
  if (id === undefined || id === null) return 'has no "id"';
  if (typeof id !== 'string') return `has an "id" that is ${Array.isArray(id) ? 'an array' : typeof id === 'object' ? 'an object' : `a ${typeof id}`}, not a string`;
  if (id.length === 0) return 'has an empty "id"';
  const lone = loneSurrogateIndex(id);
  if (lone >= 0) return `has an "id" with a lone UTF-16 surrogate at index ${lone}`;
  const bytes = utf8Length(id);
  if (bytes > MAX_ID_BYTES) return `has an "id" of ${bytes} UTF-8 bytes; the limit is ${MAX_ID_BYTES}`;
  return undefined;
}

/** What is wrong with a document: its shape or id (`field` absent), or one field's value. */
export interface DocumentProblem {
  /** Completes "the document ..." when `field` is absent; else a sentence about the field. */
  readonly message: string;
  readonly field?: string;
}

/**
 * Everything that would make a document refused, anywhere: not an object, its id, a reserved
 * key, or a value its field cannot hold (declared types, dynamic-mapping rules). The HTTP API,
 * the leader, the smart client and `shardex import` all ask this one function.
 */
export function admissionProblem(schema: CollectionSchema | undefined, doc: unknown): DocumentProblem | undefined {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) {
    return { message: `is ${Array.isArray(doc) ? 'an array' : doc === null ? 'null' : `a ${typeof doc}`}, not a JSON object` };
  }
  const id = idProblem((doc as StoredDoc).id);
  if (id) return { message: id };
  if (Object.hasOwn(doc, '_version_') || Object.hasOwn(doc, '_shard_')) return { message: 'sets a reserved field (_version_ or _shard_)' };
  return schema === undefined ? undefined : documentProblem(schema, doc);
}

/** The problem as a sentence about document `position` (and NDJSON `line`), ending "nothing was written". */
export function describeProblem(p: DocumentProblem, position: number, line?: number): string {
  const where = line === undefined ? `document ${position}` : `document ${position} (line ${line})`;
  return `${where}${p.field === undefined ? ' ' : ': '}${p.message}; nothing was written`;
}

/** Why the index cannot take `doc`'s field values, or undefined when it can (see admissionProblem). */
export function documentProblem(schema: CollectionSchema, doc: unknown): DocumentProblem | undefined {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) return { message: `a document must be a JSON object, got ${describe(doc)}` };
  const d = doc as StoredDoc;
  for (const key in d) {
    if (!Object.hasOwn(d, key) || RESERVED_DOC_KEYS.has(key)) continue;
    const value = d[key];
    if (value === null || value === undefined) continue;
    const def = schema.fields.get(key);
    if (def === undefined && key.endsWith(KEYWORD_SUFFIX)) {
      return { field: key, message: `field '${key}': names ending in '${KEYWORD_SUFFIX}' are reserved for the exact-value view of undeclared string fields` };
    }
    if (Array.isArray(value)) {
      for (const item of value) {
        if (item === null || item === undefined) continue;
        if (Array.isArray(item)) return { field: key, message: `field '${key}': lists of lists are not supported` };
        const problem = valueProblem(def, key, item);
        if (problem !== undefined) return { field: key, message: problem };
      }
    } else {
      const problem = valueProblem(def, key, value);
      if (problem !== undefined) return { field: key, message: problem };
    }
  }
  return undefined;
}

/** Throws SHX_BAD_DOCUMENT (naming the field) unless the index can take `doc`. */
export function checkDocument(schema: CollectionSchema, doc: unknown): StoredDoc {
  const problem = documentProblem(schema, doc);
  if (problem !== undefined) {
    throw new ShardexError('SHX_BAD_DOCUMENT', problem.message, problem.field === undefined ? undefined : { details: { field: problem.field } });
  }
  return doc as StoredDoc;
}

function valueProblem(def: FieldDef | undefined, key: string, v: unknown): string | undefined {
  const type = def?.type;
  if (type === 'number') return Number.isNaN(toNumber(v)) ? `field '${key}' is a number field; got ${describe(v)}` : undefined;
  if (type === 'date') return Number.isNaN(toDate(v)) ? `field '${key}' is a date field (ISO 8601 or epoch ms); got ${describe(v)}` : undefined;
  if (typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v))) return undefined;
  const what = type === undefined ? 'undeclared fields hold' : `a ${type} field holds`;
  return `field '${key}': ${what} strings, numbers or booleans (or lists of them); got ${describe(v)}`;
}

/** `fields=id,title` as a list; null (every stored field) for absent, empty or `*`. */
export function parseFieldList(fields: string | readonly string[] | null | undefined): string[] | null {
  if (fields === undefined || fields === null) return null;
  const items = (typeof fields === 'string' ? fields.split(',') : fields).map((f) => f.trim()).filter((f) => f.length > 0);
  if (items.length === 0 || items.includes('*')) return null;
  return [...new Set(items)];
}

/** A stored document cut to `fields` (null = all), always with its id first. */
export function projectFields(id: string, doc: StoredDoc, fields: readonly string[] | null): StoredDoc {
  const out: StoredDoc = { id };
  if (fields === null) {
    for (const key in doc) {
      if (Object.hasOwn(doc, key) && !RESERVED_DOC_KEYS.has(key)) out[key] = doc[key];
    }
    return out;
  }
  for (const key of fields) {
    if (!RESERVED_DOC_KEYS.has(key) && Object.hasOwn(doc, key)) out[key] = doc[key];
  }
  return out;
}
