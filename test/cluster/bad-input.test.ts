// Issue 2, "what it must show" 6: every kind of bad input gets a clear 4xx over real HTTP,
// with a message that says what is wrong, and changes no stored data. "No change" is checked
// on every replica of the cluster (live docs and newest version, read in-process from the
// dev cluster), on the known documents (read back over HTTP) and on the collection list;
// ids of a rejected batch must then be unknown.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterView, http, startCluster, type HttpResult, type TestCluster } from '../support/cluster.js';

const C = 'bi';
const BODY_LIMIT = 16 * 1024;
const KNOWN = [
  { id: 'known-1', title: 'one' },
  { id: 'known-2', title: 'two', tags: ['a', 'b'] },
  { id: 'tenant!known-3', title: 'three' },
  { id: 'known-é', title: 'four' },
];

let tc: TestCluster;
let base: string;

const docsUrl = (query = ''): string => `${base}/api/collections/${C}/docs${query}`;
const docUrl = (id: string, query = ''): string => `${base}/api/collections/${C}/docs/${encodeURIComponent(id)}${query}`;
const ndjson = { 'content-type': 'application/x-ndjson' };

/** Everything stored in the cluster, as one comparable value. */
async function storedState(): Promise<unknown> {
  const replicas: Record<string, unknown> = {};
  for (const node of tc.cluster.nodes) {
    for (const [c, state] of node.coordinator.collections()) {
      for (const s of state.shards) {
        const r = node.replica(c, s.name);
        if (r) replicas[`${node.name}/${c}/${s.name}`] = { docs: r.store.docCount, maxVersion: r.store.maxVersion };
      }
    }
  }
  const known = await Promise.all(KNOWN.map(async (d) => (await http('GET', docUrl(d.id))).body));
  const collections = Object.keys((await clusterView(base)).collections).sort();
  return { replicas, known, collections };
}


interface Expectation {
  readonly status: number;
  /** Substrings the `error` message must contain. */
  readonly says: readonly string[];
  /** Ids of the rejected request that must not exist afterwards. */
  readonly absent?: readonly string[];
}

/** Sends a bad request and checks its status, its message, and that nothing stored changed. */
async function rejected(send: () => Promise<HttpResult>, expected: Expectation): Promise<HttpResult> {
  const before = await storedState();
  const res = await send();
  expect(res.status, JSON.stringify(res.body)).toBe(expected.status);
  expect(typeof res.body?.error, JSON.stringify(res.body)).toBe('string');
  for (const s of expected.says) expect(res.body.error).toContain(s);
  expect(await storedState()).toEqual(before);
  for (const id of expected.absent ?? []) expect((await http('GET', docUrl(id))).status, `${id} must not exist`).toBe(404);
  return res;
}

beforeAll(async () => {
  tc = await startCluster({
    nodes: 2,
    collection: { name: C, numShards: 2, replicationFactor: 2, router: 'compositeId' },
    nodeOptions: { bodyLimit: BODY_LIMIT },
  });
  base = tc.urls[0]!;
  // Replicas recover from their leader at start; until then they are not counted as active.
  await tc.cluster.waitAllActive(30_000);
  const res = await http('POST', docsUrl(), KNOWN);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expect(res.body.rf).toBe(2);
});

afterAll(async () => {
  await tc?.stop();
});

describe('a body that is not JSON or NDJSON', () => {
  it('is refused with 400 when it is not valid JSON', async () => {
    await rejected(() => http('POST', docsUrl(), '[{"id": "nj-1", "title": "x"},'), { status: 400, says: ['not valid JSON'], absent: ['nj-1'] });
  });

  it('is refused with 400 when it is empty', async () => {
    await rejected(() => http('POST', docsUrl(), ''), { status: 400, says: ['empty'] });
  });

  it('is refused with 415 when its content type is neither JSON nor NDJSON', async () => {
    await rejected(() => http('POST', docsUrl(), '{"id":"ct-1"}', { 'content-type': 'text/plain' }), {
      status: 415,
      says: ['application/json', 'application/x-ndjson'],
      absent: ['ct-1'],
    });
  });

  it('is refused with 400 naming the bad line of an NDJSON body', async () => {
    const body = '{"id":"nd-1"}\n{"id":"nd-2"}\n{"id": nd-3}\n{"id":"nd-4"}\n';
    const res = await rejected(() => http('POST', docsUrl(), body, ndjson), { status: 400, says: ['line 3', 'not valid JSON'], absent: ['nd-1', 'nd-2', 'nd-4'] });
    expect(res.body.line).toBe(3);
  });

  it('counts blank lines when naming the bad line of an NDJSON body', async () => {
    const body = '\n{"id":"nd-5"}\n\n{"id":"nd-6"\n';
    await rejected(() => http('POST', docsUrl(), body, ndjson), { status: 400, says: ['line 4'], absent: ['nd-5'] });
  });
});

