// Helpers for tests that start real nodes: a DevCluster on free loopback ports in a temp
// dir (nodes in this thread, for tests that reach into them), the cluster `npm start` runs
// (nodes in worker threads, for tests that use only their ports), HTTP helpers, and the
// cluster view.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { CollectionSpec } from '../../src/coordination/index.js';
import type { NodeTunables } from '../../src/node/config.js';
import { DevCluster, type DevClusterOptions } from '../../src/node/dev-cluster.js';
import { silentLogger } from '../../src/logger.js';
import { assertBuilt } from './cli-run.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

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
  const stop = await started(cluster, dataDir);
  return { cluster, urls: cluster.urls, dataDir, stop };
}

/** Starts `cluster`; returns its stop, which also removes `dataDir` (run at once when the start fails). */
async function started(cluster: { start(): Promise<void>; stop(): Promise<void> }, dataDir: string): Promise<() => Promise<void>> {
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
  return stop;
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

/** `npm start`'s own cluster (ThreadedDevCluster from dist/: each member in a worker thread), for tests that use only its ports. */
export interface ThreadedTestCluster {
  /** HTTP URL of each node, node1 first. */
  readonly urls: string[];
  /** HTTP URL of each snapshot reader. */
  readonly readerUrls: string[];
  readonly dataDir: string;
  stop(): Promise<void>;
}

export interface ThreadedClusterOptions {
  readonly nodes: number;
  readonly readers?: number;
  readonly collection?: CollectionSpec;
  /** Every node's tunables, as `shardex dev` takes them from flags, env or a config file. */
  readonly node?: Partial<NodeTunables>;
}

/**
 * Starts the cluster `shardex dev` runs (the built one: workers load dist/) on free loopback
 * ports in a temp dir, its logs in a file there; `stop()` ends every worker and removes the dir.
 * Node retries pause as briefly as startCluster's (50 ms growing to 200 ms).
 */
export async function startThreadedCluster(opts: ThreadedClusterOptions): Promise<ThreadedTestCluster> {
  await assertBuilt('node/dev-threads.ts');
  const { ThreadedDevCluster } = (await import(pathToFileURL(join(ROOT, 'dist/node/dev-threads.js')).href)) as typeof import('../../src/node/dev-threads.js');
  const dataDir = await mkdtemp(join(tmpdir(), 'shardex-threads-'));
  const cluster = new ThreadedDevCluster({
    nodes: opts.nodes,
    readers: opts.readers ?? 0,
    port: 0,
    dataDir: join(dataDir, 'data'),
    logFile: join(dataDir, 'cluster.log'),
    logger: silentLogger(),
    ...(opts.collection && { collection: opts.collection }),
    node: { retryPause: 50, retryPauseMax: 200, ...opts.node },
  });
  const stop = await started(cluster, dataDir);
  return { urls: cluster.nodes.map((n) => n.http), readerUrls: cluster.readers.map((r) => r.http), dataDir, stop };
}
