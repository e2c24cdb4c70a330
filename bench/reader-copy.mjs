// A snapshot reader's first copy of a collection (issue 11): one `shardex node` on a local
// ZooKeeper holding N corpus documents in 2 shards, committed; then, one after the other, fresh
// `shardex reader` processes that load the leader's segment files of the commit point (the
// default) and readers that copy the documents and index them themselves (`--copy-documents`,
// the baseline; both copy the documents the same way), each asked one eventual search that must count
// every document. Printed: the time of that first search (the copy of both shards), the reader's
// CPU during it, and its RSS after, side by side, as medians over the rounds.
import { fmt, ingestCorpus, httpRequest, log, parseFlags, percentile, postJson, rssOf, startZkCluster, waitSettled } from './lib.mjs';

const C = 'copy';

/** One reader's first eventual search: ms, the reader's CPU ms meanwhile, its RSS after. */
async function firstCopy(cluster, name, n, extra) {
  const reader = await cluster.startReader(name, { extra });
  try {
    const cpu0 = reader.cpuMs();
    const t0 = performance.now();
    const res = await httpRequest(`${cluster.urls[0]}/api/collections/${C}/search?q=*&limit=1&consistency=eventual&timeoutMs=600000`, { timeoutMs: 620_000 });
    const ms = performance.now() - t0;
    if (res.status !== 200) throw new Error(`the eventual search answered ${res.status}: ${res.body.slice(0, 300)}`);
    const body = JSON.parse(res.body);
    if (body.total !== n) throw new Error(`the eventual search counted ${body.total} documents, not ${n}`);
    const by = Object.values(body.servedBy ?? {});
    if (by.length === 0 || by.some((s) => s.node !== name || s.fallback)) throw new Error(`the search was not served by ${name}: ${JSON.stringify(body.servedBy)}`);
    return { ms, cpuMs: reader.cpuMs() - cpu0, rss: await rssOf(reader.pid) };
  } finally {
    await cluster.stopReaders();
  }
}

export async function run(rest) {
  const a = parseFlags(rest, { docs: 100000, rounds: 3 });
  const n = Number(a.docs);
  log(`-- starting ZooKeeper and 1 node, then indexing ${fmt(n)} documents (2 shards x 1 replica) ...`);
  const cluster = await startZkCluster({ nodes: 1 });
  const rows = { segments: [], documents: [] };
  try {
    await postJson(`${cluster.urls[0]}/api/collections`, JSON.stringify({ name: C, numShards: 2, replicationFactor: 1, autoCommit: 'off' }));
    await waitSettled(cluster.urls[0], C);
    await ingestCorpus(cluster.urls, C, n);
    await postJson(`${cluster.urls[0]}/api/collections/${C}/commit`, '{}');
    for (let round = 1; round <= Number(a.rounds); round++) {
      // Alternating which goes first, so that neither always runs on a machine just warmed by the other.
      const order = round % 2 === 1 ? ['segments', 'documents'] : ['documents', 'segments'];
      for (const how of order) {
        const r = await firstCopy(cluster, `r${round}${how[0]}`, n, how === 'documents' ? ['--copy-documents'] : []);
        rows[how].push(r);
        log(`  round ${round}, ${how === 'segments' ? "the leader's segments" : 'documents indexed by the reader'}: first eventual search ${fmt(r.ms)} ms, reader CPU ${fmt(r.cpuMs)} ms, reader RSS ${fmt(r.rss / 2 ** 20)} MiB`);
      }
    }
  } finally {
    await cluster.stop();
  }
  const med = (how, key) => percentile(rows[how].map((r) => r[key]), 50);
  log('');
  log(`| a fresh reader's first eventual search of ${fmt(n)} documents (2 shards), median of ${a.rounds} | copies the leader's segments | copies documents, indexes them (baseline) | ratio |`);
  log('|---|---|---|---|');
  for (const [label, key, unit, scale] of [['time until answered', 'ms', 'ms', 1], ['reader CPU meanwhile', 'cpuMs', 'ms', 1], ['reader RSS after', 'rss', 'MiB', 2 ** 20]]) {
    const s = med('segments', key);
    const d = med('documents', key);
    log(`| ${label} | ${fmt(s / scale)} ${unit} | ${fmt(d / scale)} ${unit} | ${(s / d).toFixed(2)} |`);
  }
}
