// A replica's search index on disk: immutable segment files, each holding one ShardIndex (a
// segment of the replica's SegmentedIndex), and a commit file naming the segments that make the
// index at one point of the replica's change journal (`seq`) with the ids deleted from each since
// it was written. Every file is written beside a temporary name, synced, then renamed into place.
// At open the replica loads the commit's segments and replays only the changes journaled after
// `seq` (src/distrib/index-persistence.ts).
//
// Layout: the magic, the header's length and CRC-32, the header (JSON: format, seq, the
// collection's schema fingerprint, the index's small values, and the table of sections), then the
// sections, each 8-byte aligned with its own CRC-32: typed arrays as they are in memory (little
// endian), string lists as UTF-16 text with an Int32 table of starts, each inverted field's terms
// as its TermTable's arrays (ready for lookups: nothing is indexed or made a string at open), the
// document ids as an IdTable (their UTF-16 code units, starts, and a hash table), each inverted field's
// postings and positions packed per term and the forward index packed per document
// (postings-codec.ts; most of a file's bytes). Loading checks every checksum and uses the file's
// buffer as the index's arrays (no copy, outside the JS heap); a term's packed postings are
// decoded when the term is first read, a document's forward entries each time they are read, its
// id when it is first read (a lookup by id reads the table in place).
import { open, readFile, rename } from 'node:fs/promises';
import { dirname } from 'node:path';
import { crc32 } from 'node:zlib';
import { ShardexError } from '../errors.js';
import { IdTable, IdTableProblem } from './id-table.js';
import type { PackedInvertedState } from './inverted-field.js';
import { TermTable, TermTableProblem } from './term-table.js';
import { packForward, packPostings, type PackedForward } from './postings-codec.js';
import { ShardIndex, type ShardIndexOptions, type ShardIndexState, type SlotState } from './shard-index.js';
import type { CollectionSchema } from './schema.js';

const MAGIC = Buffer.from('SHXSEG01', 'latin1');
/** Bumped whenever the layout of ShardIndexState changes: older files are rebuilt, not misread. */
export const SEGMENT_FORMAT = 5;
const PREFIX = MAGIC.length + 8;

type ArrayKind = 'Int32Array' | 'Float64Array' | 'Uint8Array' | 'Uint16Array';
const VIEWS = { Int32Array, Float64Array, Uint8Array, Uint16Array } as const;

interface SectionEntry {
  readonly kind: ArrayKind;
  readonly offset: number;
  readonly bytes: number;
  readonly crc: number;
}

interface Header {
  readonly format: number;
  readonly seq: number;
  readonly fingerprint: string;
  /**
   * The state with every typed array replaced by {"$a": section}, every string list by {"$s":
   * [chars, starts]}, each term dictionary by {"$d": [slots, chars, starts, keys]} (TermTable's
   * arrays) and the ids by {"$t": [chars, starts, slots]} (IdTable's).
   */
  readonly state: unknown;
  readonly sections: readonly SectionEntry[];
}

/** What a segment file holds besides the index. */
export interface SegmentInfo {
  /** The change-journal position the index holds every change up to. */
  readonly seq: number;
  /** Identifies the collection's schema and analyzer: a file written for another one is not loaded. */
  readonly fingerprint: string;
}

const pad8 = (n: number): number => (n + 7) & ~7;

function kindOf(a: ArrayBufferView): ArrayKind {
  if (a instanceof Int32Array) return 'Int32Array';
  if (a instanceof Float64Array) return 'Float64Array';
  if (a instanceof Uint8Array) return 'Uint8Array';
  if (a instanceof Uint16Array) return 'Uint16Array';
  throw new ShardexError('SHX_INTERNAL', `a segment cannot hold a ${a.constructor.name}`);
}

/** An inverted field's postings and positions packed, its terms as a dictionary (the other slots as they are). */
function packSlot(slot: SlotState): SlotState<PackedInvertedState> {
  if (slot.kind !== 'inverted') return slot;
  const { postingStarts, postings, positionStarts, positions, terms, ...rest } = slot.state;
  const dict = new TermTable();
  dict.adopt(terms);
  return { ...slot, state: { ...rest, terms: dict, ...packPostings({ postingStarts, postings, positionStarts, positions }, slot.withPositions) } };
}

