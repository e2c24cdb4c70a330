// Fuzzing the HTTP API (issue 13, "what it must show" 3): 10,000 seeded random requests (bad
// JSON, wrong types, huge and deeply nested values, odd Unicode, `../` and `%2e%2e` in
// collection names and ids, bad query syntax, bad parameters, every content type, keys of every
// role and none), half with API keys on and half off, against running nodes over real sockets:
// never a 5xx, never a crash, and nothing stored changes but by the requests that were accepted.
//
// To stay cheap, requests go 8 at a time over keep-alive connections (node:http with a keep-alive
// agent: fetch would resolve the `..` segments and re-encode the paths this fuzzes before they
// left the process). Since they run side by side, "a refused request changes nothing" is
// checked on what the nodes store after the run rather than around each request: every write
// a replica holds (every update-log entry and every stored entry, as collection, id and version)
// is one that existed before the run or one an accepted answer reported (versions are unique
// per shard, so a write a refused request made would show with a version no answer gave), every
// collection and read-balance setting is one that existed or an accepted request made.
// The seed is printed; a failure names the seed and the request's index:
// FUZZ_RUNS=5000 FUZZ_SEED=7 npx vitest run test/http-fuzz.test.ts (FUZZ_RUNS per mode).
import { Agent, request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { connect } from 'node:net';
import fc from 'fast-check';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildHttp } from '../src/node/http/app.js';
import { silentLogger } from '../src/logger.js';
import { KEYS, bearer, keyEntries, startGuardedNode, type GuardedNode } from './support/guarded-node.js';

const C = 'fz';
// Per mode (keys on, keys off): 2 x 5,000 = the 10,000.
const RUNS = Number(process.env.FUZZ_RUNS ?? 5000);
/** Requests in flight at once, each mode (one keep-alive connection each). */
const CONCURRENCY = 8;
/** Requests generated at a time (chunk k from seed + k): memory stays bounded, any request can be replayed. */
const CHUNK = 250;
const SEED = process.env.FUZZ_SEED === undefined ? undefined : Number(process.env.FUZZ_SEED);
const HTTP = {
  bodyLimit: 256 * 1024,
  limits: { maxBatchDocs: 50, maxDocumentBytes: 64 * 1024, maxFieldsPerDocument: 40, maxFieldValueBytes: 16 * 1024, maxQueryLength: 2000, maxQueryClauses: 64, maxJsonDepth: 12 },
};

let g: GuardedNode;
let open: FastifyInstance;
let openUrl: string;

beforeAll(async () => {
  // Two nodes, one shard each: half the writes and reads are forwarded to the other node.
  g = await startGuardedNode({ ...HTTP, apiKeys: keyEntries() }, { nodes: 2, collection: C, durability: 'async', fields: { title: 'text', n: 'number', tag: 'keyword', at: 'date' } });
  open = await buildHttp(g.node, { ...HTTP, logger: silentLogger() });
  openUrl = await open.listen({ host: '127.0.0.1', port: 0 });
  const seed = await open.inject({ method: 'POST', url: `/api/collections/${C}/docs`, payload: [{ id: 'seed-1', title: 'dune', n: 1, tag: 'a' }, { id: 'seed-2', title: 'emma', n: 2, tag: 'b' }, { id: 'keep-1', title: 'kept', n: 3 }] });
  expect(seed.statusCode, seed.body).toBe(200);
});

afterAll(async () => {
  await open?.close();
  await g?.stop();
});

// ---- what a request is made of --------------------------------------------------------------

const oddText = fc.oneof(
  fc.constantFrom('..', '../..', '%2e%2e', '%2E%2E%2F', '..%2f..%2fetc%2fpasswd', '%00', '%ED%A0%80', '%FF%FE', '%', '%zz', 'a%2Fb', '*', '\u0000', '\uD800', '\uFFFF', '🦀', 'e\u0301', '\u202E', ' ', ''),
  fc.string({ maxLength: 20 }),
  fc.string({ unit: 'grapheme', maxLength: 20 }),
  fc.string({ unit: 'binary', maxLength: 10 }),
  fc.stringMatching(/^[A-Za-z0-9_-]{1,70}$/),
  fc.constant('x'.repeat(5000)),
);

