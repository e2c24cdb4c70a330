// What travels between nodes on the update path (the gRPC layer only encodes it).
import { ShardexError } from '../errors.js';
import { docText, type Doc } from '../ulog/index.js';

/** Solr's DistribPhase: NONE from a client, TOLEADER forwarded to a leader, FROMLEADER to replicas. */
export type Phase = 'NONE' | 'TOLEADER' | 'FROMLEADER';

/** One update op on the wire; `v` is set by the leader (absent on TOLEADER). doc null = delete. */
export interface WireOp {
  readonly id: string;
  readonly v?: number;
  readonly doc: Doc | null;
  /**
   * JSON.stringify(doc), once known: the document crosses every hop and lands in every replica's
   * log as this same text, so it is serialized once per request, not once per hop and store.
   */
  readonly text?: string;
}

export interface ShardUpdate {
  readonly collection: string;
  readonly shard: string;
  readonly phase: 'TOLEADER' | 'FROMLEADER';
  /** The sender's leadership epoch (FROMLEADER); 0 otherwise. */
  readonly epoch: number;
  readonly ops: readonly WireOp[];
  readonly minRf: number;
  /** Name of the sending node. */
  readonly from: string;
  /** The client request this update serves (src/request-id.ts), for the receiver's logs. */
  readonly requestId?: string | undefined;
}

export interface ShardUpdateResult {
  /** Achieved replication factor: the leader plus every replica that acknowledged. */
  readonly rf: number;
  /** Versions assigned by the leader, by id (TOLEADER). */
  readonly versions?: Record<string, number>;
  /** Ops applied (FROMLEADER: those newer than the stored version). */
  readonly applied?: number;
}

// Ops as bytes: a JSON header line [[id, version or null, text length or -1 for a delete], ...],
// then the documents' texts back to back. The receiver keeps each text (a slice of the frame) as
// the op's `text` and parses it for the document, so no hop serializes a document again.

/** Encodes ops for the wire (see above). */
export function encodeOps(ops: readonly WireOp[]): Buffer {
  const header: [string, number | null, number][] = new Array(ops.length);
  const texts: string[] = [];
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i]!;
    const text = docText(op);
    header[i] = [op.id, op.v ?? null, text === undefined ? -1 : text.length];
    if (text !== undefined) texts.push(text);
  }
  return Buffer.from(`${JSON.stringify(header)}\n${texts.join('')}`, 'utf8');
}

/** Decodes encodeOps() bytes; a malformed frame is SHX_BAD_REQUEST and yields nothing. */
export function decodeOps(bytes: Buffer | undefined): WireOp[] {
  if (bytes === undefined || bytes.length === 0) return [];
  const s = bytes.toString('utf8');
  const bad = (why: string): ShardexError => new ShardexError('SHX_BAD_REQUEST', `malformed update ops from a peer: ${why}`);
  const nl = s.indexOf('\n');
  if (nl < 0) throw bad('no header line');
  let header: unknown;
  try {
    header = JSON.parse(s.slice(0, nl));
  } catch {
    throw bad('the header is not JSON');
  }
  if (!Array.isArray(header)) throw bad('the header is not an array');
  const ops: WireOp[] = new Array(header.length);
  let at = nl + 1;
  for (let i = 0; i < header.length; i++) {
    const h: unknown = header[i];
    if (!Array.isArray(h) || typeof h[0] !== 'string' || (h[1] !== null && typeof h[1] !== 'number') || !Number.isInteger(h[2]) || (h[2] as number) < -1) {
      throw bad(`entry ${i} is not [id, version, length]`);
    }
    const [id, v, len] = h as [string, number | null, number];
    let doc: Doc | null = null;
    let text: string | undefined;
    if (len >= 0) {
      if (at + len > s.length) throw bad(`the text of '${id}' runs past the end`);
      text = s.slice(at, at + len);
      at += len;
      try {
        doc = JSON.parse(text) as Doc;
      } catch {
        throw bad(`the document '${id}' is not JSON`);
      }
      if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw bad(`the document '${id}' is not an object`);
    }
    if (v === null) ops[i] = text === undefined ? { id, doc } : { id, doc, text };
    else ops[i] = text === undefined ? { id, v, doc } : { id, v, doc, text };
  }
  if (at !== s.length) throw bad('bytes after the last document');
  return ops;
}
