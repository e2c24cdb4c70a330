// The last lines a dev node logs before its worker thread is terminated reach the log file
// (src/logger.ts flushLoggerSync). The destination writes asynchronously: lines logged while a write
// is in flight wait in its buffer, and the dev cluster terminates a node's thread right after its
// last line. (A process's main thread is covered by pino itself, which writes the buffer out at
// exit.) The code runs from dist/ (a worker runs JavaScript).
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, ROOT } from './support/cli-run.js';
import { useTempStores } from './support/temp-stores.js';

const LINES = 5000;

// Waits for the file to open (its first line written), then logs a burst and ends at once: most of
// the burst is still buffered when the last call returns.
const body = (end: string): string => `
const { createLogger, flushLoggerSync } = await import(${JSON.stringify(pathToFileURL(join(ROOT, 'dist/logger.js')).href)});
const logger = createLogger({ file: FILE, level: 'info' });
logger.info({ n: -1 }, 'opening');
await new Promise((r) => setTimeout(r, 100));
for (let n = 0; n < ${LINES}; n++) logger.info({ n, pad: 'x'.repeat(200) }, 'burst');
flushLoggerSync(logger);
${end}
`;

/** The burst lines found, in order of n (the write in flight may land after the ones written at the end). */
async function burstLines(file: string): Promise<number[]> {
  const text = await readFile(file, 'utf8');
  return text
    .split('\n')
    .filter((l) => l.includes('"burst"'))
    .map((l) => (JSON.parse(l) as { n: number }).n)
    .sort((a, b) => a - b);
}

const everyLine = Array.from({ length: LINES }, (_, n) => n);

describe('the last log lines before the end', () => {
  const tmp = useTempStores('logger-flush');
  beforeAll(() => assertBuilt('logger.ts'));

  it('reach the file when the worker thread is terminated right after them', async () => {
    const file = join(tmp.dir, 'worker.log');
    // An eval'd worker is CommonJS: the module body runs in an async function.
    const code = `const { parentPort } = require('node:worker_threads');\nconst FILE = ${JSON.stringify(file)};\n(async () => {${body("parentPort.postMessage('done');")}})();`;
    const worker = new Worker(code, { eval: true });
    try {
      await new Promise<void>((resolve, reject) => {
        worker.once('message', () => resolve());
        worker.once('error', reject);
      });
    } finally {
      await worker.terminate();
    }
    // A write the thread had already handed to the file system may still land after terminate():
    // wait (bounded) for the count to settle; lines that were only buffered would never come.
    let lines: number[] = [];
    for (let i = 0; i < 50; i++) {
      lines = await burstLines(file);
      if (lines.length === LINES) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(lines).toEqual(everyLine);
  });
});
