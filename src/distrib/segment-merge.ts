// Merging a replica's segment files off the event loop, as Elasticsearch runs merges on threads
// of their own: a merge decodes every posting of its sources and encodes them again, a second or
// more of CPU for tens of thousands of documents, during which a node on one thread would answer
// nothing and write no checkpoint.
//
// A checkpoint's files are written off the event loop too (CheckpointFiles, on a second thread
// of the node so that they never wait behind a merge): encoding a segment, its writes and syncs,
// then the commit's, are a dozen steps that on a busy event loop would each wait behind the
// batches queued there, hundreds of milliseconds in all during which a crash replays more.
//
// A merge is described by files, not by objects (MergeJob): each source's segment file and the
// ids deleted from it since it was written. mergeSegmentFiles loads them, combines their live
// documents (src/index/merge-segments.ts) and writes the result; MergeThread runs it in a worker
// thread (merge-worker.ts), one job at a time, and ends the worker when it has been idle a while.
// Without the worker's file (the sources run as TypeScript, in tests) it merges in the thread
// that asks, with the same code.
import { existsSync } from 'node:fs';
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import {
  loadSegment,
  mergeStates,
  parseSchema,
  SegmentProblem,
  writeCommit,
  writeSegment,
  type CollectionSchema,
  type CommitInfo,
  type SegmentInfo,
  type ShardIndexState,
} from '../index/index.js';

/** One merge: the sources' files (each with the ids deleted from it since), the file to write. */
export interface MergeJob {
  readonly sources: ReadonlyArray<{ readonly path: string; readonly deleted: readonly string[] }>;
  readonly out: string;
  /** The sequence the merged file records (the store's, when the merge began). */
  readonly seq: number;
  /** The schema and analyzer the files are written for (schemaFingerprint). */
  readonly fingerprint: string;
}

/**
 * Runs merges; resolves the merged file's size. A source that does not check rejects with a
 * SegmentProblem. `schema` is the one the fingerprint names, for a merge in the calling thread.
 */
export interface SegmentMerger {
  merge(job: MergeJob, schema: CollectionSchema): Promise<Merged>;
}

/** A merge's file: its bytes, and the id of the worker thread that wrote it (absent: the calling thread). */
export interface Merged {
  readonly bytes: number;
  readonly thread?: number;
}

/** Identifies a collection's schema and analyzer: segment files written for another one are rebuilt. */
export function schemaFingerprint(fields: unknown): string {
  return JSON.stringify({ fields: fields ?? null, analyzer: 'standard' });
}

/** The schema a fingerprint made by schemaFingerprint names (a worker gets the fingerprint, not the schema's objects). */
export function schemaOfFingerprint(fingerprint: string): CollectionSchema {
  return parseSchema((JSON.parse(fingerprint) as { fields: unknown }).fields);
}

/** Loads the job's sources, applies their deletes, writes their live documents as one segment; returns its bytes. */
export async function mergeSegmentFiles(job: MergeJob, schema: CollectionSchema): Promise<number> {
  const states = [];
  for (const source of job.sources) {
    const loaded = await loadSegment(source.path, schema, job.fingerprint);
    if (!loaded.ok) throw new SegmentProblem(`segment ${basename(source.path)}: ${loaded.problem}`);
    for (const id of source.deleted) loaded.index.delete(id);
    states.push(loaded.index.exportState());
  }
  return writeSegment(job.out, mergeStates(states), { seq: job.seq, fingerprint: job.fingerprint });
}

/** A checkpoint's files: its new segments (each written and synced), then the commit naming them. */
export interface CheckpointFiles {
  readonly segments: ReadonlyArray<{ readonly path: string; readonly state: ShardIndexState }>;
  /** What every new segment file records. */
  readonly info: SegmentInfo;
  readonly commitPath: string;
  readonly commit: CommitInfo;
}

/** Writes checkpoints' files. */
export interface CheckpointWriter {
  writeCheckpoint(files: CheckpointFiles): Promise<CheckpointWritten>;
}

/** What a checkpoint's files take: each segment file's bytes, then the commit's. */
export interface CheckpointSizes {
  readonly segments: number[];
  readonly commit: number;
}

/** A checkpoint's files as written, with the id of the worker thread that wrote them (absent: the calling thread). */
export interface CheckpointWritten extends CheckpointSizes {
  readonly thread?: number;
}

/** Writes `files` in order: the segments, then the commit (which syncs the directory). */
export async function writeCheckpointFiles(files: CheckpointFiles): Promise<CheckpointSizes> {
  const segments: number[] = [];
  for (const { path, state } of files.segments) segments.push(await writeSegment(path, state, files.info));
  return { segments, commit: await writeCommit(files.commitPath, files.commit) };
}

