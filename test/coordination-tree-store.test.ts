// The embedded coordinator on disk (src/coordination/tree-store.ts): what a restart brings back,
// what a crash may cost (only a torn last record), and what it refuses to open.
import { spawn } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as zlib from 'node:zlib';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { MemoryZNodeServer } from '../src/coordination/memory-store.js';
import { crc32, encodeChange, encodeHeader, HEADER_BYTES, LOG_MAGIC, tableCrc32 } from '../src/coordination/tree-format.js';
import { LOCK_FILE, LOG_FILE, openTreeStore, SNAPSHOT_FILE } from '../src/coordination/tree-store.js';
import type { ZNodeStore } from '../src/coordination/store.js';
import { ShardexError } from '../src/errors.js';

const buf = (s: string): Buffer => Buffer.from(s);

let root: string;
let dir: string;
const open: MemoryZNodeServer[] = [];

async function openTree(options: { dir?: string; compactAfter?: number; warnings?: object[] } = {}): Promise<MemoryZNodeServer> {
  const warnings = options.warnings ?? [];
  const server = await openTreeStore({
    dir: options.dir ?? dir,
    remedy: 'restore it from a backup',
    logger: { info: () => {}, warn: (obj) => warnings.push(obj), error: () => {} },
    ...(options.compactAfter !== undefined && { compactAfter: options.compactAfter }),
  });
  open.push(server);
  return server;
}

/** The persistent tree as comparable values: path -> data, version, cversion. */
function contents(server: MemoryZNodeServer): Record<string, [string, number, number]> {
  return Object.fromEntries(server.persistentNodes().map((n) => [n.path, [n.data.toString('utf8'), n.version, n.cversion]]));
}

/** What a kill -9 leaves: the files as they are now, with the server still running (the lock included). */
async function crashImage(): Promise<string> {
  const image = join(root, `crash-${open.length}`);
  await cp(dir, image, { recursive: true });
  return image;
}

async function refusal(promise: Promise<unknown>): Promise<ShardexError> {
  const err = await promise.then(
    () => new Error('expected a refusal, but it opened'),
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ShardexError);
  expect((err as ShardexError).code).toBe('SHX_BAD_CONFIG');
  return err as ShardexError;
}

/** A few changes of every kind, some concurrent: creates, sets, deletes, sequential and ephemeral nodes. */
async function workload(store: ZNodeStore): Promise<void> {
  await store.mkdirp('/collections/books/leaders/shard1');
  await store.mkdirp('/collections/books/leader_elect/shard1');
  await store.create('/collections/books/state', buf('{"shards":1}'), 'persistent');
  for (let epoch = 1; epoch <= 3; epoch++) await store.set('/collections/books/leaders/shard1', buf(JSON.stringify({ node: 'node1', epoch })), epoch - 1);
  await Promise.all([1, 2, 3].map((i) => store.create('/collections/books/leader_elect/shard1/n_', buf(`node${i}`), 'ephemeral_sequential')));
  await store.create('/queue', Buffer.alloc(0), 'persistent');
  await Promise.all([1, 2].map((i) => store.create('/queue/q_', buf(`item${i}`), 'persistent_sequential')));
  await store.create('/gone', buf('x'), 'persistent');
  await store.set('/gone', buf('y'));
  await store.delete('/gone');
  await store.create('/live_nodes', Buffer.alloc(0), 'persistent');
  await store.create('/live_nodes/node1', buf('{}'), 'ephemeral');
}

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'shardex-tree-'));
  dir = join(root, 'coordinator');
});

afterEach(async () => {
  for (const server of open.splice(0)) await server.close();
  await rm(root, { recursive: true, force: true });
});

