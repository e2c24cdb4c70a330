// Limits (issue 13, "what it must show" 2): each violation returns the documented 4xx with
// SHX_LIMIT_EXCEEDED (413 for the body, 429 for a connection's requests in flight), a message
// naming the limit, its value and its flag, and changes nothing: a batch with one document over
// a limit is refused whole. The node runs with small limits so that the bodies stay small.
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildHttp } from '../src/node/http/app.js';
import fc from 'fast-check';
import { LIMITS, countElements, countLines, limitRequestsPerConnection, nestsDeeper, resolveLimits, type HttpLimits } from '../src/node/http/limits.js';
import { silentLogger } from '../src/logger.js';
import { MAX_RESULT_WINDOW } from '../src/index/index.js';
import { startGuardedNode, type GuardedNode } from './support/guarded-node.js';

const C = 'lim';
const LIMITS_HERE: HttpLimits = {
  maxBatchDocs: 5,
  maxDocumentBytes: 4096,
  maxFieldsPerDocument: 10,
  maxFieldValueBytes: 1024,
  maxQueryLength: 200,
  maxQueryClauses: 8,
  maxResultWindow: 100,
  maxJsonDepth: 6,
  maxRequestsPerConnection: 2,
};
const BODY_LIMIT = 64 * 1024;

let g: GuardedNode;

beforeAll(async () => {
  g = await startGuardedNode({ bodyLimit: BODY_LIMIT, limits: LIMITS_HERE }, { collection: C });
  const seed = await post('/docs', [{ id: 'known-1', title: 'dune' }]);
  expect(seed.statusCode, seed.body).toBe(200);
});

afterAll(async () => {
  await g?.stop();
});

type Injected = Awaited<ReturnType<GuardedNode['app']['inject']>>;

function post(path: string, body: unknown, contentType = 'application/json'): Promise<Injected> {
  return g.app.inject({ method: 'POST', url: `/api/collections/${C}${path}`, headers: { 'content-type': contentType }, payload: typeof body === 'string' ? body : JSON.stringify(body) });
}

const get = (path: string): Promise<Injected> => g.app.inject({ method: 'GET', url: `/api/collections/${C}${path}` });

/** Sends a request over a limit: the status, the code, a message naming limit, value and flag; nothing stored changed; `absent` ids unknown. */
async function refused(send: () => Promise<Injected>, limit: keyof typeof LIMITS, value: number, opts: { status?: number; says?: string[]; absent?: string[] } = {}) {
  const before = await g.stored();
  const res = await send();
  const body = res.json();
  expect(res.statusCode, res.body).toBe(opts.status ?? 400);
  expect(body.code).toBe(limit === 'maxBodyBytes' ? 'SHX_BODY_TOO_LARGE' : limit === 'maxRequestsPerConnection' ? 'SHX_TOO_MANY_REQUESTS' : 'SHX_LIMIT_EXCEEDED');
  expect(body).toMatchObject({ limit, value, flag: LIMITS[limit].flag });
  expect(body.error).toContain(`the limit is ${value} `);
  expect(body.error).toContain(`set by ${LIMITS[limit].flag}`);
  for (const s of opts.says ?? []) expect(body.error).toContain(s);
  expect(await g.stored()).toEqual(before);
  for (const id of opts.absent ?? []) expect((await get(`/docs/${id}`)).statusCode, `${id} must not exist`).toBe(404);
  return body;
}

const docs = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => ({ id: `${prefix}-${i}`, title: 'ok' }));

describe('the body size (--max-body-bytes)', () => {
  it('refuses a larger body with 413', async () => {
    const big = [{ id: 'big-1', title: 'x'.repeat(BODY_LIMIT) }];
    await refused(() => post('/docs', big), 'maxBodyBytes', BODY_LIMIT, { status: 413, absent: ['big-1'] });
  });
});

