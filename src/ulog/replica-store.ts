// One replica's durable state in LevelDB: the update log keyed by version and the current
// documents keyed by id, both written in one atomic batch per applied request. A stored
// entry is the same JSON text in both places: {"id","v","doc"} (doc null = tombstone).
// Tombstones keep their version so that a late, older add cannot resurrect a deleted id, for
// a retention window (Elasticsearch's index.gc_deletes, 60 s) far longer than any update is in
// flight; then they are dropped. Memory does not grow with the ids written: versions of ids not
// recently touched are read from LevelDB, the live count is persisted with every batch.
//
// Every batch that changes documents also journals their ids under a sequence number (the change
// journal), and the store tells its sink (the search index) what each batch applied, in order,
// as soon as the batch is on disk: the index's persisted segment (src/index/segment-file.ts)
// records the sequence it holds, and a restart replays only the ids journaled after it.
//
// Writes are group-committed: applies issued while a batch is being written wait and go to disk
// together in the next batch, so that concurrent requests share one sync. With durability
// `request` every batch is synced (LevelDB `sync: true`) before its applies resolve, so a replica
// that answers an update has it on disk; with `async` batches are synced every syncIntervalMs.
import { Level } from 'level';
import { ShardexError } from '../errors.js';
import { DEFAULT_DOC_CACHE_SIZE, DocCache } from './doc-cache.js';
import { decodeSum, encodeSum, LogSums, sumOf, type BucketSum, type Digest } from './log-sums.js';

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

/** The versions of a stretch of the update log, summed up: two logs with the same digest hold the same versions there. */
export type LogDigest = Digest;

export interface CommitPoint {
  readonly version: number;
  readonly at: number;
}

/** A commit point held for copying (ReplicaStore.openCommit). */
export interface HeldCommit {
  readonly point: CommitPoint;
  /** Its entries (tombstones included), in id order; read once (this or values). */
  entries(): AsyncGenerator<StoredEntry>;
  /** The same as stored (encodeEntry's text), for ReplicaStore.loadCopy. */
  values(): AsyncGenerator<string>;
  release(): Promise<void>;
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
  /**
   * LevelDB's block compression (Snappy); off by default. On 2 cores it was about 40% of the CPU
   * of LevelDB's compactions, which run beside the ingest and after a restart (bench/RESULTS.md,
   * "LevelDB's block compression, now off by default"); on, a store of the corpus takes about
   * 0.6 times the disk.
   */
  readonly compression?: boolean;
  readonly durability?: Durability;
  /** Called after every batch written to LevelDB. */
  readonly onWrite?: (w: StoreWrite) => void;
  /** How long a delete's tombstone is kept (Elasticsearch's gc_deletes); default 60 s. */
  readonly deleteRetentionMs?: number;
  /** Ids whose version and liveness stay in memory (the recently touched); default 100,000. */
  readonly idCacheSize?: number;
  /**
   * Parsed documents kept for pages of hits (Solr's documentCache), least recently used out;
   * default 512, 0 turns it off. An id's entry is dropped as soon as a batch writing it is on disk.
   */
  readonly docCacheSize?: number;
  /**
   * Journal the ids each batch changes (default true): what a persisted index replays after its
   * segment, which then trims the journal. A store without one (a reader's copy) says false.
   */
  readonly journalChanges?: boolean;
}

export const DEFAULT_DELETE_RETENTION_MS = 60_000;
/** Update-log entries kept per shard for peer sync, by default. */
export const DEFAULT_LOG_RETENTION = 100_000;

const LOG = 'l';
const DOC = 'd';
/** getMany reads up to this many ids synchronously. */
const SYNC_READ_MAX = 20;
const SYNC_GET = { keyEncoding: 'buffer', valueEncoding: 'utf8' } as const;
// Keys compare as UTF-8 bytes: an id starting with a character above U+FFFF (or with U+FFFF
// itself) sorts after DOC + '\uffff', so the document range ends at the next prefix instead.
const DOC_END = 'e';
const COMMIT = 'm:commit';
const TRIMMED = 'm:trimmed';
/** The newest leadership epoch this replica has seen: leaders of older epochs are fenced off. */
const FENCE = 'm:fence';
const SYNC_MARK = 'm:sync';
/** The live documents, written with every batch that changes them. */
const COUNT = 'm:count';
/** The update log's entries, written with every batch that adds some, so that opening never counts them. */
const LOG_COUNT = 'm:logcount';
/** Sums of the log's versions per bucket (log-sums.ts): h<bucket, 16 digits> -> sum, written with every batch that changes the log. */
const SUMS = 'h';
const sumKey = (bucket: number): string => SUMS + String(bucket).padStart(VERSION_WIDTH, '0');
/** Present once the bucket sums cover the whole log (stores written before them are summed once at open). */
const SUMS_KEPT = 'm:logsums';
/**
 * A key kept right after the sums (it is the bound of their range, never read as one): a scan of
 * the sums stops at it instead of stepping over what follows, the trimmed log's deleted keys,
 * which LevelDB keeps until a compaction reaches them (400,000 of them cost 0.5 s per scan).
 */
const SUMS_END = SUMS + ':';
/**
 * Present while the replica's data is not a whole copy of its shard's (a full copy under way, or
 * a store created after its shard had a leader): such a replica may not lead until a recovery
 * completes, whatever its term says (Solr keeps a recovering replica's term marked likewise).
 */
const INCOMPLETE = 'm:incomplete';
/**
 * Present while a peer sync is under way: the version it compares the logs from (recovery.ts,
 * syncStartOf). A sync stopped part way may have stored a newer leader's entries above writes of
 * this replica's it had not compared yet; the next one starts no later than this one did.
 */
const SYNC_FLOOR = 'm:syncfloor';
/** Tombstones by the time they were written: t<ms, 16 digits><id> -> version (for the purge). */
const TOMB = 't';
const tombKey = (at: number, id: string): string => TOMB + String(at).padStart(VERSION_WIDTH, '0') + id;
/** The change journal: c<seq, 16 digits> -> JSON ids changed by that batch. */
const CHANGES = 'c';
const changeKey = (seq: number): string => CHANGES + String(seq).padStart(VERSION_WIDTH, '0');
/** The newest change sequence used (survives a clear and the journal's trimming). */
const SEQ = 'm:seq';
/** Present while a wipe is under way (LevelDB's clear is not atomic): the next open finishes it. */
const WIPING = 'm:wiping';
/** The metadata's keys ('m:...') sort between these two; every other key is data. */
const META = 'm:';
const META_END = 'm;';
const FORMAT = 'm:format';
/** Versions are epoch-major since format 2 (src/distrib/shard-state.ts). */
const FORMAT_VERSION = '2';
const VERSION_WIDTH = 16;