/** Percent-encodes even a lone surrogate (as the replacement character's bytes). */
const enc = (s: string): string => {
  try {
    return encodeURIComponent(s);
  } catch {
    return [...Buffer.from(s, 'utf8')].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');
  }
};

/** A path segment: raw (may break the URL on purpose) or percent-encoded. */
const segment = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(C, C, C, 'nope', 'seed-1', 'seed-2', 'shard1', 'primary', 'interactive') },
  { weight: 2, arbitrary: oddText.map(enc) },
  { weight: 1, arbitrary: oddText },
);

const method = fc.constantFrom('GET', 'GET', 'POST', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS');

/** A collection name: mostly the one that exists. */
const collection = fc.oneof({ weight: 4, arbitrary: fc.constant(C) }, { weight: 1, arbitrary: segment });

/** A route of the API with its method (mostly), or any method on any path. */
const target = fc.oneof(
  { weight: 3, arbitrary: collection.map((c) => ({ method: 'POST', path: `/api/collections/${c}/docs` })) },
  { weight: 2, arbitrary: fc.tuple(fc.constantFrom('GET', 'DELETE'), collection, segment).map(([method, c, id]) => ({ method, path: `/api/collections/${c}/docs/${id}` })) },
  { weight: 3, arbitrary: fc.tuple(fc.constantFrom('GET', 'POST'), collection).map(([method, c]) => ({ method, path: `/api/collections/${c}/search` })) },
  { weight: 1, arbitrary: collection.map((c) => ({ method: 'GET', path: `/api/collections/${c}/export` })) },
  { weight: 1, arbitrary: collection.map((c) => ({ method: 'POST', path: `/api/collections/${c}/commit` })) },
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom('GET', 'PATCH', 'DELETE'), collection).map(([method, c]) => ({ method, path: `/api/collections/${c}` })) },
  { weight: 1, arbitrary: fc.constant({ method: 'POST', path: '/api/collections' }) },
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom('PUT', 'DELETE'), segment, segment).map(([method, p, t]) => ({ method, path: `/api/read-balance/${p}/${t}` })) },
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom('GET', 'DELETE'), segment).map(([method, p]) => ({ method, path: method === 'GET' ? '/api/read-balance' : `/api/read-balance/${p}` })) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      { method: 'GET', path: '/api/read-slots' },
      { method: 'POST', path: '/api/read-slots/reset' },
      { method: 'GET', path: '/api/cluster' },
      { method: 'GET', path: '/api/readers' },
      { method: 'GET', path: '/metrics' },
      { method: 'GET', path: '/health' },
    ),
  },
  {
    weight: 2,
    arbitrary: fc.tuple(method, fc.oneof(fc.constantFrom('/', '//', '/api/', '/api/collections/fz/docs/', '/health/live'), fc.tuple(segment, segment).map(([a, b]) => `/${a}/${b}`), collection.map((c) => `/api/collections/${c}/search`))).map(([m, path]) => ({ method: m, path })),
  },
);

const queryToken = fc.constantFrom('title:(', 'AND', 'OR', 'NOT', '"unclosed', '"dune emma"', '\\', 'title:[1 TO', 'n:[* TO *]', 'n:[1 TO 5}', 'n:{a TO b}', '(', ')', '*:*', '*', 'title:dune^x', 'dune^2.5', 'tag:*', 'tag:a*', '-', '+', '!', '&&', '||', 'at:[2020-01-01 TO 2030-01-01]', 'at:[x TO y]', 'id:(seed-1 OR seed-2)', ':', 'nofield:x', 'n:abc', 'dune', 'emma', 'the', '🦀', 'title:', 'x'.repeat(300));
const querySyntax = fc.oneof(fc.array(queryToken, { minLength: 1, maxLength: 8 }).map((t) => t.join(' ')), fc.array(queryToken, { minLength: 1, maxLength: 4 }).map((t) => t.join('')), fc.integer({ min: 1, max: 80 }).map((d) => '('.repeat(d) + 'x' + ')'.repeat(d)));
const paramValue = fc.oneof(
  fc.constantFrom('-1', '0', '1', '10', '9999', '10001', '1e20', 'NaN', 'true', 'false', '', ' ', 'immediate', 'eventual', 'shard1', 'title desc', 'n asc', 'score', 'id,title', '*', 'interactive'),
  querySyntax,
  oddText,
  fc.integer().map(String),
);
const paramName = fc.oneof(
  { weight: 5, arbitrary: fc.constantFrom('q', 'q', 'filter', 'sort', 'offset', 'limit', 'fields', 'partial', 'consistency', 'minVersion', 'priority', 'timeoutMs') },
  { weight: 2, arbitrary: fc.constantFrom('filters', 'scanType', 'minRf', 'distrib', 'shard', 'after', 'target') },
  { weight: 1, arbitrary: oddText },
);
const param = fc.oneof({ weight: 2, arbitrary: fc.tuple(fc.constant('q'), querySyntax) }, { weight: 3, arbitrary: fc.tuple(paramName, paramValue) });
const query = fc.array(param, { maxLength: 5 }).map((pairs) => (pairs.length === 0 ? '' : '?' + pairs.map(([k, v]) => `${enc(k)}=${enc(v)}`).join('&')));

