// CLI import (issue 6, item 5): an N-line NDJSON file from the corpus, loaded by
// `node bin/shardex.js import <collection> <file> --url ...` as a child process (the smart
// client: each batch grouped by shard and sent to the shard's leader) into a `shardex dev`
// cluster, timed by the child's wall clock. Beside it, in the same run and cluster, the raw
// HTTP bulk path: the same documents as JSON batches of the same size, posted round-robin to
// the nodes with the same number in flight, into a fresh collection (any node accepts a batch
// and forwards each shard's part to its leader).
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pLimit from 'p-limit';
import { generateNdjson } from '../dist/corpus.js';
import { fmt, httpRequest, log, metricSum, parseFlags, postJson, processCpuMs, ratio, root, startDevCluster, waitSettled } from './lib.mjs';

const FIELDS = { title: 'text', body: 'text', category: 'keyword', price: 'number', ts: 'date' };
const DEFAULTS = { docs: 100_000, batch: 500, concurrency: 4, nodes: 3, shards: 2, replicas: 2, maxMinutes: 15 };
const FORWARDS = ['shardex_updates_forwarded_total', 'phase="TOLEADER"'];

/**
 * CPU ms (user + system) of this process's children that have exited and been waited for
 * (/proc/self/stat cutime + cstime): around one child's run, that child's CPU.
 */
function exitedChildrenCpuMs() {
  const f = readFileSync('/proc/self/stat', 'utf8').split(') ')[1].split(' ');
  return (Number(f[13]) + Number(f[14])) * 10;
}

async function createCollection(cluster, name, a) {
  await postJson(`${cluster.urls[0]}/api/collections`, JSON.stringify({ name, numShards: a.shards, replicationFactor: a.replicas, fields: FIELDS }));
  for (const url of cluster.urls) await waitSettled(url, name);
}

async function countDocs(cluster, name) {
  const res = await httpRequest(`${cluster.urls[0]}/api/collections/${name}/search?q=*&limit=0`);
  return JSON.parse(res.body).total;
}

/** Runs the CLI import as a child process, echoing its progress lines; resolves its wall clock and last line. */
function runCli(collection, file, cluster, a) {
  const args = [join(root, 'bin/shardex.js'), 'import', collection, file, '--url', cluster.urls.join(','),
    '--batch-size', String(a.batch), '--concurrency', String(a.concurrency), '--progress-interval', '2000'];
  log(`  $ node bin/shardex.js ${args.slice(1).join(' ').replace(file, '<file>')}`);
  const cpu0 = exitedChildrenCpuMs();
  const t0 = performance.now();
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines = [];
  let partial = '';
  const keep = (chunk) => {
    const parts = (partial + chunk.toString('utf8')).split('\n');
    partial = parts.pop();
    for (const line of parts) if (line.trim()) {
      lines.push(line);
      log(`  cli: ${line}`);
    }
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  return new Promise((resolve, reject) => {
    const limit = setTimeout(() => child.kill('SIGKILL'), a.maxMinutes * 60_000);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(limit);
      const ms = performance.now() - t0;
      if (code !== 0) return reject(new Error(`shardex import exited with ${signal ?? code}:\n${lines.slice(-20).join('\n')}`));
      resolve({ ms, cpuMs: exitedChildrenCpuMs() - cpu0, last: lines.at(-1) ?? '' });
    });
  });
}

/** The raw bulk path: the batches posted round-robin over the nodes, `concurrency` in flight. */
async function runHttp(collection, bodies, sizes, cluster, a) {
  const limit = pLimit(a.concurrency);
  let done = 0;
  let last = performance.now();
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    bodies.map((body, i) =>
      limit(async () => {
        await postJson(`${cluster.urls[i % cluster.urls.length]}/api/collections/${collection}/docs`, body);
        done += sizes[i];
        if (performance.now() - last > 2000) {
          last = performance.now();
          log(`  http: ${fmt(done)} / ${fmt(a.docs)} docs, ${fmt(done / ((last - t0) / 1000))} docs/s`);
        }
      }),
    ),
  );
  const ms = performance.now() - t0;
  const c = process.cpuUsage(c0);
  return { ms, cpuMs: (c.user + c.system) / 1000 };
}

