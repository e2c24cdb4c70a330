// The embedded coordinator on disk: a MemoryZNodeServer whose persistent znodes survive a crash.
// Under its directory: `snapshot` (the tree as of change z), `log` (every change after it, appended
// and synced before the change is acknowledged; concurrent changes share one sync, as ZooKeeper's
// SyncRequestProcessor groups them) and `LOCK` (the pid of the process that has it open). Once the
// log holds `compactAfter` changes, the tree is written to a new snapshot (temporary file, sync,
// rename, sync of the directory) and the log starts again empty; a crash between the two leaves
// an old log whose changes the new snapshot already holds, and they are skipped at open.
// Formats: tree-format.ts. Only persistent znodes are kept: after a restart, as after a ZooKeeper
// restart, the old sessions are dead and their ephemerals gone; versions and sequence counters
// are exactly as they were (a leader epoch is a znode version, and must never go back).
import { mkdir, open, readFile, rm, writeFile, type FileHandle } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { replaceDurably, writeAll } from '../durable-file.js';
import { ShardexError } from '../errors.js';
import { MemoryZNodeServer, type MemoryZNodeServerOptions, type PersistedZNode, type ZNodeChange, type ZNodeJournal } from './memory-store.js';
import type { StoreLogger } from './store.js';
import { decodeLog, decodeSnapshot, encodeChange, encodeHeader, encodeSnapshot, LOG_MAGIC, replay, TreeFileError, type DecodedSnapshot, type LoggedChange } from './tree-format.js';
import { processAlive as alive } from '../pid.js';

export interface TreeStoreOptions extends Omit<MemoryZNodeServerOptions, 'restore' | 'journal'> {
  /** The directory of the tree's files; created if missing. */
  readonly dir: string;
  /** Write a new snapshot once the log holds this many changes. Default 10 000. */
  readonly compactAfter?: number;
  /** What a refusal tells the user to do about a damaged directory. */
  readonly remedy?: string;
}

const DEFAULT_COMPACT_AFTER = 10_000;
const DEFAULT_REMEDY = 'restore the directory from a backup, or remove it to start with an empty tree';

export const SNAPSHOT_FILE = 'snapshot';
export const LOG_FILE = 'log';
export const LOCK_FILE = 'LOCK';

/** Directories this process has open: a second open of one is refused like another process's. */
const openHere = new Set<string>();

/**
 * Opens (or creates) the tree under `options.dir` and serves it. Refuses, with a ShardexError
 * SHX_BAD_CONFIG naming the file and what to do, a file that is damaged, unreadable or of another
 * format version, and a directory another live process has open. A torn last log record (a crash
 * while appending) is cut off with a warning.
 */
export async function openTreeStore(options: TreeStoreOptions): Promise<MemoryZNodeServer> {
  const { dir: given, compactAfter = DEFAULT_COMPACT_AFTER, remedy = DEFAULT_REMEDY, ...serverOptions } = options;
  const dir = resolve(given);
  const refuse = (file: string, why: string): ShardexError => new ShardexError('SHX_BAD_CONFIG', `coordinator file ${file} cannot be used: ${why}; ${remedy}`);
  try {
    await mkdir(dir, { recursive: true });
  } catch (err) {
    throw refuse(dir, `the directory cannot be created (${(err as Error).message})`);
  }
  await lock(dir, refuse);
  try {
    const snapshotPath = join(dir, SNAPSHOT_FILE);
    const logPath = join(dir, LOG_FILE);
    const read = async (path: string): Promise<Buffer | undefined> => {
      try {
        return await readFile(path);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
        throw refuse(path, `it cannot be read (${(err as Error).message})`);
      }
    };
    const decode = <T>(path: string, f: () => T): T => {
      try {
        return f();
      } catch (err) {
        if (err instanceof TreeFileError) throw refuse(path, err.message);
        throw err;
      }
    };
    const snapshotBytes = await read(snapshotPath);
    const snapshot: DecodedSnapshot | undefined = snapshotBytes && decode(snapshotPath, () => decodeSnapshot(snapshotBytes));
    const logBytes = await read(logPath);
    let changes: LoggedChange[] = [];
    if (logBytes === undefined) {
      // A compaction replaces the log, it never leaves none: a snapshot without its log has lost
      // the changes made since it was written.
      if (snapshot !== undefined) throw refuse(logPath, `it is missing while the snapshot ${snapshotPath} is there (the changes made since the snapshot would be lost)`);
      await replaceDurably(logPath, [encodeHeader(LOG_MAGIC)]);
    } else {
      const log = decode(logPath, () => decodeLog(logBytes));
      changes = log.changes;
      if (log.validBytes < logBytes.length) {
        serverOptions.logger?.warn(
          { file: logPath, keptBytes: log.validBytes, droppedBytes: logBytes.length - log.validBytes },
          'coordinator log ends in a torn record (the process stopped while writing it); cut it off',
        );
        await truncateDurably(logPath, log.validBytes);
      }
    }
    const tree = decode(logPath, () => replay(snapshot, changes));
    const handle = await open(logPath, 'a');
    const journal = new FileJournal(dir, handle, tree.z, changes.length, compactAfter, serverOptions.logger);
    return new MemoryZNodeServer({ ...serverOptions, restore: tree.nodes, journal });
  } catch (err) {
    await unlock(dir);
    throw err;
  }
}

