// Search: N generated docs in a `shardex dev` cluster (3 nodes, a collection `bench` of 2 shards
// x replication 2 with a field schema), a fixed mix of queries built from the corpus's own
// vocabulary, timed over HTTP (sequential for latency, concurrent clients for queries/s), each
// beside the same queries run in this process, on the same documents, against SQLite FTS5
// (better-sqlite3, ranked with bm25()) and MiniSearch. Also: indexing docs/s (HTTP, replication
// 2) beside FTS5 inserts and MiniSearch addAll; memory per document (heap delta of one
// in-process ShardIndex beside MiniSearch's); disk per document (the cluster's data dir).
// And Apache Lucene (bench/lucene.mjs: Debian's liblucene8-java in a JVM, installed when missing) on
// the same documents and queries, match counts checked, every Shardex figure printed as a ratio
// to it (issue 15).
// Lucene's JVM is started (indexed, warmed up) first; its timed rounds then alternate with those
// of each Shardex figure it is compared with (HTTP on the dev cluster, on node processes, the
// in-process ShardIndex: 4 blocks each way, the JVM idle in between), so that each pair is
// measured in the same minutes.
//
// The baselines are synchronous libraries: they run on this process's one thread, one query
// after another, so their queries/s is the sequential rate. The dev cluster is one process (each
// of its three nodes on a worker thread of its own); its concurrent rate is measured with
// --clients HTTP clients. Every engine, over HTTP or in-process, Lucene's JVM included, runs the
// mix --warmup times untimed before its timed rounds (each has a JIT to warm; the JavaScript
// ones stop warming after 30 s, which only the slow baselines reach).
// The same queries also go to three `shardex node` processes on ZooKeeper holding the same
// collection (--processes 0 skips it): what the distributed path costs when the nodes do not
// share one thread, as in a real cluster.
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import Database from 'better-sqlite3';
import MiniSearch from 'minisearch';
import pLimit from 'p-limit';
import { generateDocs } from '../dist/corpus.js';
import { loadSegment, parseSchema, ShardIndex, writeSegment } from '../dist/index/index.js';
import { dirSize, fmt, httpRequest, log, metricSum, percentile, processCpuMs, ratio, rssOf, startDevCluster, startZkCluster, untilSettled, vocabularyByRank, waitSettled } from './lib.mjs';
import { luceneSession, sequentialFigures } from './lucene.mjs';

const COLLECTION = 'bench';
const FIELDS = { title: 'text', body: 'text', category: 'keyword', price: 'number', ts: 'date' };
const RETURNED = ['id', 'title', 'category', 'price'];
const LIMIT = 10;
/** What Lucene's default collection counts exactly before its total becomes a lower bound. */
const LUCENE_DEFAULT_COUNT = 1000;

function args(rest) {
  const a = { docs: 100_000, batch: 500, concurrency: 8, rounds: 40, warmup: 200, clients: 8, qpsSeconds: 15, maxMinutes: 25, memoryDocs: 1_000_000, lucene: 1, processes: 1 };
  for (let i = 0; i < rest.length; i += 2) {
    const key = rest[i].replace(/^--/, '').replace(/-(\w)/g, (_, c) => c.toUpperCase());
    if (!(key in a)) throw new Error(`unknown flag ${rest[i]} (known: ${Object.keys(a).join(', ')})`);
    const n = Number(rest[i + 1]);
    const mayBeZero = key === 'memoryDocs' || key === 'lucene' || key === 'processes';
    if (!Number.isFinite(n) || n < 0 || (n === 0 && !mayBeZero)) throw new Error(`${rest[i]} must be a positive number${mayBeZero ? ' (or 0 to skip the phase)' : ''}`);
    a[key] = n;
  }
  return a;
}

// ---- the query mix ----

/** The corpus's words, most frequent first, as counted in (up to) the first 20,000 docs. */

/**
 * The fixed mix: ranks are frequency ranks in the corpus's Zipf vocabulary (1 = most frequent;
 * a rank-r word is in roughly 1 - exp(-17/r) of the documents' 155 words), so the mix spans
 * common to rare terms the same way at any --docs.
 */
function queryMix(words) {
  const w = (rank) => words[rank - 1];
  return [
    { name: '1-term (rank 40)', kind: 'term', words: [w(40)] },
    { name: '1-term (rank 800)', kind: 'term', words: [w(800)] },
    { name: '2-term OR (ranks 20, 300)', kind: 'or', words: [w(20), w(300)] },
    { name: '2-term OR (ranks 4, 60)', kind: 'or', words: [w(4), w(60)] },
    { name: '2-term AND (ranks 30, 200)', kind: 'and', words: [w(30), w(200)] },
    { name: '2-term AND (ranks 5, 50)', kind: 'and', words: [w(5), w(50)] },
    { name: 'phrase (ranks 3, 8)', kind: 'phrase', words: [w(3), w(8)] },
    { name: 'phrase (ranks 10, 40)', kind: 'phrase', words: [w(10), w(40)] },
    { name: '1-term + filter category', kind: 'term', words: [w(40)], category: 'cat-c' },
    { name: '1-term, sort price desc', kind: 'term', words: [w(40)], sortPrice: true },
    { name: '2-term OR + filter, sort price desc', kind: 'or', words: [w(20), w(300)], category: 'cat-h', sortPrice: true },
  ];
}

/** The same text query in Shardex's and FTS5's syntax (they agree for these words). */
function queryText(q) {
  if (q.kind === 'phrase') return `"${q.words.join(' ')}"`;
  if (q.kind === 'term') return q.words[0];
  return q.words.join(q.kind === 'and' ? ' AND ' : ' OR ');
}

function shardexParams(q, trackTotalHits) {
  const p = new URLSearchParams({ q: queryText(q), limit: String(LIMIT), fields: RETURNED.join(',') });
  if (trackTotalHits !== undefined) p.set('trackTotalHits', String(trackTotalHits));
  if (q.category) p.append('filter', `category:${q.category}`);
  if (q.sortPrice) p.append('sort', 'price desc');
  return p.toString();
}

