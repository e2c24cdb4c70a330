// A replica's search index on disk: immutable segment files, each holding one ShardIndex (a
// segment of the replica's SegmentedIndex), and a commit file naming the segments that make the
// index at one point of the replica's change journal (`seq`) with the ids deleted from each since
// it was written. A segment file is written under its own new name and synced; the commit is
// written beside a temporary name, synced, renamed into place and its directory synced, so that a
// commit names only files that are whole on disk (src/durable-file.ts).
// At open the replica loads the commit's segments and replays only the changes journaled after
// `seq` (src/distrib/index-persistence.ts).
//
// Layout: the magic, the header's length and CRC-32, the header (JSON: format, seq, the
// collection's schema fingerprint, the index's small values, and the table of sections), then the
// sections, each 8-byte aligned with its own CRC-32: typed arrays as they are in memory (little
// endian), string lists as UTF-16 text with an Int32 table of starts, each inverted field's terms
// as its TermTable's arrays (ready for lookups: nothing is indexed or made a string at open), the
// document ids as an IdTable (their UTF-16 code units, starts, and a hash table), each inverted field's
// postings and positions packed per term, with a CRC-32 per term (postings-codec.ts; most of a
// file's bytes). There is no forward index (which terms each document holds): a document of a
// loaded segment is removed late (InvertedField.removeLateDoc). Loading checks every checksum and
// uses the file's buffer as the index's arrays (no copy, outside the JS heap); a term's packed
// postings are decoded when the term is first read, a document's id when it is first read (a
// lookup by id reads the table in place).
import { closeSync, openSync, readSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { crc32 } from 'node:zlib';
import { replaceDurably, writeSynced } from '../durable-file.js';
import { ShardexError } from '../errors.js';
import { IdTable, IdTableProblem } from './id-table.js';
import type { PackedInvertedState } from './inverted-field.js';
import { TermTable, TermTableProblem, type TermTableArrays } from './term-table.js';
import { packPostings, type ByteSource } from './postings-codec.js';
import { SegmentProblem } from './segment-problem.js';
import { ShardIndex, type ShardIndexOptions, type ShardIndexState, type SlotState } from './shard-index.js';
import type { CollectionSchema } from './schema.js';

const MAGIC = Buffer.from('SHXSEG01', 'latin1');
/** Bumped whenever the layout of ShardIndexState changes: older files are rebuilt, not misread. */
export const SEGMENT_FORMAT = 7;
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
  const { ids, ...rest } = state;
  const table = IdTable.build(ids);
  const packed = pack({ ...rest, slots: state.slots.map(packSlot) }) as Record<string, unknown>;
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

export { SegmentProblem };

/** A section as the state gets it: a typed array over bytes in memory, or packed postings left in the file. */
type SectionView = { readonly array: ArrayBufferView } | { readonly source: ByteSource };

const arrayOf = (views: readonly SectionView[], i: number): ArrayBufferView | undefined => {
  const v = views[i];
  return v !== undefined && 'array' in v ? v.array : undefined;
};

/** The header length the prefix `head` announces, checked against the file's length. */
function headerLengthOf(head: Buffer, fileLength: number): number {
  if (head.length < PREFIX || !head.subarray(0, MAGIC.length).equals(MAGIC)) throw new SegmentProblem('not a Shardex segment file (bad magic)');
  const headerLength = head.readUInt32LE(MAGIC.length);
  if (PREFIX + headerLength > fileLength) throw new SegmentProblem(`truncated: the header needs ${headerLength} bytes, the file has ${fileLength - PREFIX}`);
  return headerLength;
}

function parseHeader(head: Buffer, headerBytes: Buffer): Header {
  if (crc32(headerBytes) !== head.readUInt32LE(MAGIC.length + 4)) throw new SegmentProblem('the header checksum does not match');
  const header = JSON.parse(headerBytes.toString('utf8')) as Header;
  if (header.format !== SEGMENT_FORMAT) throw new SegmentProblem(`written in segment format ${header.format}, this version reads ${SEGMENT_FORMAT}`);
  return header;
}

/** Section i of `header` over `raw` (its bytes, 8-byte aligned), its checksum checked. */
function viewOf(header: Header, i: number, raw: Buffer): SectionView {
  const s = header.sections[i]!;
  if (crc32(raw) !== s.crc) throw new SegmentProblem(`the checksum of section ${i} does not match`);
  const View = VIEWS[s.kind];
  if (View === undefined) throw new SegmentProblem(`section ${i} has an unknown type ${String(s.kind)}`);
  return { array: new View(raw.buffer as ArrayBuffer, raw.byteOffset, s.bytes / View.BYTES_PER_ELEMENT) };
}

/** The state and info of a segment file's bytes; throws SegmentProblem when anything does not check. */
export function decodeSegment(file: Buffer): { state: ShardIndexState<PackedInvertedState, IdTable>; info: SegmentInfo } {
  const headerLength = headerLengthOf(file, file.length);
  const header = parseHeader(file, file.subarray(PREFIX, PREFIX + headerLength));
  const base = pad8(PREFIX + headerLength);
  // Typed arrays need aligned offsets: a buffer that does not start on 8 bytes is copied once.
  const bytes = file.byteOffset % 8 === 0 ? file : Buffer.from(file);
  const views = header.sections.map((s, i) => {
    const start = base + s.offset;
    if (start + s.bytes > bytes.length) throw new SegmentProblem(`truncated: section ${i} ends at byte ${start + s.bytes}, the file has ${bytes.length}`);
    return viewOf(header, i, bytes.subarray(start, start + s.bytes));
  });
  return stateOf(header, views);
}

/** The state `header` describes over its sections' `views`. */
function stateOf(header: Header, views: readonly SectionView[]): { state: ShardIndexState<PackedInvertedState, IdTable>; info: SegmentInfo } {
  const unpack = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(unpack);
    if (v !== null && typeof v === 'object') {
      if ('$a' in v) {
        const view = views[(v as { $a: number }).$a]!;
        return 'source' in view ? view.source : view.array;
      }
      if ('$d' in v) {
        const [slots, chars, starts, keys] = (v as { $d: [number, number, number, number] }).$d.map((i) => arrayOf(views, i));
        if (!(slots instanceof Int32Array) || !(chars instanceof Uint16Array) || !(starts instanceof Int32Array) || !(keys instanceof Float64Array)) throw new SegmentProblem('a term dictionary does not have the sections it needs');
        try {
          return TermTable.fromArrays({ slots, chars, starts, keys } as TermTableArrays);
        } catch (err) {
          if (err instanceof TermTableProblem) throw new SegmentProblem(err.message);
          throw err;
        }
      }
      if ('$t' in v) {
        const [chars, starts, slots] = (v as { $t: [number, number, number] }).$t.map((i) => arrayOf(views, i));
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
        const chars = arrayOf(views, charsAt);
        const starts = arrayOf(views, startsAt);
        if (!(chars instanceof Uint8Array) || !(starts instanceof Int32Array)) throw new SegmentProblem('a string list does not have the sections it needs');
        const text = Buffer.from(chars.buffer, chars.byteOffset, chars.byteLength).toString('utf16le');
        const out = new Array<string>(starts.length - 1);
        for (let i = 0; i < out.length; i++) out[i] = text.slice(starts[i], starts[i + 1]);
        return out;
      }
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, unpack(x)]));
    }
    return v;
  };
  const state = unpack(header.state) as ShardIndexState<PackedInvertedState, IdTable>;
  if (!(state.ids instanceof IdTable)) throw new SegmentProblem('it has no id table');
  return { state, info: { seq: header.seq, fingerprint: header.fingerprint } };
}

