// Shared pieces of the benchmarks: a dev cluster in its own process, free ports, timing.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { Agent, request } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = fileURLToPath(new URL('..', import.meta.url));

export const log = (line) => process.stdout.write(line + '\n');

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/**
 * Starts `shardex dev` as a child process, resolves once it prints that it is up.
 * `nodeArgs` go to the child's node (e.g. `--cpu-prof`), and so do BENCH_NODE_ARGS (space-separated,
 * as for startProcess); `extra` to `shardex dev`.
 */
export async function startDevCluster({ nodes = 3, shards = 2, replicas = 2, extra = [], nodeArgs = [] } = {}) {
  const dataDir = await mkdtemp(join(tmpdir(), 'shardex-bench-'));
  // Consecutive HTTP ports from the base, gRPC at +1000: pick a base with room.
  const port = 20000 + Math.floor(Math.random() * 20000);
  const envArgs = process.env.BENCH_NODE_ARGS?.split(' ').filter((a) => a !== '') ?? [];
  const child = spawn(process.execPath, [...envArgs, ...nodeArgs, join(root, 'bin/shardex.js'), 'dev', '--nodes', String(nodes), '--port', String(port),
    '--data', dataDir, '--shards', String(shards), '--replicas', String(replicas), ...extra], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`dev cluster did not start in 60 s:\n${out}`)), 60_000);
    child.stdout.on('data', (d) => {
      out += d;
      if (out.includes('press Ctrl-C')) { clearTimeout(t); resolve(); }
    });
    child.once('exit', (code) => { clearTimeout(t); reject(new Error(`dev cluster exited with ${code}:\n${out}`)); });
  });
  const urls = Array.from({ length: nodes }, (_, i) => `http://127.0.0.1:${port + i}`);
  return {
    urls,
    pid: child.pid,
    dataDir,
    async stop() {
      child.kill('SIGTERM');
      await new Promise((r) => { const t = setTimeout(() => { child.kill('SIGKILL'); r(); }, 10_000); child.once('exit', () => { clearTimeout(t); r(); }); });
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

export const ratio = (a, b) => (b === 0 ? 'n/a' : (a / b).toFixed(2));
export const fmt = (n) => Math.round(n).toLocaleString('en-US');

/**
 * Bytes of every file under `dir` (recursively), except names `skip` accepts. A live node may
 * remove a file between the listing and its stat (a merge's sources, a compacted LevelDB table):
 * such a file counts as gone.
 */
export async function dirSize(dir, skip = () => false) {
  let total = 0;
  const gone = (err) => {
    if (err.code === 'ENOENT') return 0;
    throw err;
  };
  for (const e of await readdir(dir, { withFileTypes: true }).catch((err) => (gone(err), []))) {
    if (skip(e.name)) continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) total += await dirSize(p, skip);
    else if (e.isFile()) total += await stat(p).then((s) => s.size, gone);
  }
  return total;
}

// One keep-alive agent for every benchmark request: latency should be the server's, not TCP set-up's.
const agent = new Agent({ keepAlive: true, maxSockets: 64 });

/**
 * One HTTP request to a loopback URL, bounded by `timeoutMs`; resolves `{ status, body }` with
 * the body as text. Only 127.0.0.1 is accepted: benchmarks never talk to anything else.
 */
export function httpRequest(url, { method = 'GET', body, headers = {}, timeoutMs = 30_000 } = {}) {
  const u = new URL(url);
  if (u.hostname !== '127.0.0.1') return Promise.reject(new Error(`benchmarks only talk to 127.0.0.1, not ${u.hostname}`));
  return new Promise((resolve, reject) => {
    const req = request(u, { method, agent, headers: body === undefined ? headers : { 'content-length': Buffer.byteLength(body), ...headers } }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`${method} ${u.pathname}: no answer in ${timeoutMs} ms`)));
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

/** Nearest-rank percentile of an array of numbers (sorted here, a copy). */
export function percentile(values, p) {
  if (values.length === 0) return NaN;
  const s = Float64Array.from(values).sort();
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}

/**
 * CPU time (user + system, all threads) a process has used so far, in ms, from /proc (Linux;
 * NaN elsewhere). On a machine shared with other work, CPU per document moves far less than
 * wall-clock rates do.
 */
export function processCpuMs(pid) {
  try {
    // Fields after the command name: utime and stime are the 12th and 13th, in clock ticks (USER_HZ = 100).
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch {
    return NaN;
  }
}

/**
 * CPU by thread of a process, in ms, from /proc (Linux; empty elsewhere): the main thread (whose
 * id is the pid) apart from the rest, and the busiest other thread (on a node, the one LevelDB
 * compacts on, or a merge worker).
 */
export function threadCpuMs(pid) {
  try {
    const ms = readdirSync(`/proc/${pid}/task`).map((tid) => {
      const f = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8').split(') ')[1].split(' ');
      return { tid: Number(tid), ms: (Number(f[11]) + Number(f[12])) * 10 };
    });
    const others = ms.filter((t) => t.tid !== pid).map((t) => t.ms);
    return { main: ms.find((t) => t.tid === pid)?.ms ?? NaN, others: others.reduce((a, b) => a + b, 0), busiestOther: Math.max(0, ...others) };
  } catch {
    return { main: NaN, others: NaN, busiestOther: NaN };
  }
}

/** A yes/no benchmark flag's value (yes, no, 1, 0, true, false); anything else throws, naming the flag. */
export function onOff(flag, value) {
  const v = String(value).toLowerCase();
  if (['yes', '1', 'true'].includes(v)) return true;
  if (['no', '0', 'false'].includes(v)) return false;
  throw new Error(`${flag} takes yes or no, not '${value}'`);
}

/** A process's resident memory, bytes (NaN once it is gone). */
export async function rssOf(pid) {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const m = /VmRSS:\s+(\d+) kB/.exec(status);
  return m ? Number(m[1]) * 1024 : NaN;
}

/**
 * Flags `--name value` (kebab-case names become camelCase keys) over `defaults`: a flag whose
 * default is a number must be a positive number; others are taken as text. Unknown flags throw.
 */
export function parseFlags(rest, defaults) {
  const a = { ...defaults };
  for (let i = 0; i < rest.length; i += 2) {
    const key = rest[i].replace(/^--/, '').replace(/-(\w)/g, (_, c) => c.toUpperCase());
    if (!(key in a)) throw new Error(`unknown flag ${rest[i]} (known: ${Object.keys(a).join(', ')})`);
    if (rest[i + 1] === undefined) throw new Error(`${rest[i]} needs a value`);
    if (typeof defaults[key] === 'number') {
      const n = Number(rest[i + 1]);
      if (!Number.isFinite(n) || n <= 0) throw new Error(`${rest[i]} must be a positive number`);
      a[key] = n;
    } else a[key] = rest[i + 1];
  }
  return a;
}

/**
 * POSTs a JSON body (text) and resolves the parsed answer. A 503 is a condition that passes (no
 * leader yet, leader changing): waited out a bounded number of times; anything else not 2xx throws.
 */
export async function postJson(url, body, { timeoutMs = 120_000 } = {}) {
  for (let attempt = 1; ; attempt++) {
    const res = await httpRequest(url, { method: 'POST', body, headers: { 'content-type': 'application/json' }, timeoutMs });
    if (res.status >= 200 && res.status < 300) return res.body === '' ? undefined : JSON.parse(res.body);
    if (res.status !== 503 || attempt >= 20) throw new Error(`POST ${new URL(url).pathname}: HTTP ${res.status} ${res.body.slice(0, 500)}`);
    await new Promise((r) => setTimeout(r, 250 * attempt));
  }
}

/**
 * Waits until the nodes write no index segment (checkpoints and merges) for `quietSeconds` in a
 * row (checkpoints are checked every second), at most 5 minutes; returns the ms waited.
 */
export async function untilSettled(urls, quietSeconds) {
  const t0 = performance.now();
  let written = await metricSum(urls, 'shardex_index_segments_written_total');
  for (let quiet = 0; quiet < quietSeconds && performance.now() - t0 < 300_000; ) {
    await new Promise((r) => setTimeout(r, 1000));
    const now = await metricSum(urls, 'shardex_index_segments_written_total');
    quiet = now === written ? quiet + 1 : 0;
    written = now;
  }
  return performance.now() - t0;
}

/** Sum of a Prometheus counter over the nodes' `/metrics`, over the lines that contain `labels`. */
export async function metricSum(urls, name, labels = '') {
  let sum = 0;
  for (const url of urls) {
    const res = await httpRequest(`${url}/metrics`);
    for (const line of res.body.split('\n')) {
      if ((line.startsWith(name + '{') || line.startsWith(name + ' ')) && line.includes(labels)) sum += Number(line.split(' ').pop());
    }
  }
  return sum;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `probe` every 100 ms until it returns something other than undefined; throws after `ms`. */
export async function until(what, ms, probe) {
  const deadline = performance.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (performance.now() > deadline) throw new Error(`no ${what} within ${ms} ms${last ? `: ${last.message}` : ''}`);
    await sleep(100);
  }
}

/** Resolves once every shard of `collection` has a leader and every replica is active, as the node at `url` sees it. */
export async function waitSettled(url, collection, ms = 60_000) {
  await until(`settled collection ${collection}`, ms, async () => {
    const view = JSON.parse((await httpRequest(`${url}/api/cluster`)).body);
    const shards = Object.values(view.collections?.[collection]?.shards ?? {});
    return shards.length > 0 && shards.every((s) => s.leader !== null && s.replicas.every((r) => r.state === 'active')) ? true : undefined;
  });
}

// Processes a benchmark started and has not stopped yet: killed if the bench itself exits early.
const running = new Set();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});
// Ctrl-C: exit through 'exit', so that the hook above (and ZooKeeper's) run.
process.once('SIGINT', () => process.exit(130));