// ---- timing ----

/**
 * Of a query round's shards (timing.shards): the slowest shard's own time serving it, and the
 * rest of the round as that shard's caller saw it (gRPC, encoding, queueing).
 */
function servedAndTransport(shards = {}) {
  const slowest = Object.values(shards).reduce((a, b) => (b.queryMs > (a?.queryMs ?? -1) ? b : a), undefined);
  return slowest === undefined ? {} : { servedMs: slowest.servedMs ?? 0, transportMs: slowest.queryMs - (slowest.servedMs ?? 0) };
}

/** A warm-up ends after this long even if it ran fewer rounds (the slow baselines: seconds per round). */
const WARMUP_MAX_MS = 30_000;

/**
 * Runs the mix `rounds` times untimed, or for WARMUP_MAX_MS if that comes first: each engine's
 * JIT and caches warm up before its timed rounds. Returns the rounds it ran.
 */
async function warmUp(label, mix, runOne, rounds) {
  if (rounds > 0) log(`  ${label}: ${rounds} warm-up rounds (at most ${WARMUP_MAX_MS / 1000} s) ...`);
  const t0 = performance.now();
  let last = t0;
  let r = 0;
  for (; r < rounds && performance.now() - t0 < WARMUP_MAX_MS; r++) {
    checkTime(`${label} warm-up`);
    for (const q of mix) await runOne(q);
    if (performance.now() - last > 5000) {
      last = performance.now();
      log(`  ${label}: warm-up round ${r + 1} / ${rounds}`);
    }
  }
  if (r < rounds) log(`  ${label}: warm-up stopped after ${r} rounds (${WARMUP_MAX_MS / 1000} s)`);
  return r;
}

let deadline = Infinity;
function checkTime(phase) {
  if (performance.now() > deadline) throw new Error(`time limit reached during ${phase}: stop (raise --max-minutes to allow more)`);
}

/**
 * Runs the mix `warmup` times untimed, then `rounds` times timed, one query after another;
 * returns every latency (ms) by query, and the wall time of the timed rounds.
 */
async function sequentialRun(label, mix, runOne, { rounds, warmup }) {
  await warmUp(label, mix, runOne, warmup);
  const byQuery = mix.map(() => []);
  const t0 = performance.now();
  let last = t0;
  for (let r = 0; r < rounds; r++) {
    checkTime(`${label} latency`);
    for (let i = 0; i < mix.length; i++) {
      const s = performance.now();
      await runOne(mix[i]);
      byQuery[i].push(performance.now() - s);
    }
    if (performance.now() - last > 5000) {
      last = performance.now();
      log(`  ${label}: round ${r + 1} / ${rounds}`);
    }
  }
  const wallMs = performance.now() - t0;
  return { byQuery, all: byQuery.flat(), wallMs, qps: (rounds * mix.length) / (wallMs / 1000) };
}

/** Blocks of rounds in which a Shardex figure and Lucene's take turns (alternatingRun). */
const LUCENE_BLOCKS = 4;

/**
 * sequentialRun of `runOne` (`ours`); with `other` (rounds => ms by query, e.g. Lucene's), the
 * rounds go in LUCENE_BLOCKS blocks, each followed by as many of `other`'s (`theirs`).
 */
async function alternatingRun(label, mix, runOne, { rounds, warmup }, other) {
  if (!other) return { ours: await sequentialRun(label, mix, runOne, { rounds, warmup }) };
  await warmUp(label, mix, runOne, warmup);
  const ours = mix.map(() => []);
  const theirs = mix.map(() => []);
  let wallMs = 0;
  for (let b = 0; b < LUCENE_BLOCKS; b++) {
    const n = Math.floor((rounds * (b + 1)) / LUCENE_BLOCKS) - Math.floor((rounds * b) / LUCENE_BLOCKS);
    if (n === 0) continue;
    const block = await sequentialRun(label, mix, runOne, { rounds: n, warmup: 0 });
    wallMs += block.wallMs;
    block.byQuery.forEach((ms, i) => ours[i].push(...ms));
    (await other(n)).forEach((ms, i) => theirs[i].push(...ms));
    log(`  ${label}: block ${b + 1} / ${LUCENE_BLOCKS} (${n} rounds each)`);
  }
  const all = ours.flat();
  return { ours: { byQuery: ours, all, wallMs, qps: all.length / (wallMs / 1000) }, theirs: sequentialFigures(theirs) };
}

function memoryNow(gc) {
  gc();
  gc();
  const m = process.memoryUsage();
  // Typed arrays live outside the V8 heap: count them too.
  return m.heapUsed + m.external;
}

function exposeGc() {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc');
}

// ---- Shardex over HTTP ----

async function post(url, body) {
  for (let attempt = 1; ; attempt++) {
    const res = await httpRequest(url, { method: 'POST', body, headers: { 'content-type': 'application/json' }, timeoutMs: 120_000 });
    if (res.status === 200 || res.status === 201) return JSON.parse(res.body);
    // 503 = a condition that passes (no leader yet): wait a little, a bounded number of times.
    if (res.status !== 503 || attempt >= 20) throw new Error(`POST ${new URL(url).pathname}: HTTP ${res.status} ${res.body.slice(0, 500)}`);
    await new Promise((r) => setTimeout(r, 250 * attempt));
  }
}

async function ingestHttp(cluster, bodies, batchSizes, total, concurrency) {
  const limit = pLimit(concurrency);
  let done = 0;
  let lastReport = performance.now();
  const t0 = performance.now();
  await Promise.all(
    bodies.map((body, i) =>
      limit(async () => {
        checkTime('HTTP indexing');
        await post(`${cluster.urls[i % cluster.urls.length]}/api/collections/${COLLECTION}/docs`, body);
        done += batchSizes[i];
        const now = performance.now();
        if (now - lastReport > 5000) {
          lastReport = now;
          log(`  ${fmt(done)} / ${fmt(total)} docs, ${fmt(done / ((now - t0) / 1000))} docs/s`);
        }
      }),
    ),
  );
  return total / ((performance.now() - t0) / 1000);
}