/** Merges and writes checkpoints in the calling thread. */
export const IN_THREAD: SegmentMerger & CheckpointWriter = {
  merge: async (job, schema) => ({ bytes: await mergeSegmentFiles(job, schema) }),
  writeCheckpoint: writeCheckpointFiles,
};

/** What the worker is sent: a merge, or a checkpoint's files. */
export type SegmentTask = { readonly id: number; readonly job: MergeJob } | { readonly id: number; readonly checkpoint: CheckpointFiles };

/** What the worker answers for a task. */
export type MergeReply =
  | { readonly id: number; readonly bytes: number; readonly thread: number }
  | { readonly id: number; readonly written: CheckpointSizes; readonly thread: number }
  | { readonly id: number; readonly error: string; readonly damaged: boolean };

const WORKER_URL = new URL('./merge-worker.js', import.meta.url);
/** A worker idle this long ends (its heap held the last merge's decoded postings). */
const DEFAULT_IDLE_MS = 30_000;

/**
 * A node's merge thread: a worker started at the first task, running the tasks of every replica
 * of the node one at a time (the node's other core, not its event loop), ended once idle. A node
 * runs two: one for merges, one for checkpoints' files.
 */
export class MergeThread implements SegmentMerger, CheckpointWriter {
  private worker: Worker | undefined;
  private readonly pending = new Map<number, { resolve: (reply: MergeReply) => void; reject: (err: Error) => void }>();
  private nextId = 1;
  private idleTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly o: { readonly log: Logger; readonly idleMs?: number }) {}

  /** Whether merges run in a worker: false when the worker's file is not there (sources run as TypeScript). */
  static get available(): boolean {
    return WORKER_URL.protocol === 'file:' && existsSync(fileURLToPath(WORKER_URL));
  }

  /** The worker's thread id while it runs (tests check that merges leave the calling thread). */
  get threadId(): number | undefined {
    return this.worker?.threadId;
  }

  /** The worker reads the schema from `job.fingerprint`, which schemaFingerprint must have made. */
  merge(job: MergeJob, schema: CollectionSchema): Promise<Merged> {
    if (!MergeThread.available && !this.closed) return IN_THREAD.merge(job, schema);
    return this.run((id) => ({ id, job })).then((reply) => {
      if ('bytes' in reply) return { bytes: reply.bytes, thread: reply.thread };
      throw new Error('the merge thread answered a merge as a checkpoint write');
    });
  }

  /** The segments' states are copied to the worker (structured clone): the caller's stay as they are. */
  writeCheckpoint(files: CheckpointFiles): Promise<CheckpointWritten> {
    if (!MergeThread.available && !this.closed) return IN_THREAD.writeCheckpoint(files);
    return this.run((id) => ({ id, checkpoint: files })).then((reply) => {
      if ('written' in reply) return { ...reply.written, thread: reply.thread };
      throw new Error('the merge thread answered a checkpoint write as a merge');
    });
  }

  private run(task: (id: number) => SegmentTask): Promise<MergeReply> {
    if (this.closed) return Promise.reject(new Error('the merge thread is closed'));
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    const worker = this.start();
    const id = this.nextId++;
    return new Promise<MergeReply>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      worker.postMessage(task(id));
    });
  }

  /** Ends the worker; merges still running fail (their replicas drop them). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    await this.stop();
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(WORKER_URL);
    worker.unref();
    worker.on('message', (reply: MergeReply) => {
      const p = this.pending.get(reply.id);
      if (p === undefined) return;
      this.pending.delete(reply.id);
      if ('error' in reply) p.reject(reply.damaged ? new SegmentProblem(reply.error) : new Error(reply.error));
      else p.resolve(reply);
      if (this.pending.size === 0 && !this.closed) {
        this.idleTimer = setTimeout(() => void this.stop(), this.o.idleMs ?? DEFAULT_IDLE_MS);
        this.idleTimer.unref();
      }
    });
    worker.on('error', (err) => this.failAll(worker, `the merge thread failed: ${err.message}`));
    worker.on('exit', (code) => this.failAll(worker, `the merge thread exited (code ${code})`));
    this.worker = worker;
    return worker;
  }

  private async stop(): Promise<void> {
    const worker = this.worker;
    if (worker === undefined) return;
    this.failAll(worker, 'the merge thread was stopped');
    await worker.terminate();
  }

  /** `worker` is gone: its jobs fail, and the next merge starts a new one. */
  private failAll(worker: Worker, why: string): void {
    if (this.worker !== worker) return;
    this.worker = undefined;
    if (this.pending.size > 0) this.o.log.warn({ tasks: this.pending.size, why }, 'merges or checkpoint writes were dropped');
    for (const p of this.pending.values()) p.reject(new Error(why));
    this.pending.clear();
  }
}
