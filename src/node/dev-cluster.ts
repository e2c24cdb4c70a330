// The local cluster in one thread: several nodes in one process, on consecutive loopback ports,
// sharing an embedded coordinator (kept under <dataDir>/coordinator), talking real gRPC to each
// other. `shardex dev` runs the same cluster with each member in a worker thread (dev-threads.ts).
// Both lay members out, configure them (config.ts), give their starter its own key and create
// their collection over HTTP with the functions here, so that they differ only in where a member
// runs. Tests use this one because they reach into nodes (replicas, clocks, injected faults),
// which a worker thread cannot hand over.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { ClusterCoordinator } from '../coordination/cluster.js';
import type { MemoryZNodeServer } from '../coordination/memory-store.js';
import type { CollectionSpec } from '../coordination/index.js';
import { SnapshotReader, type SnapshotReaderOptions } from '../read/snapshot-reader.js';
import { ShardexError } from '../errors.js';
import { DEV_CHROOT, openDevCoordinator } from './dev-data.js';
import { keyDigest } from './http/auth.js';
import { NODE_TUNABLE_KEYS, READER_TUNABLE_KEYS, checkTunables, defaultOf, nodeOptionsOf, readerOptionsOf, type NodeTunables, type ReaderTunables } from './config.js';
import { ShardexNode, type ShardexNodeOptions } from './shardex-node.js';
import { handoversOf } from './leader-balance.js';

/** Where member i of a dev cluster lives: nodes from the base port (gRPC +1000), readers from base + 100; port 0: any free ports. */
export function devMember(kind: 'node' | 'reader', i: number, o: { readonly port: number; readonly dataDir: string; readonly host?: string }) {
  const name = kind === 'node' ? `node${i + 1}` : `reader${i + 1}`;
  const base = o.port + (kind === 'reader' ? 100 : 0) + i;
  return { name, host: o.host ?? '127.0.0.1', httpPort: o.port === 0 ? 0 : base, grpcPort: o.port === 0 ? 0 : base + 1000, dataDir: join(o.dataDir, name) };
}

/** The dev readers' tunables: `shardex dev`'s defaults (readers that refresh often), then what was given. */
export function devReaderTunables(given: Partial<ReaderTunables> = {}): Partial<ReaderTunables> {
  return { snapshotExpiry: defaultOf('dev', 'snapshotExpiry') as number, ...given };
}

/** A dev cluster's node and reader tunables, checked by the config schema as `shardex dev`'s flags are. */
export function checkDevTunables(o: { readonly node?: Partial<NodeTunables>; readonly reader?: Partial<ReaderTunables> }): void {
  if (o.node) checkTunables('node', NODE_TUNABLE_KEYS, o.node);
  if (o.reader) checkTunables('reader', READER_TUNABLE_KEYS, o.reader);
}

type NodeHttp = ShardexNodeOptions['http'];

/** How the process that starts a dev cluster reaches its nodes: with keys required, by its own admin key. */
export interface StarterAccess {
  /** The nodes' HTTP settings, with the starter's key added when keys are required. */
  readonly http: NodeHttp;
  /** Headers of the starter's own requests (the cluster view, creating the collection). */
  readonly headers: Readonly<Record<string, string>>;
}

/** The starter's access: its key is random, held only in this process's memory, never printed. */
export function starterAccess(http: NodeHttp): StarterAccess {
  const keys = http?.apiKeys;
  if (keys === undefined) return { http, headers: {} };
  const key = randomBytes(32).toString('hex');
  return {
    http: { ...http, apiKeys: [...keys, { name: 'shardex-dev (internal)', sha256: keyDigest(key).toString('hex'), roles: ['admin'] }] },
    headers: { authorization: `Bearer ${key}` },
  };
}

/**
 * Creates `spec` through the node at `url` (as a user would, so that the request is checked as
 * theirs) unless the cluster has it; resolves with the names of the cluster's collections.
 */
export async function ensureCollection(url: string, spec: CollectionSpec | undefined, headers: Readonly<Record<string, string>>): Promise<string[]> {
  const view = (await (await fetch(`${url}/api/cluster`, { headers })).json()) as { collections: Record<string, unknown> };
  const names = Object.keys(view.collections);
  if (!spec || names.includes(spec.name)) return names;
  const created = await fetch(`${url}/api/collections`, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify(collectionRequest(spec)) });
  if (created.status !== 201) throw new ShardexError('SHX_INTERNAL', `could not create collection ${spec.name}: ${await created.text()}`);
  return [...names, spec.name];
}

/** A collection spec as the body of `POST /api/collections`: every part of it, none dropped. */
export function collectionRequest(spec: CollectionSpec): Record<string, unknown> {
  return {
    name: spec.name,
    numShards: spec.numShards,
    replicationFactor: spec.replicationFactor,
    router: spec.router,
    ...(spec.fields && { fields: spec.fields }),
    // A spec without autoCommitMs means none (the node reads it as 0); the HTTP API's default is 15 s.
    autoCommit: (spec.autoCommitMs ?? 0) === 0 ? 'off' : `${spec.autoCommitMs}ms`,
    ...(spec.durability !== undefined && { durability: spec.durability }),
    ...(spec.syncIntervalMs !== undefined && { syncInterval: `${spec.syncIntervalMs}ms` }),
  };
}

