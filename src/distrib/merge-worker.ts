// The merge thread's worker (segment-merge.ts): runs the merges and checkpoint writes it is
// sent, one at a time, and answers each with what it wrote or why it failed.
import { parentPort, threadId } from 'node:worker_threads';
import { SegmentProblem } from '../index/index.js';
import { mergeSegmentFiles, schemaOfFingerprint, writeCheckpointFiles, type MergeReply, type SegmentTask } from './segment-merge.js';

const port = parentPort;
if (port === null) throw new Error('merge-worker.js runs as a worker thread of MergeThread');

let queue = Promise.resolve();
port.on('message', (task: SegmentTask) => {
  const { id } = task;
  queue = queue.then(async () => {
    let reply: MergeReply;
    try {
      if ('job' in task) reply = { id, bytes: await mergeSegmentFiles(task.job, schemaOfFingerprint(task.job.fingerprint)), thread: threadId };
      else reply = { id, written: await writeCheckpointFiles(task.checkpoint), thread: threadId };
    } catch (err) {
      reply = { id, error: err instanceof Error ? err.message : String(err), damaged: err instanceof SegmentProblem };
    }
    port.postMessage(reply);
  });
});
