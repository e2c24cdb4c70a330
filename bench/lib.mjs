// Shared pieces of the benchmarks: a dev cluster in its own process, free ports, timing.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
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
 * `nodeArgs` go to the child's node (e.g. `--cpu-prof`), `extra` to `shardex dev`.
 */
export async function startDevCluster({ nodes = 3, shards = 2, replicas = 2, extra = [], nodeArgs = [] } = {}) {
  const dataDir = await mkdtemp(join(tmpdir(), 'shardex-bench-'));
  // Consecutive HTTP ports from the base, gRPC at +1000: pick a base with room.
  const port = 20000 + Math.floor(Math.random() * 20000);
  const child = spawn(process.execPath, [...nodeArgs, join(root, 'bin/shardex.js'), 'dev', '--nodes', String(nodes), '--port', String(port),
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

/** Bytes of every file under `dir` (recursively), except names `skip` accepts. */
export async function dirSize(dir, skip = () => false) {
  let total = 0;
  for (const e of await readdir(dir, { withFileTypes: true })) {
    if (skip(e.name)) continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) total += await dirSize(p, skip);
    else if (e.isFile()) total += (await stat(p)).size;
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
