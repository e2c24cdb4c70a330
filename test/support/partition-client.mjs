// The partition test's client, run inside the test's client namespace (`ip netns exec NS node
// partition-client.mjs MODE '<json options>'`): the only process that talks to the nodes.
//   write  keeps writing documents with unique ids (single-doc and small batch POSTs, round-robin
//          over the nodes, at most `maxInFlight` per node, each bounded by `timeoutMs`) and
//          appends every outcome as one NDJSON line to `out`: ids, node, start/end, HTTP status
//          and body code, or the network error. Stops (after its requests in flight end) when
//          `stopFile` exists, on SIGTERM, or after `maxMs`.
//   dump   writes to `out`, for every node: its cluster view and, for each shard it holds a
//          replica of, that replica's id -> version map (export with distrib=false, paged).
//   view   prints every node's GET /api/cluster (or the error) as one JSON object.
//   request  sends one request ({method, url, body}) and prints {status, body}.
// Plain JavaScript with Node's built-ins only: it runs as is, without a build.
import { appendFileSync, existsSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

const [mode, json] = process.argv.slice(2);
const opts = JSON.parse(json ?? '{}');

/** The error a failed fetch carries, as one short string: 'TimeoutError', 'ECONNREFUSED', ... */
function networkError(err) {
  if (err?.name === 'TimeoutError' || err?.name === 'AbortError') return 'TimeoutError';
  return err?.cause?.code ?? err?.cause?.name ?? err?.name ?? String(err);
}

async function getJson(url, timeoutMs = 5000) {
  const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${url}: ${res.status} ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

// --- write -------------------------------------------------------------------------------------

async function write() {
  const { nodes, collection, out, stopFile, maxMs = 180_000, prefix, intervalMs = 15, maxInFlight = 4, timeoutMs = 3000, maxBatch = 5 } = opts;
  const names = Object.keys(nodes);
  const deadline = Date.now() + maxMs;
  let stopping = false;
  process.once('SIGTERM', () => (stopping = true));
  const stop = () => stopping || Date.now() > deadline || (stopFile !== undefined && existsSync(stopFile));
  let seq = 0;

  async function send(node) {
    // Half single-document POSTs (one object), half small arrays.
    const size = seq % 2 === 0 ? 1 : 2 + (seq % (maxBatch - 1));
    const docs = Array.from({ length: size }, () => {
      const n = seq++;
      return { id: `${prefix}${n}`, n, text: `write ${n} via ${node}` };
    });
    const start = Date.now();
    const outcome = { ids: docs.map((d) => d.id), node, start };
    try {
      const res = await fetch(`${nodes[node]}/api/collections/${collection}/docs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(size === 1 ? docs[0] : docs),
        signal: AbortSignal.timeout(timeoutMs),
      });
      const text = await res.text();
      outcome.status = res.status;
      let body;
      try {
        body = JSON.parse(text);
      } catch {
        body = { error: text.slice(0, 200) };
      }
      if (res.status === 200) outcome.versions = body.versions;
      else {
        outcome.code = body.code;
        outcome.message = String(body.error ?? '').slice(0, 200);
      }
    } catch (err) {
      // Also when the status arrived but the body was lost: no answer the client can trust.
      delete outcome.status;
      outcome.error = networkError(err);
      outcome.message = String(err?.cause?.message ?? err?.message ?? '').slice(0, 200);
    }
    outcome.end = Date.now();
    appendFileSync(out, JSON.stringify(outcome) + '\n');
  }

  // Open loop, round-robin: every `intervalMs` the next node with a free slot gets a request, so
  // a node that hangs (a partition) holds only its own `maxInFlight` slots, not the whole client.
  const inFlight = new Map(names.map((n) => [n, 0]));
  const pending = new Set();
  let turn = 0;
  while (!stop()) {
    const free = names.map((_, k) => names[(turn + k) % names.length]).find((n) => inFlight.get(n) < maxInFlight);
    if (free === undefined) {
      await sleep(5);
      continue;
    }
    turn = (names.indexOf(free) + 1) % names.length;
    inFlight.set(free, inFlight.get(free) + 1);
    const p = send(free).finally(() => {
      inFlight.set(free, inFlight.get(free) - 1);
      pending.delete(p);
    });
    pending.add(p);
    await sleep(intervalMs);
  }
  await Promise.all(pending);
}

// --- dump and view -----------------------------------------------------------------------------

async function replicaMap(url, collection, shard) {
  const versions = {};
  let after;
  for (;;) {
    const q = new URLSearchParams({ shard, distrib: 'false', limit: '10000', fields: 'id', ...(after ? { after } : {}) });
    const page = await getJson(`${url}/api/collections/${collection}/export?${q}`, 20_000);
    for (const d of page.docs) versions[d.id] = d._version_;
    after = page.next;
    if (!after) return versions;
  }
}

async function dump() {
  const { nodes, collection, out } = opts;
  const result = {};
  for (const [name, url] of Object.entries(nodes)) {
    const entry = { shards: {}, errors: [] };
    result[name] = entry;
    try {
      entry.view = await getJson(`${url}/api/cluster`);
    } catch (err) {
      entry.errors.push(`cluster view: ${err.message}`);
      continue;
    }
    const shards = entry.view.collections?.[collection]?.shards ?? {};
    for (const [shard, s] of Object.entries(shards)) {
      if (!s.replicas.some((r) => r.node === name)) continue;
      try {
        entry.shards[shard] = await replicaMap(url, collection, shard);
      } catch (err) {
        entry.errors.push(`export of ${shard}: ${err.message}`);
      }
    }
  }
  writeFileSync(out, JSON.stringify(result));
}

async function view() {
  const entries = await Promise.all(
    Object.entries(opts.nodes).map(async ([name, url]) => {
      try {
        return [name, await getJson(`${url}/api/cluster`, opts.timeoutMs ?? 2000)];
      } catch (err) {
        return [name, { error: err.message }];
      }
    }),
  );
  process.stdout.write(JSON.stringify(Object.fromEntries(entries)) + '\n');
}

async function request() {
  const { method = 'GET', url, body, timeoutMs = 10_000 } = opts;
  const res = await fetch(url, {
    method,
    ...(body !== undefined && { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  let parsed = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* not JSON: keep the text */
  }
  process.stdout.write(JSON.stringify({ status: res.status, body: parsed }) + '\n');
}

const modes = { write, dump, view, request };
if (!modes[mode]) {
  process.stderr.write(`usage: partition-client.mjs write|dump|view|request '<json options>'\n`);
  process.exit(2);
}
await modes[mode]();
