// A replica's search index that survives restarts: at open it loads the replica's segment file
// (src/index/segment-file.ts) and replays only the documents the store journaled after the
// segment's sequence; without a usable segment (none yet, damaged, truncated, written for another
// schema) it rebuilds from the stored documents, says why, and writes a fresh segment. New
// segments are written by a policy (enough changes, or changes and enough time) and at a clean
// close, each one capturing the index at a durable point of the store (ReplicaStore.atDurablePoint).
import { join } from 'node:path';
import type { Logger } from 'pino';
import { loadSegment, removeSegment, ShardIndex, writeSegment, type CollectionSchema, type StoredDoc } from '../index/index.js';
import type { ReplicaStore, UpdateOp } from '../ulog/index.js';
import { Mutex } from './mutex.js';
import { SearchIndexBinding } from './replica.js';

/** The segment file's name in the replica's directory (LevelDB ignores files it did not write). */
export const SEGMENT_FILE = 'shardex-index.seg';

export interface CheckpointPolicy {
  /** Changes (applied ops) after which a segment is written at the next check; default 20,000... */
  readonly maxChanges: number;
  /**
   * ...or this share of the index's documents, if more: a segment holds the whole index, so a
   * large replica writes one less often (default 0.1: a tenth of it changed).
   */
  readonly changedShare: number;
  /** Any change at all gets a segment once the last one is this old; default 60 s. */
  readonly maxAgeMs: number;
}

export const DEFAULT_CHECKPOINT_POLICY: CheckpointPolicy = { maxChanges: 20_000, changedShare: 0.1, maxAgeMs: 60_000 };

/** How the index came back at open. */
export interface IndexOpenReport {
  readonly method: 'loaded' | 'rebuilt';
  /** Why a segment was not used (rebuilt only). */
  readonly problem?: string;
  /** Documents re-read from the store: journaled after the segment (loaded), or all (rebuilt). */
  readonly replayed: number;
  readonly segmentBytes: number;
  readonly ms: number;
}

export interface PersistedIndexOptions {
  /** The replica's directory (its store's). */
  readonly dir: string;
  readonly schema: CollectionSchema;
  /** Identifies schema and analyzer: a segment written for another one is rebuilt. */
  readonly fingerprint: string;
  readonly store: ReplicaStore;
  readonly log: Logger;
  readonly policy?: Partial<CheckpointPolicy>;
  /** Told of every segment written (metrics). */
  readonly onSegmentWritten?: (bytes: number) => void;
}

const REPLAY_PAGE = 1000;

export class PersistedIndex extends SearchIndexBinding {
  private readonly path: string;
  private readonly o: PersistedIndexOptions;
  private readonly policy: CheckpointPolicy;
  /** Checkpoints and clears take turns: a segment of old data never lands after a clear. */
  private readonly lock = new Mutex();
  /** Ops the index took since the newest segment's point. */
  private changes = 0;
  private lastCheckpointAt: number;
  private unindexable = 0;

  private constructor(o: PersistedIndexOptions, index: ShardIndex, now: number) {
    super(o.schema, index);
    this.o = o;
    this.path = join(o.dir, SEGMENT_FILE);
    this.policy = { ...DEFAULT_CHECKPOINT_POLICY, ...o.policy };
    this.lastCheckpointAt = now;
  }

