// Ingest: N generated docs posted over HTTP (JSON batches, round-robin over the nodes) into
// a `shardex dev` cluster (2 shards x 2 replicas), beside the raw rate of writing the same
// documents with `level` batches in this process (the floor of what a replica must do).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Level } from 'level';
import pLimit from 'p-limit';
import { generateDocs } from '../dist/corpus.js';
import { fmt, log, processCpuMs, ratio, startDevCluster } from './lib.mjs';

function args(rest) {
  const a = { docs: 100_000, batch: 500, concurrency: 8, runs: 1, profile: undefined, writeBufferMb: undefined };
  for (let i = 0; i < rest.length; i += 2) {
    // --write-buffer-mb N: LevelDB's write buffer for the cluster's replicas AND the baseline store.
    const key = rest[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (!(key in a)) throw new Error(`unknown ingest flag ${rest[i]}; flags: ${Object.keys(a).map((k) => '--' + k.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase())).join(', ')}`);
    // --profile DIR: the dev cluster runs under `node --cpu-prof`, its profile written to DIR on exit.
    a[key] = key === 'profile' ? rest[i + 1] : Number(rest[i + 1]);
  }
  return a;
}

async function rawLevel(batches, writeBufferMb) {
  const dir = await mkdtemp(join(tmpdir(), 'shardex-bench-level-'));
  const db = new Level(dir, { valueEncoding: 'utf8', ...(writeBufferMb !== undefined && { writeBufferSize: writeBufferMb * 1024 * 1024 }) });
  await db.open();
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  let v = 1;
  for (const batch of batches) {
    const ops = [];
    for (const d of batch) {
      const text = JSON.stringify({ id: d.id, v, doc: d });
      ops.push({ type: 'put', key: 'l' + String(v++).padStart(16, '0'), value: text }, { type: 'put', key: 'd' + d.id, value: text });
    }
    await db.batch(ops);
  }
  const ms = performance.now() - t0;
  const cpu = process.cpuUsage(c0);
  await db.close();
  await rm(dir, { recursive: true, force: true });
  return { ms, cpuUs: cpu.user + cpu.system };
}

// --runs N repeats baseline + cluster N times (a fresh cluster each time) and ends with the
// median of each figure: on a small shared machine one run's rates move by 5-10%.
export async function run(rest) {
  const a = args(rest);
  log(`generating ${fmt(a.docs)} docs ...`);
  const docs = [...generateDocs({ count: a.docs, seed: 1 })];
  const batches = [];
  for (let i = 0; i < docs.length; i += a.batch) batches.push(docs.slice(i, i + a.batch));
  const bodies = batches.map((b) => JSON.stringify(b));
  const results = [];
  for (let r = 1; r <= a.runs; r++) {
    if (a.runs > 1) log(`-- run ${r} of ${a.runs}`);
    results.push(await once(a, batches, bodies));
  }
  if (a.runs > 1) {
    const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
    log('');
    log(`runs (shardex docs/s, raw level docs/s, ratio, cluster CPU µs/doc): ${results.map((x) => `${fmt(x.rate)} / ${fmt(x.rawRate)} / ${ratio(x.rate, x.rawRate)} / ${fmt(x.cpuUsPerDoc)}`).join('; ')}`);
    table(a, {
      rate: median(results.map((x) => x.rate)),
      rawRate: median(results.map((x) => x.rawRate)),
      ratioMedian: median(results.map((x) => x.rate / x.rawRate)),
      cpuUsPerDoc: median(results.map((x) => x.cpuUsPerDoc)),
      rawCpuUsPerDoc: median(results.map((x) => x.rawCpuUsPerDoc)),
    }, `median of ${a.runs} runs`);
  }
}

function table(a, x, title) {
  log('');
  const buffer = a.writeBufferMb === undefined ? '' : `, LevelDB write buffer ${a.writeBufferMb} MiB in both`;
  log(`| figure${title || buffer ? ` (${[title, buffer.slice(2)].filter(Boolean).join('; ')})` : ''} | shardex (HTTP, 2 shards x 2 replicas) | raw level batches | ratio |`);
  log(`|---|---|---|---|`);
  log(`| ingest docs/s (${fmt(a.docs)} docs, batches of ${a.batch}, ${a.concurrency} in flight) | ${fmt(x.rate)} | ${fmt(x.rawRate)} | ${(x.ratioMedian ?? x.rate / x.rawRate).toFixed(2)} |`);
  log(`| dev cluster CPU per doc (user + system, all its threads; both replicas' work) | ${fmt(x.cpuUsPerDoc)} µs | ${fmt(x.rawCpuUsPerDoc)} µs (this process, all threads) | ${ratio(x.cpuUsPerDoc, x.rawCpuUsPerDoc)} |`);
}

async function once(a, batches, bodies) {
  log('baseline: raw level batches (one store, log + doc per document) ...');
  const raw = await rawLevel(batches, a.writeBufferMb);
  const rawRate = a.docs / (raw.ms / 1000);

  log('starting dev cluster (3 nodes, 2 shards x 2 replicas) ...');
  const nodeArgs = a.profile === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', resolve(a.profile)];
  const extra = a.writeBufferMb === undefined ? [] : ['--write-buffer-mb', String(a.writeBufferMb)];
  const cluster = await startDevCluster({ nodes: 3, shards: 2, replicas: 2, nodeArgs, extra });
  try {
    const limit = pLimit(a.concurrency);
    let done = 0;
    let lastReport = performance.now();
    const cpu0 = processCpuMs(cluster.pid);
    const t0 = performance.now();
    await Promise.all(
      bodies.map((body, i) =>
        limit(async () => {
          const res = await fetch(`${cluster.urls[i % cluster.urls.length]}/api/collections/docs/docs`, {
            method: 'POST', headers: { 'content-type': 'application/json' }, body,
          });
          if (res.status !== 200) throw new Error(`batch ${i}: HTTP ${res.status} ${await res.text()}`);
          await res.arrayBuffer();
          done += batches[i].length;
          const now = performance.now();
          if (now - lastReport > 2000) {
            lastReport = now;
            log(`  ${fmt(done)} / ${fmt(a.docs)} docs, ${fmt(done / ((now - t0) / 1000))} docs/s`);
          }
        }),
      ),
    );
    const ms = performance.now() - t0;
    const rate = a.docs / (ms / 1000);
    const cpuUsPerDoc = ((processCpuMs(cluster.pid) - cpu0) * 1000) / a.docs;
    const x = { rate, rawRate, cpuUsPerDoc, rawCpuUsPerDoc: raw.cpuUs / a.docs };
    table(a, x);
    return x;
  } finally {
    await cluster.stop();
    if (a.profile !== undefined) log(`CPU profile of the dev cluster written to ${resolve(a.profile)} (see: node bench/cpuprofile-top.mjs FILE)`);
  }
}
