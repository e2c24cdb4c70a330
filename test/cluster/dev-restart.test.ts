// `npm start` again on the same data dir (issue 11, must-show 1): the embedded coordinator keeps
// its tree under <dataDir>/coordinator, so a collection a user created, its documents and its
// search results come back after kill -9 and after Ctrl-C (then from each replica's index segment,
// re-reading no document); a damaged index segment is rebuilt; a damaged coordinator file is refused
// with a message that names it and says what to do; `--reset` wipes the data dir on purpose.
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isSegmentFile } from '../../src/distrib/index-persistence.js';
import { http } from '../support/cluster.js';
import { devLogLength, devLogLines, killAllDev, killDev, runDevUntilExit, startDev, stopDev, type DevProcess } from '../support/dev-process.js';
import { pollUntil } from '../support/poll.js';

const WORDS = ['whale', 'peace', 'river', 'crown', 'night'];
const DEADLINE_MS = 30_000;

/** A document per id: its title holds one of WORDS, so that each word matches a fifth of them. */
const book = (i: number) => ({ id: `b${i}`, title: `book ${i} of the ${WORDS[i % WORDS.length]}`, year: 1800 + i });

const poll = <T>(what: string, attempt: () => Promise<T | undefined>): Promise<T> => pollUntil(what, attempt, { ms: DEADLINE_MS });

/** Adds documents; a shard whose leader is still being elected answers 503, so retry until acknowledged. */
async function addBooks(url: string, from: number, to: number): Promise<void> {
  const docs = Array.from({ length: to - from }, (_, k) => book(from + k));
  await poll(`books ${from}-${to - 1} to be acknowledged`, async () => {
    const r = await http('POST', `${url}/api/collections/books/docs`, docs);
    return r.status === 200 ? true : undefined;
  });
}