  /** Opens the replica's index: its segment plus the changes after it, else a rebuild (then a new segment). */
  static async open(o: PersistedIndexOptions): Promise<{ index: PersistedIndex; report: IndexOpenReport }> {
    const t0 = performance.now();
    const path = join(o.dir, SEGMENT_FILE);
    const loaded = await loadSegment(path, o.schema, o.fingerprint);
    let problem: string | undefined;
    if (loaded.ok && loaded.seq > o.store.changeSeq) problem = `its sequence ${loaded.seq} is newer than the store's ${o.store.changeSeq}`;
    else if (!loaded.ok && !loaded.missing) problem = loaded.problem;
    if (loaded.ok && problem === undefined) {
      const p = new PersistedIndex(o, loaded.index, Date.now());
      const ids = await o.store.changedSince(loaded.seq);
      await p.replay(ids);
      // The replayed changes are not in the segment yet: they count toward the next one.
      p.changes = ids.length;
      return { index: p, report: { method: 'loaded', replayed: ids.length, segmentBytes: loaded.bytes, ms: Math.round(performance.now() - t0) } };
    }
    if (problem !== undefined) o.log.warn({ dir: o.dir, problem }, 'the replica index segment cannot be used; rebuilding it from the stored documents');
    await removeSegment(path);
    const p = new PersistedIndex(o, new ShardIndex(o.schema), Date.now());
    const replayed = await p.rebuild();
    // The rebuilt index goes to disk at once, so that the next start loads it.
    p.changes = replayed;
    const written = replayed > 0 ? await p.checkpoint() : 0;
    return { index: p, report: { method: 'rebuilt', ...(problem !== undefined && { problem }), replayed, segmentBytes: written, ms: Math.round(performance.now() - t0) } };
  }

  override apply(ops: readonly UpdateOp[]): void {
    super.apply(ops);
    this.changes += ops.length;
  }

  /** Writes a segment when the policy says so; returns whether it did. */
  async maybeCheckpoint(now = Date.now()): Promise<boolean> {
    if (this.changes === 0) return false;
    const enough = Math.max(this.policy.maxChanges, this.policy.changedShare * this.index.size);
    if (this.changes < enough && now - this.lastCheckpointAt < this.policy.maxAgeMs) return false;
    await this.checkpoint();
    return true;
  }

  /**
   * Writes the index as the replica's segment, captured at a durable point of the store (every
   * change journaled up to the point's sequence is in it, nothing later), then drops the journal
   * up to there. Returns the segment's size in bytes (0: nothing to write).
   */
  checkpoint(): Promise<number> {
    return this.lock.run(async () => {
      if (this.changes === 0) return 0;
      const t0 = performance.now();
      const { state, seq } = await this.o.store.atDurablePoint((seq) => {
        this.changes = 0;
        return { state: this.index.exportState(), seq };
      });
      const captureMs = Math.round(performance.now() - t0);
      const bytes = await writeSegment(this.path, state, { seq, fingerprint: this.o.fingerprint });
      this.lastCheckpointAt = Date.now();
      await this.o.store.dropChangesThrough(seq);
      this.o.onSegmentWritten?.(bytes);
      this.o.log.info({ dir: this.o.dir, seq, bytes, docs: this.index.size, captureMs, ms: Math.round(performance.now() - t0) }, 'replica index segment written');
      return bytes;
    });
  }

  override clear(): Promise<void> {
    return this.lock.run(async () => {
      await removeSegment(this.path);
      this.changes = 0;
      super.clear();
    });
  }

  /** Re-reads the current documents of `ids` into the index (a deleted or purged id leaves it). */
  private async replay(ids: readonly string[]): Promise<void> {
    for (let i = 0; i < ids.length; i += REPLAY_PAGE) {
      const page = ids.slice(i, i + REPLAY_PAGE);
      const entries = await this.o.store.getMany(page);
      const ops = page.map((id, j) => ({ id, doc: (entries[j]?.doc ?? null) as StoredDoc | null }));
      for (const op of ops) this.indexOne(op.id, op.doc);
    }
  }

  /** Indexes every stored document; returns how many. */
  private async rebuild(): Promise<number> {
    let n = 0;
    for await (const e of this.o.store.entries()) {
      if (e.doc === null) continue;
      this.indexOne(e.id, e.doc as StoredDoc);
      n++;
    }
    this.index.trim();
    return n;
  }

  private indexOne(id: string, doc: StoredDoc | null): void {
    if (doc === null) {
      this.index.delete(id);
      return;
    }
    try {
      this.index.add(id, doc);
    } catch {
      // Only data written before admission existed can hold such a document: keep the replica usable.
      if (this.unindexable++ === 0) this.o.log.warn({ dir: this.o.dir, id }, 'a stored document the index refuses was left out of the search index');
    }
  }
}