describe('CRC32', () => {
  it('is the IEEE CRC-32 of zlib, with or without zlib.crc32', () => {
    expect(tableCrc32(buf('123456789'))).toBe(0xcbf43926);
    const sample = Buffer.from(Array.from({ length: 1000 }, (_, i) => (i * 7919) & 0xff));
    expect(tableCrc32(sample)).toBe(crc32(sample));
    const native = (zlib as { crc32?: (b: Uint8Array) => number }).crc32;
    if (native) expect(crc32(sample)).toBe(native(sample) >>> 0);
  });
});

describe('a restart', () => {
  it('brings back every persistent znode with its data, version and sequence counter', async () => {
    const server = await openTree();
    const store = server.connect({ chroot: '/shardex' });
    await workload(store);
    const before = contents(server);
    await server.close();
    const again = await openTree();
    expect(contents(again)).toEqual(before);
    const s = again.connect({ chroot: '/shardex' });
    expect(await s.get('/collections/books/leaders/shard1')).toEqual({ data: buf('{"node":"node1","epoch":3}'), version: 3 });
    expect((await s.children('/queue')).sort()).toEqual(['q_0000000000', 'q_0000000001']);
    expect(await s.exists('/gone')).toBe(false);
  });

  it('keeps leader epochs (znode versions) going forward, never back', async () => {
    const server = await openTree();
    const store = server.connect();
    await store.create('/leader', Buffer.alloc(0), 'persistent');
    for (let v = 0; v < 5; v++) await store.set('/leader', buf(`epoch ${v + 1}`), v);
    await server.close();
    const again = (await openTree()).connect();
    expect(await again.set('/leader', buf('epoch 6'), 5)).toBe(6);
  });

  it('drops the ephemerals of the old sessions but never reuses the sequence numbers they took', async () => {
    const server = await openTree();
    const store = server.connect();
    await store.create('/elect', Buffer.alloc(0), 'persistent');
    await store.create('/elect/n_', buf('a'), 'ephemeral_sequential');
    await store.create('/elect/n_', buf('b'), 'ephemeral_sequential');
    await store.create('/live', buf('me'), 'ephemeral');
    // A crash: the sessions never close, their ephemerals are in memory only.
    const again = (await openTree({ dir: await crashImage() })).connect();
    expect(await again.children('/elect')).toEqual([]);
    expect(await again.exists('/live')).toBe(false);
    expect(await again.create('/elect/n_', buf('c'), 'ephemeral_sequential')).toBe('/elect/n_0000000002');
  });

  it('after a crash, has every change that was acknowledged', async () => {
    const server = await openTree();
    const store = server.connect({ chroot: '/shardex' });
    await workload(store);
    const acknowledged = contents(server);
    const image = await crashImage();
    expect(contents(await openTree({ dir: image }))).toEqual(acknowledged);
  });
});

describe('a torn last record (a crash while appending)', () => {
  async function tornLog(tail: Buffer): Promise<{ before: Record<string, [string, number, number]>; logBytes: number; image: string }> {
    const server = await openTree();
    const store = server.connect();
    await store.create('/a', buf('1'), 'persistent');
    await store.set('/a', buf('2'));
    const before = contents(server);
    const image = await crashImage();
    const log = join(image, LOG_FILE);
    const bytes = await readFile(log);
    await writeFile(log, Buffer.concat([bytes, tail]));
    return { before, logBytes: bytes.length, image };
  }

  it('is cut off with a warning, and everything before it is kept', async () => {
    const record = encodeChange(3, { op: 'set', path: '/a', data: buf('3'), version: 2 });
    const { before, logBytes, image } = await tornLog(record.subarray(0, record.length - 3));
    const warnings: object[] = [];
    const server = await openTree({ dir: image, warnings });
    expect(contents(server)).toEqual(before);
    expect(warnings).toEqual([expect.objectContaining({ keptBytes: logBytes, droppedBytes: record.length - 3 })]);
    expect((await stat(join(image, LOG_FILE))).size).toBe(logBytes);
    // The log goes on from there.
    expect(await server.connect().set('/a', buf('3'), 1)).toBe(2);
  });

  it('is cut off when it is complete but garbled', async () => {
    const record = encodeChange(3, { op: 'set', path: '/a', data: buf('3'), version: 2 });
    record[record.length - 1] ^= 0xff;
    const { before, image } = await tornLog(record);
    expect(contents(await openTree({ dir: image }))).toEqual(before);
  });

  it('is cut off when it is zeros the file system allocated but the crash left unwritten', async () => {
    const { before, image } = await tornLog(Buffer.alloc(4096));
    expect(contents(await openTree({ dir: image }))).toEqual(before);
  });
});

