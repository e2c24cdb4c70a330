// Fuzzing the HTTP API (issue 13, "what it must show" 3): seeded random requests (bad JSON,
// wrong types, huge and deeply nested values, odd Unicode, `../` and `%2e%2e` in collection
// names and ids, bad query syntax, bad parameters, every content type, keys of every role and
// none) against a real node, with API keys on and off: never a 5xx, never a crash, and a
// refused request changes nothing stored. Bounded (a few hundred runs each) to stay fast; the
// seed makes a failure reproducible (fast-check prints the counterexample and its path).
import { connect } from 'node:net';
import fc from 'fast-check';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildHttp } from '../src/node/http/app.js';
import { silentLogger } from '../src/logger.js';
import { KEYS, bearer, keyEntries, startGuardedNode, type GuardedNode } from './support/guarded-node.js';

const C = 'fz';
// The 10,000 (and other seeds) on demand: FUZZ_RUNS=5000 FUZZ_SEED=7 npx vitest run test/http-fuzz.test.ts
const RUNS = Number(process.env.FUZZ_RUNS ?? 300);
const SEED = process.env.FUZZ_SEED === undefined ? undefined : Number(process.env.FUZZ_SEED);
const HTTP = {
  bodyLimit: 256 * 1024,
  limits: { maxBatchDocs: 50, maxDocumentBytes: 64 * 1024, maxFieldsPerDocument: 40, maxFieldValueBytes: 16 * 1024, maxQueryLength: 2000, maxQueryClauses: 64, maxJsonDepth: 12 },
};

let g: GuardedNode;
let open: FastifyInstance;

beforeAll(async () => {
  g = await startGuardedNode({ ...HTTP, apiKeys: keyEntries() }, { collection: C, durability: 'async', fields: { title: 'text', n: 'number', tag: 'keyword', at: 'date' } });
  open = await buildHttp(g.node, { ...HTTP, logger: silentLogger() });
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

/** The collection the run is about is never deleted (by the keys that may). */
const keepsTheCollection = (r: FuzzRequest): boolean => !(r.method === 'DELETE' && /^\/api\/collections\/fz\/?(\?|$)/.test(r.url));

async function check(app: FastifyInstance, r: FuzzRequest): Promise<void> {
  const before = await g.stored();
  let res;
  try {
    res = await app.inject({
      method: r.method as 'GET',
      url: r.url,
      headers: { ...(r.contentType !== undefined && { 'content-type': r.contentType }), ...(r.key !== undefined && bearer(r.key)) },
      ...(r.body !== undefined && { payload: r.body }),
    });
  } catch (err) {
    // light-my-request refuses some URLs before any server code runs: not the node's answer.
    if (err instanceof TypeError || (err as { code?: string }).code === 'ERR_INVALID_URL') return;
    throw err;
  }
  expect(res.statusCode, `${r.method} ${r.url}: ${res.body.slice(0, 500)}`).toBeLessThan(500);
  if (res.statusCode >= 400) {
    if (r.method !== 'HEAD') expect(res.json(), res.body.slice(0, 500)).toMatchObject({ code: expect.stringMatching(/^SHX_/), error: expect.any(String) });
    expect(await g.stored(), `${r.method} ${r.url} was refused (${res.statusCode}) but changed what is stored`).toEqual(before);
  }
}

async function stillServing(app: FastifyInstance, key?: string): Promise<void> {
  const headers = key ? bearer(key) : {};
  expect((await app.inject({ method: 'GET', url: '/health' })).statusCode).toBe(200);
  const got = await app.inject({ method: 'GET', url: `/api/collections/${C}/docs/keep-1`, headers });
  expect(got.statusCode, got.body).toBe(200);
  expect(got.json()).toMatchObject({ id: 'keep-1', title: 'kept' });
}

describe('random requests', () => {
  it(`with API keys on: ${RUNS} of them, never a 5xx, a refused one changes nothing`, async () => {
    await fc.assert(fc.asyncProperty(request(true).filter(keepsTheCollection), (r) => check(g.app, r)), { seed: SEED ?? 1313, numRuns: RUNS, endOnFailure: true });
    await stillServing(g.app, KEYS.reader);
  });

  it(`with API keys off: ${RUNS} of them, never a 5xx, a refused one changes nothing`, async () => {
    await fc.assert(fc.asyncProperty(request(false).filter(keepsTheCollection), (r) => check(open, r)), { seed: SEED ?? 1314, numRuns: RUNS, endOnFailure: true });
    await stillServing(open);
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
