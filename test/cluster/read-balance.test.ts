// Issue 12, "what it must show" 2 and 3: read balancing on a 2-node cluster with two reader
// groups. `interactive` may use 1 slot per node on the `fast` readers (weight 10), `report` 2 on
// the `lowcost` readers; 30 concurrent slow searches of each never run more balanced searches
// on a target than its slots (sampled from GET /api/read-slots on every node and from the
// readers' own scan counters), and every one is answered with a documented status. Changes
// through the admin API apply on every node without a restart.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShardexClient } from '../../src/client/index.js';
import { http, startCluster, type HttpResult, type TestCluster } from '../support/cluster.js';
import { pollUntil } from '../support/poll.js';

const C = 'bal';
const SHARDS = 2;
const NODES = 2;
/** Per node: enough for the 30 + 30 searches spread over 2 nodes, small enough to fill in a test. */
const QUEUE_SIZE = 20;

interface SlotRow {
  priority: string;
  target: string;
  weight: number;
  up: boolean;
  limit: number;
  taken: number;
  free: number;
  queued: number;
}

const until = <T>(what: string, probe: () => Promise<T | undefined> | T | undefined, ms = 30_000): Promise<T> => pollUntil(what, probe, { ms, everyMs: 10 });

describe('read balancing by priority across reader groups', () => {
  let tc: TestCluster;
  let urls: string[];
  const slots = async (url: string): Promise<SlotRow[]> => (await http<{ slots: SlotRow[] }>('GET', `${url}/api/read-slots`)).body.slots;
  const row = async (url: string, priority: string, target: string): Promise<SlotRow | undefined> =>
    (await slots(url)).find((r) => r.priority === priority && r.target === target);
  /** Every node applies the setting (they poll coordination): resolves once each shows it. */
  const applied = (priority: string, target: string, check: (r: SlotRow | undefined) => boolean) =>
    Promise.all(urls.map((u) => until(`${u} to apply ${priority}/${target}`, async () => (check(await row(u, priority, target)) ? true : undefined))));
  const put = (priority: string, target: string, body: unknown, url = urls[0]!) => http('PUT', `${url}/api/read-balance/${priority}/${target}`, body);
  const search = (url: string, query: string): Promise<HttpResult> => http('GET', `${url}/api/collections/${C}/search?${query}`);

  beforeAll(async () => {
    tc = await startCluster({ nodes: NODES, nodeOptions: { readBalance: { queueSize: QUEUE_SIZE, defaultPriority: 'standard', pollMs: 100 } } });
    urls = tc.urls;
    // Every scan of these readers takes at least 100 ms: a search (stats, query, fetch) 300 ms+.
    await tc.cluster.startReader(0, { group: 'fast', scanDelayMs: 100, maxScans: 16, snapshotExpiryMs: 600_000 });
    await tc.cluster.startReader(1, { group: 'lowcost', scanDelayMs: 100, maxScans: 16, snapshotExpiryMs: 600_000 });
    expect((await http('POST', `${urls[0]}/api/collections`, { name: C, numShards: SHARDS, replicationFactor: 1 })).status).toBe(201);
    const docs = Array.from({ length: 60 }, (_, i) => ({ id: `d${i}`, title: `balanced doc ${i}` }));
    expect((await http('POST', `${urls[0]}/api/collections/${C}/docs`, docs)).status).toBe(200);
    expect((await http('POST', `${urls[0]}/api/collections/${C}/commit`)).status).toBe(200);
    expect((await put('interactive', 'fast', { weight: 10, slots: 1 })).status).toBe(200);
    expect((await put('report', 'lowcost', { weight: 1, slots: 2 })).status).toBe(200);
    await applied('interactive', 'fast', (r) => r?.limit === 1);
    await applied('report', 'lowcost', (r) => r?.limit === 2);
  });
  afterAll(async () => tc?.stop());

  it('never runs more balanced searches on a target than its slots, and answers every search', async () => {
    const limits: Record<string, number> = { fast: 1, lowcost: 2 };
    const violations: string[] = [];
    let samples = 0;
    let running = true;
    const sampler = (async () => {
      while (running) {
        for (const [i, url] of urls.entries()) {
          for (const r of await slots(url)) {
            if (r.taken > r.limit) violations.push(`node${i + 1} ${r.priority}/${r.target}: taken ${r.taken} > limit ${r.limit}`);
          }
        }
        // A balanced search holds one slot per target and reads its shards in parallel: at most
        // slots x nodes x shards scans at once on a group's readers.
        for (const reader of tc.cluster.readers) {
          const status = (await http<{ group: string; scans: { running: number } }>('GET', `${reader.httpUrl}/api/reader`)).body;
          const bound = limits[status.group]! * NODES * SHARDS;
          if (status.scans.running > bound) violations.push(`${reader.name} (${status.group}): ${status.scans.running} scans > ${bound}`);
        }
        samples++;
      }
    })();
    const runs = [...Array.from({ length: 30 }, (_, i) => ['interactive', i] as const), ...Array.from({ length: 30 }, (_, i) => ['report', i] as const)];
    const answers = await Promise.all(
      runs.map(async ([priority, i]) => ({ priority, res: await search(urls[i % NODES]!, `q=balanced&limit=5&consistency=eventual&priority=${priority}`) })),
    );
    running = false;
    await sampler;

    expect(violations).toEqual([]);
    expect(samples).toBeGreaterThan(0);
    for (const { priority, res } of answers) {
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.total).toBe(60);
      const group = priority === 'interactive' ? 'fast' : 'lowcost';
      expect(res.body.readBalance).toMatchObject({ priority, targets: { shard1: group, shard2: group } });
      for (const s of Object.values(res.body.servedBy) as Array<{ node: string; fallback: boolean }>) {
        expect(s).toEqual(expect.objectContaining({ node: group === 'fast' ? 'reader1' : 'reader2', fallback: false }));
      }
    }
    // 15 interactive searches per node and one slot: all but one of them had to wait.
    expect(answers.filter((a) => a.priority === 'interactive' && a.res.body.readBalance.waitedMs > 0).length).toBeGreaterThan(0);
    for (const url of urls) for (const r of await slots(url)) expect({ [`${r.priority}/${r.target}`]: r.taken }).toEqual({ [`${r.priority}/${r.target}`]: 0 });
  });

  it('answers 429 naming the priority at a full queue and 504 for a read that times out in the queue', async () => {
    // No slot at all: every read of `batch` waits until its timeout.
    expect((await put('batch', 'lowcost', { weight: 1, slots: 0 })).status).toBe(200);
    await until('node1 to apply batch', () => row(urls[0]!, 'batch', 'lowcost'));
    const queued = Array.from({ length: QUEUE_SIZE }, () => search(urls[0]!, 'q=balanced&consistency=eventual&priority=batch&timeoutMs=6000'));
    await until('the batch queue to fill', async () => ((await row(urls[0]!, 'batch', 'lowcost'))?.queued === QUEUE_SIZE ? true : undefined));
    const full = await search(urls[0]!, 'q=balanced&consistency=eventual&priority=batch&timeoutMs=6000');
    expect(full.status).toBe(429);
    expect(full.body).toMatchObject({ code: 'SHX_BUSY', priority: 'batch', reason: 'queue-full' });
    expect(full.body.error).toMatch(/queue of priority "batch" is full/);
    for (const res of await Promise.all(queued)) {
      expect(res.status).toBe(504);
      expect(res.body).toMatchObject({ code: 'SHX_TIMEOUT', priority: 'batch' });
      expect(res.body.error).toMatch(/timed out after \d+ ms in the queue of priority "batch"/);
    }
    const metrics = (await http('GET', `${urls[0]}/metrics`)).body as string;
    expect(metrics).toMatch(/shardex_read_rejected_total\{priority="batch",reason="queue-full"\} 1/);
    expect(metrics).toMatch(new RegExp(`shardex_read_rejected_total\\{priority="batch",reason="timeout"\\} ${QUEUE_SIZE}`));
    expect(metrics).toMatch(/shardex_read_queue_length\{priority="batch"\} 0/);
    expect(metrics).toMatch(/shardex_read_slots_taken\{priority="report",target="lowcost"\} 0/);
    expect((await http('DELETE', `${urls[0]}/api/read-balance/batch`)).status).toBe(200);
  });

  it('rejects at once a read no configured target can serve, saying why', async () => {
    expect((await put('offline', 'ghost', { weight: 1, slots: 4 })).status).toBe(200);
    await until('node1 to mark ghost down', async () => ((await row(urls[0]!, 'offline', 'ghost'))?.up === false ? true : undefined));
    const down = await search(urls[0]!, 'q=balanced&consistency=eventual&priority=offline');
    expect(down.status).toBe(503);
    expect(down.body).toMatchObject({ code: 'SHX_UNAVAILABLE', priority: 'offline', reason: 'down' });
    expect(down.body.error).toMatch(/its targets ghost are down/);
    // An immediate read may only use the leaders, which `offline` is not configured on.
    const wrong = await search(urls[0]!, 'q=balanced&priority=offline');
    expect(wrong.status).toBe(400);
    expect(wrong.body.error).toMatch(/may use primary, the priority is configured on ghost/);
    expect((await http('DELETE', `${urls[0]}/api/read-balance/offline/ghost`)).status).toBe(200);
  });

  it('applies a change made on one node to reads queued on another, without a restart', async () => {
    const [one, two] = [urls[0]!, urls[1]!];
    expect((await put('live', 'lowcost', { weight: 1, slots: 0 }, one)).status).toBe(200);
    await applied('live', 'lowcost', (r) => r?.limit === 0);
    const waiting = search(two, 'q=balanced&consistency=eventual&priority=live&timeoutMs=60000');
    await until('the read to queue on node2', async () => ((await row(two, 'live', 'lowcost'))?.queued === 1 ? true : undefined));
    // More slots: the queued read is re-evaluated and runs.
    expect((await put('live', 'lowcost', { weight: 1, slots: 1 }, one)).status).toBe(200);
    const ran = await waiting;
    expect(ran.status).toBe(200);
    expect(ran.body.readBalance).toMatchObject({ priority: 'live', targets: { shard1: 'lowcost', shard2: 'lowcost' } });

    // Settings removed while a read waits: it runs unbalanced.
    expect((await put('live', 'lowcost', { weight: 1, slots: 0 }, one)).status).toBe(200);
    await applied('live', 'lowcost', (r) => r?.limit === 0);
    const released = search(two, 'q=balanced&consistency=eventual&priority=live&timeoutMs=60000');
    await until('the read to queue on node2', async () => ((await row(two, 'live', 'lowcost'))?.queued === 1 ? true : undefined));
    expect((await http('DELETE', `${one}/api/read-balance/live/lowcost`)).status).toBe(200);
    const unbalanced = await released;
    expect(unbalanced.status).toBe(200);
    expect(unbalanced.body.readBalance).toBeUndefined();
    await applied('live', 'lowcost', (r) => r === undefined);
  });

  it('zeroes the counters on reset while reads run, and what they give back later frees nothing twice', async () => {
    const url = urls[0]!;
    expect((await put('hold', 'lowcost', { weight: 1, slots: 1 })).status).toBe(200);
    await until('node1 to apply hold', () => row(url, 'hold', 'lowcost'));
    const first = search(url, 'q=balanced&consistency=eventual&priority=hold');
    const second = search(url, 'q=balanced&consistency=eventual&priority=hold');
    await until('one read running and one queued', async () => {
      const r = await row(url, 'hold', 'lowcost');
      return r?.taken === 1 && r.queued === 1 ? true : undefined;
    });
    const reset = await http<{ slots: SlotRow[] }>('POST', `${url}/api/read-slots/reset`);
    expect(reset.status).toBe(200);
    // Zeroed: the queued read takes the freed slot at once, beside the one still running.
    expect((await Promise.all([first, second])).map((r) => r.status)).toEqual([200, 200]);
    const after = await row(url, 'hold', 'lowcost');
    expect(after).toMatchObject({ taken: 0, free: 1, queued: 0 });
    expect((await http('DELETE', `${url}/api/read-balance/hold/lowcost`)).status).toBe(200);
  });

  it('gives the slots back when the client disconnects, before the read itself ends', async () => {
    // Scans of this group take 20 s: only the disconnect can give the slot back within the test
    // (and stopping the reader afterwards does not wait for its scan to end).
    const slow = await tc.cluster.startReader(2, { group: 'slow', scanDelayMs: 20_000, snapshotExpiryMs: 600_000, drainTimeoutMs: 100 });
    const url = urls[0]!;
    try {
      expect((await put('gone', 'slow', { weight: 1, slots: 1 })).status).toBe(200);
      await until('node1 to see the slow group up', async () => ((await row(url, 'gone', 'slow'))?.up ? true : undefined));
      const client = new AbortController();
      const read = fetch(`${url}/api/collections/${C}/search?q=balanced&consistency=eventual&priority=gone`, { signal: client.signal }).catch((err: Error) => err);
      await until('the read to take its slot', async () => ((await row(url, 'gone', 'slow'))?.taken === 1 ? true : undefined));
      const queued = fetch(`${url}/api/collections/${C}/search?q=balanced&consistency=eventual&priority=gone&timeoutMs=60000`, { signal: client.signal }).catch((err: Error) => err);
      await until('a second read to queue', async () => ((await row(url, 'gone', 'slow'))?.queued === 1 ? true : undefined));
      client.abort();
      expect(await read).toBeInstanceOf(Error);
      expect(await queued).toBeInstanceOf(Error);
      expect(await until('the slot to come back', async () => {
        const r = await row(url, 'gone', 'slow');
        return r?.taken === 0 && r.queued === 0 ? r : undefined;
      })).toMatchObject({ free: 1 });
      expect((await http('DELETE', `${url}/api/read-balance/gone/slow`)).status).toBe(200);
    } finally {
      await slow.stop();
    }
  });

  it("gives a read that names no priority the node's default, balanced once that has settings", async () => {
    const url = urls[1]!;
    const before = await search(url, 'q=balanced&limit=1');
    expect(before.status).toBe(200);
    expect(before.body.readBalance).toBeUndefined();
    expect((await put('standard', 'primary', { weight: 1, slots: 2 })).status).toBe(200);
    await until('node2 to apply standard', () => row(url, 'standard', 'primary'));
    const after = await search(url, 'q=balanced&limit=1');
    expect(after.status).toBe(200);
    expect(after.body.readBalance).toMatchObject({ priority: 'standard', targets: { shard1: 'primary', shard2: 'primary' } });
    expect((await http('DELETE', `${url}/api/read-balance/standard`)).status).toBe(200);
  });

  it('balances real-time gets and export pages on the leaders', async () => {
    const url = urls[1]!;
    expect((await put('bulk', 'primary', { weight: 1, slots: 1 })).status).toBe(200);
    await until('node2 to apply bulk', () => row(url, 'bulk', 'primary'));
    const got = await http('GET', `${url}/api/collections/${C}/docs/d1?priority=bulk`);
    expect(got.status).toBe(200);
    expect(JSON.parse(got.headers.get('x-shardex-read-balance')!)).toMatchObject({ priority: 'bulk', targets: { [got.body._shard_]: 'primary' } });
    const page = await http('GET', `${url}/api/collections/${C}/export?shard=shard1&limit=5&priority=bulk`);
    expect(page.status).toBe(200);
    expect(page.body.docs).toHaveLength(5);
    expect(page.body.readBalance).toMatchObject({ priority: 'bulk', targets: { shard1: 'primary' } });
    expect(await row(url, 'bulk', 'primary')).toMatchObject({ taken: 0 });
    expect((await http('DELETE', `${url}/api/read-balance/bulk/primary`)).status).toBe(200);
  });

  it('refuses bad input with 400 naming the field, and lists unknown names as empty', async () => {
    const url = urls[0]!;
    const cases: Array<[Promise<HttpResult>, RegExp]> = [
      [search(url, 'q=x&priority=no%20spaces'), /^priority must be a name matching/],
      [http('POST', `${url}/api/collections/${C}/search`, { q: 'x', priority: 7 }), /^priority must be a name/],
      [search(url, 'q=x&timeoutMs=0'), /^timeoutMs must be an integer from 1/],
      [http('GET', `${url}/api/collections/${C}/docs/d1?priority=a/b`), /^priority must be a name/],
      [http('GET', `${url}/api/collections/${C}/export?shard=shard1&priority=%21`), /^priority must be a name/],
      [put('report', 'lowcost', { weight: -1, slots: 2 }), /weight .*>=0/],
      [put('report', 'lowcost', { weight: 'high', slots: 2 }), /weight .*expected number/],
      [put('report', 'lowcost', { weight: 1, slots: 1.5 }), /slots .*expected int/],
      [put('report', 'lowcost', { weight: 1 }), /slots .*expected number/],
      [put('report', 'lowcost', { weight: 1, slots: 1, extra: true }), /Unrecognized key: "extra"/],
      [put('a%20b', 'lowcost', { weight: 1, slots: 1 }), /priority a priority name must match/],
      [put('report', 'x'.repeat(65), { weight: 1, slots: 1 }), /target a target name must match/],
      [http('DELETE', `${url}/api/read-balance/bad%20name/lowcost`), /^priority must be a name/],
    ];
    for (const [p, message] of cases) {
      const res = await p;
      expect(res.status, JSON.stringify(res.body)).toBe(400);
      expect(res.body.code).toBe('SHX_BAD_REQUEST');
      expect(res.body.error).toMatch(message);
    }
    // Nothing changed.
    expect(await row(url, 'report', 'lowcost')).toMatchObject({ weight: 1, limit: 2 });
    expect((await http('GET', `${url}/api/read-balance?priority=nobody`)).body).toEqual({ settings: [] });
    expect((await http('GET', `${url}/api/read-balance?target=nowhere`)).body).toEqual({ settings: [] });
    const missing = await http('DELETE', `${url}/api/read-balance/nobody/lowcost`);
    expect(missing.status).toBe(404);
    expect(missing.body.error).toMatch(/no read-balance setting for "nobody" on target "lowcost"/);
  });

  it('lets the smart client set, get and erase settings, read every node\'s slots and search with a priority', async () => {
    const client = new ShardexClient({ urls, refreshIntervalMs: 0 });
    try {
      expect(await client.readBalance.set('adhoc', 'primary', { weight: 5, slots: 3 })).toEqual({ priority: 'adhoc', target: 'primary', weight: 5, slots: 3 });
      expect(await client.readBalance.get({ priority: 'adhoc' })).toEqual([{ priority: 'adhoc', target: 'primary', weight: 5, slots: 3 }]);
      expect(await client.readBalance.get({ priority: 'unheard-of' })).toEqual([]);
      expect((await client.readBalance.get()).map((s) => `${s.priority}/${s.target}`)).toEqual(['adhoc/primary', 'interactive/fast', 'report/lowcost']);
      await applied('adhoc', 'primary', (r) => r?.limit === 3);
      const nodes = await client.readSlots();
      expect(nodes.map((n) => n.node).sort()).toEqual(['node1', 'node2']);
      for (const n of nodes) expect(n.slots.find((r) => r.priority === 'adhoc')).toMatchObject({ target: 'primary', limit: 3, taken: 0, free: 3, queued: 0, up: true });
      // The opening example: a priority on a search through the nodes works now.
      const res = await client.search(C, 'balanced', { priority: 'adhoc', limit: 1 });
      expect(res.total).toBe(60);
      expect((res as unknown as { readBalance: unknown }).readBalance).toMatchObject({ priority: 'adhoc', targets: { shard1: 'primary', shard2: 'primary' } });
      expect((await client.readBalance.reset({ node: 'node2' })).map((n) => n.node)).toEqual(['node2']);
      expect(await client.readBalance.erase('adhoc', 'primary')).toBe(1);
      await expect(client.readBalance.erase('adhoc', 'primary')).rejects.toMatchObject({ code: 'SHX_NOT_FOUND' });
      // Checked in the client with the nodes' own schema: nothing is sent.
      await expect(client.readBalance.set('adhoc', 'primary', { weight: 1.5, slots: 1 })).rejects.toMatchObject({ code: 'SHX_BAD_REQUEST', message: expect.stringMatching(/weight/) });
      await expect(client.readSlots({ node: 'node9' })).rejects.toMatchObject({ code: 'SHX_NOT_FOUND' });
    } finally {
      await client.close();
    }
  });
});
