// Ingest: N generated docs posted over HTTP (JSON batches, round-robin over the nodes) into
// a `shardex dev` cluster (2 shards x 2 replicas), once into a collection with durability
// `request` (every acknowledged batch synced on both replicas) and once into one with `async`,
// beside the raw rate of writing the same documents with `level` batches in this process (the
// floor of what a replica must do), synced and not; and beside the single-copy indexing rates of
// the same documents (issue 15, aim 4): an in-process ShardIndex (memory only) and Apache Lucene
// (bench/lucene.mjs: one copy, stored source, committed; --lucene 0 skips it).
// Before anything is timed, the cluster and the in-process baseline index `--warmup` documents
// untimed (default 20,000; 0 skips it): a fresh cluster's first documents pay for its code being
// compiled, and without it the mode timed first was charged that (2026-12-05: durability
// `request` 373 us of CPU per document timed first against 261 us timed second, async 242
// against 292 us).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Level } from 'level';
import pLimit from 'p-limit';
import { generateDocs } from '../dist/corpus.js';
import { parseSchema, ShardIndex } from '../dist/index/index.js';
import { luceneRun } from './lucene.mjs';
import { fmt, log, onOff, processCpuMs, ratio, startDevCluster } from './lib.mjs';

function args(rest) {
  const a = { docs: 100_000, batch: 500, concurrency: 8, runs: 1, profile: undefined, writeBufferMb: undefined, storeCompression: false, lucene: 1, checkpointInterval: undefined, warmup: 20_000 };
  for (let i = 0; i < rest.length; i += 2) {
    // --write-buffer-mb N: LevelDB's write buffer for the cluster's replicas AND the baseline store.
    // --store-compression yes: the replicas' stores AND the baseline store with LevelDB's block compression.
    // --checkpoint-interval MS: the nodes' tunable (how often a replica writes its index segment).
    const key = rest[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (!(key in a)) throw new Error(`unknown ingest flag ${rest[i]}; flags: ${Object.keys(a).map((k) => '--' + k.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase())).join(', ')}`);
    // --profile DIR: the dev cluster runs under `node --cpu-prof`, its profile written to DIR on exit.
    a[key] = key === 'profile' ? rest[i + 1] : key === 'storeCompression' ? onOff(rest[i], rest[i + 1]) : Number(rest[i + 1]);
  }
  if (!Number.isInteger(a.warmup) || a.warmup < 0) throw new Error(`--warmup takes a number of documents (0 or more), got ${a.warmup}`);
  return a;
}

async function rawLevel(batches, { writeBufferMb, storeCompression }, sync) {
  const dir = await mkdtemp(join(tmpdir(), 'shardex-bench-level-'));
  // As the replicas' stores are opened: block compression only when they have it.
  const db = new Level(dir, { valueEncoding: 'utf8', compression: Boolean(storeCompression), ...(writeBufferMb !== undefined && { writeBufferSize: writeBufferMb * 1024 * 1024 }) });
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
    await db.batch(ops, { sync });
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
  // Single-copy indexing of the same documents, once (no cluster running meanwhile).
  log('baseline: in-process ShardIndex, one copy in memory (the dev collections\' dynamic schema) ...');
  if (a.warmup > 0) shardIndexRate(docs.slice(0, a.warmup));
  const single = { shardIndex: shardIndexRate(docs) };
  if (a.lucene) single.lucene = (await luceneRun(docs, [], { rounds: 0, warmup: 0, limit: 10 })).rate;
  const results = [];
  for (let r = 1; r <= a.runs; r++) {
    if (a.runs > 1) log(`-- run ${r} of ${a.runs}`);
    results.push(await once(a, batches, bodies, r, single));
  }
  if (a.runs > 1) {
    const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
    log('');
    log(`runs (request docs/s, async docs/s, request/async): ${results.map((x) => `${fmt(x.request.rate)} / ${fmt(x.async.rate)} / ${ratio(x.request.rate, x.async.rate)}`).join('; ')}`);
    const m = (f) => median(results.map(f));
    table(a, {
      request: { rate: m((x) => x.request.rate), cpuUsPerDoc: m((x) => x.request.cpuUsPerDoc) },
      async: { rate: m((x) => x.async.rate), cpuUsPerDoc: m((x) => x.async.cpuUsPerDoc) },
      rawSync: { rate: m((x) => x.rawSync.rate), cpuUsPerDoc: m((x) => x.rawSync.cpuUsPerDoc) },
      rawAsync: { rate: m((x) => x.rawAsync.rate), cpuUsPerDoc: m((x) => x.rawAsync.cpuUsPerDoc) },
      requestVsAsync: m((x) => x.request.rate / x.async.rate),
    }, `median of ${a.runs} runs`, single);
  }
}

/** Indexing docs/s of one in-process ShardIndex holding every document (no store, no HTTP). */
function shardIndexRate(docs) {
  const byId = new Map(docs.map((d) => [d.id, d]));
  const index = new ShardIndex(parseSchema({}), { lookup: (id) => byId.get(id) });
  const t0 = performance.now();
  for (const d of docs) index.add(d.id, d);
  return docs.length / ((performance.now() - t0) / 1000);
}

function table(a, x, title, single) {
  log('');
  const buffer = `${a.writeBufferMb === undefined ? '' : `, LevelDB write buffer ${a.writeBufferMb} MiB in all`}${a.storeCompression ? ', LevelDB block compression on in all' : ''}${a.checkpointInterval === undefined ? '' : `, checkpoint interval ${a.checkpointInterval} ms`}`;
  const what = `${fmt(a.docs)} docs, batches of ${a.batch}, ${a.concurrency} in flight${a.warmup > 0 ? `, after ${fmt(a.warmup)} untimed` : ''}`;
  log(`| figure${title || buffer ? ` (${[title, buffer.slice(2)].filter(Boolean).join('; ')})` : ''} | durability request | durability async | ratio request/async |`);
  log(`|---|---|---|---|`);
  log(`| shardex ingest docs/s (HTTP, 2 shards x 2 replicas; ${what}) | ${fmt(x.request.rate)} | ${fmt(x.async.rate)} | ${(x.requestVsAsync ?? x.request.rate / x.async.rate).toFixed(2)} |`);
  log(`| raw level batches docs/s (one store, log + doc per document; sync: true / false) | ${fmt(x.rawSync.rate)} | ${fmt(x.rawAsync.rate)} | ${ratio(x.rawSync.rate, x.rawAsync.rate)} |`);
  log(`| shardex / raw level, same durability | ${ratio(x.request.rate, x.rawSync.rate)} | ${ratio(x.async.rate, x.rawAsync.rate)} | |`);
  log(`| dev cluster CPU per doc (user + system, all its threads; both replicas' work) | ${fmt(x.request.cpuUsPerDoc)} µs | ${fmt(x.async.cpuUsPerDoc)} µs | ${ratio(x.request.cpuUsPerDoc, x.async.cpuUsPerDoc)} |`);
  log('');
  log('| single-copy indexing of the same docs (baseline) | docs/s | shardex durability request / it | shardex durability async / it |');
  log('|---|---|---|---|');
  log(`| in-process ShardIndex, one copy in memory | ${fmt(single.shardIndex)} | ${ratio(x.request.rate, single.shardIndex)} | ${ratio(x.async.rate, single.shardIndex)} |`);
  if (single.lucene !== undefined) log(`| Apache Lucene 8, one copy, stored source, committed | ${fmt(single.lucene)} | ${ratio(x.request.rate, single.lucene)} | ${ratio(x.async.rate, single.lucene)} |`);
}

async function ingest(a, cluster, collection, batches, bodies) {
  const total = batches.reduce((n, b) => n + b.length, 0);
  const limit = pLimit(a.concurrency);
  let done = 0;
  let lastReport = performance.now();
  const cpu0 = processCpuMs(cluster.pid);
  const t0 = performance.now();
  await Promise.all(
    bodies.map((body, i) =>
      limit(async () => {
        const res = await fetch(`${cluster.urls[i % cluster.urls.length]}/api/collections/${collection}/docs`, {
          method: 'POST', headers: { 'content-type': 'application/json' }, body,
        });
        if (res.status !== 200) throw new Error(`batch ${i}: HTTP ${res.status} ${await res.text()}`);
        await res.arrayBuffer();
        done += batches[i].length;
        const now = performance.now();
        if (now - lastReport > 2000) {
          lastReport = now;
          log(`  ${collection}: ${fmt(done)} / ${fmt(total)} docs, ${fmt(done / ((now - t0) / 1000))} docs/s`);
        }
      }),
    ),
  );
  const ms = performance.now() - t0;
  return { rate: total / (ms / 1000), cpuUsPerDoc: ((processCpuMs(cluster.pid) - cpu0) * 1000) / total };
}

async function once(a, batches, bodies, r, single) {
  log('baseline: raw level batches, sync: true ...');
  const rs = await rawLevel(batches, a, true);
  log('baseline: raw level batches, sync: false ...');
  const ra = await rawLevel(batches, a, false);
  const rawSync = { rate: a.docs / (rs.ms / 1000), cpuUsPerDoc: rs.cpuUs / a.docs };
  const rawAsync = { rate: a.docs / (ra.ms / 1000), cpuUsPerDoc: ra.cpuUs / a.docs };

  log('starting dev cluster (3 nodes, 2 shards x 2 replicas) ...');
  const nodeArgs = a.profile === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', resolve(a.profile)];
  const extra = [...(a.writeBufferMb === undefined ? [] : ['--write-buffer-mb', String(a.writeBufferMb)]), ...(a.storeCompression ? ['--store-compression'] : []), ...(a.checkpointInterval === undefined ? [] : ['--checkpoint-interval', String(a.checkpointInterval)])];
  const cluster = await startDevCluster({ nodes: 3, shards: 2, replicas: 2, nodeArgs, extra });
  try {
    // The same shape as `docs` (which has the default durability, request), asynchronous.
    const created = await fetch(`${cluster.urls[0]}/api/collections`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'bulk', numShards: 2, replicationFactor: 2, durability: 'async' }),
    });
    if (created.status !== 201) throw new Error(`could not create the async collection: ${await created.text()}`);
    if (a.warmup > 0) {
      const warm = await fetch(`${cluster.urls[0]}/api/collections`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'warmup', numShards: 2, replicationFactor: 2 }),
      });
      if (warm.status !== 201) throw new Error(`could not create the warm-up collection: ${await warm.text()}`);
      const n = Math.ceil(a.warmup / a.batch);
      log(`warm-up: ${fmt(Math.min(a.warmup, a.docs))} docs into collection warmup, untimed ...`);
      await ingest(a, cluster, 'warmup', batches.slice(0, n), bodies.slice(0, n));
    }
    const x = { rawSync, rawAsync };
    // Alternate which goes first, so that neither always meets the fuller LevelDB.
    const order = r % 2 === 1 ? ['request', 'async'] : ['async', 'request'];
    for (const mode of order) {
      log(`ingest with durability ${mode} ...`);
      x[mode] = await ingest(a, cluster, mode === 'request' ? 'docs' : 'bulk', batches, bodies);
    }
    table(a, x, undefined, single);
    return x;
  } finally {
    await cluster.stop();
    if (a.profile !== undefined) log(`CPU profile of the dev cluster written to ${resolve(a.profile)} (see: node bench/cpuprofile-top.mjs FILE)`);
  }
}
