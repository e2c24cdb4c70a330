// One replica's durable state in LevelDB: the update log keyed by version and the current
// documents keyed by id, both written in one atomic batch per applied request. A stored
// entry is the same JSON text in both places: {"id","v","doc"} (doc null = tombstone).
// Tombstones keep their version so that a late, older add cannot resurrect a deleted id.
//
// Writes are group-committed: applies issued while a batch is being written wait and go to disk
// together in the next batch, so that concurrent requests share one sync. With durability
// `request` every batch is synced (LevelDB `sync: true`) before its applies resolve, so a replica
// that answers an update has it on disk; with `async` batches are synced every syncIntervalMs.
import { Level } from 'level';
import { ShardexError } from '../errors.js';

export type Doc = Record<string, unknown>;

export interface UpdateOp {
  readonly id: string;
  readonly version: number;
  /** The document, or null for a delete. */
  readonly doc: Doc | null;
  /** JSON.stringify(doc) when the caller has it already (see WireOp.text). */
  readonly text?: string;
}

export interface StoredEntry extends UpdateOp {}

export interface CommitPoint {
  readonly version: number;
  readonly at: number;
}

/** Elasticsearch's index.translog.durability: `request` syncs before answering, `async` on a timer. */
export type DurabilityMode = 'request' | 'async';

export interface Durability {
  readonly mode: DurabilityMode;
  /** With `async`: how often unsynced writes are synced (Elasticsearch's sync_interval, here 5 s). */
  readonly syncIntervalMs: number;
}

export const DEFAULT_DURABILITY: Durability = { mode: 'request', syncIntervalMs: 5000 };

/** One batch that reached LevelDB (for metrics and for the tests that check sync-before-ack). */
export interface StoreWrite {
  /** Versions the batch wrote (log entries). */
  readonly versions: readonly number[];
  /** The batch was synced to disk before it completed. */
  readonly sync: boolean;
  /** Applies the batch served (group commit merges concurrent ones). */
  readonly applies: number;
}

export interface ReplicaStoreOptions {
  /** Update-log entries kept for peer sync; older ones are trimmed. */
  readonly logRetention?: number;
  /**
   * LevelDB's write buffer (memtable) in bytes; default LevelDB's 4 MiB. A larger buffer means
   * fewer, larger flushes and less compaction per write, for that much more memory per replica.
   */
  readonly writeBufferSize?: number;
  readonly durability?: Durability;
  /** Called after every batch written to LevelDB. */
  readonly onWrite?: (w: StoreWrite) => void;
}

const LOG = 'l';
const DOC = 'd';
// Keys compare as UTF-8 bytes: an id starting with a character above U+FFFF (or with U+FFFF
// itself) sorts after DOC + '\uffff', so the document range ends at the next prefix instead.
const DOC_END = 'e';
const COMMIT = 'm:commit';
const TRIMMED = 'm:trimmed';
/** The newest leadership epoch this replica has seen: leaders of older epochs are fenced off. */
const FENCE = 'm:fence';
const SYNC_MARK = 'm:sync';
const FORMAT = 'm:format';
/** Versions are epoch-major since format 2 (src/distrib/shard-state.ts). */
const FORMAT_VERSION = '2';
const VERSION_WIDTH = 16;

export const logKey = (version: number): string => LOG + String(version).padStart(VERSION_WIDTH, '0');
const docKey = (id: string): string => DOC + id;

/** An op's document as JSON text: the text it carries, else serialized now; undefined for a delete. */
export function docText(op: { readonly doc: Doc | null; readonly text?: string }): string | undefined {
  return op.doc === null ? undefined : (op.text ?? JSON.stringify(op.doc));
}

export function encodeEntry(op: UpdateOp): string {
  return `{"id":${JSON.stringify(op.id)},"v":${op.version},"doc":${docText(op) ?? 'null'}}`;
}

export function decodeEntry(text: string): StoredEntry {
  const e = JSON.parse(text) as { id: string; v: number; doc: Doc | null };
  return { id: e.id, version: e.v, doc: e.doc };
}

/** An id and the leader's entry for it (undefined: the leader has none). */
export interface Reconcile {
  readonly id: string;
  readonly leader: StoredEntry | undefined;
}

type BatchOp = { type: 'put'; key: string; value: string } | { type: 'del'; key: string };
interface Undo {
  readonly prev: number | undefined;
  readonly wasLive: boolean;
}
interface PendingBatch {
  readonly ops: BatchOp[];
  readonly versions: number[];
  sync: boolean;
  applies: number;
  done: Promise<void>;
}

