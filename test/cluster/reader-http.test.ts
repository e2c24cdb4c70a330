// A snapshot reader's own HTTP port (issue 13): with API keys, everything but /health needs a
// valid key (the node's guard, src/node/http/auth.ts); per-route series as on the nodes; and the
// reader's cache series (hits, misses, copies, evictions) move as eventual reads use the cache.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { routeId } from '../../src/hashrange/index.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';
import { KEYS, bearer, keyEntries } from '../support/guarded-node.js';
import { pollUntil } from '../support/poll.js';

const C = 'rh';
// Two ids on different shards of a 2-shard collection.
const A = 'a';
const B = ['b', 'c', 'd', 'e', 'f', 'g'].find((id) => routeId(id, 2, 'compositeId').shard !== routeId(A, 2, 'compositeId').shard)!;

/** The value of the sample `name{labels}` in Prometheus text (labels as written, '' for none). */
function sample(text: string, name: string, labels = ''): number | undefined {
  for (const line of text.split('\n')) {
    const m = /^(\w+)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m && m[1] === name && (m[2] ?? '') === labels) return Number(m[3]);
  }
  return undefined;
}

describe('a snapshot reader with API keys', () => {
  let tc: TestCluster;
  let reader: string;
  let node: string;
  const metrics = async (): Promise<string> => (await http<string>('GET', `${reader}/metrics`, undefined, bearer(KEYS.reader))).body;
  const eventualGet = async (id: string): Promise<void> => {
    const r = await http('GET', `${node}/api/collections/${C}/docs/${id}?consistency=eventual`, undefined, bearer(KEYS.reader));
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(JSON.parse(r.headers.get('x-shardex-served-by') ?? 'null')).toMatchObject({ node: 'reader1', fallback: false });
  };

  beforeAll(async () => {
    tc = await startCluster({
      nodes: 1,
      readers: 1,
      nodeOptions: { http: { apiKeys: keyEntries() } },
      // A budget smaller than one copy: a second cached shard evicts the least recently used one.
      readerOptions: { apiKeys: keyEntries(), diskBudgetBytes: 1 },
      collection: { name: C, numShards: 2, replicationFactor: 1, router: 'compositeId', autoCommitMs: 0 },
    });
    node = tc.urls[0]!;
    reader = tc.cluster.readers[0]!.httpUrl;
    const added = await http('POST', `${node}/api/collections/${C}/docs`, [{ id: A, title: 'one' }, { id: B, title: 'two' }], bearer(KEYS.writer));
    expect(added.status, JSON.stringify(added.body)).toBe(200);
    expect((await http('POST', `${node}/api/collections/${C}/commit`, undefined, bearer(KEYS.writer))).status).toBe(200);
  });
  afterAll(async () => tc?.stop());

  it('answers /health without a key', async () => {
    const r = await http('GET', `${reader}/health`);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ status: 'ok', reader: 'reader1' });
  });

  for (const path of ['/api/reader', '/metrics', '/no/such/path']) {
    it(`refuses ${path} without a key and with a wrong one (401, Bearer challenge)`, async () => {
      for (const headers of [{}, bearer('wrong-key'), { authorization: 'Basic Zm9vOmJhcg==' }]) {
        const r = await http('GET', `${reader}${path}`, undefined, headers);
        expect(r.status).toBe(401);
        expect(r.body).toMatchObject({ code: 'SHX_UNAUTHORIZED', error: expect.stringContaining('Authorization: Bearer KEY') });
        expect(r.headers.get('www-authenticate')).toBe('Bearer realm="shardex"');
      }
    });
  }

  it('serves its status and metrics to a key of any role, and says 404 for a path that is no route', async () => {
    for (const key of Object.values(KEYS)) {
      const status = await http('GET', `${reader}/api/reader`, undefined, bearer(key));
      expect(status.status).toBe(200);
      expect(status.body).toMatchObject({ name: 'reader1', group: 'default' });
      expect((await http('GET', `${reader}/metrics`, undefined, bearer(key))).status).toBe(200);
    }
    const missing = await http('GET', `${reader}/no/such/path`, undefined, bearer(KEYS.reader));
    expect(missing.status).toBe(404);
    expect(missing.body).toMatchObject({ code: 'SHX_NOT_FOUND' });
  });

  it('counts its requests per route and status, refusals included', async () => {
    await http('GET', `${reader}/api/reader`);
    await http('GET', `${reader}/api/reader`, undefined, bearer(KEYS.admin));
    // A request is counted once its answer is sent, which the client may see first: wait for the counts.
    const counted = (text: string): boolean => ['401', '200'].every((status) => (sample(text, 'shardex_http_requests_total', `{method="GET",route="/api/reader",status_code="${status}"}`) ?? 0) >= 1);
    const text = await pollUntil('the requests counted', async () => {
      const t = await metrics();
      return counted(t) ? t : undefined;
    }, { ms: 10_000, everyMs: 20 });
    expect(sample(text, 'shardex_http_requests_total', '{method="GET",route="/api/reader",status_code="401"}')).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'shardex_http_requests_total', '{method="GET",route="/api/reader",status_code="200"}')).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'shardex_http_request_duration_seconds_count', '{method="GET",route="/api/reader",status_code="200"}')).toBeGreaterThanOrEqual(1);
    expect(text).toContain('route="(unmatched)"');
  });

  it('counts cache misses and copies, hits, and evictions past the disk budget', async () => {
    const at = async (): Promise<Record<string, number>> => {
      const text = await metrics();
      const names = ['cache_hits', 'cache_misses', 'copies', 'evictions', 'busy'];
      return Object.fromEntries(names.map((n) => [n, sample(text, `shardex_reader_${n}_total`) ?? Number.NaN]));
    };
    const counts = [await at()];
    // One shard each: the first get of a shard copies it; the next is served from the copy; the
    // other shard's copy pushes the first past the budget.
    for (const [i, id] of [A, A, B, B].entries()) {
      await eventualGet(id);
      // The eviction follows the copy that went past the budget, in the background.
      counts.push(i === 2 ? await pollUntil('the eviction past the budget', async () => ((await at()).evictions > counts[i]!.evictions! ? at() : undefined), { ms: 10_000, everyMs: 20 }) : await at());
    }
    const delta = (i: number, name: string): number => counts[i + 1]![name]! - counts[i]![name]!;
    expect([0, 1, 2, 3].map((i) => [delta(i, 'cache_misses'), delta(i, 'cache_hits'), delta(i, 'copies'), delta(i, 'evictions')])).toEqual([
      [1, 0, 1, 0],
      [0, 1, 0, 0],
      [1, 0, 1, 1],
      [0, 1, 0, 0],
    ]);
    expect(counts[4]!.busy).toBe(0);
  });

  it("is shown by a node's GET /api/readers, which passes the caller's key on", async () => {
    const refused = await http('GET', `${node}/api/readers`);
    expect(refused.status).toBe(401);
    const shown = await http('GET', `${node}/api/readers`, undefined, bearer(KEYS.reader));
    expect(shown.status).toBe(200);
    expect(shown.body.readers).toEqual([expect.objectContaining({ name: 'reader1', group: 'default', scans: expect.any(Object) })]);
    expect(shown.body.readers[0].error).toBeUndefined();
  });
});