describe('a document that is not a JSON object', () => {
  const cases: Array<[string, string, string]> = [
    ['an array', '[{"id":"na-1"},[1,2]]', 'document 1 is an array'],
    ['a string', '[{"id":"na-2"},"text"]', 'document 1 is a string'],
    ['null', '[{"id":"na-3"},null]', 'document 1 is null'],
    ['a number', '[{"id":"na-4"},42]', 'document 1 is a number'],
    ['a boolean', '[{"id":"na-5"},true]', 'document 1 is a boolean'],
  ];
  for (const [what, body, says] of cases) {
    it(`is refused with 400 when it is ${what}`, async () => {
      const absent = [/"id":"(na-\d)"/.exec(body)![1]!];
      const res = await rejected(() => http('POST', docsUrl(), body), { status: 400, says: [says, 'not a JSON object'], absent });
      expect(res.body.position).toBe(1);
    });
  }

  it('is refused with 400 when an NDJSON line is not an object', async () => {
    await rejected(() => http('POST', docsUrl(), '{"id":"na-6"}\n[1,2]\n', ndjson), { status: 400, says: ['document 1 (line 2) is an array'], absent: ['na-6'] });
  });

  for (const [what, body] of [
    ['a string', '"just text"'],
    ['a number', '42'],
    ['null', 'null'],
  ] as const) {
    it(`is refused with 400 when the whole body is ${what}`, async () => {
      await rejected(() => http('POST', docsUrl(), body), { status: 400, says: ['JSON array of documents'] });
    });
  }
});

describe('document ids', () => {
  const cases: Array<[string, unknown, string]> = [
    ['missing', { title: 'no id' }, 'has no "id"'],
    ['null', { id: null }, 'has no "id"'],
    ['a number', { id: 7 }, 'has an "id" that is a number, not a string'],
    ['a boolean', { id: true }, 'has an "id" that is a boolean, not a string'],
    ['an array', { id: ['a'] }, 'has an "id" that is an array, not a string'],
    ['an object', { id: { a: 1 } }, 'has an "id" that is an object, not a string'],
    ['empty', { id: '' }, 'has an empty "id"'],
  ];
  for (const [what, doc, says] of cases) {
    it(`refuses an id that is ${what}`, async () => {
      const res = await rejected(() => http('POST', docsUrl(), [{ id: 'idc-ok' }, doc]), { status: 400, says: [`document 1 ${says}`], absent: ['idc-ok'] });
      expect(res.body.position).toBe(1);
    });
  }

  for (const [what, id, bytes] of [
    ['513 ASCII characters', 'a'.repeat(513), 513],
    ['257 two-byte characters', 'é'.repeat(257), 514],
    ['129 characters outside the BMP (258 UTF-16 units)', '😀'.repeat(129), 516],
  ] as const) {
    it(`refuses an id over 512 UTF-8 bytes: ${what}`, async () => {
      await rejected(() => http('POST', docsUrl(), [{ id: 'long-ok' }, { id }]), {
        status: 400,
        says: ['document 1', `${bytes} UTF-8 bytes`, 'limit is 512'],
        absent: ['long-ok'],
      });
    });
  }

  for (const [what, raw, index] of [
    ['a lone high surrogate', 'ab\\ud800cd', 2],
    ['a lone low surrogate', '\\udc00', 0],
    ['a reversed surrogate pair', 'x\\udc00\\ud800', 1],
    ['a high surrogate at the end', 'abc\\ud83d', 3],
  ] as const) {
    it(`refuses an id with ${what}`, async () => {
      await rejected(() => http('POST', docsUrl(), `[{"id":"sur-ok"},{"id":"${raw}"}]`), {
        status: 400,
        says: ['document 1', 'lone UTF-16 surrogate', `index ${index}`],
        absent: ['sur-ok'],
      });
    });
  }

  for (const [what, encoded] of [
    ['a lone surrogate (encoded as its 3 bytes)', '%ED%A0%80'],
    ['a truncated percent-escape', '%E0%A4%A'],
  ] as const) {
    it(`refuses a document path with ${what}`, async () => {
      await rejected(() => http('GET', `${base}/api/collections/${C}/docs/${encoded}`), { status: 400, says: ['percent-encoded UTF-8'] });
      await rejected(() => http('DELETE', `${base}/api/collections/${C}/docs/${encoded}`), { status: 400, says: ['percent-encoded UTF-8'] });
    });
  }

  it('refuses a get or delete by an id over 512 UTF-8 bytes', async () => {
    const id = 'g'.repeat(513);
    await rejected(() => http('GET', docUrl(id)), { status: 400, says: ['513 UTF-8 bytes'] });
    await rejected(() => http('DELETE', docUrl(id)), { status: 400, says: ['513 UTF-8 bytes'] });
  });
});