/** `session`: Lucene's JVM, whose rounds then alternate with the timed HTTP rounds (`lucene`: its figures of them). */
async function shardexSearch(cluster, mix, a, session) {
  let next = 0;
  // The coordinator's time per round (timing=true), recorded during the timed rounds only.
  let phases;
  let trackTotalHits;
  const runOne = async (q) => {
    const url = `${cluster.urls[next++ % cluster.urls.length]}/api/collections/${COLLECTION}/search?${shardexParams(q, trackTotalHits)}${phases ? '&timing=true' : ''}`;
    const res = await httpRequest(url, { timeoutMs: 30_000 });
    if (res.status !== 200) throw new Error(`search ${q.name}: HTTP ${res.status} ${res.body.slice(0, 300)}`);
    const body = JSON.parse(res.body);
    if (phases && body.timing) phases.push({ ...body.timing, tookMs: body.tookMs, ...servedAndTransport(body.timing.shards) });
    return body;
  };
  const totals = [];
  for (const q of mix) totals.push((await runOne(q)).total);

  log(`shardex: sequential latency, ${a.rounds} rounds of ${mix.length} queries over HTTP ...`);
  await warmUp('shardex HTTP', mix, runOne, a.warmup);
  phases = [];
  const seqPair = await alternatingRun('shardex HTTP', mix, runOne, { rounds: a.rounds, warmup: 0 }, session && ((rounds) => session.run('exact', rounds)));
  const seq = seqPair.ours;
  seq.phases = phases;
  phases = undefined;
  log(`shardex: the same with trackTotalHits=${LUCENE_DEFAULT_COUNT} (what Lucene's default counts), ${a.rounds} rounds ...`);
  trackTotalHits = LUCENE_DEFAULT_COUNT;
  const countedPair = await alternatingRun('shardex HTTP, trackTotalHits', mix, runOne, { rounds: a.rounds, warmup: a.warmup }, session && ((rounds) => session.run('default', rounds)));
  const counted = countedPair.ours;
  trackTotalHits = undefined;

  log(`shardex: queries/s with ${a.clients} concurrent HTTP clients for ${a.qpsSeconds} s ...`);
  const stopAt = performance.now() + a.qpsSeconds * 1000;
  let count = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: a.clients }, async (_, c) => {
      for (let i = c; performance.now() < stopAt; i++) {
        checkTime('shardex queries/s');
        await runOne(mix[i % mix.length]);
        count++;
      }
    }),
  );
  const concurrentQps = count / ((performance.now() - t0) / 1000);
  return { totals, seq, counted, concurrentQps, ...(session && { lucene: { exact: seqPair.theirs, default: countedPair.theirs } }) };
}

// ---- in-process engines ----

/** The mix's query `q` as a ShardIndex search request. */
function searchRequest(q, trackTotalHits) {
  return {
    q: queryText(q),
    limit: LIMIT,
    ...(q.category && { filters: [`category:${q.category}`] }),
    ...(q.sortPrice && { sort: 'price desc' }),
    ...(trackTotalHits !== undefined && { trackTotalHits }),
  };
}

function shardIndexEngine(docs, byId, gc) {
  const schema = parseSchema(FIELDS);
  const before = memoryNow(gc);
  const t0 = performance.now();
  const index = new ShardIndex(schema, { lookup: (id) => byId.get(id) });
  for (const d of docs) index.add(d.id, d);
  const rate = docs.length / ((performance.now() - t0) / 1000);
  const bytes = memoryNow(gc) - before;
  const runOne = async (q, trackTotalHits) => {
    const r = index.search(searchRequest(q, trackTotalHits));
    const stored = await index.fetch(r.hits.map((h) => h.id), RETURNED);
    return { total: r.total, stored };
  };
  return { rate, bytes, runOne, index, byId };
}

/**
 * The same index as a replica holds it after a checkpoint and its merges: one segment file
 * (packed postings, columns, the id table), loaded as a replica loads it. Its bytes are what
 * issue 15's aim counts: the JS heap it takes once loaded plus the file (sections the index reads
 * whole are copied into memory outside the heap: the file's bytes, not counted twice). Match
 * counts are checked against the in-memory index's.
 */
