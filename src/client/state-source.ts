// Where the client's cluster state comes from: GET /api/cluster from any node that answers
// (polled, and re-read on demand), or a watch on the coordination store (ZooKeeper), rendered
// exactly as the nodes render /api/cluster so that both give the same ClusterSnapshot.
import { pino, type Logger } from 'pino';
import { ClusterCoordinator } from '../coordination/cluster.js';
import type { Coordinator } from '../coordination/index.js';
import { ShardexError, isShardexError } from '../errors.js';
import { clusterView } from '../coordination/index.js';
import { ClusterSnapshot } from './cluster-state.js';
import { httpCall } from './transport.js';
import type { FetchLike } from './types.js';

export interface ClusterStateSource {
  /**
   * Reads the current state. `preferred` are hosts believed live and not suspended, asked
   * first; an HTTP source falls back to its bootstrap URLs.
   */
  read(preferred: readonly string[], signal?: AbortSignal): Promise<ClusterSnapshot>;
  /** Watch-based sources push changes; returns an unsubscribe function. */
  onChange?(listener: () => void): () => void;
  /** A short description for messages (the URLs, or the connect string). */
  readonly describe: string;
  close(): Promise<void>;
}

export function normalizeUrls(urls: string | readonly string[]): string[] {
  const list = (typeof urls === 'string' ? urls.split(',') : urls).map((u) => u.trim()).filter((u) => u.length > 0);
  if (list.length === 0) throw new ShardexError('SHX_BAD_CONFIG', 'the client needs at least one node URL (urls) or a ZooKeeper connect string (zk)');
  return list.map((u) => {
    let parsed: URL;
    try {
      parsed = new URL(u);
    } catch {
      throw new ShardexError('SHX_BAD_CONFIG', `node URL ${JSON.stringify(u)} is not a URL such as http://127.0.0.1:8983`);
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
      throw new ShardexError('SHX_BAD_CONFIG', `node URL ${JSON.stringify(u)} must start with http:// or https://`);
    }
    return `${parsed.protocol}//${parsed.host}`;
  });
}

export class HttpStateSource implements ClusterStateSource {
  readonly describe: string;

  constructor(
    private readonly bootstrap: readonly string[],
    private readonly fetchFn: FetchLike,
    private readonly timeoutMs: number,
  ) {
    this.describe = bootstrap.join(', ');
  }

  async read(preferred: readonly string[], signal?: AbortSignal): Promise<ClusterSnapshot> {
    const candidates = [...new Set([...preferred, ...this.bootstrap])];
    let last: unknown;
    for (const host of candidates) {
      try {
        const { body } = await httpCall<unknown>(this.fetchFn, { method: 'GET', host, path: '/api/cluster', timeoutMs: this.timeoutMs, ...(signal && { signal }) });
        return ClusterSnapshot.fromView(body);
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        // A refused key is a definite answer: every node would give it, and no retry helps.
        if (isShardexError(err) && (err.code === 'SHX_UNAUTHORIZED' || err.code === 'SHX_FORBIDDEN')) throw err;
        last = err;
      }
    }
    throw new ShardexError('SHX_UNAVAILABLE', `could not read the cluster state from any of ${candidates.join(', ')}: ${(last as Error)?.message ?? 'no host'}`, {
      cause: last,
    });
  }

  async close(): Promise<void> {}
}

/** Watches a coordinator; `owned` ones (made from a connect string) are started and closed here. */
export class CoordinatorStateSource implements ClusterStateSource {
  readonly describe: string;
  private started: Promise<Coordinator> | undefined;

  constructor(
    private readonly make: () => Promise<Coordinator>,
    private readonly owned: boolean,
    describe: string,
  ) {
    this.describe = describe;
  }

  /** A source over ZooKeeper: connects on first use and watches without registering a node. */
  static zookeeper(connectString: string, sessionTimeoutMs: number, logger: Logger | undefined): CoordinatorStateSource {
    return new CoordinatorStateSource(
      async () => {
        const { ZooKeeperStore } = await import('../coordination/zookeeper-store.js');
        const store = await ZooKeeperStore.connect({ connectString, sessionTimeoutMs, ...(logger && { logger }) });
        const coordinator = new ClusterCoordinator({ store, logger: logger ?? pino({ level: 'silent' }) });
        await coordinator.start();
        return coordinator;
      },
      true,
      `zk ${connectString}`,
    );
  }

  private coordinator(): Promise<Coordinator> {
    this.started ??= this.make().then(async (c) => {
      await settled(c);
      return c;
    });
    return this.started;
  }

  async read(): Promise<ClusterSnapshot> {
    let coordinator: Coordinator;
    try {
      coordinator = await this.coordinator();
    } catch (err) {
      this.started = undefined;
      throw new ShardexError('SHX_UNAVAILABLE', `could not watch the cluster state at ${this.describe}: ${(err as Error).message}`, { cause: err });
    }
    return ClusterSnapshot.fromView(clusterView(coordinator));
  }

  onChange(listener: () => void): () => void {
    let off: (() => void) | undefined;
    let cancelled = false;
    void this.coordinator().then(
      (c) => {
        if (!cancelled) off = c.onChange(listener);
      },
      () => undefined,
    );
    return () => {
      cancelled = true;
      off?.();
    };
  }

  async close(): Promise<void> {
    if (!this.owned || !this.started) return;
    const c = await this.started.catch(() => undefined);
    await c?.close();
  }
}

/**
 * A freshly started coordinator loads collection states and leaders through watches that land
 * after start() resolves; wait until the changes stop for a moment (at most `maxMs`).
 */
async function settled(coordinator: Coordinator, quietMs = 50, maxMs = 2000): Promise<void> {
  await new Promise<void>((resolve) => {
    let timer: NodeJS.Timeout;
    const done = (): void => {
      off();
      clearTimeout(timer);
      clearTimeout(cap);
      resolve();
    };
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(done, quietMs);
    };
    const off = coordinator.onChange(arm);
    const cap = setTimeout(done, maxMs);
    arm();
  });
}
