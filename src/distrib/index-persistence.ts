// A replica's search index that survives restarts, kept as Lucene keeps one: immutable segment
// files plus a commit file naming them (src/index/segment-file.ts), loaded into a SegmentedIndex
// (src/index/segmented-index.ts).
//
// - A checkpoint seals the in-memory buffer as a new segment, writes it, then writes a commit
//   naming every segment with the ids deleted from each since it was written. It is captured at
//   a durable point of the store (ReplicaStore.atDurablePoint): the commit holds every change
//   journaled up to its sequence and nothing later. Its cost follows the buffer, not the replica.
//   Its files are written by the node's checkpoint thread (segment-merge.ts), off the event loop;
//   the next checkpoint may begin at the commit, and the work after it (serving the new segment
//   from its file, removing files, trimming the journal) follows outside the lock, in order.
// - At open the replica loads the commit's segments, replays each one's deletes, then re-reads
//   only the documents journaled after the commit. Without a usable commit (none yet, damaged,
//   truncated, a segment missing or damaged, another schema) it rebuilds from the stored
//   documents, says why, and writes a fresh commit; it never serves from a bad file.
// - Merges (pickMerge's policy) run in the background, off the event loop (segment-merge.ts): a
//   few segment files are combined into one (src/index/merge-segments.ts: their postings, no
//   document analysed again), written, loaded, swapped in and committed; files no commit names
//   any more are removed after each commit.
// - A term's postings read from a segment file, and a segment's postings read whole by a merge or
//   a compaction, are checked against their checksums again: a file damaged after it was loaded
//   fails the search that read it (never a wrong answer) and makes the replica rebuild its index
//   from the stored documents while it goes on taking writes, then swap it in (rebuildDamaged).
import { open, readdir, rm, stat, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import {
  DEFAULT_MERGE_POLICY,
  loadSegment,
  pickMerge,
  readCommit,
  SegmentedIndex,
  SegmentProblem,
  ShardIndex,
  type CollectionSchema,
  type CommitInfo,
  type MergePolicy,
  type Segment,
  type ShardIndexState,
  type StoredDoc,
} from '../index/index.js';
import type { CommitPoint, ReplicaStore, StoredEntry, UpdateOp } from '../ulog/index.js';
import { syncDir } from '../durable-file.js';
import { Mutex } from './mutex.js';
import { SearchIndexBinding } from './replica.js';
import { IN_THREAD, type CheckpointWriter, type CheckpointWritten, type SegmentMerger } from './segment-merge.js';

/** The commit file's name in the replica's directory (LevelDB ignores files it did not write). */
export const COMMIT_FILE = 'shardex-index.commit';
const SEGMENT_PREFIX = 'shardex-seg-';
const SEGMENT_SUFFIX = '.seg';
/** The single-file layout of earlier versions: rebuilt, then removed. */
const LEGACY_SEGMENT_FILE = 'shardex-index.seg';

/** Whether `name` is a segment file's name. */
export function isSegmentFile(name: string): boolean {
  return name.startsWith(SEGMENT_PREFIX) && name.endsWith(SEGMENT_SUFFIX);
}

/** Whether `name` is one of the index's files in a replica directory (segments, commit, their temporaries, the legacy file). */
export function isIndexFile(name: string): boolean {
  const base = name.endsWith('.tmp') ? name.slice(0, -4) : name;
  return base === COMMIT_FILE || base === LEGACY_SEGMENT_FILE || isSegmentFile(base);
}

export interface CheckpointPolicy extends MergePolicy {
  /** Changes (applied ops) after which a checkpoint is written at the next check; default 10,000... */
  readonly maxChanges: number;
  /** ...and any change at all once the last checkpoint was captured this long ago; default 0.3 s (bench/RESULTS.md, restart: the journal a kill leaves). */
  readonly maxAgeMs: number;
  /** No change for this long since the last checkpoint: the segments below floorSegmentDocs are merged into one (pickMerge's `idle`); default 3 s. */
  readonly idleMergeMs: number;
}

export const DEFAULT_CHECKPOINT_POLICY: CheckpointPolicy = { maxChanges: 10_000, maxAgeMs: 300, idleMergeMs: 3_000, ...DEFAULT_MERGE_POLICY };

/** How the index came back at open. */
export interface IndexOpenReport {
  readonly method: 'loaded' | 'rebuilt';
  /** Why the files on disk were not used (rebuilt only). */
  readonly problem?: string;
  /** Documents re-read from the store: journaled after the commit (loaded), or all (rebuilt). */
  readonly replayed: number;
  /** Segments loaded (or written, rebuilt). */
  readonly segments: number;
  readonly segmentBytes: number;
  readonly ms: number;
}

export interface PersistedIndexOptions {
  /** The replica's directory (its store's). */
  readonly dir: string;
  readonly schema: CollectionSchema;
  /** Identifies schema and analyzer: files written for another one are rebuilt. */
  readonly fingerprint: string;
  readonly store: ReplicaStore;
  readonly log: Logger;
  readonly policy?: Partial<CheckpointPolicy>;
  /** Told of every segment file written (metrics). */
  readonly onSegmentWritten?: (bytes: number) => void;
  /** Runs the merges (the node's merge thread); default: in the calling thread. */
  readonly merger?: SegmentMerger;
  /** Writes the checkpoints' files (the node's checkpoint thread); default: in the calling thread. */
  readonly writer?: CheckpointWriter;
}

const PAGE = 1000;

/** A segment of a commit point: its file's name and the ids deleted from it at that point. */
export interface CommittedSegment {
  readonly name: string;
  readonly deleted: readonly string[];
}

/** A commit point's segment files, opened for copying (PersistedIndex.openCommitted). */
export interface CommittedSegments {
  /** The schema and analyzer the files were written for. */
  readonly fingerprint: string;
  readonly files: ReadonlyArray<CommittedSegment & { readonly handle: FileHandle; readonly bytes: number }>;
}

/** What a checkpoint captures at its durable point. */
interface Captured {
  readonly seq: number;
  /** When it was captured (Date.now()): a checkpoint's age counts from here, not from when its files were written. */
  readonly at: number;
  readonly segments: ReadonlyArray<{ readonly segment: Segment; readonly deleted: number; readonly state: ShardIndexState | undefined }>;
}

/**
 * Loads the segment files `entries` names in `dir`, each with its deleted ids applied (the index
 * of a commit, or of a commit point a snapshot reader copied); or says which one cannot be used.
 */
export async function loadSegments(
  dir: string,
  entries: readonly CommittedSegment[],
  schema: CollectionSchema,
  fingerprint: string,
): Promise<{ readonly ok: true; readonly segments: Segment[]; readonly bytes: number } | { readonly ok: false; readonly problem: string }> {
  const segments: Segment[] = [];
  let bytes = 0;
  for (const entry of entries) {
    const loaded = await loadSegment(join(dir, entry.name), schema, fingerprint);
    if (!loaded.ok) return { ok: false, problem: `segment ${entry.name}: ${loaded.problem}` };
    for (const id of entry.deleted) loaded.index.delete(id);
    segments.push({ name: entry.name, index: loaded.index, deleted: new Set(entry.deleted) });
    bytes += loaded.bytes;
  }
  return { ok: true, segments, bytes };
}

/** Identifies a collection's schema and analyzer: index files written for another are not used. */

/** A replica's commit as read from disk before its store is open (PersistedIndex.readCommitted). */
export interface CommittedIndex {
  /** The commit and its segments, loaded; absent when there is no usable commit. */
  readonly loaded?: { readonly info: CommitInfo; readonly segments: Segment[]; readonly bytes: number };
  /** Why the files on disk cannot be used; absent when there are none (a new replica) or they loaded. */
  readonly problem?: string;
  /** When the read began (performance.now()). */
  readonly startedAt: number;
}

export class PersistedIndex extends SearchIndexBinding {
  declare index: SegmentedIndex;
  private readonly o: PersistedIndexOptions;
  private readonly policy: CheckpointPolicy;
  /** Checkpoints and clears take turns: a commit of old data never lands after a clear. */
  private readonly lock = new Mutex();
  /** Segments whose file is written. */
  private readonly written = new WeakSet<Segment>();
  private nextFile = 1;
  private lastCheckpointAt: number;
  /** A merge swapped segments since the last commit. */
  private dirty = false;
  private merging: Promise<boolean> | undefined;
  /** A merge check was put off (maybeCheckpoint without `merge`). */
  private mergeDeferred = false;
  /** The idle merge check ran since the index last changed (see maybeCheckpoint). */
  private idleChecked = false;
  /** Segment files a merge is writing (not in any commit yet, and not to be removed as such). */
  private readonly inProgress = new Set<string>();
  /** Closed: nothing is written any more. */
  private closed = false;
  /** Bumped by clear(): a merge started before it is dropped. */
  private generation = 0;
  private unindexable = 0;
  /** While the index is rebuilt from the documents (rebuildDamaged): the ids written meanwhile. */
  private changedDuringRebuild: Set<string> | undefined;
  private rebuilding: Promise<void> | undefined;
  /** The store's latest commit point and the segments checkpointed at it (what snapshot readers copy). */
  private committed: { readonly point: CommitPoint; readonly segments: readonly CommittedSegment[] } | undefined;
  /** The segments the newest commit file names: what a crash now would open. */
  private onDisk: ReadonlySet<string> = new Set();
  /**
   * The work after each commit (serving its new segments from their files, removing the files no
   * commit names, trimming the journal), one commit's after another's, outside the lock: the next
   * checkpoint need not wait for it, only for the commit before it.
   */
  private settling: Promise<void> = Promise.resolve();

  private constructor(o: PersistedIndexOptions, index: SegmentedIndex, now: number) {
    super(o.schema, index);
    this.o = o;
    this.policy = { ...DEFAULT_CHECKPOINT_POLICY, ...o.policy };
    this.lastCheckpointAt = now;
    this.index = this.watched(index);
  }

  /** `index`, telling this replica when a search finds one of its segment files damaged. */
  private watched(index: SegmentedIndex): SegmentedIndex {
    index.onDamage = (problem) => void this.rebuildDamaged(problem);
    return index;
  }

  /**
   * Reads the replica's commit and loads its segments: what opening the index needs before the
   * store, so that it can run while the store opens (LevelDB recovering its log on its own thread).
   */
  static async readCommitted(o: Pick<PersistedIndexOptions, 'dir' | 'schema' | 'fingerprint'>): Promise<CommittedIndex> {
    const startedAt = performance.now();
    const read = await readCommit(join(o.dir, COMMIT_FILE));
    const done = (c: Omit<CommittedIndex, 'startedAt'>): CommittedIndex => ({ ...c, startedAt });
    if (!read.ok) {
      if (!read.missing) return done({ problem: read.problem });
      return done(await exists(join(o.dir, LEGACY_SEGMENT_FILE)) ? { problem: 'it is in the single-file layout of an earlier version' } : {});
    }
    const { info } = read;
    if (info.fingerprint !== o.fingerprint) return done({ problem: 'it was written for another schema or analyzer' });
    const loaded = await loadSegments(o.dir, info.segments, o.schema, o.fingerprint);
    return done(loaded.ok ? { loaded: { info, segments: loaded.segments, bytes: loaded.bytes } } : { problem: loaded.problem });
  }

  /**
   * Opens the replica's index: its commit's segments plus the changes after it, else a rebuild
   * (then a commit). `committed` is readCommitted's answer when the caller started it already.
   */
  static async open(o: PersistedIndexOptions, committed?: Promise<CommittedIndex>): Promise<{ index: PersistedIndex; report: IndexOpenReport }> {
    const c = await (committed ?? PersistedIndex.readCommitted(o));
    // From the start of the segments' load, also when it ran side by side with the store's open.
    const ms = (): number => Math.round(performance.now() - c.startedAt);
    let problem = c.problem;
    if (c.loaded && c.loaded.info.seq > o.store.changeSeq) problem = `its sequence ${c.loaded.info.seq} is newer than the store's ${o.store.changeSeq}`;
    else if (c.loaded) {
      const { info, segments, bytes } = c.loaded;
      const p = new PersistedIndex(o, new SegmentedIndex(o.schema, segments), Date.now());
      for (const s of segments) p.written.add(s);
      p.nextFile = info.nextFile;
      p.onDisk = new Set(info.segments.map((s) => s.name));
      await p.removeUnusedFiles();
      const ids = await o.store.changedSince(info.seq);
      await p.replay(ids);
      return { index: p, report: { method: 'loaded', replayed: ids.length, segments: segments.length, segmentBytes: bytes, ms: ms() } };
    }
    if (problem !== undefined) o.log.warn({ dir: o.dir, problem }, 'the replica index on disk cannot be used; rebuilding it from the stored documents');
    const p = new PersistedIndex(o, new SegmentedIndex(o.schema), Date.now());
    await p.removeUnusedFiles(false);
    const replayed = await p.rebuild();
    // The rebuilt index goes to disk at once, so that the next start loads it.
    const written = replayed > 0 ? await p.checkpoint() : 0;
    return { index: p, report: { method: 'rebuilt', ...(problem !== undefined && { problem }), replayed, segments: p.index.segments.length, segmentBytes: written, ms: ms() } };
  }

  /**
   * Writes a checkpoint when the policy says so, then starts a merge if one is due; returns
   * whether it wrote. Without `byAge` (a replica still recovering, whose CPU goes to catching
   * up) only the count of changes makes one due, not their age. Without `merge` (the node's
   * CPU is needed elsewhere: replicas opening or recovering) the merge check waits for a later
   * call that allows it. Once nothing changed for the policy's idleMergeMs since the last
   * checkpoint, the small segments are merged (once per quiet spell).
   */
  async maybeCheckpoint(now = Date.now(), { byAge = true, merge = true }: { byAge?: boolean; merge?: boolean } = {}): Promise<boolean> {
    let wrote = false;
    if (this.closed) return false;
    if (this.index.unsealedChanges > 0) this.idleChecked = false;
    if (this.hasWork()) {
      const old = byAge && now - this.lastCheckpointAt >= this.policy.maxAgeMs;
      if (this.index.unsealedChanges >= this.policy.maxChanges || old || this.dirty || this.hasUnwritten()) {
        // Resolved at the commit: the work after it goes on while the next check may begin.
        await this.checkpointed();
        wrote = true;
      }
    }
    if (wrote || this.mergeDeferred) {
      this.mergeDeferred = !merge;
      if (merge) void this.merge();
    } else if (merge && !this.idleChecked && this.merging === undefined && !this.hasWork() && now - this.lastCheckpointAt >= this.policy.idleMergeMs) {
      this.idleChecked = true;
      void this.merge({ idle: true });
    }
    return wrote;
  }

  /**
   * Seals the buffer as a segment and writes a commit, captured at a durable point of the store
   * (every change journaled up to the point's sequence is in it, nothing later: the segments
   * still to write are exported and the delete lists measured there), then drops the journal up
   * to there and the files no commit names. Returns the bytes written (0: nothing to write) once
   * all of that is done.
   */
  async checkpoint(): Promise<number> {
    const { bytes, settled } = await this.checkpointed();
    await settled;
    return bytes;
  }

  /** Resolves once the work after every commit written so far is done (files removed, journal trimmed). */
  settled(): Promise<void> {
    return this.settling;
  }

  /** A checkpoint, resolved at its commit; `settled` once the work after it is done (it never rejects). */
  private checkpointed(): Promise<{ bytes: number; settled: Promise<void> }> {
    return this.lock.run(async () => {
      if (this.closed || !this.hasWork()) return { bytes: 0, settled: this.settling };
      const t0 = performance.now();
      const captured = await this.o.store.atDurablePoint((seq) => this.capture(seq));
      return this.write(captured, t0);
    });
  }

  /**
   * Records a commit point of the store (what snapshot readers copy) and, at that same moment,
   * a checkpoint of the index: the commit point's segments are written and kept on disk until
   * the next commit point, so that a reader copies the files rather than indexing the documents
   * again (as Solr's replication keeps the files of the commit it serves). Resolves once the
   * store recorded the point; the files are written after. A checkpoint that cannot be written
   * leaves the commit point without segments: readers then copy documents.
   */
  commit(): Promise<CommitPoint> {
    let answer!: { resolve: (p: CommitPoint) => void; reject: (err: unknown) => void };
    const answered = new Promise<CommitPoint>((resolve, reject) => (answer = { resolve, reject }));
    // The point is answered as soon as the store recorded it; the lock is held until its files are written.
    void this.lock.run(async () => {
      if (this.closed) return this.o.store.commit().then(answer.resolve, answer.reject);
      const t0 = performance.now();
      const taken = await this.o.store.commit((_, seq) => this.capture(seq)).catch((err: unknown) => {
        answer.reject(err);
        return undefined;
      });
      if (taken === undefined) return;
      this.committed = undefined;
      answer.resolve(taken.point);
      // The lock is held until the point's files are written; the work after them is not waited for.
      await this.write(taken.captured, t0, taken.point).catch((err: Error) =>
        this.o.log.warn({ dir: this.o.dir, version: taken.point.version, err: err.message }, "could not write the commit point's index checkpoint; snapshot readers will copy its documents"),
      );
    });
    return answered;
  }

  /**
   * The segment files of the commit point `point` opened for reading, with the ids deleted from
   * each at that point; undefined if the index holds no checkpoint of that point (a newer commit
   * replaced it, or its checkpoint failed). The files stay readable through the handles even if
   * a later commit removes their names. The caller closes every handle.
   */
  openCommitted(point: CommitPoint): Promise<CommittedSegments | undefined> {
    // Under the lock, and the files of `committed` are never removed while it names them.
    return this.lock.run(async () => {
      const c = this.committed;
      if (this.closed || !c || c.point.version !== point.version || c.point.at !== point.at) return undefined;
      const files: CommittedSegments['files'][number][] = [];
      try {
        for (const { name, deleted } of c.segments) {
          const handle = await open(join(this.o.dir, name), 'r');
          files.push({ name, deleted, handle, bytes: (await handle.stat()).size });
        }
      } catch (err) {
        await Promise.all(files.map((f) => f.handle.close()));
        this.o.log.warn({ dir: this.o.dir, err: (err as Error).message }, "a commit point's segment file cannot be opened; it is copied as documents");
        return undefined;
      }
      return { fingerprint: this.o.fingerprint, files };
    });
  }

  /**
   * At `seq` (the sink was told every change up to it, none after; synced for a checkpoint, maybe
   * not yet for a commit point with durability async): seals the buffer, and exports the
   * segments not written yet.
   */
  private capture(seq: number): Captured {
    // Not trimmed: write() serves the segment from its file, so a trimmed copy would be dropped at once.
    this.index.seal(this.newName(), { trim: false });
    this.index.dropEmpty();
    this.dirty = false;
    return {
      seq,
      at: Date.now(),
      segments: this.index.segments.map((segment) => ({
        segment,
        // Deletes are only ever added, in order: the first `deleted` of the set are those up to seq.
        deleted: segment.deleted.size,
        state: this.written.has(segment) ? undefined : segment.index.exportState(),
      })),
    };
  }

  /**
   * Writes what `capture` took: its new segment files, then the commit naming them (on the
   * checkpoint thread, when the node has one); with `point`, they are that commit point's.
   * Resolves at the commit, with the work after it queued (`settled`).
   */
  private async write({ seq, at, segments }: Captured, t0: number, point?: CommitPoint): Promise<{ bytes: number; settled: Promise<void> }> {
    const captureMs = Math.round(performance.now() - t0);
    const named = segments.map(({ segment, deleted }) => ({ name: segment.name, deleted: first(segment.deleted, deleted) }));
    const fresh = segments.flatMap(({ segment, state }) => (state === undefined ? [] : [{ segment, state }]));
    // A clear, a close or a rebuild from here on makes the work after the commit theirs.
    const generation = this.generation;
    let sizes: CheckpointWritten;
    try {
      sizes = await (this.o.writer ?? IN_THREAD).writeCheckpoint({
        segments: fresh.map(({ segment, state }) => ({ path: join(this.o.dir, segment.name), state })),
        info: { seq, fingerprint: this.o.fingerprint },
        commitPath: join(this.o.dir, COMMIT_FILE),
        commit: { seq, fingerprint: this.o.fingerprint, nextFile: this.nextFile, segments: named },
      });
    } catch (err) {
      // The next check writes what is missing (hasWork), the last commit still holds.
      this.dirty = true;
      throw err;
    }
    for (const { segment } of fresh) this.written.add(segment);
    for (const size of sizes.segments) this.o.onSegmentWritten?.(size);
    const bytes = sizes.segments.reduce((a, b) => a + b, sizes.commit);
    // The checkpoint thread's id, when a worker wrote the files (logged with the checkpoint).
    const thread = sizes.thread;
    // From here a crash replays only what was journaled after `seq`.
    const committedMs = Math.round(performance.now() - t0);
    this.onDisk = new Set(named.map((s) => s.name));
    if (point) this.committed = { point, segments: named };
    // A busy node's checkpoint can take most of a second: counted from its capture, the journal a
    // crash leaves to replay stays near maxAgeMs of changes rather than that plus the write.
    this.lastCheckpointAt = at;
    // Only the segments: the exported states are not kept while the work after the commit waits.
    const written = fresh.map(({ segment }) => segment);
    const count = segments.length;
    const settle = async (): Promise<void> => {
      // A clear, a close or a rebuild since: their own work replaces this one's.
      const current = (): boolean => this.generation === generation && !this.closed;
      try {
        for (const segment of written) if (current()) await this.serveFromFile(segment);
        if (current()) await this.removeUnusedFiles();
        if (current()) await this.o.store.dropChangesThrough(seq);
      } catch (err) {
        // The files and the journal entries left are removed after a later commit, or at the next open.
        this.o.log.warn({ dir: this.o.dir, seq, err: (err as Error).message }, 'could not tidy up after an index checkpoint');
      }
      this.o.log.info({ dir: this.o.dir, seq, bytes, docs: this.index.size, segments: count, captureMs, committedMs, ms: Math.round(performance.now() - t0), ...(point && { commitPoint: point.version }), ...(thread !== undefined && { thread }) }, 'replica index checkpoint written');
    };
    this.settling = this.settling.then(settle);
    return { bytes, settled: this.settling };
  }

  /**
   * Runs the merge the policy picks (`idle`: as pickMerge's), if any (one at a time): the picked
   * segments are combined into one (their postings, not their documents: nothing is analysed
   * again), written, swapped in, and committed. Resolves whether it merged.
   */
  merge({ idle = false }: { readonly idle?: boolean } = {}): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    const generation = this.generation;
    this.merging ??= this.runMerge(generation, idle)
      .catch((err: Error) => {
        // A reset or a rebuild since removes the sources' files: a merge that then cannot read them found no damage.
        if (this.generation !== generation) return false;
        if (err instanceof SegmentProblem) {
          void this.rebuildDamaged(err.message);
          return false;
        }
        // The segments stay as they were; the next checkpoint's merge check tries again.
        this.o.log.warn({ dir: this.o.dir, err: err.message }, 'could not merge index segments');
        return false;
      })
      .finally(() => (this.merging = undefined));
    return this.merging;
  }

  override apply(ops: readonly UpdateOp[]): void {
    if (this.changedDuringRebuild !== undefined) for (const op of ops) this.changedDuringRebuild.add(op.id);
    try {
      super.apply(ops);
    } catch (err) {
      // A delete made a segment compact, which read a damaged file: the rebuild reads every document again.
      if (!(err instanceof SegmentProblem)) throw err;
      void this.rebuildDamaged(err.message);
    }
  }

  /**
   * A segment file turned out damaged after it was loaded: the index is rebuilt from the stored
   * documents while writes go on into the old one (their ids noted, and read again into the new
   * one until none is left), then swapped in, and written by the next checkpoint. Until then the
   * old index serves searches (one that reads a damaged term fails as unavailable). Resolves once
   * swapped, or at once with the running rebuild's promise.
   */
  rebuildDamaged(problem: string): Promise<void> {
    // The index whose segment was found damaged (a clear asked before may not have run yet).
    const damaged = this.index;
    this.rebuilding ??= this.lock
      .run(async () => {
        if (this.closed) return;
        // Replaced since (a reset for a full copy): the damaged index is gone, and the store is
        // being wiped; a rebuild now would read back the documents the wipe removes.
        if (this.index !== damaged) return;
        const t0 = performance.now();
        this.o.log.warn({ dir: this.o.dir, problem }, 'a segment file of the replica index is damaged; rebuilding the index from the stored documents');
        // Merges of the damaged segments are dropped.
        this.generation++;
        const changed = new Set<string>();
        this.changedDuringRebuild = changed;
        try {
          const fresh = this.watched(new SegmentedIndex(this.o.schema));
          const docs = await this.rebuild(fresh);
          // Checked and swapped in one turn: no write lands between the last read and the swap.
          for (let ids = [...changed]; ids.length > 0; ids = [...changed]) {
            changed.clear();
            await this.replay(ids, fresh);
          }
          this.index = fresh;
          this.dirty = true;
          this.o.log.info({ dir: this.o.dir, docs, ms: Math.round(performance.now() - t0) }, 'replica index rebuilt from the stored documents');
        } finally {
          this.changedDuringRebuild = undefined;
        }
      })
      .catch((err: Error) => this.o.log.error({ dir: this.o.dir, err: err.message }, 'could not rebuild the replica index; it serves from the damaged one until the replica is opened again'))
      .finally(() => (this.rebuilding = undefined));
    return this.rebuilding;
  }

  override clear(): Promise<void> {
    // At once: a merge running now must not swap or commit anything of the old data.
    this.generation++;
    return this.lock.run(async () => {
      await this.settling;
      this.index = this.watched(new SegmentedIndex(this.o.schema));
      this.dirty = false;
      this.committed = undefined;
      this.onDisk = new Set();
      await this.removeUnusedFiles(false);
      // The commit's removal is on disk before the store is wiped: after a power loss the old
      // commit must not come back to name documents the store no longer holds.
      await syncDir(this.o.dir);
    });
  }

  /** Stops merging and writes a last checkpoint (a clean stop replays nothing); nothing is written after. Returns its bytes. */
  async close(): Promise<number> {
    this.generation++;
    await this.merging;
    const bytes = await this.checkpoint();
    await this.settling;
    this.closed = true;
    return bytes;
  }

  /**
   * Stops for good without writing anything more: the replica's files are about to be removed.
   * Resolves once a checkpoint, a merge, a rebuild or the tidy-up after a commit that was running
   * is done, so that none of them writes into a directory being deleted.
   */
  async discard(): Promise<void> {
    this.generation++;
    await this.lock.run(async () => {
      this.closed = true;
    });
    await Promise.all([this.merging, this.rebuilding, this.settling]);
  }

  private hasUnwritten(): boolean {
    return this.index.segments.some((s) => !this.written.has(s));
  }

  private hasWork(): boolean {
    return this.index.unsealedChanges > 0 || this.dirty || this.hasUnwritten();
  }

  /**
   * Serves the segment just written from its file, in place of the growable arrays it was built in
   * (deletes made meanwhile apply again). A file that cannot be read back leaves the segment in
   * memory, where it still answers right; a commit names the file, so the next open rebuilds the
   * index if the file is damaged.
   */
  private async serveFromFile(segment: Segment): Promise<void> {
    try {
      segment.index = await this.reload(join(this.o.dir, segment.name), segment.deleted);
    } catch (err) {
      segment.index.trim();
      this.o.log.warn({ dir: this.o.dir, segment: segment.name, err: (err as Error).message }, 'a segment file just written cannot be read back; the segment stays in memory');
    }
  }

  /**
   * The segment file just written, loaded: exact-size arrays in the file's buffer, outside the JS
   * heap, in place of the growable ones it was built in; `deleted` apply again.
   */
  private async reload(path: string, deleted: Iterable<string>): Promise<ShardIndex> {
    const loaded = await loadSegment(path, this.o.schema, this.o.fingerprint);
    if (!loaded.ok) throw new Error(`the segment just written cannot be read back: ${loaded.problem}`);
    for (const id of deleted) loaded.index.delete(id);
    return loaded.index;
  }

  /** A merge for the index of `generation` (a clear or close since makes it drop its work). */
  private async runMerge(generation: number, idle: boolean): Promise<boolean> {
    // Starts after the current turn, so that a caller sees the segments as they were when it asked.
    await Promise.resolve();
    const sources = pickMerge(this.index.segments, this.policy, { idle });
    if (sources === undefined || this.closed || this.generation !== generation) return false;
    // Merged from their files: one not written yet is, by the next checkpoint, whose merge check tries again.
    if (sources.some((s) => !this.written.has(s))) return false;
    const t0 = performance.now();
    const name = this.newName();
    const path = join(this.o.dir, name);
    this.inProgress.add(name);
    try {
      const { bytes: size, thread } = await (this.o.merger ?? IN_THREAD).merge({
        sources: sources.map((s) => ({ path: join(this.o.dir, s.name), deleted: [...s.deleted] })),
        out: path,
        seq: this.o.store.changeSeq,
        fingerprint: this.o.fingerprint,
      }, this.o.schema);
      const index = this.generation === generation ? await this.reload(path, []) : undefined;
      if (index === undefined || this.generation !== generation) {
        await rm(path, { force: true });
        return false;
      }
      // Documents deleted or replaced while the merge ran are dropped from it by replace().
      const merged: Segment = { name, index, deleted: new Set() };
      this.index.replace(sources, merged);
      this.written.add(merged);
      this.dirty = true;
      this.o.onSegmentWritten?.(size);
      // `thread`: the merge thread's id, when a worker wrote the file.
      this.o.log.info({ dir: this.o.dir, merged: sources.length, into: name, docs: index.size, bytes: size, ms: Math.round(performance.now() - t0), ...(thread !== undefined && { thread }) }, 'replica index segments merged');
      // Kept as in progress until a commit names it.
      await this.checkpoint();
      return true;
    } finally {
      this.inProgress.delete(name);
    }
  }

  private newName(): string {
    return `${SEGMENT_PREFIX}${String(this.nextFile++).padStart(8, '0')}${SEGMENT_SUFFIX}`;
  }

  /**
   * Removes the index files of the directory but those of the last commit written and, with
   * `keepCommit`, the commit itself. The files of the index's own segments, of the commit point
   * readers copy and of a merge being written always stay: a commit written later names them (a
   * checkpoint that captured its segments before a merge swapped them must not remove the merge's
   * file). Each file is checked against them as they are when it is removed, not as they were
   * when the listing began: the removal runs outside the lock, and a checkpoint taken while the
   * directory is read adds a segment whose file the listing may already hold.
   */
  private async removeUnusedFiles(keepCommit = true): Promise<void> {
    let names: string[];
    try {
      names = await readdir(this.o.dir);
    } catch {
      return;
    }
    for (const name of names) {
      const base = name.endsWith('.tmp') ? name.slice(0, -4) : name;
      // The commit's temporary too: a checkpoint may be writing it now.
      if (!isIndexFile(name) || (keepCommit && base === COMMIT_FILE) || this.inUse(base)) continue;
      await rm(join(this.o.dir, name), { force: true });
    }
  }

  /** Whether the segment file `name` is the index's, the last commit's, the commit point's (readers copy it), or a merge's being written. */
  private inUse(name: string): boolean {
    const named = (segments: readonly { readonly name: string }[] | undefined): boolean => segments?.some((s) => s.name === name) ?? false;
    return this.onDisk.has(name) || this.inProgress.has(name) || named(this.index.segments) || named(this.committed?.segments);
  }

  /** Re-reads the current documents of `ids` into `index` (a deleted or purged id leaves it). */
  private async replay(ids: readonly string[], index = this.index): Promise<void> {
    for (let i = 0; i < ids.length; i += PAGE) {
      const page = ids.slice(i, i + PAGE);
      const entries = await this.o.store.getMany(page);
      page.forEach((id, j) => {
        const doc = (entries[j]?.doc ?? null) as StoredDoc | null;
        if (doc === null) index.delete(id);
        else this.indexInto(index, id, doc);
      });
    }
  }

  /** Indexes every stored document into `index`, in segments of at most maxSegmentDocs; returns how many. */
  private async rebuild(index = this.index): Promise<number> {
    return indexStored(this.o.store.entries(), index, (id, err) => this.refused(id, err), (n) => {
      if (n % this.policy.maxSegmentDocs === 0) index.seal(this.newName());
    });
  }

  private indexInto(index: { add(id: string, doc: StoredDoc): void }, id: string, doc: StoredDoc): void {
    const err = addStored(index, id, doc);
    if (err !== undefined) this.refused(id, err);
  }

  private refused(id: string, err: unknown): void {
    if (this.unindexable++ === 0) this.o.log.warn({ dir: this.o.dir, id, err }, 'a stored document the index refuses was left out of the search index');
  }
}

