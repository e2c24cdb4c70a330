// Issue 14, reader item 2, through the public API: an eventual read's own deadline (HTTP
// `timeoutMs=`, the client's `timeoutMs` / `signal`) ends it with SHX_TIMEOUT (or the signal's
// reason) while it waits for a reader to appear: the node and the client pass the read's deadline
// down to src/read.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShardexClient } from '../../src/client/index.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';

// Eventual reads wait up to 10 minutes for a reader of a group nobody runs.
const PATIENT = [{ isDefault: true, group: 'nobody', maxBusyTimeout: '5m', busyTimeoutMultiplier: 8, timeToWaitForScanServers: '10m', attemptPlans: [{ servers: '100%', busyTimeout: '33ms' }] }];

describe('the read deadline of eventual reads', () => {
  let tc: TestCluster;
  let url: string;
  beforeAll(async () => {
    tc = await startCluster({ nodes: 1, nodeOptions: { selectorProfiles: PATIENT } });
    url = tc.urls[0]!;
    expect((await http('POST', `${url}/api/collections`, { name: 'dl', numShards: 2, replicationFactor: 1 })).status).toBe(201);
  });
  afterAll(async () => tc?.stop());

  it('ends an HTTP eventual get with 504 SHX_TIMEOUT at its timeoutMs', async () => {
    const res = await http('GET', `${url}/api/collections/dl/docs/a?consistency=eventual&timeoutMs=300`);
    expect(res.status).toBe(504);
    expect(res.body).toMatchObject({ code: 'SHX_TIMEOUT', error: expect.stringMatching(/within 300 ms \(waiting for a snapshot reader in group 'nobody'\)/) });
  });

  it('ends an HTTP eventual search with 504 SHX_TIMEOUT at its timeoutMs', async () => {
    const res = await http('GET', `${url}/api/collections/dl/search?q=*&consistency=eventual&timeoutMs=300`);
    expect(res.status).toBe(504);
    expect(res.body).toMatchObject({ code: 'SHX_TIMEOUT', error: expect.stringMatching(/within 300 ms/) });
  });

  it('ends the client\'s eventual get and search when its signal aborts', async () => {
    const client = new ShardexClient({ urls: [url], refreshIntervalMs: 0, selectorProfiles: PATIENT });
    try {
      for (const read of [
        (signal: AbortSignal) => client.get('dl', 'a', { consistency: 'eventual', signal }),
        (signal: AbortSignal) => client.search('dl', '*', { consistency: 'eventual', signal }),
      ]) {
        const ctl = new AbortController();
        const reason = new Error('the caller gave up');
        const pending = read(ctl.signal).catch((e) => e);
        setTimeout(() => ctl.abort(reason), 100);
        expect(await pending).toBe(reason);
      }
    } finally {
      await client.close();
    }
  });

  it('ends the client\'s eventual get with SHX_TIMEOUT at its timeoutMs', async () => {
    const client = new ShardexClient({ urls: [url], refreshIntervalMs: 0, selectorProfiles: PATIENT });
    try {
      const err = await client.get('dl', 'a', { consistency: 'eventual', timeoutMs: 300 }).catch((e) => e);
      expect(err).toMatchObject({ code: 'SHX_TIMEOUT', message: expect.stringMatching(/within 300 ms/) });
      // Ended by its own deadline, not by the read path's 30 s default.
      expect(String(err.cause?.message ?? err.cause)).not.toMatch(/30000 ms/);
    } finally {
      await client.close();
    }
  });
});
