// Shared pieces of the benchmarks: a dev cluster in its own process, free ports, timing.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
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

/** Starts `shardex dev` as a child process, resolves once it prints that it is up. */
export async function startDevCluster({ nodes = 3, shards = 2, replicas = 2, extra = [] } = {}) {
  const dataDir = await mkdtemp(join(tmpdir(), 'shardex-bench-'));
  // Consecutive HTTP ports from the base, gRPC at +1000: pick a base with room.
  const port = 20000 + Math.floor(Math.random() * 20000);
  const child = spawn(process.execPath, [join(root, 'bin/shardex.js'), 'dev', '--nodes', String(nodes), '--port', String(port),
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
    async stop() {
      child.kill('SIGTERM');
      await new Promise((r) => { const t = setTimeout(() => { child.kill('SIGKILL'); r(); }, 10_000); child.once('exit', () => { clearTimeout(t); r(); }); });
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

export const ratio = (a, b) => (b === 0 ? 'n/a' : (a / b).toFixed(2));
export const fmt = (n) => Math.round(n).toLocaleString('en-US');