export class ReplicaStore {
  private readonly db: Level<string, string>;
  private readonly retention: number;
  /** id -> version of the newest applied op (tombstones included). */
  private readonly versions = new Map<string, number>();
  private liveDocs = 0;
  private logCount = 0;
  private maxVersionSeen = 0;
  private writeChain: Promise<unknown> = Promise.resolve();
  private commitPoint: CommitPoint | undefined;
  /** The newest version on disk (maxVersionSeen runs ahead while a batch is being written). */
  private durableMax = 0;
  /** LevelDB snapshot of the latest commit point: what snapshot readers copy. */
  private commitSnapshot: { point: CommitPoint; snapshot: ReturnType<Level<string, string>['snapshot']> } | undefined;
  private trimmed = 0;
  private fenceEpoch = 0;
  private durability: Durability;
  private readonly onWrite: ((w: StoreWrite) => void) | undefined;
  /** Applies waiting for the batch in flight to finish: they go to disk together next. */
  private pending: PendingBatch | undefined;
  private unsynced = false;
  private syncTimer: NodeJS.Timeout | undefined;
  private closed = false;

  private constructor(db: Level<string, string>, retention: number, opts: ReplicaStoreOptions) {
    this.db = db;
    this.retention = retention;
    this.durability = opts.durability ?? DEFAULT_DURABILITY;
    this.onWrite = opts.onWrite;
  }

  /** Opens (creating if needed) the store in `dir` and loads its version map. */
  static async open(dir: string, opts: ReplicaStoreOptions = {}): Promise<ReplicaStore> {
    const db = new Level<string, string>(dir, {
      valueEncoding: 'utf8',
      ...(opts.writeBufferSize !== undefined && { writeBufferSize: opts.writeBufferSize }),
    });
    await db.open();
    const store = new ReplicaStore(db, opts.logRetention ?? 100_000, opts);
    try {
      await store.checkFormat(dir);
    } catch (err) {
      await db.close();
      throw err;
    }
    await store.load();
    store.armSyncTimer();
    store.durableMax = store.maxVersionSeen;
    // What was on disk at open is committed: readers can serve it after a restart.
    await store.commit();
    return store;
  }

  private async checkFormat(dir: string): Promise<void> {
    const format = await this.db.get(FORMAT);
    if (format === FORMAT_VERSION) return;
    if (format === undefined) {
      let empty = true;
      for await (const _ of this.db.keys({ limit: 1 })) empty = false;
      if (empty) {
        await this.db.put(FORMAT, FORMAT_VERSION, { sync: true });
        return;
      }
    }
    throw new ShardexError(
      'SHX_BAD_CONFIG',
      `the replica data in ${dir} was written by another Shardex version (format ${format ?? '1'}, this version reads ${FORMAT_VERSION}); ` +
        'remove that directory so the replica recovers from its leader, or run the version that wrote it',
    );
  }

  private async load(): Promise<void> {
    for await (const [, value] of this.db.iterator({ gte: DOC, lt: DOC_END })) {
      const e = decodeEntry(value);
      this.versions.set(e.id, e.version);
      if (e.doc !== null) this.liveDocs++;
      else this.tombstones.add(e.id);
      if (e.version > this.maxVersionSeen) this.maxVersionSeen = e.version;
    }
    for await (const key of this.db.keys({ gte: LOG, lt: LOG + ':' })) {
      this.logCount++;
      const v = Number(key.slice(1));
      if (v > this.maxVersionSeen) this.maxVersionSeen = v;
    }
    const t = await this.db.get(TRIMMED);
    if (t !== undefined) this.trimmed = Number(t);
    const c = await this.db.get(COMMIT);
    if (c !== undefined) this.commitPoint = JSON.parse(c) as CommitPoint;
    const f = await this.db.get(FENCE);
    if (f !== undefined) this.fenceEpoch = Number(f);
  }

  /** The newest leadership epoch recorded (0 = none yet); persisted with the data. */
  get fence(): number {
    return this.fenceEpoch;
  }

  get durabilityPolicy(): Durability {
    return this.durability;
  }

  /** Changes the durability policy (a collection update); takes effect with the next batch. */
  setDurability(d: Durability): void {
    if (d.mode === this.durability.mode && d.syncIntervalMs === this.durability.syncIntervalMs) return;
    this.durability = d;
    this.armSyncTimer();
  }

