// `shardex node`: one node process of a ZooKeeper-coordinated cluster.
import { resolve } from 'node:path';
import { ClusterCoordinator } from '../coordination/cluster.js';
import { ZooKeeperStore } from '../coordination/zookeeper-store.js';
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
