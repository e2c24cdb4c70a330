// The HTTP layer's limits (issue 13): how much one request may ask of a node. Each is a flag of
// `shardex node` and `shardex dev` with a safe default (Elasticsearch's where it has one), and
// each violation is refused before anything is done, with SHX_LIMIT_EXCEEDED (413 for the body
// size, 429 for requests in flight on one connection) and a message naming the limit, its value
// and the flag that changes it. The document checks here are about size only: what a document
// may hold is the one admission checker's (src/index/document.ts), which runs after them.
import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import { z } from 'zod';
import { ShardexError } from '../../errors.js';
import { DEFAULT_LIMIT, MAX_QUERY_LENGTH, MAX_RESULT_WINDOW, describeProblem, parseQuery, type CollectionSchema, type Query } from '../../index/index.js';

const MiB = 1024 * 1024;

interface LimitSpec {
  readonly flag: string;
  readonly default: number;
  readonly min: number;
  readonly max: number;
  /** Completes "the limit is N ...". */
  readonly unit: string;
}

/** Every limit: its flag, default, bounds and unit. The keys are the flags in camelCase (commander's names). */
export const LIMITS = {
  // Elasticsearch's http.max_content_length; held below what one V8 string can take.
  maxBodyBytes: { flag: '--max-body-bytes', default: 100 * MiB, min: 1024, max: 500 * MiB, unit: 'bytes per request body' },
  maxBatchDocs: { flag: '--max-batch-docs', default: 10_000, min: 1, max: 1_000_000, unit: 'documents per request' },
  maxDocumentBytes: { flag: '--max-document-bytes', default: 10 * MiB, min: 64, max: 500 * MiB, unit: 'bytes per document (UTF-8 of its field names and values)' },
  // Elasticsearch's index.mapping.total_fields.limit.
  maxFieldsPerDocument: { flag: '--max-fields-per-document', default: 1000, min: 1, max: 1_000_000, unit: 'fields per document' },
  maxFieldValueBytes: { flag: '--max-field-value-bytes', default: 1 * MiB, min: 16, max: 500 * MiB, unit: 'UTF-8 bytes per field value' },
  // The query parser's own bound is the most a node can be given.
  maxQueryLength: { flag: '--max-query-length', default: MAX_QUERY_LENGTH, min: 1, max: MAX_QUERY_LENGTH, unit: 'characters per query or filter' },
  // Lucene's (and Elasticsearch 7's) max_clause_count.
  maxQueryClauses: { flag: '--max-query-clauses', default: 1024, min: 1, max: 65_536, unit: 'clauses per search (query and filters together)' },
  // Elasticsearch's index.max_result_window; the index's own bound is the most a node can be given.
  maxResultWindow: { flag: '--max-result-window', default: MAX_RESULT_WINDOW, min: 1, max: MAX_RESULT_WINDOW, unit: 'hits (offset + limit)' },
  // Elasticsearch's index.mapping.depth.limit.
  maxJsonDepth: { flag: '--max-json-depth', default: 20, min: 3, max: 1000, unit: 'levels of JSON nesting' },
  maxRequestsPerConnection: { flag: '--max-requests-per-connection', default: 100, min: 1, max: 100_000, unit: 'requests in flight per connection (HTTP pipelining)' },
} as const satisfies Record<string, LimitSpec>;

export type LimitName = keyof typeof LIMITS;
/** The body size is fastify's `bodyLimit` (HttpOptions); the others live here. */
export type HttpLimits = { readonly [K in Exclude<LimitName, 'maxBodyBytes'>]: number };

const LimitsSchema = z
  .object(Object.fromEntries(Object.entries(LIMITS).map(([k, l]) => [k, z.number().int().min(l.min).max(l.max).optional()])) as Record<LimitName, z.ZodOptional<z.ZodNumber>>)
  .strict();

/** The limits with their defaults; SHX_BAD_CONFIG naming the flag for a value out of bounds. */
export function resolveLimits(given: Partial<Record<LimitName, number>> = {}): HttpLimits & { maxBodyBytes: number } {
  const parsed = LimitsSchema.safeParse(given);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => {
      const spec = LIMITS[i.path[0] as LimitName] as LimitSpec | undefined;
      return spec
        ? `${spec.flag} must be an integer from ${spec.min} to ${spec.max}, got ${JSON.stringify((given as Record<string, unknown>)[i.path[0] as string])}`
        : `unknown limit ${String(i.path[0] ?? i.message)}`;
    });
    throw new ShardexError('SHX_BAD_CONFIG', problems.join('; '));
  }
  const out = {} as Record<LimitName, number>;
  for (const name of Object.keys(LIMITS) as LimitName[]) out[name] = parsed.data[name] ?? LIMITS[name].default;
  return out;
}

