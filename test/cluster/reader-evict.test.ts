// A reader over its disk budget evicts least recently used shard copies; a copy still being
// read is closed only after its readers, so no request fails on a closed copy.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.js';
import { PeerClients } from '../../src/transport/index.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';

describe('eviction under load', () => {
  let tc: TestCluster;
  let peers: PeerClients;
  beforeAll(async () => {
    // A budget of one byte: every new copy evicts the others, while they are being read.
    tc = await startCluster({ nodes: 1, readers: 1, readerOptions: { diskBudgetBytes: 1, scanDelayMs: 10 } });
    const url = tc.urls[0]!;
    expect((await http('POST', `${url}/api/collections`, { name: 'ev', numShards: 4, replicationFactor: 1, autoCommit: 'off' })).status).toBe(201);
    expect((await http('POST', `${url}/api/collections/ev/docs`, Array.from({ length: 40 }, (_, i) => ({ id: `d${i}` })))).status).toBe(200);
    expect((await http('POST', `${url}/api/collections/ev/commit`)).status).toBe(200);
    const r = tc.cluster.readers[0]!;
    peers = new PeerClients({ resolve: () => r.grpcAddress, logger: silentLogger() });
  });
  afterAll(async () => {
    peers?.close();
    await tc?.stop();
  });

  it('answers every read while the copies it reads are evicted', async () => {
    const reads = Array.from({ length: 48 }, (_, i) =>
      peers.call<{ snapshot: number; result: unknown[] }>('reader1', 'get', { collection: 'ev', shard: `shard${(i % 4) + 1}`, ids: ['d1'], eventual: { busyTimeoutMs: 0 } }),
    );
    const answers = await Promise.allSettled(reads);
    const failed = answers.filter((a) => a.status === 'rejected').map((a) => String((a as PromiseRejectedResult).reason));
    expect(failed).toEqual([]);
    // Eviction runs after each copy, in the background (it waits for a copy's readers): it may
    // still be at work when the last answer arrives.
    const cached = (): number => (tc.cluster.readers[0]!.status() as { shards: unknown[] }).shards.length;
    await expect.poll(cached, { timeout: 10_000 }).toBeLessThan(4);
  });
});