describe('refuses, naming the file and what to do, and leaving it as it is', () => {
  async function logWithRecords(): Promise<string> {
    const server = await openTree();
    const store = server.connect();
    await store.create('/a', buf('1'), 'persistent');
    await store.create('/b', buf('2'), 'persistent');
    await server.close();
    open.splice(0);
    return join(dir, LOG_FILE);
  }

  async function expectRefused(file: string, ...says: string[]): Promise<void> {
    const bytes = await readFile(file).catch(() => undefined);
    const err = await refusal(openTree());
    expect(err.message).toContain(file);
    expect(err.message).toContain('restore it from a backup');
    for (const s of says) expect(err.message).toContain(s);
    if (bytes) expect(await readFile(file)).toEqual(bytes);
  }

  it('a log record that fails its checksum with records after it', async () => {
    const log = await logWithRecords();
    const bytes = await readFile(log);
    bytes[HEADER_BYTES + 12] ^= 0x01; // inside the first record's payload
    await writeFile(log, bytes);
    await expectRefused(log, `record at byte ${HEADER_BYTES} fails its checksum`);
  });

  it('a log record whose length field is damaged to run past the end of the file, with records after it (not taken for a torn tail)', async () => {
    const log = await logWithRecords();
    const bytes = await readFile(log);
    bytes[HEADER_BYTES + 1] ^= 0x40; // the first record's length, now far past the end
    await writeFile(log, bytes);
    await expectRefused(log, `record at byte ${HEADER_BYTES} says it runs past the end of the file`, 'its length is damaged');
  });

  it('a log with a change missing', async () => {
    const log = await logWithRecords();
    await writeFile(log, Buffer.concat([await readFile(log), encodeChange(9, { op: 'delete', path: '/a' })]));
    await expectRefused(log, 'change 9 follows change 2');
  });

  it('a snapshot that fails its checksum', async () => {
    const server = await openTree({ compactAfter: 2 });
    const store = server.connect();
    await store.create('/a', buf('1'), 'persistent');
    await store.create('/b', buf('2'), 'persistent');
    await server.close();
    open.splice(0);
    const snapshot = join(dir, SNAPSHOT_FILE);
    const bytes = await readFile(snapshot);
    bytes[bytes.length - 5] ^= 0x20;
    await writeFile(snapshot, bytes);
    await expectRefused(snapshot, 'fail their checksum');
  });

  it('a missing log beside a snapshot (the changes since the snapshot would be lost)', async () => {
    const server = await openTree({ compactAfter: 2 });
    const store = server.connect();
    await store.create('/a', buf('1'), 'persistent');
    await store.create('/b', buf('2'), 'persistent');
    await store.create('/c', buf('3'), 'persistent');
    await server.close();
    open.splice(0);
    await rm(join(dir, LOG_FILE));
    const err = await refusal(openTree());
    expect(err.message).toContain(join(dir, LOG_FILE));
    expect(err.message).toContain('is missing while the snapshot');
    expect(err.message).toContain('restore it from a backup');
  });

  it('a truncated snapshot', async () => {
    const server = await openTree({ compactAfter: 1 });
    await server.connect().create('/a', buf('1'), 'persistent');
    await server.close();
    open.splice(0);
    const snapshot = join(dir, SNAPSHOT_FILE);
    await writeFile(snapshot, (await readFile(snapshot)).subarray(0, 30));
    await expectRefused(snapshot, 'truncated');
  });

  it('a file of another format version', async () => {
    const log = await logWithRecords();
    const bytes = await readFile(log);
    bytes.writeUInt32BE(2, 8);
    bytes.writeUInt32BE(crc32(bytes.subarray(0, 12)), 12);
    await writeFile(log, bytes);
    await expectRefused(log, 'coordinator format 2', 'reads format 1');
  });

  it('a file that is not a coordinator file', async () => {
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, LOG_FILE), 'hello, I am a text file\n');
    await expectRefused(join(dir, LOG_FILE), 'does not start like a Shardex coordinator log');
  });

  it('a file it cannot read', async () => {
    await mkdir(join(dir, SNAPSHOT_FILE), { recursive: true });
    await expectRefused(join(dir, SNAPSHOT_FILE), 'cannot be read');
  });
});