describe('a body over the configured limit', () => {
  const big = Array.from({ length: 200 }, (_, i) => ({ id: `big-${i}`, text: 'x'.repeat(100) }));

  it('is refused with 413 as JSON', async () => {
    const body = JSON.stringify(big);
    expect(body.length).toBeGreaterThan(BODY_LIMIT);
    await rejected(() => http('POST', docsUrl(), body), { status: 413, says: ['too large', 'split the batch'], absent: ['big-0', 'big-199'] });
  });

  it('is refused with 413 as NDJSON', async () => {
    const body = big.map((d) => JSON.stringify(d)).join('\n');
    await rejected(() => http('POST', docsUrl(), body, ndjson), { status: 413, says: ['too large'], absent: ['big-0', 'big-199'] });
  });
});

describe('an unknown collection', () => {
  it('is 404 when posting documents', async () => {
    await rejected(() => http('POST', `${base}/api/collections/nope/docs`, [{ id: 'uc-1' }]), { status: 404, says: ["collection 'nope' does not exist"] });
  });

  it('is 404 when reading, deleting or committing', async () => {
    await rejected(() => http('GET', `${base}/api/collections/nope/docs/known-1`), { status: 404, says: ["collection 'nope' does not exist"] });
    await rejected(() => http('DELETE', `${base}/api/collections/nope/docs/known-1`), { status: 404, says: ["collection 'nope' does not exist"] });
    await rejected(() => http('POST', `${base}/api/collections/nope/commit`), { status: 404, says: ["collection 'nope' does not exist"] });
  });

  it('is 404 when deleting it', async () => {
    await rejected(() => http('DELETE', `${base}/api/collections/nope`), { status: 404, says: ["collection 'nope' does not exist"] });
  });
});

describe('collection definitions', () => {
  const create = (body: unknown): Promise<HttpResult> => http('POST', `${base}/api/collections`, body);

  for (const name of ['bad name', 'dot.ted', 'slash/ed', '', 'x'.repeat(65), 'é', '..', 'a:b']) {
    it(`refuses the collection name ${JSON.stringify(name.length > 20 ? `${name.slice(0, 8)}...(${name.length})` : name)}`, async () => {
      await rejected(() => create({ name, numShards: 1, replicationFactor: 1 }), { status: 400, says: ['name', '[A-Za-z0-9_-]{1,64}'] });
    });
  }

  it('refuses a collection name that is not a string', async () => {
    await rejected(() => create({ name: 42, numShards: 1 }), { status: 400, says: ['name'] });
  });

  it('refuses a collection name outside the pattern in a document path', async () => {
    await rejected(() => http('POST', `${base}/api/collections/bad.name/docs`, [{ id: 'cn-1' }]), { status: 400, says: ['[A-Za-z0-9_-]{1,64}'] });
    await rejected(() => http('GET', `${base}/api/collections/${'y'.repeat(65)}/docs/known-1`), { status: 400, says: ['[A-Za-z0-9_-]{1,64}'] });
  });

  for (const numShards of [0, 257, 1.5, -1, '2', null]) {
    it(`refuses numShards ${JSON.stringify(numShards)}`, async () => {
      await rejected(() => create({ name: 'ns', numShards, replicationFactor: 1 }), { status: 400, says: ['numShards'] });
    });
  }

  it('refuses a definition without numShards', async () => {
    await rejected(() => create({ name: 'ns' }), { status: 400, says: ['numShards'] });
  });

  it('refuses a replicationFactor larger than the live nodes', async () => {
    await rejected(() => create({ name: 'rf3', numShards: 1, replicationFactor: 3 }), {
      status: 400,
      says: ['replicationFactor 3', '2 live data node'],
    });
  });

  for (const replicationFactor of [0, 1.5, 'two']) {
    it(`refuses replicationFactor ${JSON.stringify(replicationFactor)}`, async () => {
      await rejected(() => create({ name: 'rfbad', numShards: 1, replicationFactor }), { status: 400, says: ['replicationFactor'] });
    });
  }

  it('refuses an unknown router', async () => {
    await rejected(() => create({ name: 'rt', numShards: 1, router: 'random' }), { status: 400, says: ['unknown router', '"random"'] });
  });

  it('refuses unknown fields in a definition', async () => {
    await rejected(() => create({ name: 'uf', numShards: 1, shards: 2 }), { status: 400, says: ['shards'] });
  });

  it('refuses a definition that is not an object', async () => {
    await rejected(() => create([{ name: 'arr', numShards: 1 }]), { status: 400, says: ['bad collection definition'] });
  });

  it('refuses to create a collection that exists', async () => {
    await rejected(() => create({ name: C, numShards: 1, replicationFactor: 1 }), { status: 409, says: [`'${C}' already exists`] });
  });
});