/** Log keys per read while summing a stretch of the log. */
const SCAN_PAGE = 10_000;
/** Adds `by` to the count of `key`; a count that reaches 0 leaves the map. */
function count(map: Map<string, number>, key: string, by: 1 | -1): void {
  const n = (map.get(key) ?? 0) + by;
  if (n <= 0) map.delete(key);
  else map.set(key, n);
}

export const logKey = (version: number): string => LOG + String(version).padStart(VERSION_WIDTH, '0');
const docKey = (id: string): string => DOC + id;

/** The writes that record changed bucket sums (an emptied bucket's key goes). */
function sumOps(sums: ReadonlyMap<number, BucketSum>): BatchOp[] {
  const ops: BatchOp[] = [];
  for (const [bucket, sum] of sums) ops.push(sum.count === 0 ? { type: 'del', key: sumKey(bucket) } : { type: 'put', key: sumKey(bucket), value: encodeSum(sum) });
  return ops;
}

/** An op's document as JSON text: the text it carries, else serialized now; undefined for a delete. */
export function docText(op: { readonly doc: Doc | null; readonly text?: string }): string | undefined {
  return op.doc === null ? undefined : (op.text ?? JSON.stringify(op.doc));
}

/** What is known of an id: its newest version (0 = none) and whether that is a live document. */
interface Known {
  readonly version: number;
  readonly live: boolean;
}
const NONE: Known = { version: 0, live: false };

export function encodeEntry(op: UpdateOp): string {
  return `{"id":${JSON.stringify(op.id)},"v":${op.version},"doc":${docText(op) ?? 'null'}}`;
}

export function decodeEntry(text: string): StoredEntry {
  const e = JSON.parse(text) as { id: string; v: number; doc: Doc | null };
  return { id: e.id, version: e.v, doc: e.doc };
}

const DOC_NULL = ',"doc":null}';

/** The id, version and liveness of a stored entry's text, without parsing its document. */
export function entryHead(text: string): { id: string; version: number; live: boolean } {
  // encodeEntry's layout: {"id":<JSON string>,"v":<version>,"doc":<document or null>}
  if (text.startsWith('{"id":"')) {
    let end = 7;
    while (end < text.length) {
      const c = text.charCodeAt(end);
      if (c === 0x5c) end += 2;
      else if (c === 0x22) break;
      else end++;
    }
    const v = end + 1;
    const docAt = text.startsWith(',"v":', v) ? text.indexOf(',"doc":', v + 5) : -1;
    const version = docAt < 0 ? NaN : Number(text.slice(v + 5, docAt));
    if (Number.isSafeInteger(version)) {
      return { id: JSON.parse(text.slice(6, end + 1)) as string, version, live: !(docAt === text.length - DOC_NULL.length && text.endsWith(DOC_NULL)) };
    }
  }
  const e = decodeEntry(text);
  return { id: e.id, version: e.version, live: e.doc !== null };
}

/** An id and the leader's entry for it (undefined: the leader has none). */
export interface Reconcile {
  readonly id: string;
  readonly leader: StoredEntry | undefined;
}

type BatchOp = { type: 'put'; key: string; value: string } | { type: 'del'; key: string };

/**
 * Writes `ops` as one atomic LevelDB batch. A chained batch hands each op to LevelDB as it is
 * added; the array form copies every op into a new object first and reads it back property by
 * property, which cost twice the CPU per document on the ingest path (a 500-document batch of
 * ~1 KB documents: 31-38 against 65-82 us per document, .prof/batchbench.mjs).
 */
async function writeBatch(db: Level<string, string>, ops: readonly BatchOp[], sync: boolean): Promise<void> {
  const batch = db.batch();
  try {
    for (const op of ops) {
      if (op.type === 'put') batch.put(op.key, op.value);
      else batch.del(op.key);
    }
  } catch (err) {
    // A refused op leaves nothing written; the batch is detached from the db (a failed write closes itself).
    await batch.close();
    throw err;
  }
  await batch.write({ sync });
}
interface Undo {
  readonly prev: Known;
}
interface Decision {
  readonly applied: UpdateOp[];
  readonly undo: Undo[];
  /** Resolves when the batch holding the decision is on disk. */
  readonly written: Promise<void>;
  /** Ids pinned in memory until then. */
  readonly ids: string[];
}
interface PendingBatch {
  readonly ops: BatchOp[];
  readonly versions: number[];
  /** What the batch applies, in order, for the sink. */
  readonly applied: UpdateOp[];
  /** Ids whose documents the batch changes (journaled). */
  readonly changed: string[];
  /** Called once the batch is on disk and the sink was told (see atDurablePoint). */
  readonly after: Array<(seq: number) => void>;
  readonly logAdded: number[];
  readonly logRemoved: number[];
  sync: boolean;
  applies: number;
  done: Promise<void>;
}

/** What a batch adds to its group besides its LevelDB ops. */
interface GroupExtras {
  readonly applied?: readonly UpdateOp[];
  readonly changed?: readonly string[];
  readonly after?: (seq: number) => void;
  /** Log entries the batch removes, and adds beside `versions` (reconcile). */
  readonly logRemoved?: readonly number[];
  readonly logAdded?: readonly number[];
}

/** Told, in order, what each batch applied once it is on disk (deletes as ops with doc null). */
export type ApplySink = (ops: readonly UpdateOp[]) => void;

export class ReplicaStore {
  private readonly db: Level<string, string>;
  private readonly retention: number;
  /**
   * What is known of recently touched ids, oldest first (a Map keeps insertion order); ids of
   * applies not yet on disk are pinned and never evicted, nor are ids looked up for a decision
   * still to be made (held). Others are read from LevelDB.
   */
  private readonly known = new Map<string, Known>();
  private readonly pinned = new Map<string, number>();
  private readonly held = new Map<string, number>();
  private readonly idCacheSize: number;
  /** Parsed documents of recent pages of hits (getMany); an id's entry goes when a batch writing it is on disk. */
  private readonly docCache: DocCache;
  private readonly docCacheCounts = { hits: 0, misses: 0 };
  private readonly deleteRetentionMs: number;
  /** Applies decide one at a time (their look-ups are async), in the order they were called. */
  private decideChain: Promise<unknown> = Promise.resolve();
  private readonly toDecide: Array<{ ops: readonly UpdateOp[]; opts: { readonly fence?: number }; resolve(d: Decision): void; reject(err: unknown): void }> = [];
  private purgeTimer: NodeJS.Timeout | undefined;
  private liveDocs = 0;
  private logCount = 0;
  private isIncomplete = false;
  /** The store was created by this open (its directory held no data). */
  private wasCreated = false;
  /** The log's versions summed per bucket (digests for peer sync). */
  private readonly sums = new LogSums();
  private maxVersionSeen = 0;
  /** At least the newest version the update log holds a key of (never lowered but by a wipe): see newToLog. */
  private logTop = 0;
  private writeChain: Promise<unknown> = Promise.resolve();
  private commitPoint: CommitPoint | undefined;
  /** The newest version on disk (maxVersionSeen runs ahead while a batch is being written). */
  private durableMax = 0;
  /** LevelDB snapshot of the latest commit point: what snapshot readers copy. */
  private copiesHeld = 0;
  private commitSnapshot: { point: CommitPoint; snapshot: ReturnType<Level<string, string>['snapshot']>; copies: number } | undefined;
  private trimmed = 0;
  /** The journal was dropped up to here by this process (0: not yet). */
  private changesDropped = 0;
  private fenceEpoch = 0;
  /** SYNC_FLOOR's value, if present. */
  private floor: number | undefined;
  private durability: Durability;
  private readonly onWrite: ((w: StoreWrite) => void) | undefined;
  /** Applies waiting for the batch in flight to finish: they go to disk together next. */
  private pending: PendingBatch | undefined;
  /** The newest group of writes queued (written or not): it is on disk once every write queued so far is. */
  private lastGroup: Promise<void> | undefined;
  private unsynced = false;
  private syncTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private sink: ApplySink | undefined;
  private readonly journal: boolean;
  /** Newest change sequence assigned to a batch. */
  private seq = 0;
  /** Newest change sequence whose batch is on disk and whose ops the sink was told. */
  private appliedSeq = 0;