describe('documents per request (--max-batch-docs)', () => {
  it('refuses a batch of more documents whole', async () => {
    await refused(() => post('/docs', docs('batch', 6)), 'maxBatchDocs', 5, { says: ['6 documents'], absent: ['batch-0', 'batch-5'] });
  });

  it('counts the documents of an NDJSON body', async () => {
    const body = docs('nbatch', 6).map((d) => JSON.stringify(d)).join('\n');
    await refused(() => post('/docs', body, 'application/x-ndjson'), 'maxBatchDocs', 5, { absent: ['nbatch-0'] });
  });

  it('takes a batch of exactly that many', async () => {
    expect((await post('/docs', docs('five', 5))).statusCode).toBe(200);
  });

  it('counts them before parsing the body: a body of many tiny documents is refused without being parsed', async () => {
    // Cut short after its sixth document: a parse would refuse it as invalid JSON.
    await refused(() => post('/docs', '[{},{},{},{},{},{},{"id":'), 'maxBatchDocs', 5, { says: ['7 documents'] });
    await refused(() => post('/docs', '{}\n{}\n\n  \n{}\n{}\n{}\n{}\n{"id":', 'application/x-ndjson'), 'maxBatchDocs', 5, { says: ['7 documents'] });
  });

  it('counts exactly the elements of any JSON array and the non-blank lines of NDJSON (brackets, commas and quotes inside strings included)', () => {
    const value = fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.parse(JSON.stringify(v)) as unknown);
    fc.assert(
      fc.property(fc.array(value, { maxLength: 30 }), fc.boolean(), (items, spaced) => {
        expect(countElements(spaced ? JSON.stringify(items, null, 2) : JSON.stringify(items))).toBe(items.length);
        expect(countLines(items.map((x) => JSON.stringify(x)).join(spaced ? '\n\n \r\n' : '\n'))).toBe(items.length);
      }),
      { numRuns: 300 },
    );
    // A line of whitespace only is skipped by the NDJSON parser, whatever whitespace it is.
    const blank = ' \t\r\u000b\u000c\u00a0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000\ufeff';
    expect(blank.trim()).toBe('');
    expect(countLines(`{}\n${blank}\n{}\n${blank}`)).toBe(2);
    expect(countElements('{"a":[1,2]}')).toBe(0);
    expect(countElements('  [ ]  ')).toBe(0);
    expect(countElements('["a,]\\"",{"x":"[,,"}]')).toBe(2);
  });
});

describe('document size (--max-document-bytes)', () => {
  it('refuses the whole batch when one document is larger, naming its position', async () => {
    const large = { id: 'large-1', a: 'x'.repeat(1000), b: 'x'.repeat(1000), c: 'x'.repeat(1000), d: 'x'.repeat(1000), e: 'x'.repeat(200) };
    const body = await refused(() => post('/docs', [...docs('dsize', 2), large, ...docs('dsize-after', 1)]), 'maxDocumentBytes', 4096, {
      says: ['document 2 is 4'],
      absent: ['dsize-0', 'dsize-1', 'large-1', 'dsize-after-0'],
    });
    expect(body.position).toBe(2);
  });

  it('counts UTF-8 bytes, not characters', async () => {
    // 5 fields of 500 two-byte characters: 2,500 characters but 5,000 bytes.
    const doc = { id: 'utf8-1', a: 'é'.repeat(500), b: 'é'.repeat(500), c: 'é'.repeat(500), d: 'é'.repeat(500), e: 'é'.repeat(500) };
    await refused(() => post('/docs', [doc]), 'maxDocumentBytes', 4096, { absent: ['utf8-1'] });
  });

  it('names the NDJSON line of the document', async () => {
    const lines = [JSON.stringify({ id: 'nd-1' }), '', JSON.stringify({ id: 'nd-2', a: 'x'.repeat(1000), b: 'x'.repeat(1000), c: 'x'.repeat(1000), d: 'x'.repeat(1000), e: 'x'.repeat(1000) })];
    const body = await refused(() => post('/docs', lines.join('\n'), 'application/x-ndjson'), 'maxDocumentBytes', 4096, { says: ['document 1 (line 3)'], absent: ['nd-1', 'nd-2'] });
    expect(body).toMatchObject({ position: 1, line: 3 });
  });
});

describe('fields per document (--max-fields-per-document)', () => {
  it('refuses a document with more fields', async () => {
    const doc: Record<string, unknown> = { id: 'fields-1' };
    for (let i = 0; i < 10; i++) doc[`f${i}`] = i;
    await refused(() => post('/docs', [{ id: 'fields-0' }, doc]), 'maxFieldsPerDocument', 10, { says: ['document 1 has 11 fields'], absent: ['fields-0', 'fields-1'] });
  });

  it('takes a document with exactly that many (the id counts)', async () => {
    const doc: Record<string, unknown> = { id: 'fields-ok' };
    for (let i = 0; i < 9; i++) doc[`f${i}`] = i;
    expect((await post('/docs', [doc])).statusCode).toBe(200);
  });
});