describe('compaction', () => {
  it('keeps everything in a new snapshot and starts the log again', async () => {
    const server = await openTree({ compactAfter: 5 });
    const store = server.connect({ chroot: '/shardex' });
    await workload(store);
    for (let i = 0; i < 20; i++) await store.set('/collections/books/state', buf(`{"round":${i}}`));
    const before = contents(server);
    expect((await stat(join(dir, SNAPSHOT_FILE))).size).toBeGreaterThan(HEADER_BYTES);
    expect((await stat(join(dir, LOG_FILE))).size).toBeLessThan(HEADER_BYTES + 5 * 200);
    expect(contents(await openTree({ dir: await crashImage() }))).toEqual(before);
  });

  it('loses nothing when a crash leaves the old log beside the new snapshot', async () => {
    const server = await openTree({ compactAfter: 4 });
    const store = server.connect();
    await store.create('/a', buf('1'), 'persistent');
    await store.create('/a/b', buf('2'), 'persistent');
    await store.set('/a', buf('3'));
    const oldLog = await readFile(join(dir, LOG_FILE));
    await store.delete('/a/b'); // the fourth change: compaction
    const before = contents(server);
    const image = await crashImage();
    await writeFile(join(image, LOG_FILE), oldLog);
    expect(contents(await openTree({ dir: image }))).toEqual(before);
  });

  it('shares one append among concurrent changes', async () => {
    const server = await openTree();
    const store = server.connect();
    await store.create('/c', Buffer.alloc(0), 'persistent');
    const sizeBefore = (await stat(join(dir, LOG_FILE))).size;
    const creates = Array.from({ length: 50 }, (_, i) => store.create(`/c/n${i}`, buf(String(i)), 'persistent'));
    // All 50 ran on the tree at once; none is acknowledged before all are in the log.
    const first = await creates[0];
    expect(first).toBe('/c/n0');
    expect((await stat(join(dir, LOG_FILE))).size - sizeBefore).toBe(
      Array.from({ length: 50 }, (_, i) => encodeChange(i + 2, { op: 'create', path: `/c/n${i}`, data: buf(String(i)), parentCversion: i + 1 }).length).reduce((a, b) => a + b),
    );
    await Promise.all(creates);
  });
});

describe('the lock', () => {
  it('refuses a directory this process has open', async () => {
    await openTree();
    const err = await refusal(openTree());
    expect(err.message).toContain(join(dir, LOCK_FILE));
  });

  it('refuses a directory a live process has open, naming its pid', async () => {
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, LOCK_FILE), `${process.ppid}\n`);
    const err = await refusal(openTree());
    expect(err.message).toContain(`in use by another Shardex process (pid ${process.ppid})`);
  });

  it('takes over the lock of a process that is gone', async () => {
    const child = spawn(process.execPath, ['-e', '']);
    const pid = child.pid!;
    await new Promise((r) => child.once('exit', r));
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, LOCK_FILE), `${pid}\n`);
    await writeFile(join(dir, LOG_FILE), encodeHeader(LOG_MAGIC));
    await openTree();
    expect((await readFile(join(dir, LOCK_FILE), 'utf8')).trim()).toBe(String(process.pid));
  });
});