class FileJournal implements ZNodeJournal {
  private snapshot: () => PersistedZNode[] = () => [];
  /** Encoded changes not yet written. */
  private pending: Buffer[] = [];
  private recorded: number;
  private synced: number;
  private waiters: Array<{ readonly z: number; resolve(): void; reject(err: Error): void }> = [];
  private writing: Promise<void> | undefined;
  private failure: Error | undefined;
  private closed = false;

  constructor(
    private readonly dir: string,
    private log: FileHandle,
    z: number,
    /** Changes in the log file, including any the snapshot already holds. */
    private logged: number,
    private readonly compactAfter: number,
    private readonly logger: StoreLogger | undefined,
  ) {
    this.recorded = z;
    this.synced = z;
  }

  attach(snapshot: () => PersistedZNode[]): void {
    this.snapshot = snapshot;
  }

  record(change: ZNodeChange): void {
    if (this.closed) throw new Error('the coordinator journal is closed');
    this.recorded += 1;
    this.pending.push(encodeChange(this.recorded, change));
    // After a failed write nothing more is written: the log would have a gap.
    if (this.failure === undefined) this.writing ??= this.writeLoop();
  }

  durable(): Promise<void> | undefined {
    if (this.failure) return Promise.reject(this.failure);
    if (this.synced >= this.recorded) return undefined;
    const z = this.recorded;
    return new Promise((resolve, reject) => this.waiters.push({ z, resolve, reject }));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.writing;
    await this.log.close().catch(() => undefined);
    await unlock(this.dir);
  }

  /** Writes what is pending, one sync per batch, until nothing is; changes recorded meanwhile form the next batch. */
  private async writeLoop(): Promise<void> {
    try {
      // Let the changes of this turn of the event loop join the first batch.
      await Promise.resolve();
      while (this.pending.length > 0) {
        const upTo = this.recorded;
        if (this.logged + this.pending.length >= this.compactAfter) await this.compact();
        else {
          const batch = this.pending;
          this.pending = [];
          await writeAll(this.log, batch.length === 1 ? batch[0]! : Buffer.concat(batch));
          await this.log.datasync();
          this.logged += batch.length;
        }
        this.synced = upTo;
        const done = this.waiters.filter((w) => w.z <= upTo);
        this.waiters = this.waiters.filter((w) => w.z > upTo);
        for (const w of done) w.resolve();
      }
    } catch (err) {
      // The tree in memory is now ahead of the disk: no operation may succeed from here on.
      this.failure = new ShardexError('SHX_INTERNAL', `the coordinator could not write under ${this.dir} (${(err as Error).message}); stop the cluster, free the disk and start it again`, { cause: err });
      this.logger?.error({ err, dir: this.dir }, 'coordinator journal write failed; every coordination operation fails from now on');
      for (const w of this.waiters) w.reject(this.failure);
      this.waiters = [];
    } finally {
      this.writing = undefined;
    }
  }

  /** A new snapshot of the tree as it is now (pending changes included), then an empty log. */
  private async compact(): Promise<void> {
    const z = this.recorded;
    const bytes = encodeSnapshot(z, this.snapshot());
    this.pending = [];
    await replaceDurably(join(this.dir, SNAPSHOT_FILE), [bytes]);
    await this.log.close();
    const logPath = join(this.dir, LOG_FILE);
    await replaceDurably(logPath, [encodeHeader(LOG_MAGIC)]);
    this.log = await open(logPath, 'a');
    this.logged = 0;
    this.logger?.info({ dir: this.dir, z, snapshotBytes: bytes.length }, 'coordinator tree compacted into a new snapshot');
  }
}

async function truncateDurably(path: string, length: number): Promise<void> {
  const fh = await open(path, 'r+');
  try {
    await fh.truncate(length);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** Takes `dir` for this process, or refuses when a live process (this one included) has it. */
async function lock(dir: string, refuse: (file: string, why: string) => ShardexError): Promise<void> {
  const path = join(dir, LOCK_FILE);
  if (openHere.has(dir)) throw refuse(path, 'this process has the coordinator open already');
  for (;;) {
    try {
      await writeFile(path, `${process.pid}\n`, { flag: 'wx' });
      openHere.add(dir);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw refuse(path, `the lock file cannot be written (${(err as Error).message})`);
    }
    const pid = Number((await readFile(path, 'utf8').catch(() => '')).trim());
    if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && alive(pid)) {
      throw new ShardexError('SHX_BAD_CONFIG', `${dir} is in use by another Shardex process (pid ${pid}): stop it first, or use another data dir (if no Shardex process has pid ${pid}, delete ${path})`);
    }
    // Left by a process that is gone (killed, or crashed): take it over.
    await rm(path, { force: true });
  }
}

async function unlock(dir: string): Promise<void> {
  if (!openHere.delete(dir)) return;
  await rm(join(dir, LOCK_FILE), { force: true });
}

