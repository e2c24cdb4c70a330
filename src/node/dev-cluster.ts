// The one-command local cluster: several nodes in one process, on consecutive loopback
// ports, sharing an embedded coordinator (kept under <dataDir>/coordinator, as by `shardex dev`),
// talking real gRPC to each other.
import { join } from 'node:path';
import type { Logger } from 'pino';
import { ClusterCoordinator } from '../coordination/cluster.js';
import type { MemoryZNodeServer } from '../coordination/memory-store.js';
import type { CollectionSpec } from '../coordination/index.js';
import { SnapshotReader, type SnapshotReaderOptions } from '../read/snapshot-reader.js';
import { DEV_CHROOT, openDevCoordinator } from './dev-data.js';
import { ShardexNode, type ShardexNodeOptions } from './shardex-node.js';

export interface DevClusterOptions {
  readonly nodes: number;
  /** HTTP port of the first node; 0 = any free ports. */
  readonly port: number;
  readonly dataDir: string;
  readonly logger: Logger;
  readonly host?: string;
  /** Collection created at start when absent. */
  readonly collection?: CollectionSpec;
  /** Extra options for every node (tests shorten retries with these). */
  readonly nodeOptions?: Partial<ShardexNodeOptions>;
  /** Snapshot readers to start in the default group. */
  readonly readers?: number;
  /** Extra options for every reader. */
  readonly readerOptions?: Partial<SnapshotReaderOptions>;
}

export class DevCluster {
  readonly nodes: ShardexNode[] = [];
  readonly readers: SnapshotReader[] = [];
  private readonly o: DevClusterOptions;
  private coordinator: MemoryZNodeServer | undefined;
  private opening: Promise<MemoryZNodeServer> | undefined;

  constructor(opts: DevClusterOptions) {
    this.o = opts;
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

  /** Starts a node named `node<i+1>` (also used to restart a stopped one). */
  async startNode(i: number): Promise<ShardexNode> {
    const name = `node${i + 1}`;
    const server = await this.open();
    const coordinator = new ClusterCoordinator({ store: server.connect({ chroot: DEV_CHROOT }), logger: this.o.logger.child({ node: name }) });
    const node = new ShardexNode({
      name,
      host: this.o.host ?? '127.0.0.1',
      httpPort: this.o.port === 0 ? 0 : this.o.port + i,
      grpcPort: this.o.port === 0 ? 0 : this.o.port + 1000 + i,
      dataDir: join(this.o.dataDir, name),
      coordinator,
      logger: this.o.logger,
      ...this.o.nodeOptions,
    });
    await node.start();
    this.nodes[i] = node;
    return node;
  }

  /** Starts a snapshot reader named `reader<i+1>` (also used to restart one). */
  async startReader(i: number, options: Partial<SnapshotReaderOptions> = {}): Promise<SnapshotReader> {
    const name = `reader${i + 1}`;
    const server = await this.open();
    const coordinator = new ClusterCoordinator({ store: server.connect({ chroot: DEV_CHROOT }), logger: this.o.logger.child({ node: name }) });
    const reader = new SnapshotReader({
      name,
      host: this.o.host ?? '127.0.0.1',
      httpPort: this.o.port === 0 ? 0 : this.o.port + 100 + i,
      grpcPort: this.o.port === 0 ? 0 : this.o.port + 1100 + i,
      dataDir: join(this.o.dataDir, name),
      coordinator,
      logger: this.o.logger,
      snapshotExpiryMs: 5000,
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
    const spec = this.o.collection;
    const first = this.nodes[0]!;
    if (spec && !first.coordinator.collection(spec.name)) await first.createCollection(spec);
    if (spec) await this.waitAllActive(30_000);
  }

  /** Resolves once every replica of every collection is open, recovered and active. */
  async waitAllActive(ms: number): Promise<void> {
    for (const node of this.nodes) {
      if (!node) continue;
      await node.waitFor(() => {
        for (const [c, state] of node.coordinator.collections()) {
          for (const s of state.shards) {
            if (node.coordinator.leader(c, s.name) === undefined) return false;
            if (s.replicas.some((r) => r.state !== 'active')) return false;
            if (!s.replicas.some((r) => r.node === node.name)) continue;
            const r = node.replica(c, s.name);
            if (!r || r.health !== 'active' || r.recovering) return false;
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