describe('field value size (--max-field-value-bytes)', () => {
  it('refuses a longer value, naming the field', async () => {
    const body = await refused(() => post('/docs', [{ id: 'value-1', body: 'é'.repeat(513) }]), 'maxFieldValueBytes', 1024, { says: ["field 'body' has a value of 1026 UTF-8 bytes"], absent: ['value-1'] });
    expect(body).toMatchObject({ field: 'body', position: 0 });
  });

  it('checks each value of a list', async () => {
    await refused(() => post('/docs', [{ id: 'list-1', tags: ['a', 'x'.repeat(1025)] }]), 'maxFieldValueBytes', 1024, { says: ["field 'tags'"], absent: ['list-1'] });
  });
});

describe('JSON nesting (--max-json-depth)', () => {
  const nested = (depth: number): unknown => (depth === 0 ? 1 : [nested(depth - 1)]);

  it('refuses a deeper document, naming its position, and takes one at the limit', async () => {
    // The array body is level 1, the document 2, its list 3, so [nested(4)] reaches level 7.
    const res = await refused(() => post('/docs', [{ id: 'deep-0' }, { id: 'deep-1', a: [nested(4)] }]), 'maxJsonDepth', 6, { says: ['document 1 nests deeper than 6 levels'], absent: ['deep-0', 'deep-1'] });
    expect(res.position).toBe(1);
    await refused(() => post('/docs', [{ id: 'deep-2', a: { b: nested(4) } }]), 'maxJsonDepth', 6, { absent: ['deep-2'] });
    await refused(() => post('/docs', '['.repeat(30_000) + ']'.repeat(30_000)), 'maxJsonDepth', 6);
    // At the limit: refused by the admission check (a list of lists), not by this one.
    const at = await post('/docs', [{ id: 'deep-3', a: [nested(3)] }]);
    expect(at.json().code, at.body).toBe('SHX_BAD_DOCUMENT');
  });

  it('refuses a deeper NDJSON line, naming it', async () => {
    const body = `{"id":"deep-4"}\n${JSON.stringify({ id: 'deep-5', a: nested(6) })}`;
    const res = await refused(() => post('/docs', body, 'application/x-ndjson'), 'maxJsonDepth', 6, { says: ['document 1 (line 2) nests deeper'], absent: ['deep-4', 'deep-5'] });
    expect(res.line).toBe(2);
  });

  it('refuses a deeper search body, also one nested 30,000 deep', async () => {
    await refused(() => post('/search', { q: 'dune', priority: nested(10) }), 'maxJsonDepth', 6);
    await refused(() => post('/search', '['.repeat(30_000) + ']'.repeat(30_000)), 'maxJsonDepth', 6);
  });

  it('measures a value nested a million deep without overflowing the stack', () => {
    const deep = JSON.parse('['.repeat(1_000_000) + ']'.repeat(1_000_000));
    expect(nestsDeeper(deep, 1000)).toBe(true);
    expect(nestsDeeper([[1], { a: [2] }], 3)).toBe(false);
    expect(nestsDeeper([[1], { a: [[2]] }], 3)).toBe(true);
  });
});

describe('query length (--max-query-length)', () => {
  const long = 'dune '.repeat(41);

  it('refuses a longer q, by GET and by POST', async () => {
    await refused(() => get(`/search?q=${encodeURIComponent(long)}`), 'maxQueryLength', 200, { says: ['q is 205 characters long'] });
    await refused(() => post('/search', { q: long }), 'maxQueryLength', 200);
  });

  it('refuses a longer filter, and one on an export', async () => {
    await refused(() => post('/search', { q: 'dune', filter: ['title:dune', long] }), 'maxQueryLength', 200, { says: ['filter 2 is'] });
    await refused(() => get(`/export?shard=shard1&q=${encodeURIComponent(long)}`), 'maxQueryLength', 200);
  });
});

describe('query clauses (--max-query-clauses)', () => {
  const terms = (n: number) => Array.from({ length: n }, (_, i) => `t${i}`).join(' ');

  it('refuses a query with more clauses, counting the query and its filters together', async () => {
    await refused(() => get(`/search?q=${encodeURIComponent(terms(9))}`), 'maxQueryClauses', 8, { says: ['9 clauses'] });
    await refused(() => post('/search', { q: terms(5), filter: `title:(${terms(4)})` }), 'maxQueryClauses', 8);
    await refused(() => get(`/export?shard=shard1&q=${encodeURIComponent(`(${terms(3)}) AND (${terms(6)})`)}`), 'maxQueryClauses', 8);
  });

  it('takes a query of exactly that many', async () => {
    expect((await post('/search', { q: terms(5), filter: `title:(${terms(3)})` })).statusCode).toBe(200);
  });
});