export async function run(rest) {
  const a = parseFlags(rest, DEFAULTS);
  const dir = await mkdtemp(join(tmpdir(), 'shardex-bench-import-'));
  const file = join(dir, 'docs.ndjson');
  try {
    log(`generating ${fmt(a.docs)} NDJSON lines (corpus seed 1) ...`);
    const lines = [...generateNdjson({ count: a.docs, seed: 1 })];
    await writeFile(file, lines.join('\n') + '\n');
    const bytes = lines.reduce((t, l) => t + Buffer.byteLength(l) + 1, 0);
    // The raw path's batches: the same lines, as JSON arrays of the same size.
    const bodies = [];
    const sizes = [];
    for (let i = 0; i < lines.length; i += a.batch) {
      const b = lines.slice(i, i + a.batch);
      bodies.push(`[${b.join(',')}]`);
      sizes.push(b.length);
    }
    lines.length = 0;
    log(`  ${file}: ${fmt(bytes / 1e6)} MB`);

    log(`starting dev cluster (${a.nodes} nodes) ...`);
    const cluster = await startDevCluster({ nodes: a.nodes, shards: 2, replicas: 2 });
    let cli;
    let raw;
    try {
      log(`shardex import into a fresh collection 'imp_cli' (${a.shards} shards x ${a.replicas} replicas, fields ${JSON.stringify(FIELDS)}) ...`);
      await createCollection(cluster, 'imp_cli', a);
      let fwd0 = await metricSum(cluster.urls, ...FORWARDS);
      let cpu0 = processCpuMs(cluster.pid);
      cli = await runCli('imp_cli', file, cluster, a);
      cli.serverCpuMs = processCpuMs(cluster.pid) - cpu0;
      cli.forwards = (await metricSum(cluster.urls, ...FORWARDS)) - fwd0;
      cli.count = await countDocs(cluster, 'imp_cli');
      // Free the first collection so that the second one starts from the same empty cluster.
      const del = await httpRequest(`${cluster.urls[0]}/api/collections/imp_cli`, { method: 'DELETE' });
      if (del.status !== 200) throw new Error(`deleting imp_cli: HTTP ${del.status} ${del.body}`);

      log(`raw HTTP bulk path into a fresh collection 'imp_http' (batches of ${a.batch}, ${a.concurrency} in flight, round-robin over ${a.nodes} nodes) ...`);
      await createCollection(cluster, 'imp_http', a);
      fwd0 = await metricSum(cluster.urls, ...FORWARDS);
      cpu0 = processCpuMs(cluster.pid);
      raw = await runHttp('imp_http', bodies, sizes, cluster, a);
      raw.serverCpuMs = processCpuMs(cluster.pid) - cpu0;
      raw.forwards = (await metricSum(cluster.urls, ...FORWARDS)) - fwd0;
      raw.count = await countDocs(cluster, 'imp_http');
    } finally {
      log(`stopping dev cluster (pid ${cluster.pid}) ...`);
      await cluster.stop();
    }
    for (const [what, r] of [['shardex import', cli], ['raw HTTP', raw]]) {
      if (r.count !== a.docs) throw new Error(`${what}: the collection holds ${r.count} documents, not ${a.docs}`);
    }

    const rate = (r) => a.docs / (r.ms / 1000);
    const perDoc = (cpuMs) => `${fmt((cpuMs * 1000) / a.docs)} µs`;
    log('');
    log(`| figure | \`shardex import\` (child process, smart client) | raw HTTP bulk (JSON batches round-robin over the nodes) | ratio import / raw |`);
    log('|---|---|---|---|');
    log(`| docs/s (${fmt(a.docs)} docs, batches of ${a.batch}, ${a.concurrency} in flight; import: wall clock of the child process) | ${fmt(rate(cli))} | ${fmt(rate(raw))} | ${ratio(rate(cli), rate(raw))} |`);
    log(`| wall clock | ${(cli.ms / 1000).toFixed(1)} s | ${(raw.ms / 1000).toFixed(1)} s | ${ratio(cli.ms, raw.ms)} |`);
    log(`| the CLI's own final line | ${cli.last.replaceAll('|', '/')} | - | - |`);
    log(`| update ops forwarded TOLEADER between nodes (\`shardex_updates_forwarded_total\`, summed over the nodes) | ${fmt(cli.forwards)} | ${fmt(raw.forwards)} | - |`);
    log(`| dev cluster CPU per doc (user + system, all nodes and replicas) | ${perDoc(cli.serverCpuMs)} | ${perDoc(raw.serverCpuMs)} | ${ratio(cli.serverCpuMs, raw.serverCpuMs)} |`);
    log(`| client CPU per doc (import: the child process; raw: this process, bodies serialized in advance) | ${perDoc(cli.cpuMs)} | ${perDoc(raw.cpuMs)} | ${ratio(cli.cpuMs, raw.cpuMs)} |`);
    log(`| documents in the collection afterwards | ${fmt(cli.count)} | ${fmt(raw.count)} | - |`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
