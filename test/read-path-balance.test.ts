// Issue 12: where the read path sends a read the balancer placed. `primary` goes to the shard
// leader whatever the consistency; a reader group keeps an eventual read inside that group,
// with the attempt plans of the read's scan-type profile; shards not placed route as before.
import { describe, expect, it } from 'vitest';
import type { NodeInfo } from '../src/coordination/index.js';
import { EventualRouter } from '../src/read/eventual.js';
import { ReadPath, ReaderGroupRouters, ReaderSelector } from '../src/read/index.js';
import type { EventualOptions } from '../src/read/snapshot-reader.js';

const reader = (name: string, group?: string): NodeInfo => ({ name, http: '', grpc: '', role: 'reader', ...(group !== undefined && { group }) });
const READERS = [reader('d1'), reader('f1', 'fast'), reader('f2', 'fast'), reader('l1', 'lowcost')];
// A scan type whose profile draws from a group nobody runs: only the balancer's group can serve it.
const PROFILES = [
  { isDefault: true, maxBusyTimeout: '5m', busyTimeoutMultiplier: 8, attemptPlans: [{ servers: '100%', busyTimeout: '33ms' }] },
  { scanTypeActivations: ['nightly'], group: 'nobody', maxBusyTimeout: '5m', busyTimeoutMultiplier: 8, timeToWaitForScanServers: '0s', attemptPlans: [{ servers: '100%', busyTimeout: '250ms' }] },
];

function setup() {
  const calls: Array<{ node: string; eventual?: EventualOptions }> = [];
  const call = async <T>(node: string, _method: 'get' | 'search', body: object): Promise<T> => {
    const eventual = (body as { eventual?: EventualOptions }).eventual;
    calls.push({ node, ...(eventual && { eventual }) });
    return (eventual ? { snapshot: 1, result: [null] } : [null]) as T;
  };
  const transport = { call, leader: (_c: string, s: string) => `leader-of-${s}` };
  let path: ReadPath;
  const readerCall = <T>(r: string, body: object, eventual: EventualOptions) => path.callReader<T>(r, body, eventual);
  const routers = new ReaderGroupRouters({ profiles: PROFILES, readers: () => READERS, call: readerCall });
  const eventual = new EventualRouter({ selector: new ReaderSelector(PROFILES), readers: () => READERS, call: readerCall });
  path = new ReadPath(transport, eventual, routers.router);
  return { path, calls };
}

describe('ReadPath with balancer targets', () => {
  it('sends a shard placed on primary to its leader even for an eventual read', async () => {
    const { path, calls } = setup();
    const r = await path.get('c', 'shard1', ['a'], { consistency: 'eventual', targets: { shard1: 'primary' } });
    expect(calls).toEqual([{ node: 'leader-of-shard1' }]);
    expect(r.servedBy).toBeUndefined();
  });

  it('keeps an eventual read placed on a reader group inside that group', async () => {
    const { path, calls } = setup();
    for (let i = 0; i < 20; i++) await path.get('c', 'shard1', ['a'], { consistency: 'eventual', targets: { shard1: 'fast' } });
    expect(new Set(calls.map((c) => c.node))).toEqual(new Set(['f1', 'f2']));
    await path.get('c', 'shard1', ['a'], { consistency: 'eventual', targets: { shard1: 'lowcost' } });
    expect(calls.at(-1)!.node).toBe('l1');
  });

  it('uses the scan type\'s profile for its attempt plans but the balancer\'s group for its readers', async () => {
    const { path, calls } = setup();
    const r = await path.get('c', 'shard1', ['a'], { consistency: 'eventual', scanType: 'nightly', targets: { shard1: 'lowcost' } });
    expect(calls).toEqual([{ node: 'l1', eventual: { busyTimeoutMs: 250 } }]);
    expect(r.servedBy).toMatchObject({ node: 'l1', fallback: false });
  });

  it('routes shards the balancer did not place as before: the profile\'s group, else the leader', async () => {
    const { path, calls } = setup();
    await path.get('c', 'shard1', ['a'], { consistency: 'eventual' });
    expect(calls.at(-1)!.node).toBe('d1');
    await path.get('c', 'shard2', ['a'], { consistency: 'eventual', scanType: 'nightly', targets: { shard1: 'fast' } });
    expect(calls.at(-1)!.node).toBe('leader-of-shard2');
  });

  it('serves every phase of a search shard from the group it was placed on', async () => {
    const { path, calls } = setup();
    const servedBy = {};
    const [s1, s2] = path.searchers('c', ['shard1', 'shard2'], { consistency: 'eventual', targets: { shard1: 'lowcost', shard2: 'primary' } }, servedBy);
    await s1!.stats({});
    await s1!.fetch(['a'], undefined);
    await s2!.stats({});
    expect(calls.map((c) => c.node)).toEqual(['l1', 'l1', 'leader-of-shard2']);
    expect(servedBy).toMatchObject({ shard1: { node: 'l1' } });
  });
});