describe('the result window (--max-result-window)', () => {
  it('refuses offset + limit above it, with the default limit counted', async () => {
    await refused(() => get('/search?q=dune&offset=95&limit=6'), 'maxResultWindow', 100, { says: ['offset + limit is 101'] });
    await refused(() => post('/search', { q: 'dune', offset: 91 }), 'maxResultWindow', 100, { says: ['offset + limit is 101'] });
    expect((await get('/search?q=dune&offset=90&limit=10')).statusCode).toBe(200);
  });
});

describe('requests in flight per connection (--max-requests-per-connection)', () => {
  it('answers pipelined requests past the limit with 429 and Retry-After, the others as usual', async () => {
    // Two reads held in the read balancer's queue (no slots for their priority) keep the
    // connection at its limit of 2 while the next two arrive.
    await g.node.putReadBalance({ priority: 'held', target: 'primary', weight: 1, slots: 0 });
    try {
      const held = `GET /api/collections/${C}/search?q=dune&priority=held&timeoutMs=500 HTTP/1.1\r\nHost: x\r\n\r\n`;
      const live = 'GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n';
      const last = 'GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
      const text = await rawExchange(g.node.httpUrl, held + held + live + last);
      const statuses = [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
      expect(statuses, text).toHaveLength(4);
      expect(statuses.slice(2)).toEqual([429, 429]);
      expect(statuses.slice(0, 2).every((s) => s !== 429)).toBe(true);
      expect(text).toContain('SHX_TOO_MANY_REQUESTS');
      expect(text).toContain('--max-requests-per-connection');
      expect(text.toLowerCase()).toContain('retry-after: 1');
    } finally {
      await g.node.eraseReadBalance('held');
    }
  });

  it('counts per connection, and frees a place when a response closes', () => {
    const hook = limitRequestsPerConnection(2);
    const socketA = {};
    const socketB = {};
    const closers: Array<() => void> = [];
    const call = (socket: object): unknown => {
      let result: unknown = 'passed';
      const reply = { raw: { once: (_e: string, fn: () => void) => closers.push(fn) } };
      hook({ raw: { socket } } as never, reply as never, (err?: unknown) => (result = err ?? 'passed'));
      return result;
    };
    expect(call(socketA)).toBe('passed');
    expect(call(socketA)).toBe('passed');
    expect(call(socketA)).toMatchObject({ code: 'SHX_TOO_MANY_REQUESTS', status: 429 });
    expect(call(socketB)).toBe('passed');
    closers[0]!();
    expect(call(socketA)).toBe('passed');
  });
});

describe('the limits themselves', () => {
  it('default to the documented values', () => {
    expect(resolveLimits()).toEqual({
      maxBodyBytes: 100 * 1024 * 1024,
      maxBatchDocs: 10_000,
      maxDocumentBytes: 10 * 1024 * 1024,
      maxFieldsPerDocument: 1000,
      maxFieldValueBytes: 1024 * 1024,
      maxQueryLength: 65_536,
      maxQueryClauses: 1024,
      maxResultWindow: MAX_RESULT_WINDOW,
      maxJsonDepth: 20,
      maxRequestsPerConnection: 100,
    });
  });

  it('refuse a value out of bounds, naming the flag (the result window never above the index bound)', async () => {
    expect(() => resolveLimits({ maxResultWindow: MAX_RESULT_WINDOW + 1 })).toThrow(expect.objectContaining({ code: 'SHX_BAD_CONFIG', message: expect.stringContaining('--max-result-window must be an integer from 1 to 10000') }));
    expect(() => resolveLimits({ maxJsonDepth: 0.5 })).toThrow(/--max-json-depth/);
    await expect(buildHttp(g.node, { bodyLimit: 10, logger: silentLogger() })).rejects.toThrow(/--max-body-bytes must be an integer from 1024/);
  });
});

/** Writes `requests` on one connection and returns everything the server sent until it closed. */
function rawExchange(url: string, requests: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = connect({ host: hostname, port: Number(port) }, () => socket.write(requests));
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('end', () => resolve(Buffer.concat(chunks).toString()));
    socket.on('error', reject);
    socket.setTimeout(20_000, () => socket.destroy(new Error('no answer within 20 s')));
  });
}
