// The on-disk format of the embedded coordinator's tree (pure: bytes in, bytes or a tree out; the
// files themselves are handled by tree-store.ts). Two files, as ZooKeeper keeps snapshots and a
// transaction log:
//   snapshot: header, then one frame: {"z": last change included, "nodes": [[path, data, version, cversion], ...]}
//   log:      header, then one frame per change: {"z", "op", "p", ...}, z = 1, 2, 3, ... with no gap
// header = magic (8 bytes) + format version (u32 BE) + CRC32 of those 12 bytes;
// frame  = payload length (u32 BE) + CRC32 of the payload (u32 BE) + payload (JSON, data in base64).
// Reading distinguishes a torn tail of the log (a crash in the middle of an append: the rest is
// kept, as ZooKeeper's FileTxnLog does) from damage anywhere else, which is refused.
import * as zlib from 'node:zlib';
import type { PersistedZNode, ZNodeChange } from './memory-store.js';

export const TREE_FORMAT_VERSION = 1;
export const SNAPSHOT_MAGIC = 'SHXZSNAP';
export const LOG_MAGIC = 'SHXZNLOG';
export const HEADER_BYTES = 16;
const FRAME_HEADER_BYTES = 8;

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** CRC-32 (IEEE, as zlib and gzip): table-driven, for a Node 20 without zlib.crc32. */
export function tableCrc32(buf: Uint8Array): number {
  let c = 0xffffffff;
  for (let i = 0; i < buf.length; i++) c = CRC_TABLE[(c ^ buf[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

const nativeCrc32 = (zlib as { crc32?: (data: Uint8Array) => number }).crc32;
export const crc32: (buf: Uint8Array) => number = nativeCrc32 ? (b) => nativeCrc32(b) >>> 0 : tableCrc32;

/** Why a file cannot be read; the caller names the file and says what to do. */
export class TreeFileError extends Error {
  constructor(
    message: string,
    /** 'version': written by another format version; 'damaged': anything else. */
    readonly kind: 'damaged' | 'version',
  ) {
    super(message);
    this.name = 'TreeFileError';
  }
}

export function encodeHeader(magic: string): Buffer {
  const b = Buffer.alloc(HEADER_BYTES);
  b.write(magic, 0, 'latin1');
  b.writeUInt32BE(TREE_FORMAT_VERSION, 8);
  b.writeUInt32BE(crc32(b.subarray(0, 12)), 12);
  return b;
}

function checkHeader(file: Buffer, magic: string, what: string): void {
  if (file.length < HEADER_BYTES) throw new TreeFileError(`it is ${file.length} bytes long, shorter than the ${HEADER_BYTES}-byte header of a ${what}`, 'damaged');
  if (file.toString('latin1', 0, 8) !== magic) throw new TreeFileError(`it does not start like a Shardex coordinator ${what} (magic ${JSON.stringify(file.toString('latin1', 0, 8))})`, 'damaged');
  if (file.readUInt32BE(12) !== crc32(file.subarray(0, 12))) throw new TreeFileError('its header fails its checksum', 'damaged');
  const version = file.readUInt32BE(8);
  if (version !== TREE_FORMAT_VERSION) {
    throw new TreeFileError(`it was written in coordinator format ${version}, and this version of Shardex reads format ${TREE_FORMAT_VERSION} only`, 'version');
  }
}

function frame(payload: Buffer): Buffer {
  const b = Buffer.alloc(FRAME_HEADER_BYTES + payload.length);
  b.writeUInt32BE(payload.length, 0);
  b.writeUInt32BE(crc32(payload), 4);
  payload.copy(b, FRAME_HEADER_BYTES);
  return b;
}

type Json = Record<string, unknown>;

/** One log record: the change numbered `z`. */
export function encodeChange(z: number, change: ZNodeChange): Buffer {
  let body: Json;
  switch (change.op) {
    case 'create':
      body = { z, op: 'create', p: change.path, d: change.data.toString('base64'), c: change.parentCversion };
      break;
    case 'cversion':
      body = { z, op: 'cversion', p: change.path, c: change.cversion };
      break;
    case 'set':
      body = { z, op: 'set', p: change.path, d: change.data.toString('base64'), v: change.version };
      break;
    case 'delete':
      body = { z, op: 'delete', p: change.path };
      break;
  }
  return frame(Buffer.from(JSON.stringify(body)));
}

export function encodeSnapshot(z: number, nodes: readonly PersistedZNode[]): Buffer {
  const body = { z, nodes: nodes.map((n) => [n.path, n.data.toString('base64'), n.version, n.cversion]) };
  return Buffer.concat([encodeHeader(SNAPSHOT_MAGIC), frame(Buffer.from(JSON.stringify(body)))]);
}

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isPath = (v: unknown): v is string => typeof v === 'string' && v.startsWith('/');
const isData = (v: unknown): v is string => typeof v === 'string';

function parsePayload(payload: Buffer): unknown {
  try {
    return JSON.parse(payload.toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}

export interface LoggedChange {
  readonly z: number;
  readonly change: ZNodeChange;
}

function toChange(v: unknown): LoggedChange | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const r = v as Json;
  if (!isCount(r.z) || !isPath(r.p)) return undefined;
  const path = r.p;
  switch (r.op) {
    case 'create':
      return isData(r.d) && isCount(r.c) ? { z: r.z, change: { op: 'create', path, data: Buffer.from(r.d, 'base64'), parentCversion: r.c } } : undefined;
    case 'cversion':
      return isCount(r.c) ? { z: r.z, change: { op: 'cversion', path, cversion: r.c } } : undefined;
    case 'set':
      return isData(r.d) && isCount(r.v) ? { z: r.z, change: { op: 'set', path, data: Buffer.from(r.d, 'base64'), version: r.v } } : undefined;
    case 'delete':
      return { z: r.z, change: { op: 'delete', path } };
    default:
      return undefined;
  }
}

export interface DecodedSnapshot {
  readonly z: number;
  readonly nodes: PersistedZNode[];
}

export function decodeSnapshot(file: Buffer): DecodedSnapshot {
  checkHeader(file, SNAPSHOT_MAGIC, 'snapshot');
  const at = HEADER_BYTES;
  if (file.length < at + FRAME_HEADER_BYTES) throw new TreeFileError('it ends before its contents (truncated)', 'damaged');
  const length = file.readUInt32BE(at);
  const end = at + FRAME_HEADER_BYTES + length;
  if (end > file.length) throw new TreeFileError(`it is truncated (${file.length} bytes of ${end})`, 'damaged');
  if (end < file.length) throw new TreeFileError(`it has ${file.length - end} unexpected bytes after its contents`, 'damaged');
  const payload = file.subarray(at + FRAME_HEADER_BYTES, end);
  if (crc32(payload) !== file.readUInt32BE(at + 4)) throw new TreeFileError('its contents fail their checksum', 'damaged');
  const body = parsePayload(payload) as { z?: unknown; nodes?: unknown } | undefined;
  if (!body || !isCount(body.z) || !Array.isArray(body.nodes)) throw new TreeFileError('its contents are not a snapshot', 'damaged');
  const nodes: PersistedZNode[] = [];
  for (const n of body.nodes as unknown[]) {
    if (!Array.isArray(n) || !isPath(n[0]) || !isData(n[1]) || !isCount(n[2]) || !isCount(n[3])) throw new TreeFileError('it holds a malformed znode', 'damaged');
    nodes.push({ path: n[0], data: Buffer.from(n[1], 'base64'), version: n[2], cversion: n[3] });
  }
  return { z: body.z, nodes };
}

export interface DecodedLog {
  readonly changes: LoggedChange[];
  /** Where the valid records end; less than the file's length when its tail was torn. */
  readonly validBytes: number;
}

const allZero = (b: Buffer): boolean => b.every((x) => x === 0);

/**
 * Reads a log. A bad record (incomplete, of length 0, failing its checksum, or unreadable) is a
 * torn tail when it runs to or past the end of the file, or when only zeros follow it (space the
 * file system allocated but the crash left unwritten); anywhere else the log is damaged.
 */
export function decodeLog(file: Buffer): DecodedLog {
  checkHeader(file, LOG_MAGIC, 'log');
  const changes: LoggedChange[] = [];
  let at = HEADER_BYTES;
  while (at < file.length) {
    const torn = (): DecodedLog => ({ changes, validBytes: at });
    if (file.length - at < FRAME_HEADER_BYTES) return torn();
    const length = file.readUInt32BE(at);
    const end = at + FRAME_HEADER_BYTES + length;
    if (end > file.length) {
      // A write the crash cut short, unless the record is whole and its length is what is wrong:
      // then cutting it off would silently drop every change after it.
      const whole = wholeRecordAt(file, at);
      if (whole !== undefined) throw new TreeFileError(`its record at byte ${at} says it runs past the end of the file (${length} bytes), but a whole record of ${whole} bytes is there: its length is damaged`, 'damaged');
      return torn();
    }
    const payload = file.subarray(at + FRAME_HEADER_BYTES, end);
    const record = length > 0 && crc32(payload) === file.readUInt32BE(at + 4) ? toChange(parsePayload(payload)) : undefined;
    if (record === undefined) {
      if (end === file.length || allZero(file.subarray(at))) return torn();
      const why = length === 0 ? 'is empty' : crc32(payload) !== file.readUInt32BE(at + 4) ? 'fails its checksum' : 'is not a change';
      throw new TreeFileError(`its record at byte ${at} ${why}, and more records follow it`, 'damaged');
    }
    changes.push(record);
    at = end;
  }
  return { changes, validBytes: at };
}

/**
 * The length of the whole, readable record that starts at `at` whatever its length field says:
 * the first payload length whose CRC-32 (computed once, byte by byte) matches the frame's and
 * that reads as a change. Undefined when none does (a torn write).
 */
function wholeRecordAt(file: Buffer, at: number): number | undefined {
  const want = file.readUInt32BE(at + 4);
  const start = at + FRAME_HEADER_BYTES;
  let c = 0xffffffff;
  for (let i = start; i < file.length; i++) {
    c = CRC_TABLE[(c ^ file[i]!) & 0xff]! ^ (c >>> 8);
    if ((c ^ 0xffffffff) >>> 0 === want && toChange(parsePayload(file.subarray(start, i + 1))) !== undefined) return i + 1 - start;
  }
  return undefined;
}

interface ModelNode {
  data: Buffer;
  version: number;
  cversion: number;
  readonly children: Set<string>;
}

const parentOf = (path: string): string => {
  const i = path.lastIndexOf('/');
  return i === 0 ? '/' : path.slice(0, i);
};

/**
 * The persistent tree a snapshot and the log after it describe, parents first. Records the
 * snapshot already holds (z <= its z: left by a crash while compacting) are skipped; the others
 * must follow on without a gap and apply cleanly, or the files are damaged.
 */
export function replay(snapshot: DecodedSnapshot | undefined, changes: readonly LoggedChange[]): { nodes: PersistedZNode[]; z: number } {
  const tree = new Map<string, ModelNode>();
  tree.set('/', { data: Buffer.alloc(0), version: 0, cversion: 0, children: new Set() });
  const bad = (message: string): TreeFileError => new TreeFileError(message, 'damaged');
  const add = (path: string, node: ModelNode, z: number): void => {
    const parent = tree.get(parentOf(path));
    if (!parent) throw bad(`change ${z} creates ${path}, whose parent does not exist`);
    if (tree.has(path)) throw bad(`change ${z} creates ${path}, which exists`);
    parent.children.add(path);
    tree.set(path, node);
  };
  for (const n of snapshot?.nodes ?? []) {
    if (n.path === '/') Object.assign(tree.get('/')!, { data: n.data, version: n.version, cversion: n.cversion });
    else add(n.path, { data: n.data, version: n.version, cversion: n.cversion, children: new Set() }, snapshot!.z);
  }
  let z = snapshot?.z ?? 0;
  for (const { z: at, change } of changes) {
    if (at <= (snapshot?.z ?? 0)) continue;
    if (at !== z + 1) throw bad(`change ${at} follows change ${z} (changes ${z + 1}-${at - 1} are missing)`);
    z = at;
    const node = tree.get(change.path);
    switch (change.op) {
      case 'create': {
        add(change.path, { data: change.data, version: 0, cversion: 0, children: new Set() }, at);
        tree.get(parentOf(change.path))!.cversion = change.parentCversion;
        break;
      }
      case 'cversion':
      case 'set':
        if (!node) throw bad(`change ${at} changes ${change.path}, which does not exist`);
        if (change.op === 'cversion') node.cversion = change.cversion;
        else Object.assign(node, { data: change.data, version: change.version });
        break;
      case 'delete':
        if (!node || change.path === '/') throw bad(`change ${at} deletes ${change.path}, which does not exist`);
        if (node.children.size > 0) throw bad(`change ${at} deletes ${change.path}, which has children`);
        tree.delete(change.path);
        tree.get(parentOf(change.path))!.children.delete(change.path);
    }
  }
  const nodes: PersistedZNode[] = [];
  const walk = (path: string): void => {
    const n = tree.get(path)!;
    nodes.push({ path, data: n.data, version: n.version, cversion: n.cversion });
    for (const child of n.children) walk(child);
  };
  walk('/');
  return { nodes, z };
}
