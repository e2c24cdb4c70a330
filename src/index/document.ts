// What a document may hold, checked against the schema before anything is written (so the
// update path can reject a bad document with a 400 before it is versioned or logged), and the
// stored-field projection of search results (`fields=id,title`).

import { ShardexError } from '../errors.js';
import { describe, KEYWORD_SUFFIX, RESERVED_DOC_KEYS, type CollectionSchema, type FieldDef } from './schema.js';
import { toDate, toNumber } from './values.js';

export type StoredDoc = Record<string, unknown>;

/** Why the index cannot take `doc`, or undefined when it can. */
export function documentProblem(schema: CollectionSchema, doc: unknown): { field?: string; message: string } | undefined {
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