export interface DevClusterOptions {
  readonly nodes: number;
  /** HTTP port of the first node; 0 = any free ports. */
  readonly port: number;
  readonly dataDir: string;
  readonly logger: Logger;
  readonly host?: string;
  /** Collection created at start when absent. */
  readonly collection?: CollectionSpec;
  /** Every node's tunables, as `shardex dev` takes them (config.ts). */
  readonly node?: Partial<NodeTunables>;
  /** Extra options for every node, over the tunables (tests inject clocks and faults with these). */
  readonly nodeOptions?: Partial<ShardexNodeOptions>;
  /** Snapshot readers to start in the default group. */
  readonly readers?: number;
  /** Every reader's tunables, as `shardex dev` takes them. */
  readonly reader?: Partial<ReaderTunables>;
  /** Extra options for every reader, over the tunables. */
  readonly readerOptions?: Partial<SnapshotReaderOptions>;
}

export class DevCluster {
  readonly nodes: ShardexNode[] = [];
  readonly readers: SnapshotReader[] = [];
  private readonly o: DevClusterOptions;
  private readonly access: StarterAccess;
  private coordinator: MemoryZNodeServer | undefined;
  private opening: Promise<MemoryZNodeServer> | undefined;

  constructor(opts: DevClusterOptions) {
    this.o = opts;
    checkDevTunables(opts);
    this.access = starterAccess(opts.nodeOptions?.http);
  }

  /** The embedded coordinator; opened by start() (or the first startNode/startReader). */
  get server(): MemoryZNodeServer {
    if (!this.coordinator) throw new Error('the dev cluster is not started');
    return this.coordinator;
  }

  private open(): Promise<MemoryZNodeServer> {
    this.opening ??= openDevCoordinator(this.o.dataDir, this.o.logger).then((c) => (this.coordinator = c.server));
    return this.opening;
  }

  /** Starts a node named `node<i+1>` (also used to restart a stopped one), with `options` over the cluster's node options. */
  async startNode(i: number, options: Partial<ShardexNodeOptions> = {}): Promise<ShardexNode> {
    const member = devMember('node', i, this.o);
    const server = await this.open();
    const coordinator = new ClusterCoordinator({ store: server.connect({ chroot: DEV_CHROOT }), logger: this.o.logger.child({ node: member.name }) });
    const node = new ShardexNode({
      ...member,
      coordinator,
      logger: this.o.logger,
      ...nodeOptionsOf(this.o.node ?? {}),
      ...this.o.nodeOptions,
      ...(this.access.http && { http: this.access.http }),
      ...options,
    });
    await node.start();
    this.nodes[i] = node;
    return node;
  }

  /** Starts a snapshot reader named `reader<i+1>` (also used to restart one). */
  async startReader(i: number, options: Partial<SnapshotReaderOptions> = {}): Promise<SnapshotReader> {
    const member = devMember('reader', i, this.o);
    const server = await this.open();
    const coordinator = new ClusterCoordinator({ store: server.connect({ chroot: DEV_CHROOT }), logger: this.o.logger.child({ node: member.name }) });
    const reader = new SnapshotReader({
      ...member,
      coordinator,
      logger: this.o.logger,
      ...readerOptionsOf(devReaderTunables(this.o.reader)),
      // Readers take the nodes' keys, as `shardex dev`'s do.
      ...(this.access.http?.apiKeys && { apiKeys: this.access.http.apiKeys }),
      ...this.o.readerOptions,
      ...options,
    });
    await reader.start();
    this.readers[i] = reader;
    return reader;
  }

  async start(): Promise<void> {
    for (let i = 0; i < this.o.nodes; i++) await this.startNode(i);
    for (let i = 0; i < (this.o.readers ?? 0); i++) await this.startReader(i);
    // As `shardex dev` does (dev-threads.ts): the collection is asked for over HTTP.
    const spec = this.o.collection;
    if (!spec) return;
    await ensureCollection(this.nodes[0]!.httpUrl, spec, this.access.headers);
    await this.waitAllActive(30_000);
  }

  /** Resolves once every replica of every collection is open, recovered and active, and no leader has a handover to make (leader balance). */
  async waitAllActive(ms: number): Promise<void> {
    for (const node of this.nodes) {
      if (!node) continue;
      await node.waitFor(() => {
        for (const [c, state] of node.coordinator.collections()) {
          // Handovers after creation or a restart are over: tests start from the balanced leaders.
          if (handoversOf(node.coordinator, state).size > 0) return false;
          for (const s of state.shards) {
            const leader = node.coordinator.leader(c, s.name);
            if (leader === undefined) return false;
            if (s.replicas.some((r) => r.state !== 'active')) return false;
            if (!s.replicas.some((r) => r.node === node.name)) continue;
            const r = node.replica(c, s.name);
            if (!r || r.health !== 'active' || r.recovering) return false;
            // The leader takes writes only once it has announced its epoch and synced (ready).
            if (leader.node === node.name && r.role !== 'leader') return false;
          }
        }
        return true;
      }, ms);
    }
  }

  get urls(): string[] {
    return this.nodes.filter(Boolean).map((n) => n.httpUrl);
  }

  async stop(): Promise<void> {
    for (const r of this.readers) await r?.stop().catch(() => undefined);
    for (const n of this.nodes) await n?.stop().catch(() => undefined);
    await this.coordinator?.close();
  }
}
