// Restart: 3 `shardex node` processes on a local ZooKeeper, a collection of 2 shards x 2
// replicas holding N generated documents; every node killed -9 at once and started again on its
// data dir. Printed: the time until every replica is active and a search finds every document,
// beside the same for an empty collection (the baseline, measured in the same run), and how
// restart time grows with the document count (largest / smallest). `--runs N` repeats each size
// N times, each run with its own cluster and empty baseline, and prints every run and the median.
import { fmt, ingestCorpus, log, onOff, parseFlags, percentile, postJson, processCpuMs, threadCpuMs, startZkCluster, until, waitSettled, httpRequest } from './lib.mjs';
import { cp } from 'node:fs/promises';

const C = 'restart';

/**
 * kill -9 every node, start them all again; ms until settled and a search counts `expected`
 * documents, and how many journaled documents the replicas re-read at their open (what moves a
 * restart's time most from run to run: the journal a kill leaves).
 */
async function restartAll(cluster, expected, timeline = false) {
  const names = cluster.nodes.map((n, i) => `n${i + 1}`);
  // A replica marked down while the documents went in recovers at the restart (a peer sync of
  // what it missed): say so, since it is part of what the restart then costs.
  for (const [i, n] of cluster.nodes.entries()) {
    for (const line of n.output()) {
      if (!/"msg":"replicas missed an update; marking them down"/.test(line)) continue;
      let e;
      try {
        e = JSON.parse(line);
      } catch {
        continue; // cut at 500 characters
      }
      log(`    before the kill: ${n.name ?? names[i]} (leader of ${e.replica}) marked ${JSON.stringify(e.behind)} down`);
    }
  }
  const killed = cluster.nodes.map((n, i) => ({ name: n.name ?? names[i], lines: n.output() }));
  for (const n of cluster.nodes) process.kill(n.pid, 'SIGKILL');
  cluster.nodes.length = 0;
  if (process.env.BENCH_KEEP_DATA === '1') {
    // The data dirs as the kill left them, to open a replica in a profiler afterwards.
    await cp(cluster.dataDir, `${cluster.dataDir}-killed-${expected}`, { recursive: true });
    log(`    data as killed copied to ${cluster.dataDir}-killed-${expected}`);
  }
  const t0 = performance.now();
  await Promise.all(names.map((name) => cluster.startNode(name)));
  await waitSettled(cluster.urls[0], C, 30 * 60_000);
  await until(`a search counting ${expected} documents`, 30 * 60_000, async () => {
    const res = await httpRequest(`${cluster.urls[0]}/api/collections/${C}/search?q=*&limit=0`);
    if (res.status !== 200) return undefined;
    return JSON.parse(res.body).total === expected ? true : undefined;
  });
  const ms = performance.now() - t0;
  // CPU the node processes used from their start until now: on 2 cores a restart is mostly CPU.
  const cpu = cluster.nodes.map((n) => processCpuMs(n.pid));
  const threads = cluster.nodes.map((n) => threadCpuMs(n.pid));
  log(`    CPU used by the nodes until searchable: ${cpu.map((c, i) => `${cluster.nodes[i].name} ${fmt(c)} ms`).join(', ')}; sum ${fmt(cpu.reduce((a, b) => a + b, 0))} ms in ${fmt(ms)} ms (2 cores: ${fmt(2 * ms)} ms)`);
  log(`      by thread, main / others (busiest other): ${threads.map((t, i) => `${cluster.nodes[i].name} ${fmt(t.main)} / ${fmt(t.others)} (${fmt(t.busiestOther)}) ms`).join(', ')}`);
  // Where the time went, per replica: the open (index load or rebuild) and the recovery.
  let replayed = 0;
  for (const [i, n] of cluster.nodes.entries()) {
    for (const line of n.output()) {
      if (!/"msg":"(replica opened|replica recovered|replica index loaded|replica index rebuilt)"/.test(line)) continue;
      const e = JSON.parse(line);
      if (e.msg === 'replica opened') replayed += e.replayed ?? 0;
      const at = ((e.time - (Date.now() - (performance.now() - t0))) / 1000).toFixed(1);
      log(`    ${n.name ?? names[i]} +${at} s ${e.msg} ${e.replica ?? ''} ${['docs', 'indexMs', 'loadMs', 'replayed', 'method', 'applied', 'reverted', 'compared', 'onlyTheirs', 'onlyOurs', 'ms'].filter((k) => e[k] !== undefined).map((k) => `${k}=${e[k]}`).join(' ')}`);
    }
  }
  if (timeline) {
    // Every line the nodes logged from 5 s before the kill, in time order (--timeline): where a restart waits.
    const rows = [];
    const lives = [...killed, ...cluster.nodes.map((n, i) => ({ name: n.name ?? names[i], lines: n.output() }))];
    for (const { name, lines } of lives) {
      for (const line of lines) {
        let e;
        try {
          e = JSON.parse(line);
        } catch {
          continue;
        }
        const at = e.time - (Date.now() - (performance.now() - t0));
        if (e.msg === undefined || at < -5000) continue;
        const { level, time, pid, hostname, msg, node, dir, ...rest } = e;
        rows.push([at, `    ${(at / 1000).toFixed(2).padStart(6)} s ${name} ${msg} ${JSON.stringify(rest).slice(0, 160)}`]);
      }
    }
    for (const [, text] of rows.sort((a, b) => a[0] - b[0])) log(text);
  }
  return { ms, replayed };
}