describe('prototype keys', () => {
  const cases: Array<[string, string]> = [
    ['a top-level __proto__ key', '[{"id":"pp-1","__proto__":{"polluted":"yes"}}]'],
    ['a nested __proto__ key', '[{"id":"pp-2","a":{"b":{"__proto__":{"polluted":"yes"}}}}]'],
    ['a constructor.prototype key', '[{"id":"pp-3","constructor":{"prototype":{"polluted":"yes"}}}]'],
  ];
  for (const [what, body] of cases) {
    it(`refuses a document with ${what} and pollutes nothing`, async () => {
      const id = /"id":"(pp-\d)"/.exec(body)![1]!;
      await rejected(() => http('POST', docsUrl(), body), { status: 400, says: ['prototype'], absent: [id] });
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      expect(Object.prototype).not.toHaveProperty('polluted');
    });

    it(`refuses an NDJSON line with ${what} and pollutes nothing`, async () => {
      const id = /"id":"(pp-\d)"/.exec(body)![1]!;
      const line = body.slice(1, -1);
      await rejected(() => http('POST', docsUrl(), `{"id":"pp-ok"}\n${line}\n`, ndjson), { status: 400, says: ['line 2', 'prototype'], absent: [id, 'pp-ok'] });
      expect(Object.prototype).not.toHaveProperty('polluted');
    });
  }

  it('refuses a collection definition with a __proto__ key and pollutes nothing', async () => {
    await rejected(() => http('POST', `${base}/api/collections`, '{"name":"pp","numShards":1,"__proto__":{"replicationFactor":5}}'), {
      status: 400,
      says: ['prototype'],
    });
    expect(Object.prototype).not.toHaveProperty('replicationFactor');
  });
});

describe('a batch with one bad document', () => {
  it('is rejected whole, naming the position of the bad document', async () => {
    const res = await rejected(() => http('POST', docsUrl(), [{ id: 'bb-1' }, { id: 'bb-2' }, { title: 'no id' }, { id: 'bb-4' }]), {
      status: 400,
      says: ['document 2', 'has no "id"', 'nothing was written'],
      absent: ['bb-1', 'bb-2', 'bb-4'],
    });
    expect(res.body.position).toBe(2);
  });

  it('is rejected whole when the bad document comes last, even in a large batch', async () => {
    const docs: unknown[] = Array.from({ length: 99 }, (_, i) => ({ id: `bl-${i}` }));
    docs.push({ id: '' });
    const res = await rejected(() => http('POST', docsUrl(), docs), { status: 400, says: ['document 99'], absent: ['bl-0', 'bl-50', 'bl-98'] });
    expect(res.body.position).toBe(99);
  });

  it('is rejected whole when the bad document comes first', async () => {
    await rejected(() => http('POST', docsUrl(), [{ id: 7 }, { id: 'bf-1' }]), { status: 400, says: ['document 0'], absent: ['bf-1'] });
  });

  it('is rejected whole when a document sets a reserved field', async () => {
    await rejected(() => http('POST', docsUrl(), [{ id: 'rs-1' }, { id: 'rs-2', _version_: 1 }]), {
      status: 400,
      says: ['document 1', 'reserved field'],
      absent: ['rs-1', 'rs-2'],
    });
  });

  it('does not overwrite known documents it names', async () => {
    await rejected(() => http('POST', docsUrl(), [{ id: 'known-1', title: 'overwritten' }, { id: '' }]), { status: 400, says: ['document 1'] });
    expect((await http('GET', docUrl('known-1'))).body.title).toBe('one');
  });
});

