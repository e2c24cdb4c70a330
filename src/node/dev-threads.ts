// The one-command local cluster on every core: each node (and snapshot reader) runs in its own
// worker thread, all around one embedded coordinator in the main thread, whose tree is kept under
// <dataDir>/coordinator (dev-data.ts) so that a restart finds every collection again. Nodes talk
// real HTTP and gRPC on loopback, exactly as separate processes would.
import { randomBytes } from 'node:crypto';
import { MessageChannel, Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { MemoryZNodeServer } from '../coordination/memory-store.js';
import { servePort } from '../coordination/port-store.js';
import type { CollectionSpec } from '../coordination/index.js';
import { ShardexError } from '../errors.js';
import { DEV_CHROOT, openDevCoordinator } from './dev-data.js';
import type { DevWorkerData, DevWorkerMessage } from './dev-worker.js';
import type { NodeTunables, ReaderTunables } from './config.js';
import { checkDevTunables, devMember, devReaderTunables, ensureCollection, starterAccess, type StarterAccess } from './dev-cluster.js';
import type { ShardexNodeOptions } from './shardex-node.js';

export interface ThreadedDevClusterOptions {
  readonly nodes: number;
  readonly readers: number;
  /** HTTP port of the first node; the others follow, gRPC at +1000, readers at +100. */
  readonly port: number;
  readonly dataDir: string;
  readonly logFile: string;
  readonly logger: Logger;
  readonly host?: string;
  /** Collection created at start when absent. */
  readonly collection?: CollectionSpec;
  /** Every node's tunables (config.ts): retries, in-flight, read balancer, LevelDB, ... */
  readonly node?: Partial<NodeTunables>;
  /** Every reader's tunables (config.ts); the snapshot expiry defaults to `shardex dev`'s. */
  readonly reader?: Partial<ReaderTunables>;
  /** Every node's HTTP settings: API keys, limits. */
  readonly http?: ShardexNodeOptions['http'];
}

interface Member {
  readonly name: string;
  readonly kind: 'node' | 'reader';
  readonly worker: Worker;
  http: string;
  grpc: string;
}

const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 15_000;

/** A collection as the cluster reports it once settled. */
export interface CollectionLayout {
  readonly shards: number;
  readonly replicas: number;
}

export class ThreadedDevCluster {
  readonly members: Member[] = [];
  /** Collections the data dir held at start (empty on a first start). */
  restored: string[] = [];
  /** Every collection, once start() has seen them settle. */
  readonly collections = new Map<string, CollectionLayout>();
  private readonly o: ThreadedDevClusterOptions;
  private coordinator: MemoryZNodeServer | undefined;
  private stopping = false;
  private readonly access: StarterAccess;
  /** A cluster secret for this run, random, never printed: only its own members reach each other over gRPC. */
  private readonly clusterSecret = randomBytes(32).toString('hex');

  constructor(opts: ThreadedDevClusterOptions) {
    this.o = opts;
    checkDevTunables(opts);
    this.access = starterAccess(opts.http);
  }

  /** The embedded coordinator; opened by start(). */
  get server(): MemoryZNodeServer {
    if (!this.coordinator) throw new Error('the dev cluster is not started');
    return this.coordinator;
  }

  get nodes(): Member[] {
    return this.members.filter((m) => m.kind === 'node');
  }

  get readers(): Member[] {
    return this.members.filter((m) => m.kind === 'reader');
  }

  private async startMember(kind: 'node' | 'reader', i: number): Promise<Member> {
    const { name, ...where } = devMember(kind, i, this.o);
    const { port1, port2 } = new MessageChannel();
    servePort(port1, this.server, { chroot: DEV_CHROOT });
    const data: DevWorkerData = {
      kind,
      name,
      ...where,
      logFile: this.o.logFile,
      ...(kind === 'node' && this.o.node && { node: this.o.node }),
      ...(kind === 'reader' && { reader: devReaderTunables(this.o.reader) }),
      ...(kind === 'node' && this.access.http && { http: this.access.http }),
      // Readers take the same keys as the nodes (their /api/reader and /metrics).
      ...(kind === 'reader' && this.access.http?.apiKeys && { apiKeys: this.access.http.apiKeys }),
      clusterSecret: this.clusterSecret,
      port: port2,
    };
    // A larger young generation: ingest allocates many short-lived objects per document, and
    // fewer scavenges measurably cut the GC's share.
    const worker = new Worker(new URL('./dev-worker.js', import.meta.url), {
      workerData: data,
      transferList: [port2],
      resourceLimits: { maxYoungGenerationSizeMb: 64 },
    });
    const member: Member = { name, kind, worker, http: '', grpc: '' };
    this.members.push(member);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new ShardexError('SHX_TIMEOUT', `${name} did not start within ${START_TIMEOUT_MS / 1000} s; see ${this.o.logFile}`)), START_TIMEOUT_MS);
      const done = (err?: Error): void => {
        clearTimeout(timer);
        worker.off('message', onMessage);
        if (err) reject(err);
        else resolve();
      };
      const onMessage = (m: DevWorkerMessage): void => {
        if (m.type === 'ready') {
          member.http = m.http;
          member.grpc = m.grpc;
          done();
        } else if (m.type === 'error') done(new ShardexError('SHX_BAD_CONFIG', `${name} could not start: ${m.message}`));
      };
      worker.on('message', onMessage);
      worker.once('error', (err) => done(err));
      worker.once('exit', (code) => done(new ShardexError('SHX_INTERNAL', `${name} exited (code ${code}) while starting; see ${this.o.logFile}`)));
    });
    // A member that dies while the cluster runs: its session has ended with its port (its shards
    // fail over); say so where the user looks.
    worker.once('exit', (code) => {
      if (!this.stopping) this.o.logger.error({ member: name, code }, `${name} stopped unexpectedly (see ${this.o.logFile}); its shards fail over to the other nodes; restart the dev cluster to bring it back`);
    });
    return member;
  }

  /** Opens the coordinator (refusing a damaged data dir), starts every member, creates the collection if absent, waits until all settle. */
  async start(): Promise<void> {
    const opened = await openDevCoordinator(this.o.dataDir, this.o.logger);
    this.coordinator = opened.server;
    this.restored = opened.restored;
    for (let i = 0; i < this.o.nodes; i++) await this.startMember('node', i);
    for (let i = 0; i < this.o.readers; i++) await this.startMember('reader', i);
    const names = await ensureCollection(this.nodes[0]!.http, this.o.collection, this.access.headers);
    await this.waitSettled(names);
  }

  /**
   * Until every node sees every shard of each collection with a leader and every replica active:
   * a leader acting on a view older than another node's could still count a replica out.
   */
  private async waitSettled(collections: readonly string[]): Promise<void> {
    const deadline = Date.now() + START_TIMEOUT_MS;
    type View = { collections: Record<string, { shards: Record<string, { leader: string | null; replicas: Array<{ state: string }> }> }> };
    const settled = async (url: string): Promise<boolean> => {
      const view = (await (await fetch(`${url}/api/cluster`, { headers: this.access.headers })).json()) as View;
      return collections.every((c) => {
        const shards = Object.values(view.collections[c]?.shards ?? {});
        if (shards.length === 0 || !shards.every((s) => s.leader !== null && s.replicas.every((r) => r.state === 'active'))) return false;
        this.collections.set(c, { shards: shards.length, replicas: Math.max(...shards.map((s) => s.replicas.length)) });
        return true;
      });
    };
    for (;;) {
      if ((await Promise.all(this.nodes.map((n) => settled(n.http)))).every(Boolean)) return;
      if (Date.now() > deadline) throw new ShardexError('SHX_TIMEOUT', `collections ${collections.join(', ')} did not settle within ${START_TIMEOUT_MS / 1000} s; see ${this.o.logFile}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Stops readers, then nodes (each leaves its elections first), then the coordinator. */
  async stop(): Promise<void> {
    this.stopping = true;
    for (const m of [...this.readers, ...this.nodes]) {
      const stopped = new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, STOP_TIMEOUT_MS);
        m.worker.on('message', (msg: DevWorkerMessage) => {
          if (msg.type === 'stopped') {
            clearTimeout(timer);
            resolve();
          }
        });
        m.worker.once('exit', () => {
          clearTimeout(timer);
          resolve();
        });
      });
      m.worker.postMessage({ type: 'stop' });
      await stopped;
      await m.worker.terminate();
    }
    await this.coordinator?.close();
  }
}
