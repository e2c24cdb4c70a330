// The node's own series on /metrics (issue 13, observability): the text of nodes and readers is
// Prometheus exposition text (read by a strict parser, test/support/prometheus-text.ts) with the
// series the issue names, each of its type; after writes and a commit, the update path,
// leadership, commit points, the index and the update log show what happened.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, startCluster, type TestCluster } from '../support/cluster.js';
import { pollUntil } from '../support/poll.js';
import { parsePrometheusText, samplesNamed, type MetricFamily, type MetricType } from '../support/prometheus-text.js';

const C = 'observed';
let tc: TestCluster;

beforeAll(async () => {
  tc = await startCluster({ nodes: 2, readers: 1, collection: { name: C, numShards: 1, replicationFactor: 2, router: 'compositeId' } });
  await tc.cluster.waitAllActive(30_000);
});

afterAll(async () => {
  await tc?.stop();
});

/** The families on /metrics at `url`, parsed strictly (a violation of the format fails the test). */
async function scrape(url: string): Promise<Map<string, MetricFamily>> {
  const res = await http<string>('GET', `${url}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parsePrometheusText(res.body);
}

/** Labels as the text writes them ('' for none), e.g. '{a="1",b="2"}'. */
const labelText = (labels: Readonly<Record<string, string>>): string => {
  const entries = Object.entries(labels);
  return entries.length === 0 ? '' : `{${entries.map(([k, v]) => `${k}="${v}"`).join(',')}}`;
};

/** Every sample of `name` on the process at `url`: labels text -> value. */
async function samples(url: string, name: string): Promise<Map<string, number>> {
  return new Map(samplesNamed(await scrape(url), name).map((s) => [labelText(s.labels), s.value]));
}

/** The issue's series (observability) on a data node, by type. */
const NODE_FAMILIES: Record<string, MetricType> = {
  shardex_http_requests_total: 'counter',
  shardex_http_request_duration_seconds: 'histogram',
  shardex_updates_received_total: 'counter',
  shardex_updates_forwarded_total: 'counter',
  shardex_distributor_queued: 'gauge',
  shardex_distributor_in_flight: 'gauge',
  shardex_distributor_requests_total: 'counter',
  shardex_replicas_marked_down_total: 'counter',
  shardex_leader_elections_total: 'counter',
  shardex_leaderships_lost_total: 'counter',
  shardex_replica_leader: 'gauge',
  shardex_recoveries_total: 'counter',
  shardex_recovery_docs_total: 'counter',
  shardex_replica_recovering: 'gauge',
  shardex_commit_points_total: 'counter',
  shardex_read_queue_length: 'gauge',
  shardex_read_slots_taken: 'gauge',
  shardex_read_rejected_total: 'counter',
  shardex_update_log_entries: 'gauge',
  shardex_replica_docs: 'gauge',
  shardex_replica_max_version: 'gauge',
  shardex_doc_cache_hits_total: 'counter',
  shardex_doc_cache_misses_total: 'counter',
  shardex_index_segments_written_total: 'counter',
  shardex_index_opens_total: 'counter',
  shardex_coordination_connected: 'gauge',
  shardex_coordination_session_events_total: 'counter',
  shardex_process_cpu_user_seconds_total: 'counter',
};

/** The issue's series on a snapshot reader: its cache, copies, BUSY answers, and its HTTP routes. */
const READER_FAMILIES: Record<string, MetricType> = {
  shardex_http_requests_total: 'counter',
  shardex_http_request_duration_seconds: 'histogram',
  shardex_reader_cache_hits_total: 'counter',
  shardex_reader_cache_misses_total: 'counter',
  shardex_reader_copies_total: 'counter',
  shardex_reader_evictions_total: 'counter',
  shardex_reader_busy_total: 'counter',
  shardex_reader_scans_total: 'counter',
  shardex_reader_refreshes_total: 'counter',
  shardex_reader_cached_shards: 'gauge',
};

const typesOf = (families: ReadonlyMap<string, MetricFamily>, names: readonly string[]): Record<string, MetricType | undefined> =>
  Object.fromEntries(names.map((n) => [n, families.get(n)?.type]));

describe('/metrics text', () => {
  it("parses as Prometheus exposition text on every node and reader, with the issue's series of the right types", async () => {
    // Scraped until an earlier scrape is counted, so that the HTTP histogram has a series to check.
    const observed = (url: string): Promise<Map<string, MetricFamily>> =>
      pollUntil(`a counted request on ${url}`, async () => {
        const families = await scrape(url);
        return samplesNamed(families, 'shardex_http_request_duration_seconds_count').some((s) => s.labels.route === '/metrics') ? families : undefined;
      }, { ms: 10_000, everyMs: 50 });
    for (const url of tc.urls) expect(typesOf(await observed(url), Object.keys(NODE_FAMILIES)), url).toEqual(NODE_FAMILIES);
    expect(typesOf(await observed(tc.cluster.readers[0]!.httpUrl), Object.keys(READER_FAMILIES))).toEqual(READER_FAMILIES);
  });
});

const sum = (m: Map<string, number>): number => [...m.values()].reduce((a, b) => a + b, 0);

describe('node metrics', () => {
  it('count the update path, leadership, commits, the index and the update log', async () => {
    const docs = Array.from({ length: 30 }, (_, i) => ({ id: `m${i}`, title: `doc ${i}` }));
    expect((await http('POST', `${tc.urls[1]}/api/collections/${C}/docs`, docs)).status).toBe(200);
    expect((await http('POST', `${tc.urls[0]}/api/collections/${C}/commit`)).status).toBe(200);

    const replica = `replica="${C}/shard1"`;
    const leaders = await Promise.all(tc.urls.map(async (u) => (await samples(u, 'shardex_replica_leader')).get(`{${replica}}`)));
    expect([...leaders].sort()).toEqual([0, 1]);
    const leaderUrl = tc.urls[leaders.indexOf(1)]!;
    const followerUrl = tc.urls[leaders.indexOf(0)]!;

    // Updates by phase: 30 ops from the client (NONE) at the node posted to, forwarded to the
    // leader (TOLEADER) unless that node leads, and sent on to the other replica (FROMLEADER).
    const phase = async (url: string, p: string): Promise<number> => (await samples(url, 'shardex_updates_received_total')).get(`{phase="${p}"}`) ?? 0;
    expect(await phase(tc.urls[1]!, 'NONE')).toBe(30);
    expect(await phase(tc.urls[0]!, 'NONE')).toBe(0);
    expect(await phase(leaderUrl, 'TOLEADER')).toBe(leaderUrl === tc.urls[1] ? 0 : 30);
    expect(await phase(followerUrl, 'FROMLEADER')).toBe(30);
    expect(await phase(leaderUrl, 'FROMLEADER')).toBe(0);

    expect((await samples(leaderUrl, 'shardex_leader_elections_total')).get(`{${replica}}`)).toBeGreaterThanOrEqual(1);
    expect((await samples(leaderUrl, 'shardex_commit_points_total')).get(`{${replica}}`)).toBeGreaterThanOrEqual(1);
    const outcomes = await samples(leaderUrl, 'shardex_distributor_requests_total');
    expect([...outcomes].filter(([k]) => k.includes('outcome="sent"')).reduce((a, [, v]) => a + v, 0)).toBeGreaterThanOrEqual(1);
    for (const url of tc.urls) {
      expect((await samples(url, 'shardex_replica_docs')).get(`{${replica}}`)).toBe(30);
      expect((await samples(url, 'shardex_update_log_entries')).get(`{${replica}}`)).toBeGreaterThanOrEqual(30);
      expect(sum(await samples(url, 'shardex_index_opens_total'))).toBe(1);
      expect((await samples(url, 'shardex_coordination_connected')).get('')).toBe(1);
      expect((await samples(url, 'shardex_distributor_queued')).get('')).toBe(0);
    }

    // The page's stored documents, read at the leader: from its store the first time, from its
    // document cache when the same page is asked again.
    const cache = async (): Promise<[number, number]> => [
      (await samples(leaderUrl, 'shardex_doc_cache_hits_total')).get(`{${replica}}`) ?? NaN,
      (await samples(leaderUrl, 'shardex_doc_cache_misses_total')).get(`{${replica}}`) ?? NaN,
    ];
    const [hits0, misses0] = await cache();
    const page = async (): Promise<void> => {
      const res = await http<{ hits: unknown[] }>('GET', `${followerUrl}/api/collections/${C}/search?q=doc&limit=5&fields=id,title`);
      expect(res.status).toBe(200);
      expect(res.body.hits).toHaveLength(5);
    };
    await page();
    const [hits1, misses1] = await cache();
    expect(misses1 - misses0).toBe(5);
    await page();
    expect(await cache()).toEqual([hits1 + 5, misses1]);
    expect(hits1).toBe(hits0);
  });
});

/** Labels of a sample's label text, e.g. '{a="1",b="2"}' -> {a: '1', b: '2'}. */
function labelsOf(text: string): Record<string, string> {
  return Object.fromEntries([...text.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]));
}

/** The value of the one sample of `name` whose labels include `want` (0 when there is none). */
function valueOf(all: Map<string, number>, want: Record<string, string>): number {
  const hits = [...all].filter(([k]) => {
    const labels = labelsOf(k);
    return Object.entries(want).every(([n, v]) => labels[n] === v);
  });
  expect(hits.length).toBeLessThanOrEqual(1);
  return hits[0]?.[1] ?? 0;
}

describe('HTTP metrics', () => {
  it('count requests and their latency by method, route pattern (never the raw URL) and status', async () => {
    const url = tc.urls[0]!;
    const byPattern = { method: 'GET', route: '/api/collections/:c', status_code: '200' };
    const missing = { method: 'GET', route: '/api/collections/:c', status_code: '404' };
    const doc = { method: 'GET', route: '/api/collections/:c/docs/:id', status_code: '200' };
    const unmatched = { method: 'GET', route: '(unmatched)', status_code: '404' };
    const read = async (): Promise<{ counts: Map<string, number>; observed: Map<string, number>; infBuckets: Map<string, number> }> => ({
      counts: await samples(url, 'shardex_http_requests_total'),
      observed: await samples(url, 'shardex_http_request_duration_seconds_count'),
      infBuckets: new Map([...(await samples(url, 'shardex_http_request_duration_seconds_bucket'))].filter(([k]) => k.includes('le="+Inf"'))),
    });
    const before = await read();

    for (let i = 0; i < 3; i++) expect((await http('GET', `${url}/api/collections/${C}`)).status).toBe(200);
    for (let i = 0; i < 2; i++) expect((await http('GET', `${url}/api/collections/no-such-${i}`)).status).toBe(404);
    expect((await http('GET', `${url}/api/collections/${C}/docs/m1`)).status).toBe(200);
    expect((await http('GET', `${url}/no/such/${'route'}`)).status).toBe(404);

    const want: Array<[Record<string, string>, number]> = [
      [byPattern, 3],
      [missing, 2],
      [doc, 1],
      [unmatched, 1],
    ];
    // A request is counted once its answer is sent, which the client may see first: wait for the counts.
    const deadline = Date.now() + 10_000;
    let after = await read();
    while (Date.now() < deadline && !want.every(([labels, n]) => valueOf(after.counts, labels) - valueOf(before.counts, labels) >= n)) {
      await new Promise((r) => setTimeout(r, 50));
      after = await read();
    }
    for (const [labels, n] of want) {
      expect(valueOf(after.counts, labels) - valueOf(before.counts, labels), JSON.stringify(labels)).toBe(n);
      expect(valueOf(after.observed, labels) - valueOf(before.observed, labels), JSON.stringify(labels)).toBe(n);
      expect(valueOf(after.infBuckets, labels)).toBe(valueOf(after.observed, labels));
    }
    // Names and ids from URLs never become label values.
    const routes = new Set([...after.counts.keys()].map((k) => labelsOf(k).route));
    expect([...routes].filter((r) => r === undefined || r.includes(C) || r.includes('no-such') || r.includes('m1'))).toEqual([]);
    expect(routes).toContain('/metrics');
  });
});

describe('coordination session and leadership metrics', () => {
  it("count a leader's session expiry, its reconnect, and the leadership it lost", async () => {
    const replica = `{replica="${C}/shard1"}`;
    const leader = tc.cluster.nodes.find((n) => n.replica(C, 'shard1')?.role === 'leader')!;
    const url = leader.httpUrl;
    const events = async (state: string): Promise<number> => (await samples(url, 'shardex_coordination_session_events_total')).get(`{state="${state}"}`) ?? 0;
    const lost = async (): Promise<number> => (await samples(url, 'shardex_leaderships_lost_total')).get(replica) ?? 0;
    const before = { expired: await events('expired'), connected: await events('connected'), lost: await lost() };
    // The embedded coordinator expires the session as ZooKeeper does when it misses heartbeats.
    const sessionId = (leader.coordinator as unknown as { store: { sessionId: string } }).store.sessionId;
    tc.cluster.server.expire(sessionId);
    await pollUntil('the expiry, the new session and the lost leadership on /metrics', async () =>
      (await events('expired')) === before.expired + 1 && (await events('connected')) > before.connected && (await lost()) === before.lost + 1 ? true : undefined,
    { ms: 20_000 });
  });
});