async function persistedEngine(local, mix, expected, gc) {
  const dir = await mkdtemp(join(tmpdir(), 'shardex-bench-segment-'));
  try {
    const path = join(dir, 'bench.seg');
    const fileBytes = await writeSegment(path, local.index.exportState(), { seq: 0, fingerprint: 'bench' });
    const schema = parseSchema(FIELDS);
    local.index = null;
    local.runOne = null;
    gc();
    gc();
    const m0 = process.memoryUsage();
    const loaded = await loadSegment(path, schema, 'bench', { lookup: (id) => local.byId.get(id) });
    if (!loaded.ok) throw new Error(`the bench's segment file cannot be loaded: ${loaded.problem}`);
    gc();
    gc();
    const m1 = process.memoryUsage();
    const index = loaded.index;
    const totals = [];
    for (const q of mix) totals.push(index.search(searchRequest(q)).total);
    const differ = mix.filter((_, i) => totals[i] !== expected[i]).map((q) => q.name);
    if (differ.length > 0) throw new Error(`the loaded segment finds other match counts than the index it was written from: ${differ.join('; ')}`);
    // Searching decodes the terms it reads (kept on the heap): measured after every query ran once.
    gc();
    gc();
    const m2 = process.memoryUsage();
    // `index` is returned so that it is alive through the last measurement; the caller drops it.
    return { fileBytes, heapLoaded: m1.heapUsed - m0.heapUsed, heapSearched: m2.heapUsed - m0.heapUsed, external: m2.external - m0.external, index };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function miniSearchEngine(docs, byId, gc) {
  const before = memoryNow(gc);
  const t0 = performance.now();
  const ms = new MiniSearch({ fields: ['title', 'body'], storeFields: ['title', 'category', 'price'] });
  ms.addAll(docs);
  const rate = docs.length / ((performance.now() - t0) / 1000);
  const bytes = memoryNow(gc) - before;
  const byPriceDesc = (x, y) => y.price - x.price || (x.id < y.id ? -1 : x.id > y.id ? 1 : 0);
  const runOne = async (q) => {
    const opts = { combineWith: q.kind === 'or' ? 'OR' : 'AND', prefix: false, fuzzy: false };
    if (q.category) opts.filter = (r) => r.category === q.category;
    let results = ms.search(q.words.join(' '), opts);
    // MiniSearch has no phrase query: AND the words, then keep documents holding the phrase.
    if (q.kind === 'phrase') {
      const phrase = ' ' + q.words.join(' ') + ' ';
      results = results.filter((r) => {
        const d = byId.get(r.id);
        return (' ' + d.title + ' ').includes(phrase) || (' ' + d.body + ' ').includes(phrase);
      });
    }
    if (q.sortPrice) results.sort(byPriceDesc);
    return { total: results.length, hits: results.slice(0, LIMIT).map((r) => ({ id: r.id, title: r.title, category: r.category, price: r.price })) };
  };
  return { rate, bytes, runOne };
}

/**
 * SQLite FTS5 as a Node user would set it up for these queries: the documents in a plain table
 * (indexed on category), an external-content FTS5 index over title and body, bm25() ranking.
 * Ranked queries take the top ids in a subquery and join the stored fields for those only
 * (measured faster than selecting the columns of every match); a filter or a sort joins first.
 * The page cache is sized to hold the whole index: Shardex serves from memory too.
 */
async function fts5Engine(docs, batch) {
  const dir = await mkdtemp(join(tmpdir(), 'shardex-bench-fts5-'));
  const file = join(dir, 'fts.db');
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('cache_size = -1048576');
  db.pragma('mmap_size = 2147483648');
  db.exec(`CREATE TABLE docs (rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, title TEXT, body TEXT, category TEXT, price REAL, ts TEXT);
    CREATE INDEX docs_category ON docs (category);
    CREATE VIRTUAL TABLE fts USING fts5(title, body, content='docs', content_rowid='rowid');`);
  const insertDoc = db.prepare('INSERT INTO docs (rowid, id, title, body, category, price, ts) VALUES (?, ?, ?, ?, ?, ?, ?)');
  const insertFts = db.prepare('INSERT INTO fts (rowid, title, body) VALUES (?, ?, ?)');
  let rowid = 0;
  const insertBatch = db.transaction((rows) => {
    for (const d of rows) {
      rowid++;
      insertDoc.run(rowid, d.id, d.title, d.body, d.category, d.price, d.ts);
      insertFts.run(rowid, d.title, d.body);
    }
  });
  const t0 = performance.now();
  let last = t0;
  for (let i = 0; i < docs.length; i += batch) {
    insertBatch(docs.slice(i, i + batch));
    if (performance.now() - last > 5000) {
      last = performance.now();
      checkTime('FTS5 inserts');
      log(`  FTS5: ${fmt(i + batch)} / ${fmt(docs.length)} docs`);
    }
  }
  const rate = docs.length / ((performance.now() - t0) / 1000);
  db.pragma('wal_checkpoint(TRUNCATE)');
  const bytes = (await stat(file)).size;

  const stmts = new Map();
  const stmt = (q) => {
    const key = `${q.category ? 'f' : ''}${q.sortPrice ? 's' : ''}`;
    if (!stmts.has(key)) {
      const sql = !q.category && !q.sortPrice
        ? `SELECT d.id, d.title, d.category, d.price, t.score FROM
             (SELECT rowid, bm25(fts) AS score FROM fts WHERE fts MATCH ? ORDER BY score LIMIT ${LIMIT}) t
             JOIN docs d ON d.rowid = t.rowid ORDER BY t.score`
        : q.sortPrice
          ? `SELECT d.id, d.title, d.category, d.price FROM fts JOIN docs d ON d.rowid = fts.rowid
               WHERE fts MATCH ?${q.category ? ' AND d.category = ?' : ''} ORDER BY d.price DESC, d.id LIMIT ${LIMIT}`
          : `SELECT d.id, d.title, d.category, d.price, bm25(fts) AS score FROM fts JOIN docs d ON d.rowid = fts.rowid
               WHERE fts MATCH ? AND d.category = ? ORDER BY score LIMIT ${LIMIT}`;
      stmts.set(key, db.prepare(sql));
    }
    return stmts.get(key);
  };
  const params = (q) => (q.category ? [queryText(q), q.category] : [queryText(q)]);
  const runOne = async (q) => stmt(q).all(...params(q));
  const count = (q) =>
    db.prepare(`SELECT count(*) AS n FROM fts JOIN docs d ON d.rowid = fts.rowid WHERE fts MATCH ?${q.category ? ' AND d.category = ?' : ''}`).get(...params(q)).n;
  return {
    rate,
    bytes,
    runOne,
    count,
    async close() {
      db.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

// ---- report ----

const ms = (x) => (Number.isFinite(x) ? x.toFixed(2) + ' ms' : 'n/a');
const perDoc = (bytes, n) => (Number.isFinite(bytes) ? `${fmt(bytes / n)} B` : 'n/a');

// ---- memory at scale (issue 11, must-show 4): one node, one replica, --memory-docs documents ----

async function memoryOf(pid, url) {
  const [rss, heap, external] = [await rssOf(pid), await metricSum([url], 'shardex_nodejs_heap_size_used_bytes'), await metricSum([url], 'shardex_nodejs_external_memory_bytes')];
  return { rss, heap, external };
}

async function memoryAtScale(a) {
  const n = a.memoryDocs;
  log(`memory at scale: ${fmt(n)} docs in one node (shardex dev --nodes 1; collection 'mem': 1 shard x 1 replica, fields ${JSON.stringify(FIELDS)}) ...`);
  const cluster = await startDevCluster({ nodes: 1, shards: 1, replicas: 1 });
  try {
    const url = cluster.urls[0];
    await post(`${url}/api/collections`, JSON.stringify({ name: 'mem', numShards: 1, replicationFactor: 1, fields: FIELDS }));
    const before = await memoryOf(cluster.pid, url);
    const docs = generateDocs({ count: n, seed: 2 });
    let jsonBytes = 0;
    let done = 0;
    let last = performance.now();
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: a.concurrency }, async () => {
        for (;;) {
          const batch = [];
          for (let r = docs.next(); !r.done; r = docs.next()) {
            batch.push(r.value);
            if (batch.length === a.batch) break;
          }
          if (batch.length === 0) return;
          const body = JSON.stringify(batch);
          jsonBytes += Buffer.byteLength(body);
          await post(`${url}/api/collections/mem/docs`, body);
          done += batch.length;
          if (performance.now() - last > 5000) {
            last = performance.now();
            log(`  ${fmt(done)} / ${fmt(n)} docs, ${fmt(done / ((last - t0) / 1000))} docs/s`);
          }
        }
      }),
    );
    log(`  indexed ${fmt(n)} docs in ${((performance.now() - t0) / 1000).toFixed(1)} s; waiting for checkpoints and merges to settle ...`);
    await post(`${url}/api/collections/mem/commit`, '{}');
    await untilSettled([url], 10);
    const after = await memoryOf(cluster.pid, url);
    const total = await httpRequest(`${url}/api/collections/mem/search?q=*&limit=0`);
    log('');
    log(`| figure (${fmt(n)} docs, 1 node, 1 replica) | per document | the documents' JSON per document (baseline) | ratio |`);
    log('|---|---|---|---|');
    const json = jsonBytes / n;
    for (const [name, key] of [['RSS growth', 'rss'], ['JS heap growth (used, without a forced GC)', 'heap'], ['external memory growth (Buffers: segment files)', 'external']]) {
      const per = (after[key] - before[key]) / n;
      log(`| ${name} | ${perDoc(after[key] - before[key], n)} | ${fmt(json)} B | ${ratio(per, json)} |`);
    }
    log(`| search total for q=* (must be ${fmt(n)}) | ${JSON.parse(total.body).total} | | |`);
    log('');
  } finally {
    log(`stopping dev cluster (pid ${cluster.pid}) ...`);
    await cluster.stop();
  }
}

export async function run(rest) {
  const a = args(rest);
  deadline = performance.now() + a.maxMinutes * 60_000;
  const gc = exposeGc();

  log(`generating ${fmt(a.docs)} docs ...`);
  const docs = [...generateDocs({ count: a.docs, seed: 1 })];
  const byId = new Map(docs.map((d) => [d.id, d]));
  const mix = queryMix(vocabularyByRank(docs));
  const batchSizes = [];
  const bodies = [];
  for (let i = 0; i < docs.length; i += a.batch) {
    const b = docs.slice(i, i + a.batch);
    batchSizes.push(b.length);
    bodies.push(JSON.stringify(b));
  }

  // ---- Apache Lucene, in its own JVM (the baseline issue 15 measures Shardex against) ----
  // Indexed and warmed up first, with nothing else running; then its timed rounds alternate with
  // those of each Shardex figure compared with it (HTTP, node processes, in-process ShardIndex),
  // so that each pair is measured in the same minutes (this machine's speed drifts by 10% and
  // more). Its JVM is idle in between, and ends after its last rounds (or here, on an error).
  let session;
  if (a.lucene) {
    checkTime('Lucene');
    session = await luceneSession(docs, mix, { warmup: a.warmup, limit: LIMIT });
  }
  try {
    await measure(a, gc, { docs, byId, mix, batchSizes, bodies }, session);
  } finally {
    await session?.close();
  }
}

/** Every phase of the benchmark after Lucene's start (`session`: Lucene's JVM, when it runs). */
async function measure(a, gc, { docs, byId, mix, batchSizes, bodies }, session) {
  // ---- Shardex over HTTP: its own process, nothing else running while it is measured ----
  const replicas = 2;
  log(`starting dev cluster (3 nodes); collection '${COLLECTION}': 2 shards x ${replicas} replicas, fields ${JSON.stringify(FIELDS)} ...`);
  const cluster = await startDevCluster({ nodes: 3, shards: 2, replicas: 2 });
  let http;
  let indexRate;
  let diskBytes;
  let rssGrowth;
  let indexCpuUs;
  try {
    await post(`${cluster.urls[0]}/api/collections`, JSON.stringify({ name: COLLECTION, numShards: 2, replicationFactor: replicas, fields: FIELDS }));
    const rss0 = await rssOf(cluster.pid);
    log(`shardex: indexing ${fmt(a.docs)} docs over HTTP (batches of ${a.batch}, ${a.concurrency} in flight, round-robin over 3 nodes) ...`);
    const cpu0 = processCpuMs(cluster.pid);
    indexRate = await ingestHttp(cluster, bodies, batchSizes, a.docs, a.concurrency);
    indexCpuUs = ((processCpuMs(cluster.pid) - cpu0) * 1000) / a.docs;
    await post(`${cluster.urls[0]}/api/collections/${COLLECTION}/commit`, '{}');
    rssGrowth = (await rssOf(cluster.pid)) - rss0;
    diskBytes = await dirSize(cluster.dataDir, (name) => name.endsWith('.log') && name.startsWith('shardex'));
    // Queries are timed on settled segments, as Lucene's and the in-process index's are timed
    // on a finished index: merges left by the ingest would otherwise share the two cores.
    log('shardex: waiting for the merges left by the ingest (until no segment is written for 5 s) ...');
    const waited = await untilSettled(cluster.urls, 5);
    log(`  settled after ${(waited / 1000).toFixed(1)} s`);
    http = await shardexSearch(cluster, mix, a, session);
  } finally {
    log(`stopping dev cluster (pid ${cluster.pid}) ...`);
    await cluster.stop();
  }

  // ---- the same over HTTP with three node processes on ZooKeeper: the nodes do not share a thread ----
  // (Printed beside Lucene's default, in the Lucene table: not run without it.)
  let procHttp;
  if (a.processes && a.lucene) {
    log('starting ZooKeeper and 3 `shardex node` processes (the same collection, the same queries) ...');
    const zc = await startZkCluster({ nodes: 3 });
    try {
      await post(`${zc.urls[0]}/api/collections`, JSON.stringify({ name: COLLECTION, numShards: 2, replicationFactor: replicas, fields: FIELDS }));
      await waitSettled(zc.urls[0], COLLECTION);
      log(`node processes: indexing ${fmt(a.docs)} docs over HTTP ...`);
      await ingestHttp(zc, bodies, batchSizes, a.docs, a.concurrency);
      await post(`${zc.urls[0]}/api/collections/${COLLECTION}/commit`, '{}');
      log('node processes: waiting for the merges left by the ingest (until no segment is written for 5 s) ...');
      await untilSettled(zc.urls, 5);
      procHttp = await shardexSearch(zc, mix, a, session);
    } finally {
      log('stopping the node processes and ZooKeeper ...');
      await zc.stop();
    }
    const differ = mix.filter((_, i) => procHttp.totals[i] !== http.totals[i]).map((q) => q.name);
    if (differ.length > 0) throw new Error(`the node processes' match counts differ from the dev cluster's for: ${differ.join(', ')}`);
  }

  // ---- in-process: one engine at a time, so that heap deltas are each engine's own ----
  log('in-process ShardIndex (1 index, all docs): indexing ...');
  const local = shardIndexEngine(docs, byId, gc);
  checkTime('ShardIndex');
  const localTotals = [];
  for (const q of mix) localTotals.push((await local.runOne(q)).total);
  log(`in-process ShardIndex: sequential latency${session ? `, alternating with Lucene counting every hit in ${LUCENE_BLOCKS} blocks` : ''} ...`);
  const seqPair = await alternatingRun('ShardIndex', mix, local.runOne, a, session && ((rounds) => session.run('exact', rounds)));
  log(`in-process ShardIndex: the same with trackTotalHits=${LUCENE_DEFAULT_COUNT}${session ? ', alternating with Lucene\'s default collection' : ''} ...`);
  const countedPair = await alternatingRun('ShardIndex, trackTotalHits', mix, (q) => local.runOne(q, LUCENE_DEFAULT_COUNT), a, session && ((rounds) => session.run('default', rounds)));
  const localSeq = seqPair.ours;
  const localCounted = countedPair.ours;
  // Lucene's figures, with its rounds of the in-process comparison (the HTTP ones have their own).
  // Its last rounds are done: the JVM goes before the other engines are measured.
  let lucene;
  if (session) {
    const { run, close, ...figures } = session;
    lucene = { ...figures, exact: seqPair.theirs, default: countedPair.theirs };
    await session.close();
  }
  log('in-process ShardIndex written as one segment file and loaded as a replica loads it ...');
  const persisted = await persistedEngine(local, mix, localTotals, gc);
  persisted.index = null;

  log('MiniSearch: addAll ...');
  const mini = miniSearchEngine(docs, byId, gc);
  checkTime('MiniSearch');
  const miniTotals = [];
  for (const q of mix) miniTotals.push((await mini.runOne(q)).total);
  log('MiniSearch: sequential latency ...');
  const miniSeq = await sequentialRun('MiniSearch', mix, mini.runOne, a);
  mini.runOne = null;
  gc();

  log('SQLite FTS5: inserting ...');
  const fts = await fts5Engine(docs, a.batch);
  let ftsSeq;
  const ftsTotals = [];
  try {
    for (const q of mix) ftsTotals.push(fts.count(q));
    log('SQLite FTS5: sequential latency ...');
    ftsSeq = await sequentialRun('FTS5', mix, fts.runOne, a);
  } finally {
    await fts.close();
  }

  log('');
  log(`Query mix (words by frequency rank in the corpus vocabulary) and matches per engine:`);
  log('');
  log('| query | shardex q | filter / sort | matches: shardex | FTS5 | MiniSearch | ShardIndex in-process | Lucene |');
  log('|---|---|---|---|---|---|---|---|');
  mix.forEach((q, i) => {
    const extra = [q.category && `category:${q.category}`, q.sortPrice && 'price desc'].filter(Boolean).join(', ') || '-';
    log(`| ${q.name} | \`${queryText(q)}\` | ${extra} | ${fmt(http.totals[i])} | ${fmt(ftsTotals[i])} | ${fmt(miniTotals[i])} | ${fmt(localTotals[i])} | ${lucene ? fmt(lucene.totals[i]) : '-'} |`);
  });
  if (lucene) {
    const differ = mix.filter((_, i) => lucene.totals[i] !== http.totals[i] || lucene.totals[i] !== localTotals[i]).map((q) => q.name);
    log('');
    log(differ.length === 0 ? 'Match counts: Shardex (HTTP), ShardIndex and Lucene agree on every query.' : `MATCH COUNTS DIFFER between Shardex and Lucene for: ${differ.join('; ')} (the latency ratios of those queries compare different work)`);
  }

  log('');
  log(`| figure | shardex (HTTP, 3 nodes, 2 shards x 2 replicas) | SQLite FTS5 (in-process) | MiniSearch (in-process) | shardex / FTS5 | shardex / MiniSearch | ShardIndex in-process (1 index, no HTTP; for reference) |`);
  log('|---|---|---|---|---|---|---|');
  const row = (figure, s, f, m, l, show) => log(`| ${figure} | ${show(s)} | ${show(f)} | ${show(m)} | ${ratio(s, f)} | ${ratio(s, m)} | ${show(l)} |`);
  mix.forEach((q, i) => {
    const p = (run) => percentile(run.byQuery[i], 50);
    row(`p50 ${q.name}`, p(http.seq), p(ftsSeq), p(miniSeq), p(localSeq), ms);
  });
  row(`p50, whole mix (${fmt(http.seq.all.length)} queries, sequential)`, percentile(http.seq.all, 50), percentile(ftsSeq.all, 50), percentile(miniSeq.all, 50), percentile(localSeq.all, 50), ms);
  row('p99, whole mix (sequential)', percentile(http.seq.all, 99), percentile(ftsSeq.all, 99), percentile(miniSeq.all, 99), percentile(localSeq.all, 99), ms);
  row('queries/s, 1 client, sequential', http.seq.qps, ftsSeq.qps, miniSeq.qps, localSeq.qps, fmt);
  log(`| queries/s, shardex with ${a.clients} concurrent HTTP clients; baselines single-threaded sequential | ${fmt(http.concurrentQps)} | ${fmt(ftsSeq.qps)} | ${fmt(miniSeq.qps)} | ${ratio(http.concurrentQps, ftsSeq.qps)} | ${ratio(http.concurrentQps, miniSeq.qps)} | - |`);
  log(`| indexing docs/s (shardex: HTTP, replication ${replicas}, batches of ${a.batch}; FTS5: transactions of ${a.batch}; MiniSearch: addAll) | ${fmt(indexRate)} | ${fmt(fts.rate)} | ${fmt(mini.rate)} | ${ratio(indexRate, fts.rate)} | ${ratio(indexRate, mini.rate)} | ${fmt(local.rate)} |`);
  log(`| indexing: dev cluster CPU per doc (user + system, both replicas' work) | ${fmt(indexCpuUs)} µs | - | - | - | - | - |`);
  log(`| indexing docs/s, PostgreSQL COPY into a GIN-indexed table | not measured (no PostgreSQL server running) | | | | | |`);
  log(`| index memory per doc (heap + external delta; shardex: in-process ShardIndex) | ${perDoc(local.bytes, a.docs)} | - | ${perDoc(mini.bytes, a.docs)} | - | ${ratio(local.bytes, mini.bytes)} | ${perDoc(local.bytes, a.docs)} |`);
  log(`| dev cluster RSS growth per doc per replica (whole process, informational) | ${perDoc(rssGrowth, a.docs * replicas)} | - | - | - | - | - |`);
  log(`| disk per doc (shardex: data dir / docs / ${replicas} replicas, update log + docs; FTS5: db file with the documents table) | ${perDoc(diskBytes / replicas, a.docs)} | ${perDoc(fts.bytes, a.docs)} | - | ${ratio(diskBytes / replicas, fts.bytes)} | - | - |`);
  log('');
  log('Ratios are shardex / baseline: above 1 means shardex is slower for latencies, faster for rates, larger for bytes.');
  log('');
  if (lucene) luceneTable(a, mix, { http, procHttp, localSeq, localCounted, local, persisted, indexRate, lucene });
  if (a.memoryDocs > 0) await memoryAtScale(a);
}

/** Every Shardex figure as a ratio to Lucene's, measured in the same run (issue 15's aims). */
function luceneTable(a, mix, { http, procHttp, localSeq, localCounted, local, persisted, indexRate, lucene }) {
  const lx = lucene.exact;
  const ld = lucene.default;
  const c = LUCENE_DEFAULT_COUNT;
  log(`Against Apache Lucene 8 (in-process, one JVM, BM25; ${fmt(a.warmup)} warm-up rounds for the JIT, ${a.rounds} timed, as every engine here). Like for like: \`exact\` counts every hit (Shardex's default), \`default\` is Lucene's default collection, which counts up to ${fmt(c)} hits and then a lower bound (Shardex with trackTotalHits=${c}). Lucene's timed rounds alternate with those of the figure they are compared with, in ${LUCENE_BLOCKS} blocks each way: its columns give its rounds beside the in-process ShardIndex's / beside the HTTP ones, and each ratio uses the Lucene figure measured beside it:`);
  log('');
  log(`| figure | ShardIndex in-process, exact | ShardIndex in-process, trackTotalHits ${c} | shardex HTTP (3 nodes, 2 x 2), exact | shardex HTTP, trackTotalHits ${c} | Lucene exact (beside ShardIndex / beside HTTP) | Lucene default (beside ShardIndex / beside HTTP) | ShardIndex exact / Lucene exact | ShardIndex ${c} / Lucene default | HTTP exact / Lucene exact | HTTP ${c} / Lucene default |`);
  log('|---|---|---|---|---|---|---|---|---|---|---|');
  const row = (figure, le, lc, he, hc, e, d, eh, dh, show) => log(`| ${figure} | ${show(le)} | ${show(lc)} | ${show(he)} | ${show(hc)} | ${show(e)} / ${show(eh)} | ${show(d)} / ${show(dh)} | ${ratio(le, e)} | ${ratio(lc, d)} | ${ratio(he, eh)} | ${ratio(hc, dh)} |`);
  const runs = [localSeq, localCounted, http.seq, http.counted, lx, ld, http.lucene.exact, http.lucene.default];
  mix.forEach((q, i) => row(`p50 ${q.name}`, ...runs.map((run) => percentile(run.byQuery[i], 50)), ms));
  row('p50, whole mix', ...runs.map((run) => percentile(run.all, 50)), ms);
  row('p99, whole mix', ...runs.map((run) => percentile(run.all, 99)), ms);
  row('queries/s, 1 client, sequential', ...runs.map((run) => run.qps), fmt);
  log('');
  log('| figure | ShardIndex in-process | shardex HTTP (3 nodes, 2 x 2) | Lucene | ShardIndex / Lucene | shardex HTTP / Lucene |');
  log('|---|---|---|---|---|---|');
  // A round's p50 over the timed exact queries (the coordinator's timing=true), and the client's time outside the coordinator.
  const round = (h, key) => percentile(h.seq.phases.map((p) => p[key]), 50);
  const outside = (h) => percentile(h.seq.all, 50) - round(h, 'tookMs');
  log(`| shardex HTTP p50 by round, exact (the coordinator's timing=true): dfs / query / merge / fetch / coordinator total / outside it (HTTP, JSON, routing: client p50 - coordinator p50) | | ${['dfsMs', 'queryMs', 'mergeMs', 'fetchMs', 'tookMs'].map((k) => ms(round(http, k))).join(' / ')} / ${ms(outside(http))} | | | |`);
  log(`| shardex HTTP p50 of the query round's slowest shard: its own search and stored fields / the rest of its call (gRPC, encoding, queueing) | | ${ms(round(http, 'servedMs'))} / ${ms(round(http, 'transportMs'))} | | | |`);
  const overheads = (h, l) => mix.map((_, i) => percentile(h.byQuery[i], 50) - percentile(l.byQuery[i], 50));
  const span = (xs) => `${ms(Math.min(...xs))} / ${ms(Math.max(...xs))}`;
  log(`| distributed overhead per query (HTTP p50 - ShardIndex p50): min / max, exact; trackTotalHits ${c} | | ${span(overheads(http.seq, localSeq))}; ${span(overheads(http.counted, localCounted))} | | | |`);
  log(`| indexing docs/s (ShardIndex: one copy in memory; shardex: HTTP, 2 replicas, default durability, a fresh cluster's first documents, not warmed up: aim 4 is measured by \`npm run bench -- ingest\`; Lucene: one copy, stored source, committed) | ${fmt(local.rate)} | ${fmt(indexRate)} | ${fmt(lucene.rate)} | ${ratio(local.rate, lucene.rate)} | ${ratio(indexRate, lucene.rate)} |`);
  const lucBytes = lucene.indexBytesWithoutStored;
  const onDisk = persisted.fileBytes + Math.max(0, persisted.heapSearched);
  log(`| index bytes per doc (ShardIndex in memory, as built: heap + external delta; Lucene: index files without stored fields) | ${perDoc(local.bytes, a.docs)} | | ${perDoc(lucBytes, a.docs)} | ${ratio(local.bytes, lucBytes)} | |`);
  log(`| index bytes per doc as a replica holds them (one segment file + the heap it takes loaded, after every query ran once) | ${perDoc(onDisk, a.docs)} | | ${perDoc(lucBytes, a.docs)} | ${ratio(onDisk, lucBytes)} | |`);
  log(`| that segment: file / heap once loaded / heap after the queries / external (file sections read whole, not counted again) | ${perDoc(persisted.fileBytes, a.docs)} / ${perDoc(persisted.heapLoaded, a.docs)} / ${perDoc(persisted.heapSearched, a.docs)} / ${perDoc(persisted.external, a.docs)} | | | | |`);
  log(`| Lucene: all index files per doc (stored source included) / JVM heap of the open index per doc / segments | | | ${perDoc(lucene.indexBytes, a.docs)} / ${perDoc(lucene.heapBytes, a.docs)} / ${lucene.segments} | | |`);
  if (procHttp) {
    log('');
    log(`Over HTTP, the dev cluster (3 nodes in one process, a worker thread each) beside 3 \`shardex node\` processes on ZooKeeper (same collection, same queries, match counts equal), against Lucene's default (trackTotalHits ${c} for both):`);
    log('');
    log(`| figure | HTTP, dev cluster | HTTP, 3 node processes | Lucene default (beside the dev cluster / beside the node processes) | dev cluster / Lucene | node processes / Lucene | node processes / dev cluster |`);
    log('|---|---|---|---|---|---|---|');
    const both = (figure, dv, pv, ldv, lpv, show) => log(`| ${figure} | ${show(dv)} | ${show(pv)} | ${show(ldv)} / ${show(lpv)} | ${ratio(dv, ldv)} | ${ratio(pv, lpv)} | ${ratio(pv, dv)} |`);
    const at = (run, p) => percentile(run.all, p);
    both('p50, whole mix', at(http.counted, 50), at(procHttp.counted, 50), at(http.lucene.default, 50), at(procHttp.lucene.default, 50), ms);
    both('p99, whole mix', at(http.counted, 99), at(procHttp.counted, 99), at(http.lucene.default, 99), at(procHttp.lucene.default, 99), ms);
    const rounds = (h) => [round(h, 'queryMs'), round(h, 'servedMs'), round(h, 'transportMs'), round(h, 'tookMs'), outside(h)].map(ms).join(' / ');
    log(`| p50 by round, exact: query (its slowest shard's own time / the rest of that call) / coordinator total / outside it (client p50 - coordinator p50) | ${rounds(http)} | ${rounds(procHttp)} | | | | |`);
    log(`| distributed overhead per query (HTTP p50 - ShardIndex p50): min / max, trackTotalHits ${c} | ${span(overheads(http.counted, localCounted))} | ${span(overheads(procHttp.counted, localCounted))} | | | | |`);
    log(`| queries/s, ${a.clients} concurrent HTTP clients | ${fmt(http.concurrentQps)} | ${fmt(procHttp.concurrentQps)} | | | | ${ratio(procHttp.concurrentQps, http.concurrentQps)} |`);
  }
  log('');
  log('Ratios are Shardex / Lucene: above 1 means Shardex is slower for latencies, faster for rates, larger for bytes.');
}