/** The bytes of `state` as a segment file (a list of buffers to write in order; the arrays are not copied). */
export function encodeSegment(state: ShardIndexState, info: SegmentInfo): Buffer[] {
  const chunks: Buffer[] = [];
  const sections: SectionEntry[] = [];
  let offset = 0;
  const add = (a: ArrayBufferView): number => {
    const bytes = Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    sections.push({ kind: kindOf(a), offset, bytes: bytes.length, crc: crc32(bytes) });
    chunks.push(bytes);
    const padded = pad8(bytes.length);
    if (padded > bytes.length) chunks.push(Buffer.alloc(padded - bytes.length));
    offset += padded;
    return sections.length - 1;
  };
  const pack = (v: unknown): unknown => {
    if (ArrayBuffer.isView(v)) return { $a: add(v) };
    if (v instanceof TermTable) {
      const a = v.arrays();
      return { $d: [add(a.slots), add(a.chars), add(a.starts), add(a.keys)] };
    }
    if (Array.isArray(v)) {
      if (v.length > 0 && v.every((x) => typeof x === 'string')) {
        const strings = v as string[];
        const starts = new Int32Array(strings.length + 1);
        for (let i = 0; i < strings.length; i++) starts[i + 1] = starts[i] + strings[i]!.length;
        const chars = Buffer.from(strings.join(''), 'utf16le');
        return { $s: [add(chars), add(starts)] };
      }
      return v.map(pack);
    }
    if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, pack(x)]));
    return v;
  };
  const { forwardStarts, forward, ids, ...rest } = state;
  const table = IdTable.build(ids);
  const packed = pack({ ...rest, ...packForward({ forwardStarts, forward }), slots: state.slots.map(packSlot) }) as Record<string, unknown>;
  packed.ids = { $t: [add(table.chars), add(table.starts), add(table.slots)] };
  const header: Header = { format: SEGMENT_FORMAT, seq: info.seq, fingerprint: info.fingerprint, state: packed, sections };
  const headerBytes = Buffer.from(JSON.stringify(header), 'utf8');
  const prefix = Buffer.alloc(PREFIX);
  MAGIC.copy(prefix, 0);
  prefix.writeUInt32LE(headerBytes.length, MAGIC.length);
  prefix.writeUInt32LE(crc32(headerBytes), MAGIC.length + 4);
  const headPadding = pad8(PREFIX + headerBytes.length) - (PREFIX + headerBytes.length);
  return [prefix, headerBytes, Buffer.alloc(headPadding), ...chunks];
}

/** Why a segment file cannot be used (it is then rebuilt from the documents). */
export class SegmentProblem extends Error {}