  private armSyncTimer(): void {
    if (this.syncTimer) clearInterval(this.syncTimer);
    this.syncTimer = undefined;
    if (this.durability.mode !== 'async' || this.closed) return;
    this.syncTimer = setInterval(() => {
      if (this.unsynced && !this.closed) this.enqueue([], true, []).catch(() => undefined);
    }, this.durability.syncIntervalMs);
    this.syncTimer.unref();
  }

  /** Newest version this replica holds (0 when empty). */
  get maxVersion(): number {
    return this.maxVersionSeen;
  }

  get docCount(): number {
    return this.liveDocs;
  }

  get lastCommit(): CommitPoint | undefined {
    return this.commitPoint;
  }

  versionOf(id: string): number | undefined {
    return this.versions.get(id);
  }

  /**
   * Applies the ops whose version is newer than the stored version of their id, in one
   * atomic batch, and returns those applied. Older or repeated versions are dropped, which
   * is what makes FROMLEADER idempotent and order-insensitive per id. With `fence`, the
   * replica's fence moves to that epoch in the same batch (never backwards). Resolves once
   * the batch is on disk (synced, with durability `request`).
   */
  apply(ops: readonly UpdateOp[], opts: { readonly fence?: number } = {}): Promise<UpdateOp[]> {
    const applied: UpdateOp[] = [];
    const undo: Undo[] = [];
    const batch: BatchOp[] = [];
    const maxBefore = this.maxVersionSeen;
    for (const op of ops) {
      const cur = this.versions.get(op.id);
      if (cur !== undefined && cur >= op.version) continue;
      const text = encodeEntry(op);
      batch.push({ type: 'put', key: logKey(op.version), value: text }, { type: 'put', key: docKey(op.id), value: text });
      const wasLive = cur !== undefined && this.isLiveVersion(op.id);
      undo.push({ prev: cur, wasLive });
      this.versions.set(op.id, op.version);
      this.setLive(op.id, op.doc !== null);
      if (op.doc !== null && !wasLive) this.liveDocs++;
      else if (op.doc === null && wasLive) this.liveDocs--;
      if (op.version > this.maxVersionSeen) this.maxVersionSeen = op.version;
      applied.push(op);
    }
    if (opts.fence !== undefined && opts.fence > this.fenceEpoch) {
      this.fenceEpoch = opts.fence;
      batch.push({ type: 'put', key: FENCE, value: String(opts.fence) });
    }
    if (batch.length === 0) return Promise.resolve(applied);
    const maxAfter = this.maxVersionSeen;
    const written = this.enqueue(batch, this.durability.mode === 'request', applied.map((op) => op.version));
    return written.then(
      () => applied,
      (err: unknown) => {
        this.undo(applied, undo);
        if (this.maxVersionSeen === maxAfter) this.maxVersionSeen = maxBefore;
        throw err;
      },
    );
  }

  /**
   * Queues `batch` for the next group write. Everything queued while a write is in flight goes
   * to disk in one LevelDB batch, synced if any of its applies asked for it.
   */
  private enqueue(batch: BatchOp[], sync: boolean, versions: readonly number[]): Promise<void> {
    let p = this.pending;
    if (p === undefined) {
      const group: PendingBatch = { ops: [], versions: [], sync: false, applies: 0, done: undefined as unknown as Promise<void> };
      group.done = this.writeChain.then(() => this.writeGroup(group));
      this.writeChain = group.done.catch(() => undefined);
      this.pending = p = group;
    }
    for (const op of batch) p.ops.push(op);
    for (const v of versions) p.versions.push(v);
    p.sync ||= sync;
    p.applies++;
    return p.done;
  }

  private async writeGroup(group: PendingBatch): Promise<void> {
    // From here on, new applies start the next group.
    if (this.pending === group) this.pending = undefined;
    const ops = group.ops.length > 0 ? group.ops : [{ type: 'put' as const, key: SYNC_MARK, value: String(Date.now()) }];
    await this.db.batch(ops, { sync: group.sync });
    if (group.sync) this.unsynced = false;
    else this.unsynced = true;
    let max = 0;
    for (const v of group.versions) if (v > max) max = v;
    if (max > this.durableMax) this.durableMax = max;
    this.logCount += group.versions.length;
    this.onWrite?.({ versions: group.versions, sync: group.sync, applies: group.applies });
    // The log is trimmed on the write chain, so that concurrent applies never trim the same
    // entries twice. A failed trim fails no write; the next write tries again.
    if (this.logCount > this.retention * 1.1) await this.trim().catch(() => undefined);
  }