  private constructor(db: Level<string, string>, retention: number, opts: ReplicaStoreOptions) {
    this.db = db;
    this.retention = retention;
    this.durability = opts.durability ?? DEFAULT_DURABILITY;
    this.onWrite = opts.onWrite;
    this.idCacheSize = opts.idCacheSize ?? 100_000;
    this.docCache = new DocCache(opts.docCacheSize ?? DEFAULT_DOC_CACHE_SIZE);
    this.deleteRetentionMs = opts.deleteRetentionMs ?? DEFAULT_DELETE_RETENTION_MS;
    this.journal = opts.journalChanges ?? true;
  }

  /** Opens (creating if needed) the store in `dir` and loads its version map. */
  static async open(dir: string, opts: ReplicaStoreOptions = {}): Promise<ReplicaStore> {
    const db = new Level<string, string>(dir, {
      valueEncoding: 'utf8',
      compression: opts.compression ?? false,
      ...(opts.writeBufferSize !== undefined && { writeBufferSize: opts.writeBufferSize }),
    });
    await db.open();
    const store = new ReplicaStore(db, opts.logRetention ?? DEFAULT_LOG_RETENTION, opts);
    try {
      await store.checkFormat(dir);
    } catch (err) {
      await db.close();
      throw err;
    }
    await store.load();
    store.armSyncTimer();
    store.armPurgeTimer();
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
        this.wasCreated = true;
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

  /** Reads what the store needs at open: bounded by the log's retention, not by the documents. */
  private async load(): Promise<void> {
    if ((await this.db.get(WIPING)) !== undefined) {
      // The process stopped during a wipe for a full copy: it is finished first.
      const f = await this.db.get(FENCE);
      if (f !== undefined) this.fenceEpoch = Number(f);
      const seq = await this.db.get(SEQ);
      if (seq !== undefined) this.seq = Number(seq);
      await this.clearData();
    }
    const logCount = await this.db.get(LOG_COUNT);
    this.isIncomplete = (await this.db.get(INCOMPLETE)) !== undefined;
    if (logCount !== undefined && (await this.db.get(SUMS_KEPT)) !== undefined) {
      this.logCount = Number(logCount);
      for await (const key of this.db.keys({ gte: LOG, lt: LOG + ':', reverse: true, limit: 1 })) this.maxVersionSeen = Number(key.slice(1));
      let summed = 0;
      if ((await this.db.get(SUMS_END)) === undefined) await this.db.put(SUMS_END, '');
      for (const [key, value] of await this.db.iterator({ gte: SUMS, lt: SUMS_END }).all()) {
        const sum = decodeSum(value);
        if (sum === undefined) throw new ShardexError('SHX_INTERNAL', `the update log's sums in ${key} are damaged`);
        this.sums.set(Number(key.slice(1)), sum);
        summed += sum.count;
      }
      // Sums that do not count the log (an older version wrote to this store meanwhile) are made again.
      if (summed !== this.logCount) await this.resum();
    } else await this.resum();
    const t = await this.db.get(TRIMMED);
    if (t !== undefined) this.trimmed = Number(t);
    // Trimming drops the oldest log entries only: the newest version is in the log, or was trimmed.
    if (this.trimmed > this.maxVersionSeen) this.maxVersionSeen = this.trimmed;
    this.logTop = this.maxVersionSeen;
    const c = await this.db.get(COMMIT);
    if (c !== undefined) this.commitPoint = JSON.parse(c) as CommitPoint;
    const f = await this.db.get(FENCE);
    if (f !== undefined) this.fenceEpoch = Number(f);
    const floor = await this.db.get(SYNC_FLOOR);
    if (floor !== undefined) this.floor = Number(floor);
    const n = await this.db.get(COUNT);
    if (n !== undefined) this.liveDocs = Number(n);
    const seq = await this.db.get(SEQ);
    if (seq !== undefined) this.seq = this.appliedSeq = Number(seq);
  }

  /**
   * Counts and sums the log again from its keys (bounded by the log's retention) and records both:
   * for a store written before they were kept, or whose sums do not count its log.
   */
  private async resum(): Promise<void> {
    const versions: number[] = [];
    for (const key of await this.db.keys({ gte: LOG, lt: LOG + ':' }).all()) versions.push(Number(key.slice(1)));
    this.logCount = versions.length;
    if (versions.length > 0) this.maxVersionSeen = Math.max(this.maxVersionSeen, versions[versions.length - 1]!);
    this.sums.clear();
    const stale = await this.db.keys({ gte: SUMS, lt: SUMS_END }).all();
    const sums = this.sums.preview(versions);
    await writeBatch(
      this.db,
      [
        ...stale.map((key): BatchOp => ({ type: 'del', key })),
        ...sumOps(sums),
        { type: 'put', key: LOG_COUNT, value: String(this.logCount) },
        { type: 'put', key: SUMS_KEPT, value: '1' },
        { type: 'put', key: SUMS_END, value: '' },
      ],
      true,
    );
    this.sums.commit(sums);
  }

  /** The replica's data is not a whole copy of its shard's yet: it may not lead (see INCOMPLETE). */
  get incomplete(): boolean {
    return this.isIncomplete;
  }

  /** This open created the store (its directory held no data). */
  get created(): boolean {
    return this.wasCreated;
  }

  /** Records that the data is not a whole copy of the shard's (until markComplete()). */
  async markIncomplete(): Promise<void> {
    await this.db.put(INCOMPLETE, '1', { sync: true });
    this.isIncomplete = true;
  }

  /** The version the peer sync under way compares the logs from (SYNC_FLOOR); undefined when none is. */
  get syncFloor(): number | undefined {
    return this.floor;
  }

  /** Records, synced, where the peer sync about to run compares from; undefined once it has converged. */
  async setSyncFloor(version: number | undefined): Promise<void> {
    if (version === this.floor) return;
    if (version === undefined) await this.db.del(SYNC_FLOOR, { sync: true });
    else await this.db.put(SYNC_FLOOR, String(version), { sync: true });
    this.floor = version;
  }

  /** Records that a recovery made the data a whole copy of the shard's. */
  async markComplete(): Promise<void> {
    if (!this.isIncomplete) return;
    await this.db.del(INCOMPLETE, { sync: true });
    this.isIncomplete = false;
  }

  /** Where every batch's applied ops go once it is on disk (the search index). */
  setSink(sink: ApplySink | undefined): void {
    this.sink = sink;
  }

  /** The change sequence the sink has been told everything up to. */
  get changeSeq(): number {
    return this.appliedSeq;
  }

  /** The ids journaled after `seq` (each once): what changed since a segment holding `seq` was written. */
  async changedSince(seq: number): Promise<string[]> {
    const ids = new Set<string>();
    for await (const value of this.db.values({ gt: changeKey(seq), lt: CHANGES + ':' })) for (const id of JSON.parse(value) as string[]) ids.add(id);
    return [...ids];
  }

  /** Drops the journal up to `seq` (a segment holds those changes now). */
  async dropChangesThrough(seq: number): Promise<void> {
    // After the last drop of this process: the keys before it are deleted already (see trim()).
    await this.db.clear({ ...(this.changesDropped > 0 ? { gt: changeKey(this.changesDropped) } : { gte: CHANGES }), lte: changeKey(seq) });
    this.changesDropped = Math.max(this.changesDropped, seq);
  }

  /**
   * Runs `fn` right after a synced write, once every batch before it is on disk and the sink was
   * told of it, and before anything later is: `fn` sees the sink's state at exactly `seq`.
   */
  atDurablePoint<T>(fn: (seq: number) => T): Promise<T> {
    let result: { value: T } | undefined;
    return this.enqueue([], true, [], { after: (seq) => (result = { value: fn(seq) }) }).then(() => {
      if (result === undefined) throw new ShardexError('SHX_INTERNAL', 'the durable point was never reached');
      return result.value;
    });
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

  /** Entries in the update log (bounded by logRetention, trimmed in steps of a tenth). */
  get logSize(): number {
    return this.logCount;
  }

  get lastCommit(): CommitPoint | undefined {
    return this.commitPoint;
  }

  /** The newest version this replica holds of `id` (tombstones included), or undefined. */
  async versionOf(id: string): Promise<number | undefined> {
    const k = this.known.get(id) ?? (await this.lookUp([id]))[0]!;
    return k.version === 0 ? undefined : k.version;
  }

  /** What LevelDB holds of these ids (for ids not known in memory). */
  private async lookUp(ids: readonly string[]): Promise<Known[]> {
    const values = await this.db.getMany(ids.map(docKey));
    return values.map((v) => {
      if (v === undefined) return NONE;
      const e = decodeEntry(v);
      return { version: e.version, live: e.doc !== null };
    });
  }

  /**
   * Loads into memory what is known of every id of `ids`, before a decision about them, and
   * keeps it there until the returned release is called: an apply finishing meanwhile evicts
   * ids, and an id evicted between its look-up and its decision would be taken as never written.
   */
  private async remember(ids: readonly string[]): Promise<() => void> {
    for (const id of ids) count(this.held, id, 1);
    const release = (): void => {
      for (const id of ids) count(this.held, id, -1);
      this.evict();
    };
    const missing = [...new Set(ids.filter((id) => !this.known.has(id)))];
    if (missing.length === 0) return release;
    try {
      const found = await this.lookUp(missing);
      missing.forEach((id, i) => {
        if (!this.known.has(id)) this.known.set(id, found[i]!);
      });
    } catch (err) {
      release();
      throw err;
    }
    return release;
  }

  private setKnown(id: string, k: Known): void {
    // Re-inserted: the most recently touched ids are the last to be evicted.
    this.known.delete(id);
    this.known.set(id, k);
  }

  private pin(id: string): void {
    count(this.pinned, id, 1);
  }

  private unpin(ids: readonly string[]): void {
    for (const id of ids) count(this.pinned, id, -1);
    this.evict();
  }

  /** Forgets the least recently touched ids beyond idCacheSize, but those pinned or held. */
  private evict(): void {
    if (this.known.size <= this.idCacheSize) return;
    for (const id of this.known.keys()) {
      if (this.known.size <= this.idCacheSize) break;
      if (!this.pinned.has(id) && !this.held.has(id)) this.known.delete(id);
    }
  }

  /**
   * Applies the ops whose version is newer than the stored version of their id, in one
   * atomic batch, and returns those applied. Older or repeated versions are dropped, which
   * is what makes FROMLEADER idempotent and order-insensitive per id. With `fence`, the
   * replica's fence moves to that epoch in the same batch (never backwards). Resolves once
   * the batch is on disk (synced, with durability `request`).
   */
  apply(ops: readonly UpdateOp[], opts: { readonly fence?: number } = {}): Promise<UpdateOp[]> {
    const decided = new Promise<Decision>((resolve, reject) => this.toDecide.push({ ops, opts, resolve, reject }));
    // The first apply queued schedules a round that decides every apply queued by the time it runs.
    if (this.toDecide.length === 1) {
      const round = this.decideChain.then(() => this.decideQueued());
      this.decideChain = round.catch(() => undefined);
    }
    return decided.then(({ applied, undo, written, ids }) =>
      written.then(
        () => {
          this.unpin(ids);
          return applied;
        },
        (err: unknown) => {
          this.undoApplied(applied, undo);
          this.unpin(ids);
          throw err;
        },
      ),
    );
  }

  /** One look-up for every queued apply's unknown ids, then each decided in the order it was called. */
  private async decideQueued(): Promise<void> {
    const queued = this.toDecide.splice(0);
    let release: () => void;
    try {
      release = await this.remember(queued.flatMap((q) => q.ops.map((op) => op.id)));
    } catch (err) {
      for (const q of queued) q.reject(err);
      return;
    }
    for (const q of queued) {
      try {
        q.resolve(this.decide(q.ops, q.opts));
      } catch (err) {
        q.reject(err);
      }
    }
    release();
  }

  /** Decides which ops apply (in memory, at once: their ids are known) and queues their batch. */
  private decide(ops: readonly UpdateOp[], opts: { readonly fence?: number }): Decision {
    const applied: UpdateOp[] = [];
    const undo: Undo[] = [];
    const batch: BatchOp[] = [];
    const ids: string[] = [];
    const maxBefore = this.maxVersionSeen;
    const liveBefore = this.liveDocs;
    const now = Date.now();
    // An op dropped for a version of its id still being written is on disk only once that is:
    // its apply must not resolve before (a replica would acknowledge what a crash can lose).
    let behindWrite = false;
    for (const op of ops) {
      const cur = this.known.get(op.id) ?? NONE;
      if (cur.version >= op.version) {
        if (this.pinned.has(op.id)) behindWrite = true;
        continue;
      }
      const text = encodeEntry(op);
      batch.push({ type: 'put', key: logKey(op.version), value: text }, { type: 'put', key: docKey(op.id), value: text });
      if (op.doc === null) batch.push({ type: 'put', key: tombKey(now, op.id), value: String(op.version) });
      undo.push({ prev: cur });
      this.setKnown(op.id, { version: op.version, live: op.doc !== null });
      this.pin(op.id);
      ids.push(op.id);
      if (op.doc !== null && !cur.live) this.liveDocs++;
      else if (op.doc === null && cur.live) this.liveDocs--;
      if (op.version > this.maxVersionSeen) this.maxVersionSeen = op.version;
      applied.push(op);
    }
    if (this.liveDocs !== liveBefore) batch.push({ type: 'put', key: COUNT, value: String(this.liveDocs) });
    if (opts.fence !== undefined && opts.fence > this.fenceEpoch) {
      this.fenceEpoch = opts.fence;
      batch.push({ type: 'put', key: FENCE, value: String(opts.fence) });
    }
    // Groups are written in order: the newest queued holds every write still under way.
    const earlier = behindWrite ? this.lastGroup : undefined;
    if (batch.length === 0) return { applied, undo, written: earlier ?? Promise.resolve(), ids };
    const maxAfter = this.maxVersionSeen;
    const own = this.enqueue(batch, this.durability.mode === 'request', applied.map((op) => op.version), { applied, changed: ids }).catch((err: unknown) => {
      if (this.maxVersionSeen === maxAfter) this.maxVersionSeen = maxBefore;
      throw err;
    });
    const written = earlier === undefined ? own : own.then(() => earlier);
    return { applied, undo, written, ids };
  }

  /**
   * Queues `batch` for the next group write. Everything queued while a write is in flight goes
   * to disk in one LevelDB batch, synced if any of its applies asked for it.
   */
  private enqueue(batch: BatchOp[], sync: boolean, versions: readonly number[], extras: GroupExtras = {}): Promise<void> {
    let p = this.pending;
    if (p === undefined) {
      const group: PendingBatch = { ops: [], versions: [], applied: [], changed: [], after: [], logAdded: [], logRemoved: [], sync: false, applies: 0, done: undefined as unknown as Promise<void> };
      group.done = this.writeChain.then(() => this.writeGroup(group));
      this.writeChain = group.done.catch(() => undefined);
      this.lastGroup = group.done;
      this.pending = p = group;
    }
    for (const op of batch) p.ops.push(op);
    for (const v of versions) p.versions.push(v);
    if (extras.applied) for (const op of extras.applied) p.applied.push(op);
    if (extras.changed) for (const id of extras.changed) p.changed.push(id);
    if (extras.after) p.after.push(extras.after);
    if (extras.logAdded) for (const v of extras.logAdded) p.logAdded.push(v);
    if (extras.logRemoved) for (const v of extras.logRemoved) p.logRemoved.push(v);
    p.sync ||= sync;
    // A durable point or a timed sync joins a batch without being one of its applies.
    if (extras.applied) p.applies++;
    return p.done;
  }

  private async writeGroup(group: PendingBatch): Promise<void> {
    // From here on, new applies start the next group.
    if (this.pending === group) this.pending = undefined;
    const ops = group.ops.length > 0 ? group.ops : [{ type: 'put' as const, key: SYNC_MARK, value: String(Date.now()) }];
    let seq = this.appliedSeq;
    const added = await this.newToLog(group.versions);
    if (added.length > 0) ops.push({ type: 'put', key: LOG_COUNT, value: String(this.logCount + added.length) });
    const sums = this.sums.preview(group.logAdded.length > 0 ? [...added, ...group.logAdded] : added, group.logRemoved);
    ops.push(...sumOps(sums));
    if (this.journal && group.changed.length > 0) {
      seq = ++this.seq;
      ops.push({ type: 'put', key: changeKey(seq), value: JSON.stringify(group.changed) }, { type: 'put', key: SEQ, value: String(seq) });
    }
    try {
      await writeBatch(this.db, ops, group.sync);
    } catch (err) {
      if (seq !== this.appliedSeq) this.seq = seq - 1;
      throw err;
    } finally {
      // Before anyone is told the batch is written: from here on a page reads what it wrote.
      if (this.docCache.size > 0) for (const op of ops) if (op.key.startsWith(DOC)) this.docCache.delete(op.key.slice(DOC.length));
    }
    // Synchronously, in group order: the sink's state is exactly the batches up to appliedSeq.
    this.sums.commit(sums);
    if (group.applied.length > 0) this.sink?.(group.applied);
    this.appliedSeq = seq;
    for (const after of group.after) after(seq);
    if (group.sync) this.unsynced = false;
    else this.unsynced = true;
    let max = 0;
    for (const v of group.versions) if (v > max) max = v;
    if (max > this.durableMax) this.durableMax = max;
    for (const v of group.logAdded) if (v > max) max = v;
    if (max > this.logTop) this.logTop = max;
    this.logCount += added.length;
    this.onWrite?.({ versions: group.versions, sync: group.sync, applies: group.applies });
    // The log is trimmed on the write chain, so that concurrent applies never trim the same
    // entries twice. A failed trim fails no write; the next write tries again.
    if (this.logCount > this.retention * 1.1) await this.trim().catch(() => undefined);
  }

  /**
   * Those of the applied `versions` whose log key is new. A version the log holds already,
   * though not as its id's current version (a superseded entry a peer sync recorded, or an older
   * entry of ours, whose id a reconcile then moved below it), applied again rewrites its entry,
   * which the log's count and sums must not take as new. Only a version at most the log's top can
   * be one: in-order writes read nothing. Runs on the write chain, where no other write (a trim
   * included) changes the log meanwhile.
   */
  private async newToLog(versions: readonly number[]): Promise<readonly number[]> {
    const there = await this.inLog(versions.filter((v) => v <= this.logTop));
    return there.size === 0 ? versions : versions.filter((v) => !there.has(v));
  }

  /** Those of `versions` the update log holds a key of (none asked: nothing read). */
  private async inLog(versions: readonly number[]): Promise<Set<number>> {
    if (versions.length === 0) return new Set();
    const values = await this.db.getMany(versions.map(logKey));
    return new Set(versions.filter((_, i) => values[i] !== undefined));
  }

  /**
   * Makes this replica hold exactly `leader`'s entry for each id (undefined = the leader has
   * none), unless our version of it is one `sinceSync` says reached us from the leader after it
   * answered. Removes the log entry of each version replaced, so that no peer syncs it from us
   * later. Convergent recovery uses this for entries a deposed leader applied and nobody acknowledged.
   */
  async reconcile(items: readonly Reconcile[], sinceSync: (version: number) => boolean): Promise<Reconcile[]> {
    const run = this.decideChain.then(async () => {
      await this.flush();
      const release = await this.remember(items.map((i) => i.id));
      try {
        return await this.reconcileKnown(items, sinceSync);
      } finally {
        release();
      }
    });
    this.decideChain = run.catch(() => undefined);
    return run;
  }

  /** Reconcile's work, once the ids' versions are in memory (held). */
  private async reconcileKnown(items: readonly Reconcile[], sinceSync: (version: number) => boolean): Promise<Reconcile[]> {
    const batch: BatchOp[] = [];
    const changed: Reconcile[] = [];
    const logAdded: number[] = [];
    const logRemoved: number[] = [];
    // What to put back in memory if the write fails: nothing of it is on disk then.
    const undo: Array<{ id: string; prev: Known }> = [];
    const liveBefore = this.liveDocs;
    // The leaders' versions our log holds already (an older version of ours the leader kept): rewritten, not counted again.
    const logged = await this.inLog(items.flatMap((i) => (i.leader === undefined ? [] : [i.leader.version])));
    for (const { id, leader } of items) {
      const cur = this.known.get(id) ?? NONE;
      if (cur.version !== 0 && sinceSync(cur.version)) continue;
      if (cur.version === (leader?.version ?? 0)) continue;
      // (A version older than the log's trim point has no entry left to remove.)
      if (cur.version > this.trimmed) {
        batch.push({ type: 'del', key: logKey(cur.version) });
        logRemoved.push(cur.version);
      }
      undo.push({ id, prev: cur });
      if (leader === undefined) {
        batch.push({ type: 'del', key: docKey(id) });
        this.setKnown(id, NONE);
        if (cur.live) this.liveDocs--;
      } else {
        const text = encodeEntry(leader);
        if (!logged.has(leader.version)) logAdded.push(leader.version);
        batch.push({ type: 'put', key: logKey(leader.version), value: text }, { type: 'put', key: docKey(id), value: text });
        this.setKnown(id, { version: leader.version, live: leader.doc !== null });
        if (leader.doc !== null && !cur.live) this.liveDocs++;
        else if (leader.doc === null && cur.live) this.liveDocs--;
      }
      changed.push({ id, leader });
    }
    if (batch.length === 0) return changed;
    batch.push({ type: 'put', key: COUNT, value: String(this.liveDocs) });
    const applied = changed.map((c): UpdateOp => ({ id: c.id, version: c.leader?.version ?? 0, doc: c.leader?.doc ?? null }));
    try {
      await this.writeLogChange(batch, { applied, changed: changed.map((c) => c.id), logAdded, logRemoved });
    } catch (err) {
      for (let i = undo.length - 1; i >= 0; i--) this.setKnown(undo[i]!.id, undo[i]!.prev);
      this.liveDocs = liveBefore;
      throw err;
    }
    await this.newestFromLog();
    return changed;
  }

  /**
   * Removes the log entries of those of `versions` that are not the current version of their id:
   * writes of a deposed leader that the peer does not hold and that a newer write replaced here
   * (reconcile removes the current ones). No peer syncs them from this replica later, and this
   * log's digest agrees with the peer's again. Resolves how many it removed.
   */
  dropStaleLog(versions: readonly number[]): Promise<number> {
    const run = this.decideChain.then(async () => {
      await this.flush();
      const entries = await this.logEntries([...new Set(versions)]);
      if (entries.length === 0) return 0;
      const release = await this.remember(entries.map((e) => e.id));
      try {
        const stale = entries.filter((e) => (this.known.get(e.id) ?? NONE).version !== e.version).map((e) => e.version);
        if (stale.length === 0) return 0;
        await this.writeLogChange(
          stale.map((v) => ({ type: 'del', key: logKey(v) })),
          { logRemoved: stale },
        );
        await this.newestFromLog();
        return stale.length;
      } finally {
        release();
      }
    });
    this.decideChain = run.catch(() => undefined);
    return run;
  }

  /**
   * Records in the log those of `entries` (fetched from the leader's log by a peer sync) that
   * this replica did not apply because it holds a newer version of their id: a write it missed,
   * superseded since. Its documents do not change; the two logs then hold the same versions, so
   * their digests agree (a later peer sync compares digests, a leader handover checks them).
   * Resolves how many it recorded.
   */
  recordSuperseded(entries: readonly StoredEntry[]): Promise<number> {
    const run = this.decideChain.then(async () => {
      await this.flush();
      const fresh = entries.filter((e) => e.version > this.trimmed);
      if (fresh.length === 0) return 0;
      const logged = await this.inLog(fresh.map((e) => e.version));
      const candidates = fresh.filter((e) => !logged.has(e.version));
      if (candidates.length === 0) return 0;
      const release = await this.remember(candidates.map((e) => e.id));
      try {
        const byVersion = new Map<number, StoredEntry>();
        for (const e of candidates) if ((this.known.get(e.id) ?? NONE).version > e.version) byVersion.set(e.version, e);
        const superseded = [...byVersion.values()];
        if (superseded.length === 0) return 0;
        await this.writeLogChange(
          superseded.map((e) => ({ type: 'put', key: logKey(e.version), value: encodeEntry(e) })),
          { logAdded: superseded.map((e) => e.version) },
        );
        return superseded.length;
      } finally {
        release();
      }
    });
    this.decideChain = run.catch(() => undefined);
    return run;
  }

  /**
   * Queues a synced batch that adds or removes log entries besides applies (`logAdded`,
   * `logRemoved`): the kept log count moves by their difference before the write is queued (a
   * write of applies joining it records the count too), and back if the write fails.
   */
  private async writeLogChange(batch: BatchOp[], extras: GroupExtras): Promise<void> {
    const delta = Math.max(0, this.logCount + (extras.logAdded?.length ?? 0) - (extras.logRemoved?.length ?? 0)) - this.logCount;
    this.logCount += delta;
    batch.push({ type: 'put', key: LOG_COUNT, value: String(this.logCount) });
    try {
      await this.enqueue(batch, true, [], extras);
    } catch (err) {
      this.logCount -= delta;
      throw err;
    }
  }

  /** The newest version again, after log entries were removed: trimming drops the oldest entries only, so it is the newest log key. */
  private async newestFromLog(): Promise<void> {
    let max = this.trimmed;
    for await (const key of this.db.keys({ gte: LOG, lt: LOG + ':', reverse: true, limit: 1 })) max = Math.max(max, Number(key.slice(1)));
    this.maxVersionSeen = max;
    if (this.durableMax > max) this.durableMax = max;
  }

  private armPurgeTimer(): void {
    const every = Math.max(50, Math.min(10_000, Math.floor(this.deleteRetentionMs / 2)));
    this.purgeTimer = setInterval(() => void this.purgeTombstones().catch(() => undefined), every);
    this.purgeTimer.unref();
  }

  /**
   * Drops tombstones older than the delete retention (Elasticsearch's gc_deletes): the id is
   * then as if never written. One still current is removed; one a later write replaced is
   * only unindexed. Returns how many tombstones were dropped.
   */
  purgeTombstones(now = Date.now()): Promise<number> {
    const run = this.decideChain.then(async () => {
      if (this.closed) return 0;
      const batch: BatchOp[] = [];
      let dropped = 0;
      const due: Array<{ key: string; id: string; version: number }> = [];
      for await (const [key, value] of this.db.iterator({ gte: TOMB, lt: tombKey(now - this.deleteRetentionMs, ''), limit: 10_000 })) {
        due.push({ key, id: key.slice(1 + VERSION_WIDTH), version: Number(value) });
      }
      if (due.length === 0) return 0;
      const release = await this.remember(due.map((d) => d.id));
      for (const d of due) {
        batch.push({ type: 'del', key: d.key });
        const cur = this.known.get(d.id) ?? NONE;
        if (cur.version === d.version && !cur.live && !this.pinned.has(d.id)) {
          batch.push({ type: 'del', key: docKey(d.id) });
          this.setKnown(d.id, NONE);
          dropped++;
        }
      }
      release();
      await this.enqueue(batch, false, []);
      return dropped;
    });
    this.decideChain = run.catch(() => undefined);
    return run;
  }

  /** The newest version in the log below `below` (0 when none). */
  async newestVersionBelow(below: number): Promise<number> {
    for await (const key of this.db.keys({ gte: LOG, lt: logKey(below), reverse: true, limit: 1 })) return Number(key.slice(1));
    return 0;
  }

  /** The versions in the log after `after` (up to `upto`), oldest first, at most `limit`: keys only, no documents read. */
  async logVersionsAfter(after: number, limit: number, upto?: number): Promise<number[]> {
    const out: number[] = [];
    const range = upto === undefined ? { gt: logKey(after), lt: LOG + ':', limit } : { gt: logKey(after), lte: logKey(upto), limit };
    for await (const key of this.db.keys(range)) out.push(Number(key.slice(1)));
    return out;
  }

  /**
   * The digest of the log's versions in (`after`, `upto`]: what peer sync compares before it lists
   * them (Solr's fingerprint). The bucket sums serve the whole buckets inside; only the keys of
   * the two edge buckets are read.
   */
  logDigest(after: number, upto: number): Promise<LogDigest> {
    return this.sums.digest(after, upto, (a, b) => this.sumLog(a, b));
  }

  /** The sum of the log's versions in (`after`, `upto`], read from its keys. */
  private async sumLog(after: number, upto: number): Promise<BucketSum> {
    const versions: number[] = [];
    const it = this.db.keys({ gt: logKey(after), lte: logKey(upto) });
    try {
      for (let page = await it.nextv(SCAN_PAGE); page.length > 0; page = await it.nextv(SCAN_PAGE)) for (const k of page) versions.push(Number(k.slice(1)));
    } finally {
      await it.close();
    }
    return sumOf(versions);
  }

  /** The log entries of exactly these versions (those the log holds), in the order given. */
  async logEntries(versions: readonly number[]): Promise<StoredEntry[]> {
    const values = await this.db.getMany(versions.map(logKey));
    const out: StoredEntry[] = [];
    for (const v of values) if (v !== undefined) out.push(decodeEntry(v));
    return out;
  }

  /**
   * Forgets ops whose batch could not be written, so that a resend of the same versions is
   * applied rather than dropped as a duplicate. An id a later apply has since moved on is
   * left as that apply set it.
   */
  private undoApplied(applied: readonly UpdateOp[], undo: readonly Undo[]): void {
    for (let i = applied.length - 1; i >= 0; i--) {
      const op = applied[i]!;
      const { prev } = undo[i]!;
      if (this.known.get(op.id)?.version !== op.version) continue;
      const live = op.doc !== null;
      if (live && !prev.live) this.liveDocs--;
      else if (!live && prev.live) this.liveDocs++;
      this.setKnown(op.id, prev);
    }
  }

  /** Waits until every write issued so far is on disk. */
  async flush(): Promise<void> {
    await this.writeChain;
  }

  async get(id: string): Promise<StoredEntry | undefined> {
    if (this.known.get(id)?.version === 0) return undefined;
    const v = await this.db.get(docKey(id));
    return v === undefined ? undefined : decodeEntry(v);
  }

  async getMany(ids: readonly string[]): Promise<Array<StoredEntry | undefined>> {
    // A few ids (a page of hits) are read on this thread, through the document cache: each read
    // is microseconds from LevelDB's cache, less than a round trip through libuv's thread pool.
    // Only these fill the cache: a read and its fill are one synchronous step, so no write can
    // land between them (larger reads, a replay or a copy, would also evict the pages' documents).
    if (ids.length <= SYNC_READ_MAX && this.db.status === 'open') return ids.map((id) => this.readCached(id));
    const values = await this.db.getMany(ids.map(docKey));
    return values.map((v) => (v === undefined ? undefined : decodeEntry(v)));
  }

  /** `id`'s entry from the document cache, else read here (keys as bytes: classic-level 3 cuts a string key short when its reused key buffer ends inside a character). */
  private readCached(id: string): StoredEntry | undefined {
    const cached = this.docCache.get(id);
    if (cached !== undefined) {
      this.docCacheCounts.hits++;
      return cached ?? undefined;
    }
    this.docCacheCounts.misses++;
    const v = this.db.getSync<Buffer, string>(Buffer.from(docKey(id)), SYNC_GET);
    const entry = v === undefined ? undefined : decodeEntry(v);
    this.docCache.set(id, entry ?? null);
    return entry;
  }

  /** Reads of a page's ids the document cache answered, and those it did not (read from LevelDB, then cached). */
  get docCacheStats(): { readonly hits: number; readonly misses: number } {
    return this.docCacheCounts;
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
   * versions up to the point's version. `atPoint` runs at that same moment, before anything
   * later is applied: the sink's state then is the snapshot's (the persisted index captures its
   * segments there), and its result comes back with the point.
   */
  commit(): Promise<CommitPoint>;
  commit<T>(atPoint: (point: CommitPoint, seq: number) => T): Promise<{ point: CommitPoint; captured: T }>;
  commit<T>(atPoint?: (point: CommitPoint, seq: number) => T): Promise<CommitPoint | { point: CommitPoint; captured: T }> {
    const taken = this.writeChain.then(async () => {
      const point: CommitPoint = { version: this.durableMax, at: Date.now() };
      const snapshot = this.db.snapshot();
      let captured: T | undefined;
      try {
        captured = atPoint?.(point, this.appliedSeq);
      } catch (err) {
        // No commit point then: the last one stays.
        await snapshot.close();
        throw err;
      }
      const old = this.commitSnapshot;
      this.commitSnapshot = { point, snapshot, copies: 0 };
      this.commitPoint = point;
      await this.db.put(COMMIT, JSON.stringify(point));
      // A snapshot being copied is closed by its last copy (an iterator cannot use a closing one).
      if (old && old.copies === 0) await old.snapshot.close();
      return atPoint ? { point, captured: captured as T } : point;
    });
    this.writeChain = taken.catch(() => undefined);
    return taken;
  }

  /** Commit points held for copying now (openCommit), not released yet. */
  get heldCommits(): number {
    return this.copiesHeld;
  }

  /**
   * The latest commit point, held from now: its entries are read from the snapshot taken with it
   * even if a newer commit replaces it meanwhile. `release()` (idempotent; reading the entries to
   * their end or stopping early calls it) lets the snapshot go.
   */
  openCommit(): HeldCommit | undefined {
    const c = this.commitSnapshot;
    if (!c) return undefined;
    c.copies++;
    this.copiesHeld++;
    const db = this.db;
    let held = true;
    const release = async (): Promise<void> => {
      if (!held) return;
      held = false;
      this.copiesHeld--;
      if (--c.copies === 0 && this.commitSnapshot !== c) await c.snapshot.close();
    };
    const values = async function* (): AsyncGenerator<string> {
      try {
        for await (const value of db.values({ gte: DOC, lt: DOC_END, snapshot: c.snapshot })) yield value;
      } finally {
        await release();
      }
    };
    return {
      point: c.point,
      release,
      values,
      async *entries() {
        for await (const value of values()) yield decodeEntry(value);
      },
    };
  }

  /**
   * Fills a store that nothing was applied to with a commit point's entries as another store
   * keeps them (HeldCommit.values): documents and tombstones, without log entries, journal or
   * search index (a snapshot reader's copy: its index comes as segment files). Nothing is
   * parsed but each entry's id and version. Later applies compare versions with these entries.
   */
  loadCopy(values: readonly string[]): Promise<void> {
    if (this.logCount > 0) return Promise.reject(new ShardexError('SHX_INTERNAL', 'a copy is loaded only into a store nothing was applied to'));
    const batch: BatchOp[] = [];
    for (const value of values) {
      const { id, version, live } = entryHead(value);
      batch.push({ type: 'put', key: docKey(id), value });
      if (live) this.liveDocs++;
      if (version > this.maxVersionSeen) this.maxVersionSeen = version;
    }
    batch.push({ type: 'put', key: COUNT, value: String(this.liveDocs) });
    return this.enqueue(batch, false, []);
  }

  private async trim(): Promise<void> {
    const drop = this.logCount - this.retention;
    if (drop <= 0) return;
    // From the trim point: the keys below it are deleted, and stepping over them costs until LevelDB compacts them away.
    const keys = await this.db.keys({ ...(this.trimmed > 0 ? { gt: logKey(this.trimmed) } : { gte: LOG }), lt: LOG + ':', limit: drop }).all();
    if (keys.length === 0) return;
    const dropped = keys.map((key) => Number(key.slice(1)));
    const trimmed = dropped[dropped.length - 1]!;
    const logCount = this.logCount - keys.length;
    const sums = this.sums.preview([], dropped);
    // One batch: the entries, their sums, the trim point and the count change together, whatever crashes.
    const batch: BatchOp[] = keys.map((key) => ({ type: 'del', key }));
    batch.push(...sumOps(sums), { type: 'put', key: TRIMMED, value: String(trimmed) }, { type: 'put', key: LOG_COUNT, value: String(logCount) });
    await writeBatch(this.db, batch, false);
    this.sums.commit(sums);
    this.trimmed = trimmed;
    this.logCount = logCount;
  }

  /**
   * Removes everything (before a full copy from the leader). It takes its turn among the applies:
   * those decided before it are on disk (and told to the sink) first, those called meanwhile are
   * decided after it. `beforeClear` runs in between, once the sink was told everything it will
   * lose (the search index clears itself there), so index and documents never disagree.
   */
  clear(beforeClear?: () => void | Promise<void>): Promise<void> {
    const run = this.decideChain.then(async () => {
      await this.flush();
      await beforeClear?.();
      await this.wipe();
    });
    this.decideChain = run.catch(() => undefined);
    return run;
  }

  private async wipe(): Promise<void> {
    // Marked first, in one synced batch: a crash part way through the clear leaves a store that
    // may not lead and whose next open finishes the wipe, never one that looks whole.
    await writeBatch(
      this.db,
      [
        { type: 'put', key: WIPING, value: '1' },
        { type: 'put', key: INCOMPLETE, value: '1' },
      ],
      true,
    );
    this.isIncomplete = true;
    await this.clearData();
    this.docCache.clear();
    this.known.clear();
    this.liveDocs = 0;
    this.logCount = 0;
    this.sums.clear();
    this.isIncomplete = true;
    this.maxVersionSeen = 0;
    this.logTop = 0;
    this.durableMax = 0;
    this.commitPoint = undefined;
    this.trimmed = 0;
    // An empty store holds no write of its own to compare.
    this.floor = undefined;
    await this.commitSnapshot?.snapshot.close();
    this.commitSnapshot = undefined;
  }

  /**
   * Removes the data, then in one synced batch the metadata but the format, the fence and the
   * sequence (a full copy does not make older leaders acceptable; sequences keep growing, so a
   * segment written before never matches what follows), leaving the store empty and incomplete.
   */
  private async clearData(): Promise<void> {
    await this.db.clear({ lt: META });
    await this.db.clear({ gte: META_END });
    const keep = new Set([FORMAT, FENCE, SEQ]);
    const meta = await this.db.keys({ gte: META, lt: META_END }).all();
    await writeBatch(
      this.db,
      [
        ...meta.filter((key) => !keep.has(key)).map((key): BatchOp => ({ type: 'del', key })),
        { type: 'put', key: FORMAT, value: FORMAT_VERSION },
        { type: 'put', key: FENCE, value: String(this.fenceEpoch) },
        { type: 'put', key: LOG_COUNT, value: '0' },
        { type: 'put', key: SUMS_KEPT, value: '1' },
        // Wiped for a full copy: not a whole copy of the shard until the recovery completes.
        { type: 'put', key: INCOMPLETE, value: '1' },
        { type: 'put', key: SEQ, value: String(this.seq) },
      ],
      true,
    );
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.syncTimer) clearInterval(this.syncTimer);
    if (this.purgeTimer) clearInterval(this.purgeTimer);
    await this.decideChain;
    // An async-durability replica syncs what it has before it closes.
    if (this.unsynced) await this.enqueue([], true, []).catch(() => undefined);
    await this.flush();
    await this.commitSnapshot?.snapshot.close();
    this.commitSnapshot = undefined;
    await this.db.close();
  }
}