/**
 * Writes the index's state as the segment file `path`, synced. As Lucene does, the file is
 * written under its own name, a new one: only a commit names it (writeCommit, which syncs the
 * directory after its rename, so the segment's name is durable before any commit names it), and
 * a file that no commit names, whole or not, is removed when the index opens.
 */
export function writeSegment(path: string, state: ShardIndexState, info: SegmentInfo): Promise<number> {
  return writeSynced(path, encodeSegment(state, info));
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
  return replaceDurably(path, [encodeCommit(info)]);
}

/** Why a file could not be used, or that there is none. */
export interface FileProblem {
  readonly ok: false;
  readonly missing: boolean;
  readonly problem: string;
}

/**
 * Opens the file `path` and decodes it with `decode` (given the open file and its size), whose
 * SegmentProblem or ShardexError says what is wrong with it; the file is closed after.
 */
async function readDecoded<T>(path: string, what: string, decode: (file: FileHandle, size: number) => Promise<T>): Promise<{ readonly ok: true; readonly value: T; readonly bytes: number } | FileProblem> {
  let file: FileHandle;
  try {
    file = await open(path, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { ok: false, missing: true, problem: `no ${what} file` };
    return { ok: false, missing: false, problem: `cannot read ${path}: ${(err as Error).message}` };
  }
  try {
    const { size } = await file.stat();
    return { ok: true, value: await decode(file, size), bytes: size };
  } catch (err) {
    if (err instanceof SegmentProblem || err instanceof ShardexError) return { ok: false, missing: false, problem: err.message };
    return { ok: false, missing: false, problem: (err as NodeJS.ErrnoException).code !== undefined ? `cannot read ${path}: ${(err as Error).message}` : `the ${what} file does not decode (${(err as Error).message})` };
  } finally {
    await file.close().catch(() => undefined);
  }
}

/** Fills `out` with the file's bytes from `position` (SegmentProblem when the file ends first). */
async function readInto<T extends Uint8Array>(file: FileHandle, out: T, position: number): Promise<T> {
  for (let at = 0; at < out.length; ) {
    const { bytesRead } = await file.read(out, at, out.length - at, position + at);
    if (bytesRead === 0) throw new SegmentProblem(`truncated: the file ends at byte ${position + at}, ${out.length - at} bytes short`);
    at += bytesRead;
  }
  return out;
}

export type CommitRead = { readonly ok: true; readonly info: CommitInfo } | FileProblem;

export async function readCommit(path: string): Promise<CommitRead> {
  const read = await readDecoded(path, 'commit', async (file, size) => decodeCommit(await readInto(file, Buffer.allocUnsafe(size), 0)));
  return read.ok ? { ok: true, info: read.value } : read;
}

export type SegmentLoad = { readonly ok: true; readonly index: ShardIndex; readonly seq: number; readonly bytes: number } | FileProblem;

/**
 * What the checksums of the sections left in the file are checked through, kept for the next load:
 * memory a process touches for the first time costs far more than reading into memory it touched
 * before (page faults; about 3 ms per MB on this project's test machine, as much as the read), and
 * a replica opening loads one segment after another.
 */
const SCRATCH_BYTES = 1 << 20;
const MAX_SCRATCH_BUFFERS = 4;
const scratchBuffers: Buffer[] = [];

/** Packed postings sections at least this large stay in their file: a term's bytes are read when the term is first decoded. */
export const LAZY_SECTION_BYTES = 64 * 1024;

/**
 * Bytes of a segment file left on disk (read with open, pread, close: no descriptor is held).
 * What is read is checked again: a term's bytes against the term's own checksum, the whole
 * section (read before a merge or a compaction, as Lucene checks a segment's integrity before
 * merging it) against the section's. A file damaged after it was loaded then throws
 * SegmentProblem rather than answer or merge wrong postings.
 */
class FileSection implements ByteSource {
  private bytes: Uint8Array | null = null;

  constructor(
    private readonly path: string,
    private readonly offset: number,
    private readonly length: number,
    /** Its number in the file and its checksum, checked at load. */
    private readonly section: number,
    private readonly crc: number,
  ) {}

  read(from: number, to: number, crc: number): Uint8Array {
    if (this.bytes !== null) return this.bytes.subarray(from, to);
    const bytes = readSyncAt(this.path, new Uint8Array(to - from), this.offset + from);
    if ((crc32(bytes) | 0) !== crc) throw new SegmentProblem(`${this.path}: the checksum of a term's postings in section ${this.section} does not match (the file changed after it was loaded)`);
    return bytes;
  }

  load(): void {
    if (this.bytes !== null) return;
    const bytes = readSyncAt(this.path, new Uint8Array(this.length), this.offset);
    if (crc32(bytes) !== this.crc) throw new SegmentProblem(`${this.path}: the checksum of section ${this.section} does not match (the file changed after it was loaded)`);
    this.bytes = bytes;
  }
}

function readSyncAt(path: string, out: Uint8Array, position: number): Uint8Array {
  const fd = openSync(path, 'r');
  try {
    for (let at = 0; at < out.length; ) {
      const n = readSync(fd, out, at, out.length - at, position + at);
      if (n === 0) throw new SegmentProblem(`${path}: the file ends before byte ${position + out.length} (it changed after it was loaded)`);
      at += n;
    }
  } finally {
    closeSync(fd);
  }
  return out;
}

/** The sections left in the file: each inverted field's packed postings, when large. */
function lazySections(header: Header): Set<number> {
  const lazy = new Set<number>();
  const slots = (header.state as { slots?: unknown }).slots;
  if (!Array.isArray(slots)) return lazy;
  for (const slot of slots as { kind?: unknown; state?: { packed?: { $a?: unknown } } }[]) {
    const at = slot.kind === 'inverted' ? slot.state?.packed?.$a : undefined;
    if (typeof at !== 'number') continue;
    const s = header.sections[at];
    if (s !== undefined && s.kind === 'Uint8Array' && s.bytes >= LAZY_SECTION_BYTES) lazy.add(at);
  }
  return lazy;
}

/**
 * Reads a segment file: every section's checksum is checked now; the sections an index uses
 * whole are read into memory (a run of neighbouring sections at a time), each inverted field's
 * packed postings are checked through a small buffer and left in the file (its terms are read
 * when first decoded, and the whole run when a merge or a compaction reads most of them).
 */
async function readSegment(path: string, file: FileHandle, size: number): Promise<{ state: ShardIndexState<PackedInvertedState, IdTable>; info: SegmentInfo }> {
  const head = await readInto(file, Buffer.alloc(Math.min(PREFIX, size)), 0);
  const headerLength = headerLengthOf(head, size);
  const header = parseHeader(head, await readInto(file, Buffer.allocUnsafe(headerLength), PREFIX));
  const base = pad8(PREFIX + headerLength);
  const sections = header.sections;
  const end = (i: number): number => base + sections[i]!.offset + sections[i]!.bytes;
  sections.forEach((s, i) => {
    if (end(i) > size) throw new SegmentProblem(`truncated: section ${i} ends at byte ${end(i)}, the file has ${size}`);
  });
  const lazy = lazySections(header);
  const views: SectionView[] = new Array<SectionView>(sections.length);
  let scratch: Buffer | undefined;
  try {
    for (let i = 0; i < sections.length; ) {
      const start = base + sections[i]!.offset;
      if (lazy.has(i)) {
        const s = sections[i]!;
        scratch ??= scratchBuffers.pop() ?? Buffer.allocUnsafeSlow(SCRATCH_BYTES);
        let crc = 0;
        for (let at = 0; at < s.bytes; at += scratch.length) {
          const part = scratch.subarray(0, Math.min(scratch.length, s.bytes - at));
          crc = crc32(await readInto(file, part, start + at), crc);
        }
        if (crc !== s.crc) throw new SegmentProblem(`the checksum of section ${i} does not match`);
        views[i] = { source: new FileSection(path, start, s.bytes, i, s.crc) };
        i++;
        continue;
      }
      let j = i + 1;
      while (j < sections.length && !lazy.has(j)) j++;
      // A buffer of its own starts 8-byte aligned, and sections are 8-byte aligned from `base`.
      const run = await readInto(file, Buffer.allocUnsafeSlow(end(j - 1) - start), start);
      for (let k = i; k < j; k++) {
        const from = base + sections[k]!.offset - start;
        views[k] = viewOf(header, k, run.subarray(from, from + sections[k]!.bytes));
      }
      i = j;
    }
  } finally {
    if (scratch !== undefined && scratchBuffers.length < MAX_SCRATCH_BUFFERS) scratchBuffers.push(scratch);
  }
  return stateOf(header, views);
}

/** Loads the segment file `path` for `schema` (its fingerprint `fingerprint`); says why when it cannot. */
export async function loadSegment(path: string, schema: CollectionSchema, fingerprint: string, options: ShardIndexOptions = {}): Promise<SegmentLoad> {
  const read = await readDecoded(path, 'segment', async (file, size) => {
    const { state, info } = await readSegment(path, file, size);
    if (info.fingerprint !== fingerprint) throw new SegmentProblem('it was written for another schema or analyzer');
    return { index: ShardIndex.restore(schema, state, options), seq: info.seq };
  });
  return read.ok ? { ok: true, index: read.value.index, seq: read.value.seq, bytes: read.bytes } : read;
}
