// The one-command local cluster: several nodes in one process, on consecutive loopback
// ports, sharing an embedded coordinator, talking real gRPC to each other.
import { join } from 'node:path';
import type { Logger } from 'pino';
import { ClusterCoordinator } from '../coordination/cluster.js';
import { MemoryZNodeServer } from '../coordination/memory-store.js';
import type { CollectionSpec } from '../coordination/index.js';
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
}

export class DevCluster {
  readonly server: MemoryZNodeServer;
  readonly nodes: ShardexNode[] = [];
  private readonly o: DevClusterOptions;

  constructor(opts: DevClusterOptions) {
    this.o = opts;
    this.server = new MemoryZNodeServer({ logger: opts.logger });
  }

  /** Starts a node named `node<i+1>` (also used to restart a stopped one). */
  async startNode(i: number): Promise<ShardexNode> {
    const name = `node${i + 1}`;
    const coordinator = new ClusterCoordinator({ store: this.server.connect({ chroot: '/shardex' }), logger: this.o.logger.child({ node: name }) });
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

  async start(): Promise<void> {
    for (let i = 0; i < this.o.nodes; i++) await this.startNode(i);
    const spec = this.o.collection;
    const first = this.nodes[0]!;
    if (spec && !first.coordinator.collection(spec.name)) await first.createCollection(spec);
    if (spec) {
      const state = first.collectionState(spec.name);
      await first.waitFor(() => state.shards.every((s) => first.coordinator.leader(spec.name, s.name) !== undefined), 30_000);
    }
  }

  get urls(): string[] {
    return this.nodes.filter(Boolean).map((n) => n.httpUrl);
  }

  async stop(): Promise<void> {
    for (const n of this.nodes) await n?.stop().catch(() => undefined);
    await this.server.close();
  }
}
