/// <reference lib="dom" />
// Issue 13, the cluster page: GET / in real headless Chromium (Debian's, driven by playwright-core)
// against a running cluster with API keys on. The page asks for a key, takes one typed into it or
// from a #key= fragment, and shows each shard's range, its leader and its replicas' states and
// the readers' cached shards, from the node's JSON endpoints; when a node stops, its replicas
// show as down after the page's next refresh.
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium } from '../support/chromium.js';
import { http, startCluster, type ClusterView, type TestCluster } from '../support/cluster.js';
import { KEYS, bearer, keyEntries } from '../support/guarded-node.js';

const C = 'paged';
const WAIT_MS = 30_000;

let tc: TestCluster;
let browser: Browser;
const pages: Page[] = [];

beforeAll(async () => {
  tc = await startCluster({
    nodes: 3,
    readers: 1,
    collection: { name: C, numShards: 2, replicationFactor: 3, router: 'compositeId', autoCommitMs: 0 },
    nodeOptions: { http: { apiKeys: keyEntries() } },
  });
  browser = await launchChromium();
}, 300_000);

afterAll(async () => {
  for (const p of pages) await p.close().catch(() => undefined);
  await browser?.close().catch(() => undefined);
  await tc?.stop();
});

async function openPage(path: string): Promise<Page> {
  const page = await browser.newPage();
  pages.push(page);
  page.setDefaultTimeout(WAIT_MS);
  const res = await page.goto(`${tc.urls[0]}${path}`);
  expect(res?.status()).toBe(200);
  expect(res?.headers()['content-type']).toContain('text/html');
  return page;
}

const view = async (): Promise<ClusterView> => (await http<ClusterView>('GET', `${tc.urls[0]}/api/cluster`, undefined, bearer(KEYS.reader))).body;

/** What the page shows of each shard of C: range, leader, and each replica's node, state and leader mark. */
function shownShards(page: Page): Promise<Record<string, { range: string; leader: string; replicas: Array<{ node: string; state: string; leader: boolean }> }>> {
  return page.$$eval(`.collection[data-collection="${C}"] tr.shard`, (rows) =>
    Object.fromEntries(
      rows.map((row) => [
        row.getAttribute('data-shard'),
        {
          range: row.querySelector('.range')!.textContent,
          leader: row.querySelector('.leader')!.textContent,
          replicas: [...row.querySelectorAll('.replica')].map((r) => ({
            node: r.getAttribute('data-node'),
            state: r.getAttribute('data-state'),
            leader: r.getAttribute('data-leader') === 'true',
          })),
        },
      ]),
    ),
  );
}

describe('the cluster page', () => {
  it('asks for an API key, and shows the cluster once one is typed in', async () => {
    const page = await openPage('/');
    await page.waitForSelector('#status[data-state="auth"]');
    expect(await page.textContent('#status')).toContain('requires an API key');
    expect(await page.$$('.collection')).toHaveLength(0);

    await page.fill('#key', KEYS.reader);
    await page.click('#key-form button');
    await page.waitForSelector(`.collection[data-collection="${C}"] tr.shard`);
    expect(await page.getAttribute('#status', 'data-state')).toBe('ok');
  });

  it('shows every shard with its range, a leader, and its replicas active (key from #key=)', async () => {
    const page = await openPage(`/#key=${encodeURIComponent(KEYS.reader)}`);
    await page.waitForSelector(`.collection[data-collection="${C}"] tr.shard`);
    // The key is kept for the tab, not left in the address bar.
    expect(page.url()).not.toContain('key=');

    const shards = await shownShards(page);
    expect(Object.keys(shards)).toEqual(['shard1', 'shard2']);
    expect(shards.shard1!.range).toBe('80000000-ffffffff');
    expect(shards.shard2!.range).toBe('0-7fffffff');
    const expected = (await view()).collections[C]!.shards;
    for (const [name, s] of Object.entries(shards)) {
      expect(s.leader).toBe(expected[name]!.leader);
      expect(['node1', 'node2', 'node3']).toContain(s.leader);
      expect(s.replicas.map((r) => r.node).sort()).toEqual(['node1', 'node2', 'node3']);
      expect(s.replicas.every((r) => r.state === 'active')).toBe(true);
      expect(s.replicas.filter((r) => r.leader).map((r) => r.node)).toEqual([s.leader]);
    }
    const nodes = await page.$$eval('#nodes tr[data-node]', (rows) => rows.map((r) => `${r.getAttribute('data-node')}:${r.getAttribute('data-role')}`));
    expect(nodes.sort()).toEqual(['node1:data', 'node2:data', 'node3:data', 'reader1:reader']);
  });

  it("shows the shards a reader has cached once an eventual read made it copy them", async () => {
    const page = await openPage(`/#key=${encodeURIComponent(KEYS.reader)}`);
    await page.waitForSelector('#readers tr[data-reader="reader1"]');
    const search = await http('GET', `${tc.urls[0]}/api/collections/${C}/search?q=anything&consistency=eventual`, undefined, bearer(KEYS.reader));
    expect(search.status, JSON.stringify(search.body)).toBe(200);
    await page.waitForSelector(`#readers tr[data-reader="reader1"] .cached[data-shard="${C}/shard1"]`);
    await page.waitForSelector(`#readers tr[data-reader="reader1"] .cached[data-shard="${C}/shard2"]`);
  });

  it("shows a stopped node's replicas as down after it refreshes, and the shards' new leaders", async () => {
    const page = await openPage(`/#key=${encodeURIComponent(KEYS.reader)}`);
    await page.waitForSelector(`.collection[data-collection="${C}"] .replica[data-node="node3"][data-state="active"]`);
    // node3 is one of the nodes this test started (in this process); the page is served by node1.
    await tc.cluster.nodes[2]!.stop();
    await page.waitForFunction(
      (c) => {
        const replicas = [...document.querySelectorAll(`.collection[data-collection="${c}"] .replica[data-node="node3"]`)];
        const leaders = [...document.querySelectorAll(`.collection[data-collection="${c}"] tr.shard .leader`)].map((l) => l.textContent);
        const others = [...document.querySelectorAll(`.collection[data-collection="${c}"] .replica:not([data-node="node3"])`)];
        return (
          replicas.length === 2 &&
          replicas.every((r) => r.getAttribute('data-state') === 'down') &&
          leaders.length === 2 &&
          leaders.every((l) => l === 'node1' || l === 'node2') &&
          others.length === 4 &&
          others.every((r) => r.getAttribute('data-state') === 'active')
        );
      },
      C,
      { timeout: WAIT_MS },
    );
    const shards = await shownShards(page);
    for (const s of Object.values(shards)) {
      expect(s.replicas.find((r) => r.node === 'node3')).toMatchObject({ state: 'down', leader: false });
      expect(s.replicas.filter((r) => r.leader).map((r) => r.node)).toEqual([s.leader]);
    }
    expect(await page.$$('#nodes tr[data-node="node3"]')).toHaveLength(0);
  });
});
