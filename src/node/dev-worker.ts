// One node (or snapshot reader) of the local dev cluster, in its own worker thread: its
// coordination session lives in the main thread's embedded coordinator, reached over a port.
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import { ClusterCoordinator } from '../coordination/cluster.js';
import { PortZNodeStore } from '../coordination/port-store.js';
import { SnapshotReader } from '../read/snapshot-reader.js';
import { createLogger, flushLoggerSync } from '../logger.js';
import { nodeOptionsOf, readerOptionsOf, type NodeTunables, type ReaderTunables } from './config.js';
import { ShardexNode, type ShardexNodeOptions } from './shardex-node.js';

export interface DevWorkerData {
  readonly kind: 'node' | 'reader';
  readonly name: string;
  readonly host: string;
  readonly httpPort: number;
  readonly grpcPort: number;
  readonly dataDir: string;
  readonly logFile: string;
  /** Plain data (config.ts), as structured clone carries it: the worker builds the options. */
  readonly node?: Partial<NodeTunables>;
  readonly reader?: Partial<ReaderTunables>;
  readonly http?: ShardexNodeOptions['http'];
  /** A reader's API keys (the nodes' `http.apiKeys`). */
  readonly apiKeys?: NonNullable<ShardexNodeOptions['http']>['apiKeys'];
  /** The run's cluster secret: every gRPC call between its nodes and readers carries it. */
  readonly clusterSecret: string;
  readonly port: MessagePort;
}

export type DevWorkerMessage = { type: 'ready'; http: string; grpc: string } | { type: 'stopped' } | { type: 'error'; message: string };

async function main(): Promise<void> {
  const d = workerData as DevWorkerData;
  const parent = parentPort!;
  const logger = createLogger({ file: d.logFile });
  const coordinator = new ClusterCoordinator({ store: new PortZNodeStore(d.port), logger: logger.child({ node: d.name }) });
  const common = { name: d.name, host: d.host, httpPort: d.httpPort, grpcPort: d.grpcPort, dataDir: d.dataDir, coordinator, logger, clusterSecret: d.clusterSecret };
  const server =
    d.kind === 'node'
      ? new ShardexNode({ ...common, ...nodeOptionsOf(d.node ?? {}), ...(d.http && { http: d.http }) })
      : new SnapshotReader({ ...common, ...readerOptionsOf(d.reader ?? {}), ...(d.apiKeys && { apiKeys: d.apiKeys }) });
  parent.on('message', (m: { type: string }) => {
    if (m.type !== 'stop') return;
    void server
      .stop()
      .catch((err: unknown) => logger.error({ err }, 'stop failed'))
      .finally(() => {
        flushLoggerSync(logger);
        parent.postMessage({ type: 'stopped' } satisfies DevWorkerMessage);
      });
  });
  try {
    await server.start();
    parent.postMessage({ type: 'ready', http: server.httpUrl, grpc: server.grpcAddress } satisfies DevWorkerMessage);
  } catch (err) {
    parent.postMessage({ type: 'error', message: err instanceof Error ? err.message : String(err) } satisfies DevWorkerMessage);
  }
}

void main();