/** One run at `n` documents: a fresh ZooKeeper and cluster, the empty restart, then the full one. */
async function runOnce(n, a) {
  const compression = onOff('--store-compression', a.storeCompression);
  // --checkpoint-interval MS: the nodes' tunable (a shorter one leaves less journal at a kill).
  const interval = a.checkpointInterval === 'default' ? [] : ['--checkpoint-interval', String(a.checkpointInterval)];
  log(`-- ${fmt(n)} documents: starting ZooKeeper and 3 nodes (LevelDB block compression ${compression ? 'on' : 'off'}${interval.length > 0 ? `, checkpoint interval ${a.checkpointInterval} ms` : ''}) ...`);
  const cluster = await startZkCluster({ nodes: 3, zkTimeoutMs: Number(a.zkTimeout), nodeExtra: [...(compression ? ['--store-compression'] : []), ...interval] });
  try {
    await postJson(`${cluster.urls[0]}/api/collections`, JSON.stringify({ name: C, numShards: 2, replicationFactor: 2, autoCommit: 'off' }));
    await waitSettled(cluster.urls[0], C);
    log('  baseline: kill -9 and restart with the collection empty ...');
    const { ms: empty } = await restartAll(cluster, 0);
    log(`  empty: up and searchable in ${(empty / 1000).toFixed(1)} s; indexing ${fmt(n)} documents ...`);
    await ingestCorpus(cluster.urls, C, n);
    log('  kill -9 every node and restart ...');
    const { ms: full, replayed } = await restartAll(cluster, n, a.timeline === 'yes');
    log(`  ${fmt(n)} documents: up and searchable in ${(full / 1000).toFixed(1)} s (${(full / empty).toFixed(2)}x the empty start); the replicas re-read ${fmt(replayed)} journaled documents`);
    return { n, full, empty, replayed };
  } finally {
    await cluster.stop();
  }
}

const median = (xs) => percentile(xs, 50);

export async function run(rest) {
  const a = parseFlags(rest, { docs: '100000,1000000', zkTimeout: 4000, timeline: 'no', runs: 1, storeCompression: 'no', checkpointInterval: 'default' });
  // The nodes log at info, so that each replica's open and recovery can be printed.
  process.env.SHARDEX_LOG_LEVEL ??= 'info';
  const sizes = String(a.docs).split(',').map(Number);
  const runs = Math.floor(a.runs);
  // --runs N: N runs per size, each with its own cluster and its own empty baseline (a run's
  // ratio moves with the machine's load more than with the code), then their median.
  const rows = [];
  for (const n of sizes) {
    const each = [];
    for (let r = 1; r <= runs; r++) {
      if (runs > 1) log(`run ${r} of ${runs} at ${fmt(n)} documents`);
      each.push(await runOnce(n, a));
    }
    rows.push({ n, each, full: median(each.map((e) => e.full)), empty: median(each.map((e) => e.empty)), ratio: median(each.map((e) => e.full / e.empty)) });
  }
  log('');
  if (runs > 1) {
    log('| documents (2 shards x 2 replicas, 3 node processes, all killed -9) | run | restart until searchable | empty collection, same run | ratio | journaled documents re-read (all replicas) |');
    log('|---|---|---|---|---|---|');
    for (const r of rows) r.each.forEach((e, i) => log(`| ${fmt(r.n)} | ${i + 1} | ${(e.full / 1000).toFixed(1)} s | ${(e.empty / 1000).toFixed(1)} s | ${(e.full / e.empty).toFixed(2)} | ${fmt(e.replayed)} |`));
    log('');
  }
  const what = runs > 1 ? `median of ${runs} runs` : 'one run';
  log(`| documents (2 shards x 2 replicas, 3 node processes, all killed -9; ${what}) | restart until searchable | empty collection, same run | ratio |`);
  log('|---|---|---|---|');
  for (const r of rows) log(`| ${fmt(r.n)} | ${(r.full / 1000).toFixed(1)} s | ${(r.empty / 1000).toFixed(1)} s | ${r.ratio.toFixed(2)} |`);
  if (rows.length > 1) {
    const first = rows[0];
    const last = rows[rows.length - 1];
    log(`| growth ${fmt(last.n)} / ${fmt(first.n)} documents (x${(last.n / first.n).toFixed(0)}) | x${(last.full / first.full).toFixed(2)} | | |`);
  }
}
