// Issue 13, request ids: a client's x-request-id (or one the node makes) comes back in the
// response and follows the request to the other nodes over gRPC, so that their log lines for it
// carry the same id. Separate `shardex node` processes on ZooKeeper: the id can only reach the
// other process over the wire, and its stdout (pino JSON) is what an operator would search.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http } from '../support/cluster.js';
import { NodeProcesses } from '../support/processes.js';
import { until, waitSettled } from '../support/zk-cluster.js';
import { zkConnect } from '../support/zookeeper.js';

const C = 'traced';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The JSON log lines of a node's output that carry `reqId`. */
function linesWith(output: readonly string[], reqId: string): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  for (const line of output) {
    if (!line.includes(reqId)) continue;
    try {
      const entry = JSON.parse(line) as Record<string, unknown>;
      if (entry.reqId === reqId) out.push(entry);
    } catch {
      /* not a JSON log line */
    }
  }
  return out;
}

describe('request ids', () => {
  let procs: NodeProcesses;
  let leader: string;
  let replica: string;

  beforeAll(async () => {
    // Debug: the receiving side of a peer call logs its arrival at debug level.
    procs = new NodeProcesses(zkConnect('request-id'), { zkTimeoutMs: 4000, env: { SHARDEX_LOG_LEVEL: 'debug' } });
    await procs.start('n1');
    await procs.start('n2');
    const res = await http('POST', `${procs.nodes.get('n1')!.http}/api/collections`, { name: C, numShards: 1, replicationFactor: 2 });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    const view = await waitSettled(procs, C);
    leader = view.collections[C]!.shards.shard1!.leader!;
    replica = leader === 'n1' ? 'n2' : 'n1';
  });

  afterAll(async () => {
    await procs?.stopAll();
  });

  const url = (name: string): string => procs.nodes.get(name)!.http;
  const output = (name: string): string[] => procs.nodes.get(name)!.output;

  it("echoes the caller's x-request-id, and makes one when there is none or it is not a plausible id", async () => {
    const given = await http('GET', `${url(replica)}/api/collections/${C}`, undefined, { 'x-request-id': 'abc' });
    expect(given.status).toBe(200);
    expect(given.headers.get('x-request-id')).toBe('abc');
    const none = await http('GET', `${url(replica)}/api/collections/${C}`);
    expect(none.headers.get('x-request-id')).toMatch(UUID);
    const tooLong = await http('GET', `${url(replica)}/api/collections/${C}`, undefined, { 'x-request-id': 'x'.repeat(200) });
    expect(tooLong.headers.get('x-request-id')).toMatch(UUID);
    const unsafe = await http('GET', `${url(replica)}/api/collections/${C}`, undefined, { 'x-request-id': 'a"b{c}' });
    expect(unsafe.headers.get('x-request-id')).toMatch(UUID);
    // Refusals carry it too.
    const missing = await http('GET', `${url(replica)}/no/such/route`, undefined, { 'x-request-id': 'abc-404' });
    expect(missing.status).toBe(404);
    expect(missing.headers.get('x-request-id')).toBe('abc-404');
  });

  it("follows an update forwarded to the leader and fanned out to the replica: both nodes' logs carry it", async () => {
    const id = `upd-${Date.now()}`;
    const res = await http('POST', `${url(replica)}/api/collections/${C}/docs`, [{ id: 'd1', title: 'traced' }], { 'x-request-id': id });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.headers.get('x-request-id')).toBe(id);
    // The leader got the update as TOLEADER from the replica's node, and sent it back as FROMLEADER.
    const atLeader = await until('the leader to log the forwarded update', 10_000, async () => {
      const lines = linesWith(output(leader), id).filter((l) => l.rpc === 'update TOLEADER');
      return lines.length > 0 ? lines : undefined;
    });
    expect(atLeader[0]).toMatchObject({ node: leader, msg: 'peer call' });
    const atReplica = await until('the replica to log the leader\'s update', 10_000, async () => {
      const lines = linesWith(output(replica), id).filter((l) => l.rpc === 'update FROMLEADER');
      return lines.length > 0 ? lines : undefined;
    });
    expect(atReplica[0]).toMatchObject({ node: replica, msg: 'peer call' });
  });

  it('follows a search the node sends on to the leader', async () => {
    const id = `search-${Date.now()}`;
    const res = await http('GET', `${url(replica)}/api/collections/${C}/search?q=traced`, undefined, { 'x-request-id': id });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.headers.get('x-request-id')).toBe(id);
    const lines = await until('the leader to log the search phases', 10_000, async () => {
      const found = linesWith(output(leader), id).filter((l) => l.rpc === 'search');
      return found.length > 0 ? found : undefined;
    });
    expect(lines[0]).toMatchObject({ node: leader, msg: 'peer call' });
  });

  it('follows an eventual search to the snapshot reader that serves it: the reader logs it', async () => {
    const reader = await procs.startReader('r1');
    await until('the reader to be listed', 20_000, async () => {
      const view = (await http('GET', `${url(replica)}/api/cluster`)).body as { nodes: Array<{ name: string }> };
      return view.nodes.some((n) => n.name === 'r1') ? true : undefined;
    });
    expect((await http('POST', `${url(leader)}/api/collections/${C}/commit`)).status).toBe(200);
    const id = `eventual-${Date.now()}`;
    const res = await http('GET', `${url(replica)}/api/collections/${C}/search?q=traced&consistency=eventual`, undefined, { 'x-request-id': id });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.headers.get('x-request-id')).toBe(id);
    expect(Object.values(res.body.servedBy as Record<string, { node: string }>).map((b) => b.node)).toEqual(['r1']);
    const lines = await until('the reader to log the search', 10_000, async () => {
      const found = linesWith(reader.output, id).filter((l) => l.rpc === 'search');
      return found.length > 0 ? found : undefined;
    });
    expect(lines[0]).toMatchObject({ msg: 'peer call' });
  });
});