/** "the limit is N unit, set by --flag". */
function theLimit(name: LimitName, value: number): string {
  const l = LIMITS[name];
  return `the limit is ${value} ${l.unit}, set by ${l.flag}`;
}

function limitDetails(name: LimitName, value: number): Record<string, unknown> {
  return { limit: name, value, flag: LIMITS[name].flag };
}

/** A refusal: `problem` (what the request has), the limit, `advice`; nothing was done. */
export function limitExceeded(name: LimitName, value: number, problem: string, advice?: string, done = 'nothing was done'): ShardexError {
  const code = name === 'maxBodyBytes' ? 'SHX_BODY_TOO_LARGE' : name === 'maxRequestsPerConnection' ? 'SHX_TOO_MANY_REQUESTS' : 'SHX_LIMIT_EXCEEDED';
  return new ShardexError(code, `${problem}; ${theLimit(name, value)}${advice ? `; ${advice}` : ''}; ${done}`, { details: limitDetails(name, value) });
}

// ---- JSON nesting ---------------------------------------------------------------------------

/**
 * Whether `value` nests deeper than `max` (a scalar is depth 0, `[]` and `{}` depth 1). Walks
 * with its own stack, so a value nested a million deep cannot overflow the call stack; stops
 * at the first level past `max`. Anything deep left alone would overflow the next recursive
 * step that touches it (JSON.stringify in a message, a schema check).
 */
export function nestsDeeper(value: unknown, max: number): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const stack: object[] = [value];
  const depths: number[] = [1];
  while (stack.length > 0) {
    const v = stack.pop()!;
    const d = depths.pop()!;
    if (d > max) return true;
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const x: unknown = v[i];
        if (typeof x === 'object' && x !== null) {
          stack.push(x);
          depths.push(d + 1);
        }
      }
    } else {
      for (const key in v) {
        const x: unknown = (v as Record<string, unknown>)[key];
        if (typeof x === 'object' && x !== null) {
          stack.push(x);
          depths.push(d + 1);
        }
      }
    }
  }
  return false;
}

/** Whether `value`, found at `depth` of its body (the body itself is 1), takes the body deeper than `max`. */
function deeperAt(value: unknown, depth: number, max: number): boolean {
  return typeof value === 'object' && value !== null && nestsDeeper(value, max - depth + 1);
}

/** Throws SHX_LIMIT_EXCEEDED naming `what` (the body, an NDJSON line) when it nests too deep. */
export function checkJsonDepth(value: unknown, max: number, what: string, details?: Record<string, unknown>): void {
  if (!nestsDeeper(value, max)) return;
  const e = limitExceeded('maxJsonDepth', max, `${what} nests deeper than ${max} levels`, undefined, 'nothing was written');
  throw details ? new ShardexError(e.code, e.message, { details: { ...e.details, ...details } }) : e;
}

// ---- documents ------------------------------------------------------------------------------

interface SizeProblem {
  readonly limit: LimitName;
  readonly message: string;
  readonly field?: string;
}

/** A JSON scalar's size as counted for maxDocumentBytes: UTF-8 bytes of a string, the text of a number or boolean. */
function scalarBytes(v: unknown): number {
  if (typeof v === 'string') return Buffer.byteLength(v, 'utf8');
  if (typeof v === 'number' || typeof v === 'boolean') return String(v).length;
  return 0;
}

/** The longest text a number takes (-1.2345678901234567e+308); booleans and null are shorter. */
const MAX_SCALAR_TEXT = 24;

/** A string's UTF-8 bytes are at least its UTF-16 units and at most three times as many. */
function valueProblem(key: string, v: unknown, l: HttpLimits): SizeProblem | undefined {
  if (typeof v !== 'string' || v.length * 3 <= l.maxFieldValueBytes) return undefined;
  const bytes = Buffer.byteLength(v, 'utf8');
  if (bytes <= l.maxFieldValueBytes) return undefined;
  return { limit: 'maxFieldValueBytes', field: key, message: `field '${key}' has a value of ${bytes} UTF-8 bytes; ${theLimit('maxFieldValueBytes', l.maxFieldValueBytes)}` };
}

/**
 * Why `doc` (at `depth` of its body) is over a size limit or nests too deep, or undefined. One
 * pass counts fields, checks each value and sums an upper bound of the size; the exact size is
 * only computed when that bound is over. Values the admission checker refuses (objects, lists
 * of lists) are left to it, once their depth is known to be within the limit.
 */