/** The state and info of a segment file's bytes; throws SegmentProblem when anything does not check. */
export function decodeSegment(file: Buffer): { state: ShardIndexState<PackedInvertedState, PackedForward, IdTable>; info: SegmentInfo } {
  if (file.length < PREFIX || !file.subarray(0, MAGIC.length).equals(MAGIC)) throw new SegmentProblem('not a Shardex segment file (bad magic)');
  const headerLength = file.readUInt32LE(MAGIC.length);
  if (PREFIX + headerLength > file.length) throw new SegmentProblem(`truncated: the header needs ${headerLength} bytes, the file has ${file.length - PREFIX}`);
  const headerBytes = file.subarray(PREFIX, PREFIX + headerLength);
  if (crc32(headerBytes) !== file.readUInt32LE(MAGIC.length + 4)) throw new SegmentProblem('the header checksum does not match');
  const header = JSON.parse(headerBytes.toString('utf8')) as Header;
  if (header.format !== SEGMENT_FORMAT) throw new SegmentProblem(`written in segment format ${header.format}, this version reads ${SEGMENT_FORMAT}`);
  const base = pad8(PREFIX + headerLength);
  // Typed arrays need aligned offsets: a buffer that does not start on 8 bytes is copied once.
  const bytes = file.byteOffset % 8 === 0 ? file : Buffer.from(file);
  const views = header.sections.map((s, i) => {
    const start = base + s.offset;
    if (start + s.bytes > bytes.length) throw new SegmentProblem(`truncated: section ${i} ends at byte ${start + s.bytes}, the file has ${bytes.length}`);
    const raw = bytes.subarray(start, start + s.bytes);
    if (crc32(raw) !== s.crc) throw new SegmentProblem(`the checksum of section ${i} does not match`);
    const View = VIEWS[s.kind];
    if (View === undefined) throw new SegmentProblem(`section ${i} has an unknown type ${String(s.kind)}`);
    return { raw, array: new View(bytes.buffer as ArrayBuffer, bytes.byteOffset + start, s.bytes / View.BYTES_PER_ELEMENT) };
  });
  const unpack = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(unpack);
    if (v !== null && typeof v === 'object') {
      if ('$a' in v) return views[(v as { $a: number }).$a]!.array;
      if ('$d' in v) {
        const [slots, chars, starts, keys] = (v as { $d: [number, number, number, number] }).$d.map((i) => views[i]?.array);
        if (!(slots instanceof Int32Array) || !(chars instanceof Uint16Array) || !(starts instanceof Int32Array) || !(keys instanceof Float64Array)) throw new SegmentProblem('a term dictionary does not have the sections it needs');
        try {
          return TermTable.fromArrays({ slots, chars, starts, keys });
        } catch (err) {
          if (err instanceof TermTableProblem) throw new SegmentProblem(err.message);
          throw err;
        }
      }
      if ('$t' in v) {
        const [chars, starts, slots] = (v as { $t: [number, number, number] }).$t.map((i) => views[i]?.array);
        if (!(chars instanceof Uint16Array) || !(starts instanceof Int32Array) || !(slots instanceof Int32Array)) throw new SegmentProblem('its id table does not have the sections it needs');
        try {
          return new IdTable({ chars, starts, slots });
        } catch (err) {
          if (err instanceof IdTableProblem) throw new SegmentProblem(err.message);
          throw err;
        }
      }
      if ('$s' in v) {
        const [charsAt, startsAt] = (v as { $s: [number, number] }).$s;
        const text = views[charsAt]!.raw.toString('utf16le');
        const starts = views[startsAt]!.array as Int32Array;
        const out = new Array<string>(starts.length - 1);
        for (let i = 0; i < out.length; i++) out[i] = text.slice(starts[i], starts[i + 1]);
        return out;
      }
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, unpack(x)]));
    }
    return v;
  };
  const state = unpack(header.state) as ShardIndexState<PackedInvertedState, PackedForward, IdTable>;
  if (!(state.ids instanceof IdTable)) throw new SegmentProblem('it has no id table');
  return { state, info: { seq: header.seq, fingerprint: header.fingerprint } };
}

