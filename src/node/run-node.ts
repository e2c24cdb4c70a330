// `shardex node`: one node process of a ZooKeeper-coordinated cluster.
import { resolve } from 'node:path';
import { ClusterCoordinator } from '../coordination/cluster.js';
import { ZooKeeperStore } from '../coordination/zookeeper-store.js';
import { SnapshotReader } from '../read/snapshot-reader.js';
import { createLogger } from './logger.js';
import { ShardexNode } from './shardex-node.js';

export interface RunNodeOptions {
  readonly zk: string;
  readonly port: number;
  readonly grpcPort?: number;
  readonly data: string;
  readonly name?: string;
  readonly host: string;
  readonly zkTimeout: number;
  readonly logRetention?: number;
}

export async function runNode(o: RunNodeOptions): Promise<ShardexNode> {
  const logger = createLogger();
  const name = o.name ?? `${o.host}_${o.port}`;
  const store = await ZooKeeperStore.connect({ connectString: o.zk, sessionTimeoutMs: o.zkTimeout, logger });
  // Stop acting as leader after a third of the session timeout without ZooKeeper: by then
  // the session may have expired and another replica may lead.
  const coordinator = new ClusterCoordinator({ store, logger: logger.child({ node: name }), leaderGraceMs: Math.floor(o.zkTimeout / 3) });
  const node = new ShardexNode({
    name,
    host: o.host,
    httpPort: o.port,
    grpcPort: o.grpcPort ?? (o.port === 0 ? 0 : o.port + 1000),
    dataDir: resolve(o.data),
    coordinator,
    logger,
    ...(o.logRetention !== undefined && { logRetention: o.logRetention }),
  });
  const stop = async (signal: string): Promise<void> => {
    logger.info({ signal }, 'stopping');
    await node.stop();
    logger.flush();
    process.exit(0);
  };
  process.once('SIGINT', () => void stop('SIGINT'));
  process.once('SIGTERM', () => void stop('SIGTERM'));
  await node.start();
  process.stdout.write(JSON.stringify({ ready: true, name, http: node.httpUrl, grpc: node.grpcAddress }) + '\n');
  return node;
}

export interface RunReaderOptions {
  readonly zk: string;
  readonly group: string;
  readonly port: number;
  readonly grpcPort?: number;
  readonly data: string;
  readonly name?: string;
  readonly host: string;
  readonly zkTimeout: number;
  readonly snapshotExpiry: number;
  readonly diskBudget?: number;
  readonly maxScans: number;
}

/** `shardex reader`: one snapshot reader process. */
export async function runReader(o: RunReaderOptions): Promise<SnapshotReader> {
  const logger = createLogger();
  const name = o.name ?? `${o.host}_${o.port}`;
  const store = await ZooKeeperStore.connect({ connectString: o.zk, sessionTimeoutMs: o.zkTimeout, logger });
  const coordinator = new ClusterCoordinator({ store, logger: logger.child({ node: name }) });
  const reader = new SnapshotReader({
    name,
    group: o.group,
    host: o.host,
    httpPort: o.port,
    grpcPort: o.grpcPort ?? (o.port === 0 ? 0 : o.port + 1000),
    dataDir: resolve(o.data),
    coordinator,
    logger,
    snapshotExpiryMs: o.snapshotExpiry,
    maxScans: o.maxScans,
    ...(o.diskBudget !== undefined && { diskBudgetBytes: o.diskBudget }),
  });
  const stop = async (): Promise<void> => {
    await reader.stop();
    logger.flush();
    process.exit(0);
  };
  process.once('SIGINT', () => void stop());
  process.once('SIGTERM', () => void stop());
  await reader.start();
  process.stdout.write(JSON.stringify({ ready: true, name, http: reader.httpUrl, grpc: reader.grpcAddress, group: reader.group }) + '\n');
  return reader;
}