  /**
   * Makes this replica hold exactly `leader`'s entry for each id (undefined = the leader has
   * none), unless our version of it is one `sinceSync` says reached us from the leader after it
   * answered. Removes the log entry of each version replaced, so that no peer syncs it from us
   * later. Convergent recovery uses this for entries a deposed leader applied and nobody acknowledged.
   */
  async reconcile(items: readonly Reconcile[], sinceSync: (version: number) => boolean): Promise<Reconcile[]> {
    await this.flush();
    const batch: BatchOp[] = [];
    const changed: Reconcile[] = [];
    for (const { id, leader } of items) {
      const cur = this.versions.get(id);
      if (cur !== undefined && sinceSync(cur)) continue;
      if (cur === leader?.version) continue;
      if (cur !== undefined) batch.push({ type: 'del', key: logKey(cur) });
      const wasLive = cur !== undefined && this.isLiveVersion(id);
      if (leader === undefined) {
        batch.push({ type: 'del', key: docKey(id) });
        this.versions.delete(id);
        this.tombstones.delete(id);
        if (wasLive) this.liveDocs--;
      } else {
        const text = encodeEntry(leader);
        batch.push({ type: 'put', key: logKey(leader.version), value: text }, { type: 'put', key: docKey(id), value: text });
        this.versions.set(id, leader.version);
        this.setLive(id, leader.doc !== null);
        if (leader.doc !== null && !wasLive) this.liveDocs++;
        else if (leader.doc === null && wasLive) this.liveDocs--;
      }
      changed.push({ id, leader });
    }
    if (batch.length === 0) return changed;
    await this.enqueue(batch, true, []);
    // Trimming drops the oldest entries only, so the newest version is the newest log key.
    let max = 0;
    for await (const key of this.db.keys({ gte: LOG, lt: LOG + ':', reverse: true, limit: 1 })) max = Number(key.slice(1));
    this.maxVersionSeen = max;
    if (this.durableMax > max) this.durableMax = max;
    return changed;
  }

  /** The newest version in the log below `below` (0 when none). */
  async newestVersionBelow(below: number): Promise<number> {
    for await (const key of this.db.keys({ gte: LOG, lt: logKey(below), reverse: true, limit: 1 })) return Number(key.slice(1));
    return 0;
  }

  /** The newest `n` log entries with a version above `after`, newest first (convergent recovery). */
  async recentEntries(after: number, n: number): Promise<StoredEntry[]> {
    const out: StoredEntry[] = [];
    for await (const [, value] of this.db.iterator({ gt: logKey(after), lt: LOG + ':', reverse: true, limit: n })) out.push(decodeEntry(value));
    return out;
  }

  /**
   * Forgets ops whose batch could not be written, so that a resend of the same versions is
   * applied rather than dropped as a duplicate. An id a later apply has since moved on is
   * left as that apply set it.
   */
  private undo(applied: readonly UpdateOp[], undo: ReadonlyArray<{ readonly prev: number | undefined; readonly wasLive: boolean }>): void {
    for (let i = applied.length - 1; i >= 0; i--) {
      const op = applied[i]!;
      const { prev, wasLive } = undo[i]!;
      if (this.versions.get(op.id) !== op.version) continue;
      const live = op.doc !== null;
      if (live && !wasLive) this.liveDocs--;
      else if (!live && wasLive) this.liveDocs++;
      if (prev === undefined) {
        this.versions.delete(op.id);
        this.tombstones.delete(op.id);
      } else {
        this.versions.set(op.id, prev);
        this.setLive(op.id, wasLive);
      }
    }
  }

  // Liveness of each id is tracked beside its version; a Set of tombstoned ids stays small.
  private readonly tombstones = new Set<string>();
  private isLiveVersion(id: string): boolean {
    return !this.tombstones.has(id);
  }
  private setLive(id: string, live: boolean): void {
    if (live) this.tombstones.delete(id);
    else this.tombstones.add(id);
  }

  /** Waits until every write issued so far is on disk. */
  async flush(): Promise<void> {
    await this.writeChain;
  }

  async get(id: string): Promise<StoredEntry | undefined> {
    if (!this.versions.has(id)) return undefined;
    const v = await this.db.get(docKey(id));
    return v === undefined ? undefined : decodeEntry(v);
  }

  async getMany(ids: readonly string[]): Promise<Array<StoredEntry | undefined>> {
    const values = await this.db.getMany(ids.map(docKey));
    return values.map((v) => (v === undefined ? undefined : decodeEntry(v)));
  }

