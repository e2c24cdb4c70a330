// Eventual reads (issue 5, item 6): a real multi-process cluster on a local ZooKeeper (2 data
// node processes). For each configuration — immediate reads (the shard leaders serve); eventual
// reads over HTTP through the data nodes (which run the reader selector) with 1, 2 and 4 snapshot
// reader processes; and eventual reads by the smart client (ShardexClient in this process runs
// the selector and asks the readers over gRPC, so no data node takes part in the read) — a fresh
// collection of 2 shards x 2 replicas with a field schema is preloaded and committed; then, each
// for a fixed time:
//   1. ingest alone (JSON batches posted round-robin to the data nodes): the baseline;
//   2. a commit; for eventual, the readers start and warm up (their first reads copy snapshots);
//   3. a fixed mix of searches from this process at a fixed concurrency, WHILE the same ingest runs.
// The ingest overwrites the preloaded ids with new contents, so every phase searches the same
// number of live documents (a growing collection would make later phases slower for that reason
// alone); a fresh collection per configuration keeps the state the overwrites leave behind from
// favouring the first.
//
// Every process shares the machine's cores: the data nodes, the readers (which copy, and at every
// refresh re-index, the shards they serve), ZooKeeper and this process. The CPU columns (from
// /proc) show where the work went.
import { cpuUsage } from 'node:process';
import { ShardexClient } from '../dist/client/index.js';
import { generateDocs } from '../dist/corpus.js';
import { fmt, httpRequest, log, parseFlags, percentile, postJson, ratio, startZkCluster, until, waitSettled, vocabularyByRank } from './lib.mjs';

const COLLECTION = 'eventual';
const FIELDS = { title: 'text', body: 'text', category: 'keyword', price: 'number', ts: 'date' };
const RETURNED = 'id,title,category,price';

const DEFAULTS = {
  docs: 20_000,
  batch: 500,
  ingestConcurrency: 4,
  clients: 8,
  seconds: 30,
  baselineSeconds: 20,
  warmup: 8,
  readers: '1,2,4',
  clientReaders: '1,4',
  snapshotExpiry: 5000,
  maxScans: 8,
  autoCommit: '15s',
  maxMinutes: 15,
};

// ---- the query mix ----

/** The corpus's words, most frequent first (counted in up to the first 20,000 docs). */

/** A fixed mix of 1-2 term queries, filters and sorts; words by frequency rank (1 = most frequent). */
function queryMix(words) {
  const w = (rank) => words[rank - 1];
  const mix = [
    { name: '1-term (rank 40)', q: w(40) },
    { name: '1-term (rank 800)', q: w(800) },
    { name: '2-term OR (ranks 20, 300)', q: `${w(20)} OR ${w(300)}` },
    { name: '2-term AND (ranks 30, 200)', q: `${w(30)} AND ${w(200)}` },
    { name: '1-term + filter category', q: w(40), filter: 'category:cat-c' },
    { name: '1-term + filter price range', q: w(60), filter: 'price:[100 TO 300]' },
    { name: '1-term, sort price desc', q: w(40), sort: 'price desc' },
    { name: '2-term OR + filter, sort price desc', q: `${w(20)} OR ${w(300)}`, filter: 'category:cat-h', sort: 'price desc' },
  ];
  return mix.map((m) => {
    const p = new URLSearchParams({ q: m.q, limit: '10', fields: RETURNED });
    if (m.filter) p.append('filter', m.filter);
    if (m.sort) p.append('sort', m.sort);
    return { ...m, params: p.toString() };
  });
}

// ---- load generators ----

/**
 * Posts batches round-robin over the data nodes, `concurrency` in flight, until `stop()`;
 * `acked` counts the documents of answered batches.
 */
function startIngest(urls, collection, bodies, sizes, concurrency, cursor) {
  const state = { acked: 0, stopping: false, error: undefined };
  const worker = async () => {
    while (!state.stopping) {
      const i = cursor.next++;
      const b = i % bodies.length;
      try {
        await postJson(`${urls[i % urls.length]}/api/collections/${collection}/docs`, bodies[b]);
      } catch (err) {
        // A batch that fails after postJson's retries ends the ingest (and, in stop(), the phase).
        state.error ??= err;
        state.stopping = true;
        return;
      }
      state.acked += sizes[b];
    }
  };
  const done = Promise.all(Array.from({ length: concurrency }, worker));
  return {
    state,
    async stop() {
      state.stopping = true;
      await done;
      if (state.error) throw state.error;
    },
  };
}