/** The ids each word finds, sorted. */
async function searchAll(url: string): Promise<Record<string, string[]>> {
  const found: Record<string, string[]> = {};
  for (const w of WORDS) {
    const r = await http('GET', `${url}/api/collections/books/search?q=${w}&limit=1000`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    found[w] = (r.body.hits as Array<{ id: string }>).map((h) => h.id).sort();
  }
  return found;
}

/** The 'replica opened' lines the books replicas logged after byte `from` of the log (how each index came back). */
const replicaOpenings = (dataDir: string, from: number): Promise<Array<Record<string, unknown>>> => devLogLines(dataDir, 'replica opened', 'books', from);

async function expectAllBack(dev: DevProcess, count: number, searches: Record<string, string[]>): Promise<void> {
  expect(dev.out.join('')).toContain('collection "books": 2 shards x 2 replicas');
  for (const url of dev.urls) {
    for (let i = 0; i < count; i++) {
      const r = await http('GET', `${url}/api/collections/books/docs/b${i}`);
      expect(r.status, `b${i} from ${url}: ${JSON.stringify(r.body)}`).toBe(200);
      expect(r.body).toMatchObject(book(i));
    }
  }
  expect(await searchAll(dev.urls[2]!)).toEqual(searches);
}

describe('shardex dev on the data dir of a previous run', () => {
  let dataDir: string;
  let dev: DevProcess | undefined;
  let searches: Record<string, string[]>;
  const start = (...extra: string[]): Promise<DevProcess> => startDev(['--port', '0', '--data', dataDir, ...extra]);

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'shardex-restart-'));
    dev = await start();
    const created = await http('POST', `${dev.urls[0]}/api/collections`, { name: 'books', numShards: 2, replicationFactor: 2 });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    await addBooks(dev.urls[1]!, 0, 200);
    searches = await searchAll(dev.urls[0]!);
    for (const w of WORDS) expect(searches[w]).toHaveLength(40);
  });

  afterAll(async () => {
    await killAllDev();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('finds the collection, every document and the same search results after kill -9', async () => {
    await killDev(dev!);
    dev = await start();
    expect(dev.out.join('')).toContain(`found 2 collection(s) in ${dataDir}`);
    await expectAllBack(dev, 200, searches);
  });

  it('finds them again after a clean Ctrl-C', async () => {
    const running = await devLogLength(dataDir);
    await addBooks(dev!.urls[0]!, 200, 250);
    const more = await poll('the new books to be searchable', async () => {
      const s = await searchAll(dev!.urls[0]!);
      return s[WORDS[0]!]!.length === 50 ? s : undefined;
    });
    // Each node writes its checkpoints' files on its checkpoint thread, not on its event loop:
    // every checkpoint line names the worker thread that wrote it. Read while the nodes run (each
    // of the four replicas checkpoints its new books by age), not from lines logged at the stop.
    const written = await poll('a checkpoint of every books replica in the log', async () => {
      const lines = await devLogLines(dataDir, 'replica index checkpoint written', 'books', running);
      return new Set(lines.map((l) => `${l.node} ${l.replica}`)).size === 4 ? lines : undefined;
    });
    for (const w of written) expect(w.thread).toEqual(expect.any(Number));
    expect(await stopDev(dev!)).toBe(0);
    const from = await devLogLength(dataDir);
    dev = await start();
    await expectAllBack(dev, 250, more);
    // A clean stop wrote every replica's index segment: each opened from it and re-read nothing.
    const opened = await replicaOpenings(dataDir, from);
    expect(opened).toHaveLength(4);
    for (const o of opened) expect(o).toMatchObject({ index: 'loaded', replayed: 0 });
  });

  it('detects a damaged index segment, rebuilds that replica from its documents and answers as before', async () => {
    const before = await searchAll(dev!.urls[0]!);
    expect(await stopDev(dev!)).toBe(0);
    const segments = (await readdir(dataDir, { recursive: true })).filter((f) => isSegmentFile(basename(f)) && f.includes('books'));
    // Every replica has segments; one segment of one replica is damaged.
    expect(new Set(segments.map((f) => dirname(f))).size).toBe(4);
    const damaged = join(dataDir, segments[0]!);
    const bytes = await readFile(damaged);
    bytes[bytes.length - 64] ^= 0xff;
    await writeFile(damaged, bytes);
    const from = await devLogLength(dataDir);
    dev = await start();
    await expectAllBack(dev, 250, before);
    const opened = await replicaOpenings(dataDir, from);
    expect(opened.filter((o) => o.index === 'rebuilt')).toHaveLength(1);
    expect(opened.filter((o) => o.index === 'rebuilt')[0]).toMatchObject({ problem: expect.stringMatching(/checksum/) });
    expect(opened.filter((o) => o.index === 'loaded')).toHaveLength(3);
  });

  it('refuses a damaged coordinator file, naming it and saying what to do, and leaves it as it is', async () => {
    expect(await stopDev(dev!)).toBe(0);
    const log = join(dataDir, 'coordinator', 'log');
    const bytes = await readFile(log);
    bytes[16 + 8 + 4] ^= 0x01; // in the payload of the first record, with more after it
    await writeFile(log, bytes);
    const { code, output } = await runDevUntilExit(['--port', '0', '--data', dataDir]);
    expect(code).not.toBe(0);
    expect(output).toContain(`coordinator file ${log} cannot be used`);
    expect(output).toContain('fails its checksum');
    expect(output).toContain(`start with --reset to wipe ${dataDir}`);
    expect(await readFile(log)).toEqual(bytes);
  });

  it('starts empty with --reset, and says it wiped the data dir', async () => {
    dev = await start('--reset');
    expect(dev.out.join('')).toContain(`--reset: wiped ${dataDir}`);
    expect(dev.out.join('')).not.toContain('collection "books"');
    const r = await http('GET', `${dev.urls[0]}/api/collections/books/docs/b1`);
    expect(r.status).toBe(404);
    expect(await stopDev(dev)).toBe(0);
  });
});