function documentSizeProblem(doc: Record<string, unknown>, depth: number, l: HttpLimits): SizeProblem | undefined {
  let fields = 0;
  let upper = 0;
  for (const key in doc) {
    if (!Object.hasOwn(doc, key)) continue;
    if (++fields > l.maxFieldsPerDocument) {
      const total = Object.keys(doc).length;
      return { limit: 'maxFieldsPerDocument', message: `has ${total} fields; ${theLimit('maxFieldsPerDocument', l.maxFieldsPerDocument)}` };
    }
    upper += key.length * 3;
    const v = doc[key];
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const item: unknown = v[i];
        if (deeperAt(item, depth + 2, l.maxJsonDepth)) return nestingProblem(l);
        const p = valueProblem(key, item, l);
        if (p) return p;
        upper += typeof item === 'string' ? item.length * 3 : MAX_SCALAR_TEXT;
      }
    } else {
      if (deeperAt(v, depth + 1, l.maxJsonDepth)) return nestingProblem(l);
      const p = valueProblem(key, v, l);
      if (p) return p;
      upper += typeof v === 'string' ? v.length * 3 : MAX_SCALAR_TEXT;
    }
  }
  if (upper <= l.maxDocumentBytes) return undefined;
  let bytes = 0;
  for (const key in doc) {
    if (!Object.hasOwn(doc, key)) continue;
    bytes += Buffer.byteLength(key, 'utf8');
    const v = doc[key];
    if (Array.isArray(v)) for (let i = 0; i < v.length; i++) bytes += scalarBytes(v[i]);
    else bytes += scalarBytes(v);
  }
  if (bytes <= l.maxDocumentBytes) return undefined;
  return { limit: 'maxDocumentBytes', message: `is ${bytes} bytes (UTF-8 of its field names and values); ${theLimit('maxDocumentBytes', l.maxDocumentBytes)}` };
}

function nestingProblem(l: HttpLimits): SizeProblem {
  return { limit: 'maxJsonDepth', message: `nests deeper than ${l.maxJsonDepth} levels; ${theLimit('maxJsonDepth', l.maxJsonDepth)}` };
}

/**
 * The size and nesting limits of a batch, checked whole before admission and before anything is
 * written: one document over a limit refuses the batch, naming its position (and NDJSON line).
 * `docDepth` is where the documents stand in their body: 2 in a JSON array, 1 alone or on an
 * NDJSON line. The bodies of this route are parsed without the generic nesting walk (this pass
 * visits every value anyway), so this is where their depth is checked.
 */
export function checkBatchLimits(docs: readonly unknown[], docDepth: number, l: HttpLimits, lines?: readonly number[]): void {
  if (docs.length > l.maxBatchDocs) throw tooManyDocs(`the request has ${docs.length} documents`, l);
  for (let i = 0; i < docs.length; i++) {
    const doc = docs[i];
    if (typeof doc !== 'object' || doc === null) continue;
    const p = Array.isArray(doc) ? (deeperAt(doc, docDepth, l.maxJsonDepth) ? nestingProblem(l) : undefined) : documentSizeProblem(doc as Record<string, unknown>, docDepth, l);
    if (!p) continue;
    const line = lines?.[i];
    throw new ShardexError('SHX_LIMIT_EXCEEDED', describeProblem(p, i, line), {
      details: { ...limitDetails(p.limit, l[p.limit as keyof HttpLimits]), position: i, ...(line !== undefined && { line }), ...(p.field !== undefined && { field: p.field }) },
    });
  }
}

const tooManyDocs = (problem: string, l: HttpLimits): ShardexError => limitExceeded('maxBatchDocs', l.maxBatchDocs, problem, 'split it into smaller batches', 'nothing was written');

/**
 * Refuses a batch body of more than maxBatchDocs documents before it is parsed (a JSON array's
 * top-level elements, or NDJSON's non-blank lines, counted in one pass over the text): a body of the largest size allowed made of tiny documents (`[{},{},...]`, tens of
 * millions of them) held a node's event loop for most of a minute while it was parsed, or ran
 * it out of memory, before the count was checked. The pass costs about a quarter of the parse
 * (strings are skipped with indexOf): 0.1 ms for a batch of 500 documents of 1 KB.
 */
export function checkBatchCount(text: string, ndjson: boolean, l: HttpLimits): void {
  const n = ndjson ? countLines(text) : countElements(text);
  if (n > l.maxBatchDocs) throw tooManyDocs(`the request has ${n} documents`, l);
}

/** JSON's whitespace. */
const isBlank = (c: number): boolean => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;

/** What String.prototype.trim removes (an NDJSON line of nothing else is skipped, see parseNdjson). */
const isTrimmed = (c: number): boolean =>
  isBlank(c) || c === 0x0b || c === 0x0c || c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff;

