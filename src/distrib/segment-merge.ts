// Merging a replica's segment files off the event loop, as Elasticsearch runs merges on threads
// of their own: a merge decodes every posting of its sources and encodes them again, a second or
// more of CPU for tens of thousands of documents, during which a node on one thread would answer
// nothing and write no checkpoint.
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
import { loadSegment, mergeStates, parseSchema, SegmentProblem, writeSegment, type CollectionSchema } from '../index/index.js';

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
  merge(job: MergeJob, schema: CollectionSchema): Promise<number>;
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

/** Merges in the calling thread. */
export const IN_THREAD: SegmentMerger = { merge: mergeSegmentFiles };

/** What the worker answers for a job. */
export type MergeReply = { readonly id: number; readonly bytes: number } | { readonly id: number; readonly error: string; readonly damaged: boolean };

const WORKER_URL = new URL('./merge-worker.js', import.meta.url);
/** A worker idle this long ends (its heap held the last merge's decoded postings). */
const DEFAULT_IDLE_MS = 30_000;

/**
 * A node's merge thread: a worker started at the first merge, running the jobs of every replica
 * of the node one at a time (the node's other core, not its event loop), ended once idle.
 */
export class MergeThread implements SegmentMerger {
  private worker: Worker | undefined;
  private readonly pending = new Map<number, { resolve: (bytes: number) => void; reject: (err: Error) => void }>();
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
  merge(job: MergeJob, schema: CollectionSchema): Promise<number> {
    if (this.closed) return Promise.reject(new Error('the merge thread is closed'));
    if (!MergeThread.available) return IN_THREAD.merge(job, schema);
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    const worker = this.start();
    const id = this.nextId++;
    return new Promise<number>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      worker.postMessage({ id, job });
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
      if ('bytes' in reply) p.resolve(reply.bytes);
      else p.reject(reply.damaged ? new SegmentProblem(reply.error) : new Error(reply.error));
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
    if (this.pending.size > 0) this.o.log.warn({ jobs: this.pending.size, why }, 'merges were dropped');
    for (const p of this.pending.values()) p.reject(new Error(why));
    this.pending.clear();
  }
}