describe('query parameters', () => {
  for (const minRf of ['0', '-1', 'abc', '1.5', '']) {
    it(`refuses minRf=${JSON.stringify(minRf)} on a write, writing nothing`, async () => {
      await rejected(() => http('POST', docsUrl(`?minRf=${encodeURIComponent(minRf)}`), [{ id: 'mr-1' }]), {
        status: 400,
        says: ['minRf must be a positive integer'],
        absent: ['mr-1'],
      });
    });
  }

  it('refuses a bad minRf on a delete, deleting nothing', async () => {
    await rejected(() => http('DELETE', docUrl('known-1', '?minRf=zero')), { status: 400, says: ['minRf'] });
  });

  for (const timeoutMs of ['0', '-5', 'soon', '1.5', '', '600001']) {
    it(`refuses timeoutMs=${JSON.stringify(timeoutMs)} on a write, writing nothing`, async () => {
      await rejected(() => http('POST', docsUrl(`?timeoutMs=${encodeURIComponent(timeoutMs)}`), [{ id: 'to-1' }]), {
        status: 400,
        says: ['timeoutMs must be an integer from 1 to 600000'],
        absent: ['to-1'],
      });
    });
  }

  it('refuses a bad timeoutMs on a delete, deleting nothing', async () => {
    await rejected(() => http('DELETE', docUrl('known-1', '?timeoutMs=later')), { status: 400, says: ['timeoutMs'] });
  });

  it('takes a good timeoutMs on a write', async () => {
    const res = await http('POST', docsUrl('?timeoutMs=30000'), [{ id: 'to-ok' }]);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
  });

  for (const distrib of ['yes', '1', 'TRUE', '']) {
    it(`refuses distrib=${JSON.stringify(distrib)}`, async () => {
      await rejected(() => http('GET', docUrl('known-1', `?distrib=${distrib}`)), { status: 400, says: ['distrib must be true or false'] });
    });
  }
});

describe('unknown routes', () => {
  for (const [method, path] of [
    ['GET', '/api/nothing'],
    ['POST', `/api/collections/${C}`],
    ['PUT', `/api/collections/${C}/docs`],
    ['GET', `/api/collections/${C}/docs`],
  ] as const) {
    it(`answers 404 for ${method} ${path}`, async () => {
      await rejected(() => http(method, `${base}${path}`, method === 'GET' ? undefined : [{ id: 'ur-1' }]), {
        status: 404,
        says: [`no route ${method} ${path}`],
        absent: ['ur-1'],
      });
    });
  }
});

describe('what is accepted at the limits', () => {
  it('accepts ids of exactly 512 UTF-8 bytes and reads them back', async () => {
    const ids = ['a'.repeat(512), 'é'.repeat(256), '😀'.repeat(128)];
    const res = await http('POST', docsUrl(), ids.map((id) => ({ id, title: 'edge' })));
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.added).toBe(3);
    for (const id of ids) {
      const got = await http('GET', docUrl(id));
      expect(got.status, JSON.stringify(got.body)).toBe(200);
      expect(got.body.id).toBe(id);
      expect(got.body._version_).toBe(res.body.versions[id]);
    }
  });

  it('reads back and deletes ids with characters that need escaping in a path', async () => {
    const ids = ['tenant/8!doc', 'a/b/c', 'sp ace', 'q?x=1', 'h#frag', 'pct%20', 'plus+', 'amp&'];
    const res = await http('POST', docsUrl(), ids.map((id) => ({ id })));
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    for (const id of ids) {
      const got = await http('GET', docUrl(id));
      expect(got.status, id).toBe(200);
      expect(got.body.id).toBe(id);
      expect((await http('DELETE', docUrl(id))).body.version, id).toBeGreaterThan(res.body.versions[id]);
      expect((await http('GET', docUrl(id))).status, id).toBe(404);
    }
  });

  it('accepts a collection name of 64 characters from the allowed set', async () => {
    const name = 'Ab_-9'.repeat(13).slice(0, 64);
    const res = await http('POST', `${base}/api/collections`, { name, numShards: 1, replicationFactor: 1 });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    expect(Object.keys((await clusterView(base)).collections)).toContain(name);
  });

  it('stores a document id "__proto__" as plain data', async () => {
    const res = await http('POST', docsUrl(), [{ id: '__proto__', title: 'plain' }]);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(Object.hasOwn(res.body.versions, '__proto__')).toBe(true);
    const got = await http('GET', docUrl('__proto__'));
    expect(got.status).toBe(200);
    expect(got.body.title).toBe('plain');
    const del = await http('DELETE', docUrl('__proto__'));
    expect(del.status).toBe(200);
    expect(typeof del.body.version).toBe('number');
    expect(Object.prototype).not.toHaveProperty('title');
  });

  it('lists a collection named "__proto__" as plain data', async () => {
    const res = await http('POST', `${base}/api/collections`, { name: '__proto__', numShards: 1, replicationFactor: 1 });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    const raw = await (await fetch(`${base}/api/cluster`)).text();
    expect(Object.hasOwn(JSON.parse(raw).collections, '__proto__')).toBe(true);
    expect(Object.prototype).not.toHaveProperty('shards');
  });
});
