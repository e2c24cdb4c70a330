// Admission of a client's batch (phase NONE, and again at the leader): every document is checked
// whole by the one checker (src/index/document.ts) before any phase starts, so that a batch with
// one bad document is refused whole, naming the document's position (or NDJSON line) and field.
import { ShardexError } from '../errors.js';
import { admissionProblem, describeProblem, idProblem, type CollectionSchema } from '../index/index.js';
import type { Doc } from '../ulog/index.js';
import type { WireOp } from '../transport/index.js';

export { idProblem, MAX_ID_BYTES } from '../index/index.js';

export function checkId(id: unknown): string {
  const problem = idProblem(id);
  if (problem) throw new ShardexError('SHX_BAD_ID', `the document ${problem}`);
  return id as string;
}

/** The refusal of the document at `position` (NDJSON `line`), or undefined when it is admitted. */
export function admissionError(schema: CollectionSchema | undefined, doc: unknown, position: number, line?: number): ShardexError | undefined {
  const problem = admissionProblem(schema, doc);
  if (problem === undefined) return undefined;
  return new ShardexError('SHX_BAD_DOCUMENT', describeProblem(problem, position, line), {
    details: { position, ...(line !== undefined && { line }), ...(problem.field !== undefined && { field: problem.field }) },
  });
}

/**
 * Admits a batch of documents and turns it into add ops (phase NONE: no versions yet). `lines`
 * gives each document's NDJSON line, when the batch came as NDJSON.
 */
export function toAddOps(docs: readonly unknown[], schema?: CollectionSchema, lines?: readonly number[]): WireOp[] {
  const ops: WireOp[] = new Array(docs.length);
  for (let i = 0; i < docs.length; i++) {
    const doc = docs[i];
    const refused = admissionError(schema, doc, i, lines?.[i]);
    if (refused) throw refused;
    ops[i] = { id: (doc as Doc).id as string, doc: doc as Doc };
  }
  return ops;
}

/** The leader's admission of forwarded ops (the sender checked them too; a peer may run older code). */
export function admitOps(ops: readonly WireOp[], schema: CollectionSchema): void {
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i]!;
    // A delete is its id only.
    const refused = admissionError(op.doc === null ? undefined : schema, op.doc ?? { id: op.id }, i);
    if (refused) throw refused;
    if (op.doc !== null && op.doc.id !== op.id) {
      throw new ShardexError('SHX_BAD_DOCUMENT', describeProblem({ message: `has "id" ${JSON.stringify(op.doc.id)} but travels as ${JSON.stringify(op.id)}` }, i), { details: { position: i } });
    }
  }
}