/**
 * Indexes the documents of `entries` (tombstones skipped) into `index`; returns how many.
 * A document the index refuses is left out and reported to `refused`: only data written before
 * admission existed can hold one, and the replica or copy stays usable. `indexed(n)` follows each.
 */
export async function indexStored(
  entries: AsyncIterable<StoredEntry>,
  index: { add(id: string, doc: StoredDoc): void },
  refused: (id: string, err: unknown) => void,
  indexed?: (n: number) => void,
): Promise<number> {
  let n = 0;
  for await (const e of entries) {
    if (e.doc === null) continue;
    const err = addStored(index, e.id, e.doc as StoredDoc);
    if (err !== undefined) {
      refused(e.id, err);
      continue;
    }
    n++;
    indexed?.(n);
  }
  return n;
}

/** Adds a stored document; what the index threw, if it refused it. */
function addStored(index: { add(id: string, doc: StoredDoc): void }, id: string, doc: StoredDoc): unknown {
  try {
    index.add(id, doc);
    return undefined;
  } catch (err) {
    return err ?? new Error('refused');
  }
}

/** The first `n` of `set`, in insertion order. */
function first(set: ReadonlySet<string>, n: number): string[] {
  const out: string[] = [];
  for (const v of set) {
    if (out.length === n) break;
    out.push(v);
  }
  return out;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}
