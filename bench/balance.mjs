// Read balancing (issue 12, item 4): does a flood of `report` searches still leave room for the
// `interactive` ones? One `shardex dev` node (its own thread) holding a collection of 2 shards
// with a field schema; every search is immediate, so every read lands on the shard leaders
// (the `primary` target) and the node's CPU is what the two priorities compete for.
//
//   alone      interactive searches with no flood: the reference latency;
//   off        a report flood (--report-clients closed-loop clients of a heavy query) beside the
//              interactive clients, with no read-balance settings: every read runs unbalanced;
//   on         the same load with settings: report may use --report-slots slots on primary
//              (the rest of the flood waits in the node's report queue), interactive
//              --interactive-slots with weight 10.
// off and on alternate --rounds times in the one run, on the one cluster and collection. Both
// kinds of request carry the same priority= in every phase; only the settings differ.
//
// Then the balancer's own cost on the unloaded node: sequential real-time gets (the cheapest
// read) with a configured priority (balanced: a slot taken and given back per get) beside the
// same gets without one (unbalanced: the balancer says so at once), in alternating blocks; and
// the runtime's acquire + release alone in this process, balanced and unbalanced.
// `--phases cost` runs only that second part (after the load and warm-up), `--phases latency` only the first.
import { generateDocs } from '../dist/corpus.js';
import { ReadBalancerRuntime } from '../dist/read/balancer-runtime.js';
import { fmt, httpRequest, log, parseFlags, percentile, postJson, processCpuMs, ratio, startDevCluster, vocabularyByRank } from './lib.mjs';

const COLLECTION = 'balance';
const FIELDS = { title: 'text', body: 'text', category: 'keyword', price: 'number', ts: 'date' };

const DEFAULTS = {
  docs: 30_000,
  batch: 500,
  reportClients: 32,
  interactiveClients: 2,
  reportSlots: 2,
  interactiveSlots: 4,
  seconds: 15,
  rounds: 2,
  warmup: 5,
  costGets: 10_000,
  costBlocks: 20,
  microOps: 200_000,
  // `latency,cost` (both), or one of them: `--phases cost` measures only the balancer's cost.
  phases: 'latency,cost',
};

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** `clients` closed-loop clients sending `path` until stopped; latencies of 200s, other statuses counted. */
function startClients(url, path, clients) {
  const r = { latencies: [], statuses: {}, stopping: false, lastError: '' };
  const client = async () => {
    while (!r.stopping) {
      const t = performance.now();
      try {
        const res = await httpRequest(url + path, { timeoutMs: 60_000 });
        if (r.stopping) return;
        if (res.status === 200) r.latencies.push(performance.now() - t);
        else {
          r.statuses[res.status] = (r.statuses[res.status] ?? 0) + 1;
          r.lastError = res.body.slice(0, 200);
        }
      } catch (err) {
        r.statuses.error = (r.statuses.error ?? 0) + 1;
        r.lastError = err.message;
        await sleep(50);
      }
    }
  };
  const done = Promise.all(Array.from({ length: clients }, client));
  return {
    r,
    async stop() {
      r.stopping = true;
      await done;
    },
  };
}

async function setSettings(url, settings) {
  const current = JSON.parse((await httpRequest(`${url}/api/read-balance`)).body).settings;
  for (const s of current) await httpRequest(`${url}/api/read-balance/${s.priority}/${s.target}`, { method: 'DELETE' });
  for (const s of settings) {
    const res = await httpRequest(`${url}/api/read-balance/${s.priority}/${s.target}`, {
      method: 'PUT',
      body: JSON.stringify({ weight: s.weight, slots: s.slots }),
      headers: { 'content-type': 'application/json' },
    });
    if (res.status !== 200) throw new Error(`PUT read-balance ${s.priority}/${s.target}: HTTP ${res.status} ${res.body}`);
  }
}

