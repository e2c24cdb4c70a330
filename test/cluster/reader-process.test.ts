// Issue 14, reader item 4, as an operator stops a reader: a `shardex reader` process sent SIGTERM
// (what `docker compose stop` and systemd send) drains and deregisters, then exits with code 0 on
// its own; the nodes stop listing it, and eventual reads go on, served by the leaders once no
// reader is left. The drain itself (BUSY for new scans, started ones finished, no failed read
// under load) is shown in-process by reader-drain.test.ts; this is the signal's path to it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http } from '../support/cluster.js';
import { NodeProcesses } from '../support/processes.js';
import { until, waitSettled } from '../support/zk-cluster.js';
import { zkConnect } from '../support/zookeeper.js';

const C = 'drained';

describe('a snapshot reader process stopped with SIGTERM', () => {
  let procs: NodeProcesses;
  let url: string;

  beforeAll(async () => {
    procs = new NodeProcesses(zkConnect('reader-process'), { zkTimeoutMs: 10_000, env: { SHARDEX_LOG_LEVEL: 'info' } });
    url = (await procs.start('n1')).http;
    expect((await http('POST', `${url}/api/collections`, { name: C, numShards: 1, replicationFactor: 1 })).status).toBe(201);
    await waitSettled(procs, C);
    expect((await http('POST', `${url}/api/collections/${C}/docs`, [{ id: 'a', title: 'kept' }])).status).toBe(200);
    expect((await http('POST', `${url}/api/collections/${C}/commit`)).status).toBe(200);
    await procs.startReader('r1');
  });

  afterAll(async () => {
    await procs?.stopAll();
  });

  const listed = async (): Promise<boolean> => ((await http('GET', `${url}/api/cluster`)).body as { nodes: Array<{ name: string }> }).nodes.some((n) => n.name === 'r1');

  it('drains, deregisters and exits 0 by itself, and eventual reads go on', async () => {
    await until('the reader to be listed', 20_000, async () => ((await listed()) ? true : undefined));
    const served = await http('GET', `${url}/api/collections/${C}/search?q=kept&consistency=eventual`);
    expect(served.status, JSON.stringify(served.body)).toBe(200);
    expect(Object.values(served.body.servedBy as Record<string, { node: string }>).map((b) => b.node)).toEqual(['r1']);

    const reader = procs.nodes.get('r1')!;
    const child = reader.child!;
    const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    child.kill('SIGTERM');
    // It exits by itself (no SIGKILL follows here), with code 0.
    expect(await exit).toEqual({ code: 0, signal: null });
    const lines = reader.output.map((l) => {
      try {
        return JSON.parse(l) as Record<string, unknown>;
      } catch {
        return {};
      }
    });
    // The signal, the drain, then the stop (its coordination session closed: no ephemeral lingers).
    const steps = ['stopping', 'snapshot reader draining: new scans are answered BUSY', 'snapshot reader stopped'];
    const at = steps.map((msg) => lines.findIndex((l) => l.msg === msg && (msg !== 'stopping' || l.signal === 'SIGTERM')));
    expect(at.every((i) => i >= 0), JSON.stringify(at)).toBe(true);
    expect([...at].sort((x, y) => x - y)).toEqual(at);

    await until('the nodes to stop listing the reader', 20_000, async () => ((await listed()) ? undefined : true));
    const after = await http('GET', `${url}/api/collections/${C}/search?q=kept&consistency=eventual`);
    expect(after.status, JSON.stringify(after.body)).toBe(200);
    expect(after.body.hits.map((h: { id: string }) => h.id)).toEqual(['a']);
    expect(Object.values(after.body.servedBy as Record<string, { node: string; fallback: boolean }>)).toEqual([expect.objectContaining({ node: 'n1', fallback: true })]);
  });
});
