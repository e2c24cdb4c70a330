// One replica's durable state in LevelDB: the update log keyed by version and the current
// documents keyed by id, both written in one atomic batch per applied request. A stored
// entry is the same JSON text in both places: {"id","v","doc"} (doc null = tombstone).
// Tombstones keep their version so that a late, older add cannot resurrect a deleted id.
import { Level } from 'level';

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

export interface ReplicaStoreOptions {
  /** Update-log entries kept for peer sync; older ones are trimmed. */
  readonly logRetention?: number;
  /**
   * LevelDB's write buffer (memtable) in bytes; default LevelDB's 4 MiB. A larger buffer means
   * fewer, larger flushes and less compaction per write, for that much more memory per replica.
   */
  readonly writeBufferSize?: number;
}

const LOG = 'l';
const DOC = 'd';
// Keys compare as UTF-8 bytes: an id starting with a character above U+FFFF (or with U+FFFF
// itself) sorts after DOC + '\uffff', so the document range ends at the next prefix instead.
const DOC_END = 'e';
const COMMIT = 'm:commit';
const TRIMMED = 'm:trimmed';
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

  private constructor(db: Level<string, string>, retention: number) {
    this.db = db;
    this.retention = retention;
  }

  /** Opens (creating if needed) the store in `dir` and loads its version map. */
  static async open(dir: string, opts: ReplicaStoreOptions = {}): Promise<ReplicaStore> {
    const db = new Level<string, string>(dir, {
      valueEncoding: 'utf8',
      ...(opts.writeBufferSize !== undefined && { writeBufferSize: opts.writeBufferSize }),
    });
    await db.open();
    const store = new ReplicaStore(db, opts.logRetention ?? 100_000);
    await store.load();
    store.durableMax = store.maxVersionSeen;
    // What was on disk at open is committed: readers can serve it after a restart.
    await store.commit();
    return store;
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
   * is what makes FROMLEADER idempotent and order-insensitive per id.
   */
  apply(ops: readonly UpdateOp[]): Promise<UpdateOp[]> {
    const applied: UpdateOp[] = [];
    const undo: Array<{ readonly prev: number | undefined; readonly wasLive: boolean }> = [];
    const maxBefore = this.maxVersionSeen;
    const batch: Array<{ type: 'put'; key: string; value: string }> = [];
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
    if (batch.length === 0) return Promise.resolve(applied);
    const maxAfter = this.maxVersionSeen;
    const write = this.writeChain.then(() => this.db.batch(batch));
    // The log is counted and trimmed on the write chain, so that the count is what is on
    // disk and concurrent applies never trim the same entries twice. A failed trim fails
    // no write; the next write tries again.
    const trimmed = write.then(() => {
      if (maxAfter > this.durableMax) this.durableMax = maxAfter;
      this.logCount += applied.length;
      return this.logCount > this.retention * 1.1 ? this.trim() : undefined;
    });
    this.writeChain = trimmed.catch(() => undefined);
    return write.then(
      async () => {
        await trimmed.catch(() => undefined);
        return applied;
      },
      (err: unknown) => {
        this.undo(applied, undo);
        if (this.maxVersionSeen === maxAfter) this.maxVersionSeen = maxBefore;
        throw err;
      },
    );
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
    await this.commitSnapshot?.snapshot.close();
    this.commitSnapshot = undefined;
  }

  async close(): Promise<void> {
    await this.flush();
    await this.commitSnapshot?.snapshot.close();
    this.commitSnapshot = undefined;
    await this.db.close();
  }
}
