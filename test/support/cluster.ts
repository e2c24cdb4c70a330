// Helpers for tests that start real nodes: a DevCluster on free loopback ports in a temp
// dir, HTTP helpers, and the cluster view.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DevCluster, type DevClusterOptions } from '../../src/node/dev-cluster.js';
import { silentLogger } from '../../src/logger.js';

export interface TestCluster {
  readonly cluster: DevCluster;
  readonly urls: string[];
  readonly dataDir: string;
  stop(): Promise<void>;
}

/** Starts a dev cluster on port 0 in a temp dir; `stop()` removes it. */
export async function startCluster(opts: Partial<DevClusterOptions> & { nodes: number }): Promise<TestCluster> {
  const dataDir = await mkdtemp(join(tmpdir(), 'shardex-test-'));
  const cluster = new DevCluster({
    port: 0,
    dataDir,
    logger: silentLogger(),
    ...opts,
    nodeOptions: { backoff: (n) => Math.min(50 * n, 200), ...opts.nodeOptions },
  });
  const stop = async (): Promise<void> => {
    await cluster.stop();
    await rm(dataDir, { recursive: true, force: true });
  };
  try {
    await cluster.start();
  } catch (err) {
    await stop();
    throw err;
  }
  return { cluster, urls: cluster.urls, dataDir, stop };
}

export interface HttpResult<T = any> {
  readonly status: number;
  readonly body: T;
  readonly headers: Headers;
}

export async function http<T = any>(method: string, url: string, body?: unknown, headers: Record<string, string> = {}): Promise<HttpResult<T>> {
  const init: RequestInit = { method, headers: { ...headers } };
  if (body !== undefined) {
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
    (init.headers as Record<string, string>)['content-type'] ??= 'application/json';
  }
  const res = await fetch(url, init);
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* not JSON: keep the text */
  }
  return { status: res.status, body: parsed as T, headers: res.headers };
}

export interface ClusterView {
  nodes: Array<{ name: string; http: string; grpc: string; role: string }>;
  collections: Record<string, { shards: Record<string, { range: string; leader: string | null; replicas: Array<{ node: string; state: string }> }> }>;
}

export async function clusterView(url: string): Promise<ClusterView> {
  return (await http<ClusterView>('GET', `${url}/api/cluster`)).body;
}
