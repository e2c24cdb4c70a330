// The node's own series on /metrics (issue 13, observability): after writes and a commit, the
// update path, leadership, commit points, the index and the update log show what happened.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, startCluster, type TestCluster } from '../support/cluster.js';

const C = 'observed';
let tc: TestCluster;

beforeAll(async () => {
  tc = await startCluster({ nodes: 2, collection: { name: C, numShards: 1, replicationFactor: 2, router: 'compositeId' } });
  await tc.cluster.waitAllActive(30_000);
});

afterAll(async () => {
  await tc?.stop();
});

/** Every sample of `name` on the node at `url`: labels text -> value. */
async function samples(url: string, name: string): Promise<Map<string, number>> {
  const text = (await http<string>('GET', `${url}/metrics`)).body;
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^(\w+)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m && m[1] === name) out.set(m[2] ?? '', Number(m[3]));
  }
  return out;
}

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
  });
});