/**
 * Starts `node bin/shardex.js <args>` (`node`, `reader`: commands that print one JSON line
 * `{"ready":true,...}` when they serve) as its own process; resolves with that line's fields
 * once it is printed. Its output is drained (a full pipe would stall it) and the last 2,000 lines
 * kept (`output()`) for error messages. `stop()` sends SIGTERM, then SIGKILL after `graceMs`, to its pid only.
 * BENCH_NODE_ARGS (space-separated) go to its node, e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`
 * (a profile is written when the process stops, not when it is killed -9).
 */
export async function startProcess(args, { env = {}, timeoutMs = 60_000, graceMs = 10_000 } = {}) {
  const nodeArgs = process.env.BENCH_NODE_ARGS?.split(' ').filter((a) => a !== '') ?? [];
  const child = spawn(process.execPath, [...nodeArgs, join(root, 'bin/shardex.js'), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    // Quiet unless the bench is run with SHARDEX_LOG_LEVEL set (e.g. info, to see refreshes).
    env: { ...process.env, SHARDEX_LOG_LEVEL: process.env.SHARDEX_LOG_LEVEL ?? 'warn', ...env },
  });
  running.add(child);
  const lines = [];
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)));
  void exited.then(() => running.delete(child));
  let partial = '';
  let onLine = () => undefined;
  const keep = (chunk) => {
    const parts = (partial + chunk.toString('utf8')).split('\n');
    partial = parts.pop();
    for (const line of parts) {
      if (!line.trim()) continue;
      lines.push(line.slice(0, 500));
      if (lines.length > 2000) lines.shift();
      onLine(line);
    }
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const what = `shardex ${args.slice(0, 1).join(' ')} (pid ${child.pid})`;
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  };
  let info;
  try {
    info = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${what} did not print its ready line in ${timeoutMs} ms:\n${lines.slice(-20).join('\n')}`)), timeoutMs);
      onLine = (line) => {
        if (!line.includes('"ready":true')) return;
        clearTimeout(timer);
        resolve(JSON.parse(line));
      };
      void exited.then((how) => {
        clearTimeout(timer);
        reject(new Error(`${what} exited (${how}) before it was ready:\n${lines.slice(-20).join('\n')}`));
      });
    });
  } catch (err) {
    await stop();
    throw err;
  }
  onLine = () => undefined;
  return { ...info, pid: child.pid, output: () => lines.slice(), cpuMs: () => processCpuMs(child.pid), stop };
}

/**
 * A cluster of separate `shardex node` processes on a throwaway local ZooKeeper (installed and
 * started by dist/node/local-zookeeper.js), all on 127.0.0.1 and free ports. Snapshot readers
 * are added with `startReader`; `nodeExtra` goes to every `shardex node`. `stop()` ends every process by pid, then ZooKeeper, then
 * removes the data; a failed start stops what had started.
 */
export async function startZkCluster({ nodes = 2, zkTimeoutMs = 15_000, progress = log, nodeExtra = [] } = {}) {
  const { startLocalZooKeeper } = await import('../dist/node/local-zookeeper.js');
  const zk = await startLocalZooKeeper((m) => progress(`  [zookeeper] ${m}`));
  const dataDir = await mkdtemp(join(tmpdir(), 'shardex-bench-zk-'));
  const connect = `127.0.0.1:${zk.port}/shardex-bench`;
  const dataNodes = [];
  const readers = [];
  const cluster = {
    connect,
    dataDir,
    nodes: dataNodes,
    readers,
    get urls() {
      return dataNodes.map((n) => n.http);
    },
    async startNode(name) {
      const p = await startProcess(['node', '--zk', connect, '--port', '0', '--grpc-port', '0', '--name', name, '--data', join(dataDir, name), '--zk-timeout', String(zkTimeoutMs), ...nodeExtra]);
      // Nodes started side by side are pushed in the order they came up: each carries its name.
      p.name = name;
      dataNodes.push(p);
      progress(`  node ${name} up: ${p.http} (pid ${p.pid})`);
      return p;
    },
    async startReader(name, { snapshotExpiryMs = 5000, maxScans = 8, group = 'default', extra = [] } = {}) {
      const p = await startProcess(['reader', '--zk', connect, '--port', '0', '--grpc-port', '0', '--name', name, '--data', join(dataDir, name), '--zk-timeout', String(zkTimeoutMs),
        '--group', group, '--snapshot-expiry', String(snapshotExpiryMs), '--max-scans', String(maxScans), ...extra]);
      readers.push(p);
      progress(`  reader ${name} up: ${p.http} (pid ${p.pid})`);
      return p;
    },
    async stopReaders() {
      while (readers.length > 0) await readers.pop().stop();
    },
    async stop() {
      for (const p of [...readers, ...dataNodes]) await p.stop().catch(() => undefined);
      readers.length = 0;
      dataNodes.length = 0;
      await zk.stop().catch((err) => progress(`  stopping ZooKeeper failed: ${err.message}`));
      // BENCH_KEEP_DATA=1 keeps the nodes' data dirs, to open or profile a replica afterwards.
      if (process.env.BENCH_KEEP_DATA === '1') progress(`  data kept in ${dataDir} (BENCH_KEEP_DATA=1)`);
      else await rm(dataDir, { recursive: true, force: true });
    },
  };
  try {
    for (let i = 1; i <= nodes; i++) await cluster.startNode(`n${i}`);
  } catch (err) {
    await cluster.stop();
    throw err;
  }
  return cluster;
}

/** The corpus vocabulary by frequency rank (1 = most frequent), counted on the first 20,000 docs. */
export function vocabularyByRank(docs) {
  const counts = new Map();
  for (const d of docs.slice(0, 20_000)) for (const text of [d.title, d.body]) for (const w of text.split(' ')) counts.set(w, (counts.get(w) ?? 0) + 1);
  return [...counts].sort((x, y) => y[1] - x[1] || (x[0] < y[0] ? -1 : 1)).map(([w]) => w);
}

/** Posts `count` corpus documents (seed 11) to `collection`, in batches of 1,000, 8 in flight, round-robin over `urls`; prints progress every 5 s. */
export async function ingestCorpus(urls, collection, count) {
  const { generateDocs } = await import('../dist/corpus.js');
  const { default: pLimit } = await import('p-limit');
  const limit = pLimit(8);
  const batch = 1000;
  let done = 0;
  let last = performance.now();
  const t0 = performance.now();
  const jobs = [];
  let docs = [];
  let i = 0;
  for (const d of generateDocs({ count, seed: 11 })) {
    docs.push(d);
    if (docs.length === batch) {
      const body = docs;
      const url = urls[i++ % urls.length];
      docs = [];
      jobs.push(limit(async () => {
        await postJson(`${url}/api/collections/${collection}/docs`, JSON.stringify(body));
        done += body.length;
        if (performance.now() - last > 5000) {
          last = performance.now();
          log(`  ${fmt(done)} / ${fmt(count)} docs indexed, ${fmt(done / ((last - t0) / 1000))} docs/s`);
        }
      }));
      // Keep at most a few batches in memory ahead of the requests.
      if (jobs.length % 64 === 0) await Promise.all(jobs.splice(0));
    }
  }
  if (docs.length > 0) jobs.push(limit(() => postJson(`${urls[0]}/api/collections/${collection}/docs`, JSON.stringify(docs))));
  await Promise.all(jobs);
}
