// Input checks for documents and ids, shared by every entry point (HTTP, client). A batch
// with one bad document is rejected whole, naming the document's position.
import { ShardexError } from '../errors.js';
import { loneSurrogateIndex, utf8Length } from '../hashrange/murmur3.js';
import type { Doc } from '../ulog/index.js';
import type { WireOp } from './protocol.js';

export const MAX_ID_BYTES = 512;

/** Why `id` cannot be a document id, or undefined when it can. */
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

export function checkId(id: unknown): string {
  const problem = idProblem(id);
  if (problem) throw new ShardexError('SHX_BAD_ID', `the document ${problem}`);
  return id as string;
}

/** Why `doc` cannot be stored (a phrase completing "the document ..."), or undefined when it can. */
export function documentProblem(doc: unknown): string | undefined {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) {
    return `is ${Array.isArray(doc) ? 'an array' : doc === null ? 'null' : `a ${typeof doc}`}, not a JSON object`;
  }
  const problem = idProblem((doc as Doc).id);
  if (problem) return problem;
  if (Object.hasOwn(doc, '_version_') || Object.hasOwn(doc, '_shard_')) return 'sets a reserved field (_version_ or _shard_)';
  return undefined;
}

/** Validates a batch of documents and turns it into add ops (phase NONE: no versions yet). */
export function toAddOps(docs: readonly unknown[]): WireOp[] {
  const ops: WireOp[] = new Array(docs.length);
  for (let i = 0; i < docs.length; i++) {
    const doc = docs[i];
    const problem = documentProblem(doc);
    if (problem) throw new ShardexError('SHX_BAD_DOCUMENT', `document ${i} ${problem}; nothing was written`, { details: { position: i } });
    ops[i] = { id: (doc as Doc).id as string, doc: doc as Doc };
  }
  return ops;
}