const nested = (depth: number, open: string, close: string): string => open.repeat(depth) + '1' + close.repeat(depth);
const fieldValue = fc.oneof(fc.string({ maxLength: 30 }), fc.integer(), fc.double(), fc.boolean(), fc.constant(null), fc.array(fc.string({ maxLength: 5 }), { maxLength: 4 }), fc.jsonValue({ maxDepth: 3 }), fc.constant('y'.repeat(20_000)));
const doc = fc.record(
  { id: fc.oneof(oddText, fc.integer(), fc.constant(null)), title: fieldValue, n: fieldValue, tag: fieldValue, at: fieldValue, extra: fieldValue },
  { requiredKeys: [] },
);
const jsonBody = fc.oneof(
  fc.array(doc, { maxLength: 6 }),
  doc,
  fc.jsonValue({ maxDepth: 4 }),
  fc.record({ q: fc.oneof(querySyntax, querySyntax, oddText, fc.integer()), filter: fc.oneof(querySyntax, fc.array(querySyntax)), offset: fc.oneof(fc.integer(), fc.string()), limit: fc.oneof(fc.integer(), fc.string()), sort: paramValue, priority: fieldValue, timeoutMs: fieldValue }, { requiredKeys: [] }),
  fc.record({ name: segment, numShards: fc.oneof(fc.integer({ min: -2, max: 300 }), fc.string()), replicationFactor: fieldValue, router: fc.oneof(fc.constantFrom('hash', 'compositeId'), oddText), fields: fc.jsonValue({ maxDepth: 2 }) }, { requiredKeys: [] }),
  fc.record({ weight: fieldValue, slots: fieldValue }, { requiredKeys: [] }),
).map((v) => JSON.stringify(v) ?? 'null');
const body = fc.oneof(
  { weight: 6, arbitrary: jsonBody },
  { weight: 1, arbitrary: fc.string({ maxLength: 200 }) },
  { weight: 1, arbitrary: fc.constantFrom('{', '[', '[{"id":"a"},', '{"__proto__":{"x":1}}', '{"constructor":{"prototype":{}}}', '[{"id":"p","__proto__":1}]', 'null', '"text"', '1e999', '\uFEFF[]', '') },
  { weight: 1, arbitrary: fc.integer({ min: 2, max: 50_000 }).map((d) => nested(d, '[', ']')) },
  { weight: 1, arbitrary: fc.integer({ min: 2, max: 2000 }).map((d) => '{"a":'.repeat(d) + '1' + '}'.repeat(d)) },
  { weight: 1, arbitrary: fc.array(jsonBody, { maxLength: 5 }).map((lines) => lines.join('\n')) },
  { weight: 1, arbitrary: fc.constant(JSON.stringify([{ id: 'huge', title: 'z'.repeat(300 * 1024) }])) },
);
const contentType = fc.oneof(
  { weight: 8, arbitrary: fc.constant('application/json') },
  { weight: 2, arbitrary: fc.constantFrom('application/x-ndjson', 'application/ndjson') },
  { weight: 1, arbitrary: fc.constantFrom('text/plain', 'application/json; charset=utf-16', 'multipart/form-data', 'APPLICATION/JSON', 'application/json;;', undefined) },
);

