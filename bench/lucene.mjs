// Apache Lucene as a baseline (issue 15): Debian's liblucene8-java and a JDK, installed when
// missing (as root, from Debian's packages), bench/lucene/LuceneBench.java compiled once into a
// temp dir, then run on the same documents and queries as the Shardex figures of the same run.
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createWriteStream, existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import { log, root } from './lib.mjs';

const JAR_DIR = '/usr/share/java';
const JARS = ['lucene-core', 'lucene-analyzers-common'];
const SOURCE = join(root, 'bench/lucene/LuceneBench.java');

function jars() {
  const files = existsSync(JAR_DIR) ? readdirSync(JAR_DIR) : [];
  return JARS.map((name) => files.find((f) => new RegExp(`^${name}-\\d[\\d.]*\\.jar$`).test(f))).map((f) => f && join(JAR_DIR, f));
}

const has = (cmd) => spawnSync(cmd, ['-version'], { stdio: 'ignore' }).status === 0;

/** Installs Lucene and a JDK from Debian's packages when missing; says what to do when it cannot. */
function ensureInstalled() {
  const missing = [];
  if (jars().some((j) => j === undefined)) missing.push('liblucene8-java');
  if (!has('javac') || !has('java')) missing.push('default-jdk-headless');
  if (missing.length === 0) return;
  if (process.getuid?.() !== 0) {
    throw new Error(`the Lucene baseline needs ${missing.join(' and ')}: run \`sudo apt-get install -y ${missing.join(' ')}\`, then the benchmark again`);
  }
  log(`installing ${missing.join(', ')} from Debian's packages (for the Lucene baseline) ...`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  let r = spawnSync('apt-get', ['install', '-y', '--no-install-recommends', ...missing], { stdio: ['ignore', 'ignore', 'inherit'], env });
  if (r.status !== 0) {
    spawnSync('apt-get', ['update'], { stdio: ['ignore', 'ignore', 'inherit'], env });
    r = spawnSync('apt-get', ['install', '-y', '--no-install-recommends', ...missing], { stdio: ['ignore', 'ignore', 'inherit'], env });
  }
  if (r.status !== 0 || jars().some((j) => j === undefined) || !has('javac')) {
    throw new Error(`could not install ${missing.join(', ')} with apt-get (exit ${r.status}); install them by hand, or run the benchmark with --lucene 0`);
  }
}

/** Compiles LuceneBench.java once per source version; returns the classpath to run it with. */
async function compiled() {
  ensureInstalled();
  const cp = jars().join(':');
  const hash = createHash('sha256').update(readFileSync(SOURCE)).update(cp).digest('hex').slice(0, 16);
  const out = join(tmpdir(), `shardex-bench-lucene-${hash}`);
  if (!existsSync(join(out, 'LuceneBench.class'))) {
    log('compiling bench/lucene/LuceneBench.java ...');
    await mkdir(out, { recursive: true });
    const r = spawnSync('javac', ['-nowarn', '-cp', cp, '-d', out, SOURCE], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`javac failed on bench/lucene/LuceneBench.java:\n${r.stderr}`);
  }
  return `${out}:${cp}`;
}

/** Figures of timed rounds, as bench/search.mjs's sequentialRun gives them. */
export function sequentialFigures(byQuery) {
  const all = byQuery.flat();
  const wallMs = all.reduce((s, x) => s + x, 0);
  return { byQuery, all, wallMs, qps: all.length / (wallMs / 1000) };
}

/**
 * Indexes `docs` into a Lucene index on disk (committed) in a JVM of its own and warms up `mix`
 * (bench/search.mjs's query mix) in both ways of collecting: counting every hit (`exact`) and
 * Lucene's default. Resolves with the index's figures and `run(mode, rounds)`, which times that
 * many rounds of the mix (ms by query) when asked, so that the caller can alternate Lucene's
 * rounds with its own engine's; `close()` ends the JVM.
 */
export async function luceneSession(docs, mix, { warmup, limit }) {
  const classpath = await compiled();
  const dir = await mkdtemp(join(tmpdir(), 'shardex-bench-lucene-run-'));
  let child;
  try {
    const docsFile = join(dir, 'docs.tsv');
    const w = createWriteStream(docsFile);
    for (const d of docs) {
      const line = `${d.id}\t${d.title}\t${d.body}\t${d.category}\t${d.price}\t${JSON.stringify(d)}\n`;
      if (!w.write(line)) await once(w, 'drain');
    }
    w.end();
    await once(w, 'finish');
    const queriesFile = join(dir, 'queries.tsv');
    await writeFile(queriesFile, mix.map((q) => `${q.kind}\t${q.words.join(' ')}\t${q.category ?? ''}\t${q.sortPrice ? 1 : 0}`).join('\n') + '\n');
    log(`Lucene: indexing ${docs.length.toLocaleString('en-US')} docs (one JVM, committed) and warming up the mix ...`);
    child = spawn('java', ['-Xms1g', '-Xmx1g', '-cp', classpath, 'LuceneBench', docsFile, queriesFile, join(dir, 'index'), String(warmup), String(limit)], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    let partial = '';
    child.stderr.on('data', (c) => {
      stderr += c;
      const lines = (partial + c).split('\n');
      partial = lines.pop();
      for (const line of lines) if (line.trim()) log(`  ${line.trim()}`);
    });
    // One JSON line per answer: the figures first, then one per `MODE ROUNDS` asked.
    const answers = [];
    const waiting = [];
    let out = '';
    let failed;
    const fail = (err) => {
      failed ??= err;
      for (const w of waiting.splice(0)) w.reject(failed);
    };
    child.stdout.on('data', (c) => {
      const lines = (out + c).split('\n');
      out = lines.pop();
      for (const line of lines) {
        if (!line.trim()) continue;
        const w = waiting.shift();
        if (w) w.resolve(JSON.parse(line));
        else answers.push(JSON.parse(line));
      }
    });
    const exited = once(child, 'close').then(([code]) => fail(new Error(`the Lucene baseline ended (exit ${code}):\n${stderr.slice(-2000)}`)));
    const next = () => {
      if (answers.length > 0) return Promise.resolve(answers.shift());
      if (failed) return Promise.reject(failed);
      return new Promise((resolve, reject) => waiting.push({ resolve, reject }));
    };
    const r = await next();
    const proc = child;
    let closed;
    return {
      rate: r.docs / r.indexSeconds,
      indexBytes: r.indexBytes,
      indexBytesWithoutStored: r.indexBytes - r.storedBytes,
      heapBytes: r.heapBytes,
      segments: r.segments,
      totals: r.totals,
      /** Times `rounds` rounds of the mix, `mode` 'exact' or 'default'; resolves with ms by query. */
      async run(mode, rounds) {
        proc.stdin.write(`${mode} ${rounds}\n`);
        const a = await next();
        if (a.mode !== mode) throw new Error(`the Lucene baseline answered ${a.mode} to ${mode}`);
        return a.ms;
      },
      /** Ends the JVM and removes its files; once, however often it is called. */
      close() {
        closed ??= (async () => {
          proc.stdin.end();
          await exited;
          await rm(dir, { recursive: true, force: true });
        })();
        return closed;
      },
    };
  } catch (err) {
    child?.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/** luceneSession, then `rounds` timed rounds in each way of collecting, one after the other. */
export async function luceneRun(docs, mix, { rounds, warmup, limit }) {
  const session = await luceneSession(docs, mix, { warmup, limit });
  try {
    const { run, close, ...figures } = session;
    const exact = rounds > 0 && mix.length > 0 ? await run('exact', rounds) : mix.map(() => []);
    const byDefault = rounds > 0 && mix.length > 0 ? await run('default', rounds) : mix.map(() => []);
    return { ...figures, exact: sequentialFigures(exact), default: sequentialFigures(byDefault) };
  } finally {
    await session.close();
  }
}