/** Writes `chunks` as the file `path`: a temporary file, synced, renamed over it, the directory synced. Returns the bytes written. */
async function writeDurably(path: string, chunks: readonly Buffer[]): Promise<number> {
  const tmp = `${path}.tmp`;
  const fh = await open(tmp, 'w');
  let size = 0;
  try {
    for (const c of chunks) size += c.length;
    await fh.writev(chunks as Buffer[]);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, path);
  const dir = await open(dirname(path), 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
  return size;
}

/** Writes the index's state as the segment file `path` (durably: see writeDurably). */
export function writeSegment(path: string, state: ShardIndexState, info: SegmentInfo): Promise<number> {
  return writeDurably(path, encodeSegment(state, info));
}

// ---- the commit file: which segments make the index, and what was deleted from each ----

const COMMIT_MAGIC = Buffer.from('SHXCMT01', 'latin1');

/** A replica index's commit point: its segments (oldest first) and the change-journal position they hold everything up to. */
export interface CommitInfo {
  readonly seq: number;
  readonly fingerprint: string;
  /** The number the next segment file gets (names are never reused). */
  readonly nextFile: number;
  /** Each segment's file name and the ids deleted from it since it was written. */
  readonly segments: readonly { readonly name: string; readonly deleted: readonly string[] }[];
}

export function encodeCommit(info: CommitInfo): Buffer {
  const body = Buffer.from(JSON.stringify({ format: SEGMENT_FORMAT, ...info }), 'utf8');
  const prefix = Buffer.alloc(COMMIT_MAGIC.length + 8);
  COMMIT_MAGIC.copy(prefix, 0);
  prefix.writeUInt32LE(body.length, COMMIT_MAGIC.length);
  prefix.writeUInt32LE(crc32(body), COMMIT_MAGIC.length + 4);
  return Buffer.concat([prefix, body]);
}

/** The commit a commit file's bytes hold; throws SegmentProblem when anything does not check. */
export function decodeCommit(file: Buffer): CommitInfo {
  const head = COMMIT_MAGIC.length + 8;
  if (file.length < head || !file.subarray(0, COMMIT_MAGIC.length).equals(COMMIT_MAGIC)) throw new SegmentProblem('not a Shardex index commit file (bad magic)');
  const length = file.readUInt32LE(COMMIT_MAGIC.length);
  if (head + length !== file.length) throw new SegmentProblem(`truncated or extended: the commit says ${length} bytes, the file has ${file.length - head}`);
  const body = file.subarray(head);
  if (crc32(body) !== file.readUInt32LE(COMMIT_MAGIC.length + 4)) throw new SegmentProblem('the commit checksum does not match');
  const c = JSON.parse(body.toString('utf8')) as CommitInfo & { format: number };
  if (c.format !== SEGMENT_FORMAT) throw new SegmentProblem(`written in segment format ${c.format}, this version reads ${SEGMENT_FORMAT}`);
  return { seq: c.seq, fingerprint: c.fingerprint, nextFile: c.nextFile, segments: c.segments };
}

export function writeCommit(path: string, info: CommitInfo): Promise<number> {
  return writeDurably(path, [encodeCommit(info)]);
}

/** Why a file could not be used, or that there is none. */
export interface FileProblem {
  readonly ok: false;
  readonly missing: boolean;
  readonly problem: string;
}

/** Reads the file `path` and decodes it with `decode`, whose SegmentProblem or ShardexError says what is wrong with it. */
async function readDecoded<T>(path: string, what: string, decode: (file: Buffer) => T): Promise<{ readonly ok: true; readonly value: T; readonly bytes: number } | FileProblem> {
  let file: Buffer;
  try {
    file = await readFile(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { ok: false, missing: true, problem: `no ${what} file` };
    return { ok: false, missing: false, problem: `cannot read ${path}: ${(err as Error).message}` };
  }
  try {
    return { ok: true, value: decode(file), bytes: file.length };
  } catch (err) {
    return { ok: false, missing: false, problem: err instanceof SegmentProblem || err instanceof ShardexError ? err.message : `the ${what} file does not decode (${(err as Error).message})` };
  }
}

export type CommitRead = { readonly ok: true; readonly info: CommitInfo } | FileProblem;

export async function readCommit(path: string): Promise<CommitRead> {
  const read = await readDecoded(path, 'commit', decodeCommit);
  return read.ok ? { ok: true, info: read.value } : read;
}

export type SegmentLoad = { readonly ok: true; readonly index: ShardIndex; readonly seq: number; readonly bytes: number } | FileProblem;

/** Loads the segment file `path` for `schema` (its fingerprint `fingerprint`); says why when it cannot. */
export async function loadSegment(path: string, schema: CollectionSchema, fingerprint: string, options: ShardIndexOptions = {}): Promise<SegmentLoad> {
  const read = await readDecoded(path, 'segment', (file) => {
    const { state, info } = decodeSegment(file);
    if (info.fingerprint !== fingerprint) throw new SegmentProblem('it was written for another schema or analyzer');
    return { index: ShardIndex.restore(schema, state, options), seq: info.seq };
  });
  return read.ok ? { ok: true, index: read.value.index, seq: read.value.seq, bytes: read.bytes } : read;
}