  /** Every stored entry (tombstones included), in id order; for full copies and index rebuilds. */
  async *entries(opts: { afterId?: string } = {}): AsyncGenerator<StoredEntry> {
    const gt = opts.afterId === undefined ? undefined : docKey(opts.afterId);
    const it = gt === undefined ? this.db.iterator({ gte: DOC, lt: DOC_END }) : this.db.iterator({ gt, lt: DOC_END });
    for await (const [, value] of it) yield decodeEntry(value);
  }

  /** The newest `n` versions in the update log, newest first (peer sync). */
  async recentVersions(n: number): Promise<number[]> {
    const out: number[] = [];
    for await (const key of this.db.keys({ gte: LOG, lt: LOG + ':', reverse: true, limit: n })) out.push(Number(key.slice(1)));
    return out;
  }

  /** Highest version trimmed from the log (0 = the log reaches back to the first update). */
  get trimmedThrough(): number {
    return this.trimmed;
  }

  /** Oldest version still in the log, or undefined when the log is empty. */
  async oldestLogVersion(): Promise<number | undefined> {
    for await (const key of this.db.keys({ gte: LOG, lt: LOG + ':', limit: 1 })) return Number(key.slice(1));
    return undefined;
  }

  /** Log entries with `after` < version (<= `upto`), oldest first, at most `limit`. */
  async updatesAfter(after: number, limit: number, upto?: number): Promise<StoredEntry[]> {
    const out: StoredEntry[] = [];
    const lte = upto === undefined ? undefined : logKey(upto);
    const range = lte === undefined ? { gt: logKey(after), lt: LOG + ':', limit } : { gt: logKey(after), lte, limit };
    for await (const [, value] of this.db.iterator(range)) out.push(decodeEntry(value));
    return out;
  }

  /**
   * Records a commit point: the state with every write issued so far, as a LevelDB snapshot
   * that snapshot readers copy. Taken on the write chain, so the snapshot holds exactly the
   * versions up to the point's version.
   */
  commit(): Promise<CommitPoint> {
    const taken = this.writeChain.then(async () => {
      const point: CommitPoint = { version: this.durableMax, at: Date.now() };
      const old = this.commitSnapshot;
      this.commitSnapshot = { point, snapshot: this.db.snapshot() };
      this.commitPoint = point;
      await this.db.put(COMMIT, JSON.stringify(point));
      await old?.snapshot.close();
      return point;
    });
    this.writeChain = taken.catch(() => undefined);
    return taken;
  }

  /** The entries of the latest commit point (tombstones included), in id order. */
  async *commitEntries(): AsyncGenerator<StoredEntry> {
    const c = this.commitSnapshot;
    if (!c) return;
    c.snapshot.ref();
    try {
      for await (const [, value] of this.db.iterator({ gte: DOC, lt: DOC_END, snapshot: c.snapshot })) yield decodeEntry(value);
    } finally {
      c.snapshot.unref();
    }
  }

  private async trim(): Promise<void> {
    const drop = this.logCount - this.retention;
    if (drop <= 0) return;
    let cutoff: string | undefined;
    let i = 0;
    for await (const key of this.db.keys({ gte: LOG, lt: LOG + ':', limit: drop })) {
      cutoff = key;
      i++;
    }
    if (cutoff === undefined) return;
    await this.db.clear({ gte: LOG, lte: cutoff });
    this.trimmed = Number(cutoff.slice(1));
    await this.db.put(TRIMMED, String(this.trimmed));
    this.logCount -= i;
  }

  /** Removes everything (before a full copy from the leader). */
  async clear(): Promise<void> {
    await this.flush();
    await this.db.clear();
    this.versions.clear();
    this.tombstones.clear();
    this.liveDocs = 0;
    this.logCount = 0;
    this.maxVersionSeen = 0;
    this.durableMax = 0;
    this.commitPoint = undefined;
    this.trimmed = 0;
    // The fence and the format survive a reset: a full copy does not make older leaders acceptable.
    await this.db.batch(
      [
        { type: 'put', key: FORMAT, value: FORMAT_VERSION },
        { type: 'put', key: FENCE, value: String(this.fenceEpoch) },
      ],
      { sync: true },
    );
    await this.commitSnapshot?.snapshot.close();
    this.commitSnapshot = undefined;
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.syncTimer) clearInterval(this.syncTimer);
    // An async-durability replica syncs what it has before it closes.
    if (this.unsynced) await this.enqueue([], true, []).catch(() => undefined);
    await this.flush();
    await this.commitSnapshot?.snapshot.close();
    this.commitSnapshot = undefined;
    await this.db.close();
  }
}