interface FuzzRequest {
  readonly method: string;
  readonly url: string;
  readonly body: string | undefined;
  readonly contentType: string | undefined;
  readonly key: string | undefined;
}

const request = (keys: boolean): fc.Arbitrary<FuzzRequest> =>
  fc
    .record({
      target,
      query,
      body: fc.option(body, { nil: undefined }),
      contentType,
      key: keys ? fc.constantFrom(KEYS.reader, KEYS.writer, KEYS.admin, KEYS.all, 'wrong-key', undefined) : fc.constant(undefined),
    })
    .map(({ target: { method: m, path: p }, ...r }) => ({ method: m, url: p + r.query, body: m === 'GET' || m === 'HEAD' ? undefined : r.body, contentType: r.contentType, key: r.key }));

/**
 * A valid deadline short enough to pass while the request runs (`timeoutMs` from 1 ms to a minute,
 * in the query or a JSON body): its 503/504 is the documented answer to a valid request (see
 * test/update-deadline.test.ts), and an update it cuts short may stand without an answer saying
 * so. Left out: malformed deadlines (0, negative, fractional, huge, words, lists) stay in.
 */
function shortDeadline(r: FuzzRequest): boolean {
  const short = (v: unknown): boolean => (typeof v === 'number' || (typeof v === 'string' && /^\s*\d+\s*$/.test(v))) && Number(v) >= 1 && Number(v) < 60_000;
  const q = r.url.indexOf('?');
  if (q >= 0) {
    try {
      if (new URLSearchParams(r.url.slice(q + 1)).getAll('timeoutMs').some(short)) return true;
    } catch {
      /* not a query the server can read either */
    }
  }
  if (r.body === undefined || !r.body.includes('timeoutMs')) return false;
  return r.body.split('\n').some((line) => {
    try {
      const v = JSON.parse(line) as { timeoutMs?: unknown } | null;
      return typeof v === 'object' && v !== null && short(v.timeoutMs);
    } catch {
      return false;
    }
  });
}

/** The collection the run is about is never deleted (by the keys that may). */
const keepsTheCollection = (r: FuzzRequest): boolean => !(r.method === 'DELETE' && /^\/api\/collections\/fz\/?(\?|$)/.test(r.url));

// ---- sending them ---------------------------------------------------------------------------

interface Answer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/**
 * Characters a request line cannot carry as they are: spaces, controls and anything beyond ASCII
 * (Node's client refuses most; Node's server refuses the rest before any route, closing the
 * connection under the requests queued behind). They go percent-encoded; raw bytes in request
 * lines are the socket cases below.
 */
const UNSENDABLE = /[^\u0021-\u007e]/gu;