/** One timed phase: interactive clients, with or without the report flood. */
async function phase(label, url, a, paths, { flood }) {
  log(`phase: ${label} (${a.seconds} s) ...`);
  const t0 = performance.now();
  const reports = flood ? startClients(url, paths.report, a.reportClients) : undefined;
  // Let the flood build up its queue before interactive latencies count.
  if (reports) await sleep(1000);
  const interactive = startClients(url, paths.interactive, a.interactiveClients);
  const t1 = performance.now();
  await sleep(a.seconds * 1000);
  const seconds = (performance.now() - t1) / 1000;
  const ir = interactive.r;
  const rr = reports?.r;
  const counted = { interactive: ir.latencies.length, report: rr?.latencies.length ?? 0 };
  await Promise.all([interactive.stop(), reports?.stop()]);
  const slots = JSON.parse((await httpRequest(`${url}/api/read-slots`)).body).slots;
  const out = {
    label,
    latencies: ir.latencies,
    p50: percentile(ir.latencies, 50),
    p99: percentile(ir.latencies, 99),
    interactive: counted.interactive,
    interactiveQps: counted.interactive / seconds,
    reportQps: counted.report / seconds,
    reportP50: rr ? percentile(rr.latencies, 50) : NaN,
    refused: { interactive: ir.statuses, report: rr?.statuses ?? {} },
    wallS: (performance.now() - t0) / 1000,
  };
  for (const [who, s] of Object.entries(out.refused)) if (Object.keys(s).length > 0) log(`  ${who} not 200: ${JSON.stringify(s)} (last: ${(who === 'report' ? rr : ir).lastError})`);
  if (slots.some((s) => s.taken !== 0)) log(`  warning: slots still taken after the phase: ${JSON.stringify(slots)}`);
  log(
    `  interactive p50 ${out.p50.toFixed(1)} ms, p99 ${out.p99.toFixed(1)} ms (${fmt(out.interactive)} searches, ${out.interactiveQps.toFixed(1)}/s)` +
      (flood ? `; report ${out.reportQps.toFixed(1)} searches/s, p50 ${out.reportP50.toFixed(0)} ms` : ''),
  );
  return out;
}

/** Sequential gets of `path`; wall-clock latencies (ms) and the dev process's CPU (ms). */
async function gets(url, path, n, pid) {
  const lat = new Array(n);
  const cpu0 = processCpuMs(pid);
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const res = await httpRequest(url + path(i));
    lat[i] = performance.now() - t;
    if (res.status !== 200) throw new Error(`GET ${path(i)}: HTTP ${res.status} ${res.body.slice(0, 200)}`);
  }
  return { lat, cpuMs: processCpuMs(pid) - cpu0 };
}

/** acquire + release per op in this process, µs. */
async function micro(ops, priority) {
  const settings = [{ priority: 'interactive', target: 'primary', weight: 10, slots: 4 }];
  const rt = new ReadBalancerRuntime({ queueSize: 100, source: { load: async () => settings, watch: () => () => {} } });
  await rt.start();
  const shards = [
    { shard: 'shard1', targets: ['primary'] },
    { shard: 'shard2', targets: ['primary'] },
  ];
  const req = { ...(priority && { priority }), shards, timeoutMs: 30_000 };
  for (let i = 0; i < 20_000; i++) (await rt.acquire(req)).release();
  const t = performance.now();
  for (let i = 0; i < ops; i++) (await rt.acquire(req)).release();
  const us = ((performance.now() - t) * 1000) / ops;
  rt.stop();
  return us;
}

