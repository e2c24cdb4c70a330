// The merge thread's worker (segment-merge.ts): runs the merges it is sent, one at a time, and
// answers each with the merged file's size or why it failed.
import { parentPort } from 'node:worker_threads';
import { SegmentProblem } from '../index/index.js';
import { mergeSegmentFiles, schemaOfFingerprint, type MergeJob, type MergeReply } from './segment-merge.js';

const port = parentPort;
if (port === null) throw new Error('merge-worker.js runs as a worker thread of MergeThread');

let queue = Promise.resolve();
port.on('message', ({ id, job }: { id: number; job: MergeJob }) => {
  queue = queue.then(async () => {
    let reply: MergeReply;
    try {
      reply = { id, bytes: await mergeSegmentFiles(job, schemaOfFingerprint(job.fingerprint)) };
    } catch (err) {
      reply = { id, error: err instanceof Error ? err.message : String(err), damaged: err instanceof SegmentProblem };
    }
    port.postMessage(reply);
  });
});