/** A search over HTTP through the data nodes (round-robin); they run the selector for eventual reads. */
function httpSearcher(urls, collection, consistency) {
  let next = 0;
  return async (q) => {
    const res = await httpRequest(`${urls[next++ % urls.length]}/api/collections/${collection}/search?${q.params}&consistency=${consistency}`, { timeoutMs: 30_000 });
    if (res.status !== 200) throw new Error(`HTTP ${res.status} ${res.body.slice(0, 200)}`);
    return JSON.parse(res.body);
  };
}

/** An eventual search by the smart client in this process: it runs the selector and asks the readers over gRPC. */
function clientSearcher(client, collection) {
  return (q) =>
    client.search(collection, q.q, {
      consistency: 'eventual',
      limit: 10,
      fields: RETURNED.split(','),
      timeoutMs: 30_000,
      ...(q.filter && { filter: q.filter }),
      ...(q.sort && { sort: q.sort }),
    });
}

/** `clients` closed-loop searchers running `search` over the mix until `stop()`; records every answer. */
function startReads(search, mix, clients) {
  const r = { latencies: [], errors: 0, lastError: '', shardReads: 0, fallbacks: 0, busy: 0, stopping: false };
  const client = async (c) => {
    for (let i = c; !r.stopping; i++) {
      const t = performance.now();
      try {
        const res = await search(mix[i % mix.length]);
        const latency = performance.now() - t;
        if (r.stopping) return;
        r.latencies.push(latency);
        for (const s of Object.values(res.servedBy ?? {})) {
          r.shardReads++;
          if (s.fallback) r.fallbacks++;
          r.busy += s.busy ?? 0;
        }
      } catch (err) {
        r.errors++;
        r.lastError = err.message;
        await new Promise((res) => setTimeout(res, 100));
      }
    }
  };
  const done = Promise.all(Array.from({ length: clients }, (_, c) => client(c)));
  return {
    r,
    async stop() {
      r.stopping = true;
      await done;
    },
  };
}

// ---- phases ----

let deadline = Infinity;
function checkTime(phase) {
  if (performance.now() > deadline) throw new Error(`time limit reached before ${phase}: stop (raise --max-minutes to allow more)`);
}

/** CPU ms used so far by each group of processes, and by this process. */
function cpuNow(cluster) {
  const sum = (ps) => ps.reduce((t, p) => t + p.cpuMs(), 0);
  const own = cpuUsage();
  return { nodes: sum(cluster.nodes), readers: sum(cluster.readers), bench: (own.user + own.system) / 1000 };
}

/** One timed phase: ingest and/or reads for `seconds`; returns rates, latencies and CPU (cores). */
async function phase(label, cluster, a, { collection, seconds: length, ingest, search, ingestData, mix }) {
  checkTime(label);
  log(`phase: ${label} (${length} s) ...`);
  const cpu0 = cpuNow(cluster);
  const t0 = performance.now();
  const ing = ingest ? startIngest(cluster.urls, collection, ingestData.bodies, ingestData.sizes, a.ingestConcurrency, ingestData.cursor) : undefined;
  const rd = search ? startReads(search, mix, a.clients) : undefined;
  const progress = setInterval(() => {
    const s = (performance.now() - t0) / 1000;
    const parts = [`  ${s.toFixed(0)} s`];
    if (ing) parts.push(`${fmt(ing.state.acked / s)} docs/s ingested`);
    if (rd) parts.push(`${fmt(rd.r.latencies.length / s)} searches/s`, `${rd.r.errors} errors`);
    log(parts.join(', '));
  }, 10_000);
  let acked = 0;
  let seconds;
  try {
    await new Promise((r) => setTimeout(r, length * 1000));
    seconds = (performance.now() - t0) / 1000;
    // The counts at the end of the window; answers that arrive while draining are not counted.
    acked = ing?.state.acked ?? 0;
    if (rd) rd.r.stopping = true;
  } finally {
    clearInterval(progress);
    // Drain: bounded by the request timeouts (30 s reads, 120 s batches).
    await Promise.all([ing?.stop(), rd?.stop()]);
  }
  const cpu1 = cpuNow(cluster);
  const cores = (k) => (cpu1[k] - cpu0[k]) / 1000 / seconds;
  const out = {
    label,
    readers: cluster.readers.length,
    ingestRate: ing ? acked / seconds : undefined,
    cpu: { nodes: cores('nodes'), readers: cores('readers'), bench: cores('bench') },
  };
  if (rd) {
    const r = rd.r;
    if (r.errors > 0) log(`  ${r.errors} searches failed; last: ${r.lastError}`);
    if (r.latencies.length === 0) throw new Error(`${label}: no search succeeded (last error: ${r.lastError})`);
    Object.assign(out, {
      qps: r.latencies.length / seconds,
      p50: percentile(r.latencies, 50),
      p99: percentile(r.latencies, 99),
      errors: r.errors,
      searches: r.latencies.length,
      shardReads: r.shardReads,
      fallbacks: r.fallbacks,
      busy: r.busy,
    });
  }
  log(`  done: ${out.qps !== undefined ? `${fmt(out.qps)} searches/s, p50 ${out.p50.toFixed(1)} ms, p99 ${out.p99.toFixed(1)} ms; ` : ''}${out.ingestRate !== undefined ? `${fmt(out.ingestRate)} docs/s ingested` : ''}`);
  return out;
}