export async function run(rest) {
  const a = parseFlags(rest, DEFAULTS);
  const phases = new Set(a.phases.split(','));
  for (const p of phases) if (p !== 'latency' && p !== 'cost') throw new Error(`--phases takes latency, cost or both (comma-separated), got ${a.phases}`);
  log(`generating ${fmt(a.docs)} docs ...`);
  const docs = [...generateDocs({ count: a.docs, seed: 12 })];
  const words = vocabularyByRank(docs);
  const w = (rank) => words[rank - 1];
  // report: every document matches, each scored over 6 common terms, sorted by price, 100 hits.
  const heavy = new URLSearchParams({ q: [1, 2, 3, 4, 5, 6].map(w).join(' OR '), sort: 'price desc', limit: '100', fields: 'id,title,price', priority: 'report' });
  const light = new URLSearchParams({ q: w(800), limit: '10', fields: 'id,title', priority: 'interactive' });
  const paths = { report: `/api/collections/${COLLECTION}/search?${heavy}`, interactive: `/api/collections/${COLLECTION}/search?${light}` };
  const on = [
    { priority: 'interactive', target: 'primary', weight: 10, slots: a.interactiveSlots },
    { priority: 'report', target: 'primary', weight: 1, slots: a.reportSlots },
  ];

  const cluster = await startDevCluster({ nodes: 1, shards: 2, replicas: 1 });
  const results = [];
  let cost;
  try {
    const url = cluster.urls[0];
    log(`dev cluster up (1 node, pid ${cluster.pid}); loading ${fmt(a.docs)} docs into ${COLLECTION} (2 shards x 1) ...`);
    await postJson(`${url}/api/collections`, JSON.stringify({ name: COLLECTION, numShards: 2, replicationFactor: 1, fields: FIELDS }));
    for (let i = 0; i < docs.length; i += a.batch * 4) {
      await Promise.all(
        Array.from({ length: 4 }, (_, j) => docs.slice(i + j * a.batch, i + (j + 1) * a.batch))
          .filter((b) => b.length > 0)
          .map((b) => postJson(`${url}/api/collections/${COLLECTION}/docs`, JSON.stringify(b))),
      );
    }
    await setSettings(url, []);
    log(`warm-up: ${a.warmup} s of both queries ...`);
    const warm = [startClients(url, paths.report, 4), startClients(url, paths.interactive, 2)];
    await sleep(a.warmup * 1000);
    await Promise.all(warm.map((c) => c.stop()));

    if (phases.has('latency')) {
      results.push(await phase('alone (no flood, no settings)', url, a, paths, { flood: false }));
      for (let round = 1; round <= a.rounds; round++) {
        await setSettings(url, []);
        results.push({ ...(await phase(`off, round ${round}: flood, no settings`, url, a, paths, { flood: true })), mode: 'off' });
        await setSettings(url, on);
        results.push({ ...(await phase(`on, round ${round}: flood, report ${a.reportSlots} slots on primary`, url, a, paths, { flood: true })), mode: 'on' });
      }
    }

    // ---- the balancer's own cost, unloaded ----
    if (phases.has('cost')) cost = await costPhase(url, a, docs, on, cluster.pid);
  } finally {
    await cluster.stop();
  }
  if (results.length > 0) reportLatency(results, a);
  if (!cost) return;
  log(`microbenchmark: ReadBalancerRuntime acquire + release, ${fmt(a.microOps)} ops each ...`);
  const microBalanced = await micro(a.microOps, 'interactive');
  const microUnbalanced = await micro(a.microOps, undefined);
  reportCost(cost, microBalanced, microUnbalanced);
}

/**
 * Sequential real-time gets with a configured priority (balanced) and without (unbalanced), in
 * alternating blocks (plain then balanced, then the other way round), so that drift on a shared
 * machine hits both alike; the differences are taken per pair of neighbouring blocks.
 */
async function costPhase(url, a, docs, on, pid) {
  log(`balancer cost: ${fmt(a.costGets)} sequential gets each way, in ${a.costBlocks} alternating blocks ...`);
  await setSettings(url, on);
  const ids = docs.slice(0, 1000).map((d) => encodeURIComponent(d.id));
  const plain = { lat: [], cpuMs: 0, blocks: [] };
  const balanced = { lat: [], cpuMs: 0, blocks: [] };
  const per = Math.ceil(a.costGets / a.costBlocks);
  await gets(url, (i) => `/api/collections/${COLLECTION}/docs/${ids[i % ids.length]}?priority=interactive`, 1000, pid);
  for (let b = 0; b < a.costBlocks; b++) {
    for (const [into, q] of b % 2 === 0 ? [[plain, ''], [balanced, '?priority=interactive']] : [[balanced, '?priority=interactive'], [plain, '']]) {
      const r = await gets(url, (i) => `/api/collections/${COLLECTION}/docs/${ids[(b * per + i) % ids.length]}${q}`, per, pid);
      into.lat.push(...r.lat);
      into.cpuMs += r.cpuMs;
      into.blocks.push({ meanMs: r.lat.reduce((x, y) => x + y, 0) / per, cpuMs: r.cpuMs / per });
    }
  }
  return { plain, balanced };
}