/** Lines of `text` that hold more than whitespace: the documents parseNdjson reads. */
export function countLines(text: string): number {
  let n = 0;
  let filled = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x0a) {
      if (filled) n++;
      filled = false;
    } else if (!filled && !isTrimmed(c)) filled = true;
  }
  return filled ? n + 1 : n;
}

/** The top-level elements of a JSON array text (0 for anything else: the parser says what is wrong). */
export function countElements(text: string): number {
  let i = 0;
  while (i < text.length && isBlank(text.charCodeAt(i))) i++;
  if (text.charCodeAt(i) !== 0x5b) return 0;
  let depth = 0;
  let n = 0;
  let any = false;
  for (; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // A string: on to its closing quote (one not escaped by an odd run of backslashes).
      let end = text.indexOf('"', i + 1);
      for (;;) {
        if (end < 0) return any ? n + 1 : n;
        let k = end - 1;
        while (text.charCodeAt(k) === 0x5c) k--;
        if ((end - 1 - k) % 2 === 0) break;
        end = text.indexOf('"', end + 1);
      }
      i = end;
      if (depth === 1) any = true;
    } else if (c === 0x5b || c === 0x7b) {
      if (depth === 1) any = true;
      depth++;
    } else if (c === 0x5d || c === 0x7d) {
      if (--depth === 0) break;
    } else if (c === 0x2c && depth === 1) {
      n++;
    } else if (depth === 1 && !isBlank(c)) any = true;
  }
  return any ? n + 1 : n;
}

// ---- queries --------------------------------------------------------------------------------

/** Leaf clauses of a parsed query (a bool counts its clauses, not itself; a stop-word clause nothing). */
export function countClauses(q: Query): number {
  let n = 0;
  const stack: Query[] = [q];
  while (stack.length > 0) {
    const x = stack.pop()!;
    if (x.kind === 'bool') {
      for (const c of x.must) stack.push(c);
      for (const c of x.should) stack.push(c);
      for (const c of x.mustNot) stack.push(c);
    } else if (x.kind !== 'none') n++;
  }
  return n;
}

export interface QueryInput {
  readonly q?: string | undefined;
  readonly filters?: readonly string[] | undefined;
}

/**
 * Query length and clause count of a search or export. The query is parsed here against the
 * collection's schema only to count its clauses (a syntax error is the same SHX_BAD_QUERY the
 * shards would give); each shard parses it again as it always did.
 */
export function checkQueryLimits(input: QueryInput, schema: CollectionSchema, l: HttpLimits): void {
  const texts: Array<[string, string]> = [];
  if (input.q !== undefined) texts.push(['q', input.q]);
  for (const [i, f] of (input.filters ?? []).entries()) texts.push([input.filters!.length > 1 ? `filter ${i + 1}` : 'filter', f]);
  for (const [what, text] of texts) {
    if (text.length > l.maxQueryLength) throw limitExceeded('maxQueryLength', l.maxQueryLength, `${what} is ${text.length} characters long`);
  }
  let clauses = 0;
  for (const [, text] of texts) clauses += countClauses(parseQuery(text, schema));
  if (clauses > l.maxQueryClauses) {
    throw limitExceeded('maxQueryClauses', l.maxQueryClauses, `the search has ${clauses} clauses (query and filters)`, 'use fewer terms, or an ids or range query');
  }
}

/** offset + limit of a search page, at most maxResultWindow (never more than the index's MAX_RESULT_WINDOW). */
export function checkResultWindow(offset: number | undefined, limit: number | undefined, l: HttpLimits): void {
  const window = (offset ?? 0) + (limit ?? DEFAULT_LIMIT);
  if (window > l.maxResultWindow) {
    throw limitExceeded('maxResultWindow', l.maxResultWindow, `offset + limit is ${window}`, 'page deeper with GET /api/collections/:c/export, which has no window');
  }
}

// ---- connections ----------------------------------------------------------------------------

/**
 * The onRequest hook bounding the requests in flight on one connection (HTTP/1.1 pipelining:
 * node parses and starts every request of a pipelined burst at once). Counted synchronously as
 * each request arrives, released when its response closes (sent, or the client gone).
 */
export function limitRequestsPerConnection(max: number) {
  const inFlight = new WeakMap<Socket, number>();
  return (req: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    const socket = req.raw.socket;
    const n = (inFlight.get(socket) ?? 0) + 1;
    if (n > max) {
      done(limitExceeded('maxRequestsPerConnection', max, `this connection has ${n} requests in flight`, 'wait for answers before sending more, or open another connection'));
      return;
    }
    inFlight.set(socket, n);
    reply.raw.once('close', () => inFlight.set(socket, (inFlight.get(socket) ?? 1) - 1));
    done();
  };
}
