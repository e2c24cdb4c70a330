// A replica's search index on disk: one immutable file holding a whole ShardIndex as it was at one
// point of the replica's change journal (`seq`), written beside a temporary name, synced, then
// renamed into place; a newer file replaces the older one. At open the replica loads it and
// replays only the changes journaled after `seq` (src/distrib/index-persistence.ts).
//
// Layout: the magic, the header's length and CRC-32, the header (JSON: format, seq, the
// collection's schema fingerprint, the index's small values, and the table of sections), then the
// sections, each 8-byte aligned with its own CRC-32: typed arrays as they are in memory (little
// endian), string lists as UTF-16 text with an Int32 table of starts. Loading checks every
// checksum and uses the file's buffer as the index's arrays (no copy, outside the JS heap).
import { open, readFile, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { crc32 } from 'node:zlib';
import { ShardexError } from '../errors.js';
import { ShardIndex, type ShardIndexOptions, type ShardIndexState } from './shard-index.js';
import type { CollectionSchema } from './schema.js';

const MAGIC = Buffer.from('SHXSEG01', 'latin1');
/** Bumped whenever the layout of ShardIndexState changes: older files are rebuilt, not misread. */
export const SEGMENT_FORMAT = 1;
const PREFIX = MAGIC.length + 8;

type ArrayKind = 'Int32Array' | 'Float64Array' | 'Uint8Array';
const VIEWS = { Int32Array, Float64Array, Uint8Array } as const;

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
  /** The state with every typed array replaced by {"$a": section} and every string list by {"$s": [chars, starts]}. */
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
  throw new ShardexError('SHX_INTERNAL', `a segment cannot hold a ${a.constructor.name}`);
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
  const packed = pack(state);
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
export function decodeSegment(file: Buffer): { state: ShardIndexState; info: SegmentInfo } {
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
  return { state: unpack(header.state) as ShardIndexState, info: { seq: header.seq, fingerprint: header.fingerprint } };
}

/** Writes the index's state as the segment file `path`: a temporary file, synced, renamed over it, the directory synced. */
export async function writeSegment(path: string, state: ShardIndexState, info: SegmentInfo): Promise<number> {
  const chunks = encodeSegment(state, info);
  const tmp = `${path}.tmp`;
  const fh = await open(tmp, 'w');
  let size = 0;
  try {
    for (const c of chunks) size += c.length;
    await fh.writev(chunks);
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

export type SegmentLoad =
  | { readonly ok: true; readonly index: ShardIndex; readonly seq: number; readonly bytes: number }
  | { readonly ok: false; readonly missing: boolean; readonly problem: string };

/** Loads the segment file `path` for `schema` (its fingerprint `fingerprint`); says why when it cannot. */
export async function loadSegment(path: string, schema: CollectionSchema, fingerprint: string, options: ShardIndexOptions = {}): Promise<SegmentLoad> {
  let file: Buffer;
  try {
    file = await readFile(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { ok: false, missing: true, problem: 'no segment file' };
    return { ok: false, missing: false, problem: `cannot read ${path}: ${(err as Error).message}` };
  }
  try {
    const { state, info } = decodeSegment(file);
    if (info.fingerprint !== fingerprint) return { ok: false, missing: false, problem: 'it was written for another schema or analyzer' };
    return { ok: true, index: ShardIndex.restore(schema, state, options), seq: info.seq, bytes: file.length };
  } catch (err) {
    return { ok: false, missing: false, problem: err instanceof SegmentProblem || err instanceof ShardexError ? err.message : `it does not decode (${(err as Error).message})` };
  }
}

/** Removes the segment file (before the replica's data is replaced); no error when there is none. */
export async function removeSegment(path: string): Promise<void> {
  await rm(path, { force: true });
  await rm(`${path}.tmp`, { force: true });
}