function reportLatency(results, a) {
  const pooled = (mode) => {
    const all = results.filter((r) => r.mode === mode).flatMap((r) => r.latencies);
    return { p50: percentile(all, 50), p99: percentile(all, 99), n: all.length };
  };
  const off = pooled('off');
  const onR = pooled('on');
  const alone = results[0];
  log('');
  log(`interactive latency (ms) while ${a.reportClients} report clients flood the node (${a.interactiveClients} interactive clients, ${a.seconds} s per phase):`);
  log('| phase | interactive p50 | interactive p99 | interactive/s | report/s | report p50 |');
  log('|---|---|---|---|---|---|');
  for (const r of results) {
    log(`| ${r.label} | ${r.p50.toFixed(1)} | ${r.p99.toFixed(1)} | ${r.interactiveQps.toFixed(1)} | ${r.mode ? r.reportQps.toFixed(1) : '-'} | ${r.mode ? r.reportP50.toFixed(0) : '-'} |`);
  }
  log(
    `all rounds pooled: interactive p99 on ${onR.p99.toFixed(1)} ms vs off ${off.p99.toFixed(1)} ms: ratio ${ratio(onR.p99, off.p99)} (aim: at most 0.5); ` +
      `p50 on ${onR.p50.toFixed(1)} vs off ${off.p50.toFixed(1)} ms: ratio ${ratio(onR.p50, off.p50)} (${fmt(onR.n)} and ${fmt(off.n)} searches); alone p99 ${alone.p99.toFixed(1)} ms`,
  );
}

function reportCost(cost, microBalanced, microUnbalanced) {
  const mean = (xs) => xs.reduce((s, x) => s + x, 0) / xs.length;
  const n = cost.plain.lat.length;
  const us = (ms) => (ms * 1000).toFixed(0);
  log('');
  log(`balancer cost on the unloaded node (${fmt(n)} sequential real-time gets each):`);
  log('| gets | mean | p50 | p99 | dev process CPU per get |');
  log('|---|---|---|---|---|');
  for (const [name, r] of [['unbalanced (no priority): baseline', cost.plain], ['balanced (priority=interactive)', cost.balanced]]) {
    log(`| ${name} | ${us(mean(r.lat))} µs | ${us(percentile(r.lat, 50))} µs | ${us(percentile(r.lat, 99))} µs | ${us(r.cpuMs / r.lat.length)} µs |`);
  }
  const median = (xs) => percentile(xs, 50);
  const pairs = cost.plain.blocks.map((p, i) => ({ wall: (cost.balanced.blocks[i].meanMs - p.meanMs) * 1000, cpu: (cost.balanced.blocks[i].cpuMs - p.cpuMs) * 1000 }));
  log(
    `balanced - unbalanced: p50 ${((percentile(cost.balanced.lat, 50) - percentile(cost.plain.lat, 50)) * 1000).toFixed(1)} µs; ` +
      `median over ${pairs.length} neighbouring block pairs: ${median(pairs.map((d) => d.wall)).toFixed(1)} µs wall-clock per get (mean), ` +
      `${median(pairs.map((d) => d.cpu)).toFixed(1)} µs dev-process CPU per get (whole run: ratio ${ratio(mean(cost.balanced.lat), mean(cost.plain.lat))} wall-clock, ` +
      `${ratio(cost.balanced.cpuMs, cost.plain.cpuMs)} CPU); aim: under 50 µs`,
  );
  log(`in process, acquire + release of a 2-shard read: balanced ${microBalanced.toFixed(2)} µs, unbalanced ${microUnbalanced.toFixed(2)} µs (ratio ${ratio(microBalanced, microUnbalanced)})`);
}