/** Sends one request on a keep-alive connection of `agent`, its path as generated but for UNSENDABLE characters. */
function send(agent: Agent, base: URL, r: FuzzRequest, attempt = 1): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...(r.contentType !== undefined && { 'content-type': r.contentType }), ...(r.key !== undefined && bearer(r.key)) };
    if (r.body !== undefined) headers['content-length'] = String(Buffer.byteLength(r.body));
    const req = httpRequest({ agent, host: base.hostname, port: base.port, method: r.method, path: r.url.replace(UNSENDABLE, enc), headers, timeout: 30_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within 30 s to ${r.method} ${r.url.slice(0, 200)}`)));
    req.on('error', (err: NodeJS.ErrnoException) => {
      // A kept-alive connection the server closed as this request went out (after refusing the
      // previous one before reading its body): the request never reached it. Node's documented
      // remedy is to send it again; the server closing on its own is not its answer to this one.
      if (req.reusedSocket && err.code === 'ECONNRESET' && attempt < 3) resolve(send(agent, base, r, attempt + 1));
      else reject(err);
    });
    req.end(r.body);
  });
}

/** What the accepted requests of a run may have changed. */
interface Accepted {
  /** `collection/id@version` of every write an accepted answer reported. */
  readonly writes: Set<string>;
  readonly createdCollections: Set<string>;
  readonly deletedCollections: Set<string>;
  /** `priority/target` of every accepted PUT. */
  readonly balanceSettings: Set<string>;
}

const writeKey = (collection: string, id: string, version: number): string => `${collection}/${JSON.stringify(id)}@${version}`;

const decoded = (segment: string): string => {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
};

/** Records what an accepted (2xx) answer says it changed. */
function recordAccepted(acc: Accepted, r: FuzzRequest, body: any): void {
  const parts = r.url.split('?')[0]!.split('/').slice(1).map(decoded);
  const [api, resource, name, sub] = parts;
  if (api !== 'api') return;
  if (resource === 'collections' && sub === 'docs' && r.method === 'POST') for (const [id, v] of Object.entries(body.versions ?? {})) acc.writes.add(writeKey(name!, id, v as number));
  if (resource === 'collections' && sub === 'docs' && r.method === 'DELETE') acc.writes.add(writeKey(name!, body.id, body.version));
  if (resource === 'collections' && parts.length === 2 && r.method === 'POST') acc.createdCollections.add(body.name);
  if (resource === 'collections' && parts.length === 3 && r.method === 'DELETE') acc.deletedCollections.add(name!);
  if (resource === 'read-balance' && r.method === 'PUT') acc.balanceSettings.add(`${name}/${sub}`);
}

/** Every write the nodes hold: `collection/id@version` of each update-log entry and each stored entry of every replica. */
async function heldWrites(): Promise<Set<string>> {
  const out = new Set<string>();
  for (const node of g.tc.cluster.nodes) {
    for (const [c, state] of node.coordinator.collections()) {
      for (const s of state.shards) {
        const store = node.replica(c, s.name)?.store;
        if (!store) continue;
        for (const e of await store.updatesAfter(0, 10_000_000)) out.add(writeKey(c, e.id, e.version));
        for await (const e of store.entries()) out.add(writeKey(c, e.id, e.version));
      }
    }
  }
  return out;
}

interface Baseline {
  readonly writes: Set<string>;
  readonly collections: Set<string>;
  readonly balanceSettings: Set<string>;
}

const balanceKeys = async (): Promise<Set<string>> => new Set((await g.node.readBalanceSettings()).map((b) => `${b.priority}/${b.target}`));

async function baseline(): Promise<Baseline> {
  return { writes: await heldWrites(), collections: new Set(g.node.coordinator.collections().keys()), balanceSettings: await balanceKeys() };
}

/** After a run: nothing is stored that was not there before or made by an accepted request. */
async function expectOnlyAcceptedChanges(before: Baseline, acc: Accepted): Promise<void> {
  const unexplained = [...(await heldWrites())].filter((w) => !before.writes.has(w) && !acc.writes.has(w));
  expect(unexplained, 'writes no accepted answer reported (a refused request changed stored data)').toEqual([]);
  const collections = new Set(g.node.coordinator.collections().keys());
  expect([...collections].filter((c) => !before.collections.has(c) && !acc.createdCollections.has(c)), 'collections no accepted request created').toEqual([]);
  expect([...before.collections].filter((c) => !collections.has(c) && !acc.deletedCollections.has(c)), 'collections no accepted request deleted').toEqual([]);
  expect([...(await balanceKeys())].filter((b) => !before.balanceSettings.has(b) && !acc.balanceSettings.has(b)), 'read-balance settings no accepted request made').toEqual([]);
}

/** Node's limit on a request's head (request line and headers), and a generous bound on the headers this sends. */
const MAX_HEAD_BYTES = 16 * 1024;
const HEADERS_BYTES = 400;

const overSizeLimit = (r: FuzzRequest): boolean =>
  Buffer.byteLength(r.url.replace(UNSENDABLE, enc)) + HEADERS_BYTES > MAX_HEAD_BYTES || (r.body !== undefined && Buffer.byteLength(r.body) > HTTP.bodyLimit);

interface RunReport {
  sent: number;
  accepted: number;
  refused: number;
  /** Answered by Node's HTTP parser before any route (no request id): a 4xx and a closed connection. */
  byParser: number;
  /** Requests over a size limit whose connection was reset before the client could read the refusal. */
  closedOverLimit: number;
}

/** Sends `RUNS` requests of `arb` (seeded) to `url`, `CONCURRENCY` at a time over keep-alive connections, checking each answer. */
async function fuzz(url: string, arb: fc.Arbitrary<FuzzRequest>, seed: number, acc: Accepted): Promise<RunReport> {
  const base = new URL(url);
  const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const report: RunReport = { sent: 0, accepted: 0, refused: 0, byParser: 0, closedOverLimit: 0 };
  const failures: string[] = [];
  try {
    for (let chunk = 0; chunk * CHUNK < RUNS && failures.length === 0; chunk++) {
      const requests = fc.sample(arb, { seed: seed + chunk, numRuns: Math.min(CHUNK, RUNS - chunk * CHUNK) });
      let next = 0;
      const worker = async (): Promise<void> => {
        while (next < requests.length && failures.length === 0) {
          const index = next++;
          const r = requests[index]!;
          const where = `request ${chunk * CHUNK + index} (FUZZ_SEED=${seed}, chunk ${chunk} from seed ${seed + chunk}, item ${index}): ${r.method} ${r.url.slice(0, 300)}`;
          try {
            const res = await send(agent, base, r);
            report.sent++;
            const problem = judge(r, res, acc, report);
            if (problem) failures.push(`${where}: ${problem}`);
          } catch (err) {
            // A request over a size limit (its head over Node's 16 KiB: 431; its body over the
            // node's: 413) is refused before it is read whole, and the connection closed: the
            // client, still sending, may see the reset before the answer.
            if (overSizeLimit(r) && ['ECONNRESET', 'EPIPE'].includes((err as NodeJS.ErrnoException).code ?? '')) {
              report.sent++;
              report.closedOverLimit++;
            } else failures.push(`${where}: ${(err as Error).message} (${(err as NodeJS.ErrnoException).code}); the request: ${JSON.stringify({ ...r, body: r.body?.slice(0, 500) })}`);
          }
        }
      };
      await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    }
  } finally {
    agent.destroy();
  }
  expect(failures).toEqual([]);
  return report;
}

/** What is wrong with an answer, or undefined; an accepted one is recorded. */
function judge(r: FuzzRequest, res: Answer, acc: Accepted, report: RunReport): string | undefined {
  if (res.status >= 500 || res.status < 200) return `answered ${res.status}: ${res.body.slice(0, 500)}`;
  if (res.status < 400) {
    report.accepted++;
    if (r.method !== 'HEAD' && r.method !== 'GET') {
      let body: unknown;
      try {
        body = JSON.parse(res.body);
      } catch {
        return `accepted (${res.status}) with a body that is not JSON: ${res.body.slice(0, 300)}`;
      }
      recordAccepted(acc, r, body);
    }
    return undefined;
  }
  report.refused++;
  if (res.headers['x-request-id'] === undefined) {
    // Node's own parser (a header block over 16 KiB: 431; a request line it cannot read: 400)
    // answers before any route, with no body, and closes the connection.
    report.byParser++;
    return undefined;
  }
  if (r.method === 'HEAD') return undefined;
  try {
    const body = JSON.parse(res.body) as { code?: unknown; error?: unknown };
    if (typeof body.code !== 'string' || !body.code.startsWith('SHX_') || typeof body.error !== 'string') return `refused (${res.status}) without {"error", "code": "SHX_..."}: ${res.body.slice(0, 300)}`;
  } catch {
    return `refused (${res.status}) with a body that is not JSON: ${res.body.slice(0, 300)}`;
  }
  return undefined;
}

async function stillServing(url: string, key?: string): Promise<void> {
  const headers = key ? bearer(key) : {};
  expect((await fetch(`${url}/health`)).status).toBe(200);
  const got = await fetch(`${url}/api/collections/${C}/docs/keep-1`, { headers });
  expect(got.status).toBe(200);
  expect(await got.json()).toMatchObject({ id: 'keep-1', title: 'kept' });
}

const emptyAccepted = (): Accepted => ({ writes: new Set(), createdCollections: new Set(), deletedCollections: new Set(), balanceSettings: new Set() });

describe('random requests over keep-alive connections', () => {
  for (const [mode, keys, defaultSeed] of [
    ['on', true, 1313],
    ['off', false, 1314],
  ] as const) {
    it(`with API keys ${mode}: ${RUNS} of them, never a 5xx, nothing stored changes but by accepted requests`, { timeout: 300_000 }, async () => {
      const seed = SEED ?? defaultSeed;
      process.stderr.write(`[fuzz] keys ${mode}: ${RUNS} requests, FUZZ_SEED=${seed}, ${CONCURRENCY} at a time\n`);
      const before = await baseline();
      const acc = emptyAccepted();
      const t0 = Date.now();
      const report = await fuzz(keys ? g.node.httpUrl : openUrl, request(keys).filter((r) => keepsTheCollection(r) && !shortDeadline(r)), seed, acc);
      process.stderr.write(`[fuzz] keys ${mode}: ${JSON.stringify(report)}, ${acc.writes.size} writes accepted, in ${Date.now() - t0} ms\n`);
      expect(report.sent).toBe(RUNS);
      await expectOnlyAcceptedChanges(before, acc);
      await stillServing(keys ? g.node.httpUrl : openUrl, keys ? KEYS.reader : undefined);
    });
  }
});

describe('the check after a run', () => {
  it('sees a write that no accepted answer reported', async () => {
    const before = await baseline();
    const written = await open.inject({ method: 'POST', url: `/api/collections/${C}/docs`, payload: [{ id: 'unreported', title: 'x' }] });
    expect(written.statusCode, written.body).toBe(200);
    await expect(expectOnlyAcceptedChanges(before, emptyAccepted())).rejects.toThrow(/writes no accepted answer reported/);
    const reported = emptyAccepted();
    recordAccepted(reported, { method: 'POST', url: `/api/collections/${C}/docs`, body: undefined, contentType: undefined, key: undefined }, written.json());
    await expectOnlyAcceptedChanges(before, reported);
  });
});

describe('what the fuzzer found', () => {
  it('refuses a read option given twice (it arrives as a list) with 400, not 500', async () => {
    for (const url of [`/api/collections/${C}/docs/seed-1?minVersion=1&minVersion=2`, `/api/collections/${C}/export?shard=shard1&after=a&after=b`, `/api/collections/${C}/docs/seed-1?scanType=a&scanType=b`]) {
      const res = await open.inject({ method: 'GET', url });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.json().error).toContain('give it once');
    }
  });
});

describe('malformed HTTP on a real socket', () => {
  const cases = [
    'GARBAGE\r\n\r\n',
    'GET / HTTP/9.9\r\n\r\n',
    'GET /api/cluster HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n',
    'POST /api/collections/fz/docs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\nzz\r\n',
    'POST /api/collections/fz/docs HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n[{}]\n',
    `GET /api/collections/fz/search?q=${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`,
    'GET /api/collections/%ED%A0%80/docs/%2e%2e HTTP/1.1\r\nHost: x\r\n\r\n',
    'GET /api/collections/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n',
    'GET /api/collections/\u00e9\u00ff/docs/\u0080 HTTP/1.1\r\nHost: x\r\n\r\n',
    'GET /api/collections/fz/docs/a b HTTP/1.1\r\nHost: x\r\n\r\n',
    `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(20_000)}\r\n\r\n`,
  ];
  it('gets a 4xx or a closed connection for each, and the node keeps serving', async () => {
    const before = await g.stored();
    for (const raw of cases) {
      const answer = await exchange(g.node.httpUrl, raw);
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(answer)?.[1];
      if (status !== undefined) expect(Number(status), `${JSON.stringify(raw.slice(0, 80))}: ${answer.slice(0, 300)}`).toBeLessThan(500);
    }
    expect(await g.stored()).toEqual(before);
    const health = await fetch(`${g.node.httpUrl}/health`);
    expect(health.status).toBe(200);
  });
});

/** Writes `raw` and returns what the server sent before it closed the connection (or 2 s passed). */
function exchange(url: string, raw: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const socket = connect({ host: hostname, port: Number(port) }, () => socket.end(raw));
    const done = (): void => resolve(Buffer.concat(chunks).toString('latin1'));
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('close', done);
    socket.on('error', done);
    socket.setTimeout(2000, () => socket.destroy());
  });
}