/** Eventual reads without ingest until the readers have copied their shards (bounded by --warmup). */
async function warmUp(cluster, a, search, mix) {
  log(`  warm-up: eventual searches for ${a.warmup} s, no ingest (readers copy their shards' snapshots) ...`);
  const rd = startReads(search, mix, a.clients);
  try {
    await new Promise((r) => setTimeout(r, a.warmup * 1000));
  } finally {
    await rd.stop();
  }
  const listed = JSON.parse((await httpRequest(`${cluster.urls[0]}/api/readers`)).body).readers;
  log(`  readers hold: ${listed.map((r) => `${r.name} [${(r.shards ?? []).map((s) => `${s.shard.split('/')[1]}@${fmt(s.docs)} docs`).join(', ')}]`).join('; ')}`);
}

async function commit(cluster, collection) {
  await postJson(`${cluster.urls[0]}/api/collections/${collection}/commit`, '{}');
}

// ---- the run ----

export async function run(rest) {
  const a = parseFlags(rest, DEFAULTS);
  const counts = (flag, text) => {
    if (text === 'none') return [];
    const list = String(text).split(',').map(Number);
    if (list.some((n) => !Number.isInteger(n) || n < 1)) throw new Error(`${flag} must be positive integers, e.g. 1,2,4 (or none)`);
    return list;
  };
  const readerCounts = counts('--readers', a.readers);
  const clientReaderCounts = counts('--client-readers', a.clientReaders);
  deadline = performance.now() + a.maxMinutes * 60_000;

  log(`generating ${fmt(a.docs)} docs to preload and 2 x ${fmt(a.docs)} replacements for the ingest ...`);
  const docs = [...generateDocs({ count: a.docs, seed: 1 })];
  const mix = queryMix(vocabularyByRank(docs));
  const preload = [];
  for (let i = 0; i < docs.length; i += a.batch) preload.push(JSON.stringify(docs.slice(i, i + a.batch)));
  const ingestData = { bodies: [], sizes: [], cursor: { next: 0 } };
  for (const seed of [2, 3]) {
    const replacements = [...generateDocs({ count: a.docs, seed })];
    for (let i = 0; i < replacements.length; i += a.batch) {
      const b = replacements.slice(i, i + a.batch);
      ingestData.bodies.push(JSON.stringify(b));
      ingestData.sizes.push(b.length);
    }
  }

  log('starting ZooKeeper and 2 data node processes ...');
  const cluster = await startZkCluster({ nodes: 2 });
  const configs = [
    { label: 'immediate, HTTP to the data nodes (shard leaders serve)', readers: 0, via: 'http' },
    ...readerCounts.map((r) => ({ label: `eventual, HTTP to the data nodes, ${r} reader(s)`, readers: r, via: 'http' })),
    ...clientReaderCounts.map((r) => ({ label: `eventual, smart client in the bench process, ${r} reader(s)`, readers: r, via: 'client' })),
  ];
  const rows = [];
  let totals;
  try {
    for (const [k, config] of configs.entries()) {
      checkTime(config.label);
      log(`== ${config.label} ==`);
      // A fresh collection each time: the state left by earlier phases' overwrites (LevelDB
      // garbage, dead index entries) would otherwise slow later configurations for that alone.
      const collection = `${COLLECTION}${k + 1}`;
      await postJson(`${cluster.urls[0]}/api/collections`, JSON.stringify({ name: collection, numShards: 2, replicationFactor: 2, fields: FIELDS, autoCommit: a.autoCommit }));
      for (const url of cluster.urls) await waitSettled(url, collection);
      const t0 = performance.now();
      for (let i = 0; i < preload.length; i += a.ingestConcurrency) {
        checkTime('preload');
        await Promise.all(preload.slice(i, i + a.ingestConcurrency).map((body, j) => postJson(`${cluster.urls[(i + j) % 2]}/api/collections/${collection}/docs`, body)));
      }
      await commit(cluster, collection);
      log(`collection '${collection}': 2 shards x 2 replicas, autoCommit ${a.autoCommit}; ${fmt(a.docs)} docs preloaded and committed in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
      if (totals === undefined) {
        totals = [];
        for (const q of mix) totals.push(JSON.parse((await httpRequest(`${cluster.urls[0]}/api/collections/${collection}/search?${q.params}`)).body).total);
      }
      const common = { collection, ingestData, mix };
      const alone = await phase('ingest alone', cluster, a, { ...common, seconds: a.baselineSeconds, ingest: true });
      await commit(cluster, collection);
      let client;
      try {
        let search = httpSearcher(cluster.urls, collection, config.readers === 0 ? 'immediate' : 'eventual');
        if (config.readers > 0) {
          log(`starting ${config.readers} reader(s) (snapshot expiry ${a.snapshotExpiry} ms, ${a.maxScans} scans each) ...`);
          for (let i = 1; i <= config.readers; i++) await cluster.startReader(`r${i}`, { snapshotExpiryMs: a.snapshotExpiry, maxScans: a.maxScans });
          await until(`${config.readers} readers listed by the data nodes`, 30_000, async () => {
            for (const url of cluster.urls) {
              if (JSON.parse((await httpRequest(`${url}/api/readers`)).body).readers.length !== config.readers) return undefined;
            }
            return true;
          });
          if (config.via === 'client') {
            // Reads the cluster state once, now that it lists the readers (no background refresh).
            client = new ShardexClient({ urls: cluster.urls, refreshIntervalMs: 0 });
            const state = await client.connect();
            if (state.nodes.filter((n) => n.role === 'reader').length !== config.readers) throw new Error('the smart client does not see every reader');
            search = clientSearcher(client, collection);
          }
          await warmUp(cluster, a, search, mix);
        }
        const loaded = await phase('reads + ingest', cluster, a, { ...common, seconds: a.seconds, ingest: true, search });
        rows.push({ config, alone, loaded });
      } finally {
        await client?.close();
        await cluster.stopReaders();
      }
      const del = await httpRequest(`${cluster.urls[0]}/api/collections/${collection}`, { method: 'DELETE' });
      if (del.status !== 200) throw new Error(`deleting ${collection}: HTTP ${del.status} ${del.body}`);
    }
  } finally {
    log('stopping readers, data nodes and ZooKeeper ...');
    await cluster.stop();
  }

  const ms = (v) => `${v.toFixed(1)} ms`;
  const c = (v) => v.toFixed(2);
  log('');
  log(`Query mix (${mix.length} searches, limit 10, fields ${RETURNED}) and matches after the preload:`);
  log('');
  log('| query | q | filter | sort | matches |');
  log('|---|---|---|---|---|');
  mix.forEach((q, i) => log(`| ${q.name} | \`${q.q}\` | ${q.filter ?? '-'} | ${q.sort ?? '-'} | ${fmt(totals[i])} |`));
  log('');
  log(`| reads (${a.clients} clients, ${a.seconds} s, with ingest) | searches/s | p50 | p99 | ingest docs/s under the reads | ingest docs/s alone (${a.baselineSeconds} s just before, same collection) | ratio | shard reads served by readers (fallbacks to leaders) | BUSY answers | CPU cores under the reads: data nodes | readers | bench process | CPU cores alone: data nodes |`);
  log('|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const { config, alone, loaded: r } of rows) {
    const byReaders = config.readers === 0 ? 'leaders' : `${fmt(r.shardReads - r.fallbacks)} of ${fmt(r.shardReads)} (${fmt(r.fallbacks)})`;
    log(`| ${config.label} | ${fmt(r.qps)} | ${ms(r.p50)} | ${ms(r.p99)} | ${fmt(r.ingestRate)} | ${fmt(alone.ingestRate)} | ${ratio(r.ingestRate, alone.ingestRate)} | ${byReaders} | ${config.readers === 0 ? "-" : fmt(r.busy)} | ${c(r.cpu.nodes)} | ${c(r.cpu.readers)} | ${c(r.cpu.bench)} | ${c(alone.cpu.nodes)} |`);
  }
  log('');
  log(`Each row: a fresh collection (2 shards x 2 replicas, ${fmt(a.docs)} docs preloaded and committed), ingest alone, a commit, then (eventual) fresh readers warmed up for ${a.warmup} s, then reads + ingest. ` +
    `Ingest: batches of ${a.batch}, ${a.ingestConcurrency} in flight, round-robin over the 2 data nodes, overwriting the preloaded ids. ` +
    `Reads: ${a.clients} concurrent searches (HTTP: round-robin over the 2 data nodes; smart client: one ShardexClient, no background state refresh). Readers: --snapshot-expiry ${a.snapshotExpiry} --max-scans ${a.maxScans}, default selector profile. ` +
    `CPU cores = CPU seconds (user + system) per second of the phase, summed over the processes.`);
}
