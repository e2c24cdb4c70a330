// Where a read goes, for whoever starts it (a node receiving HTTP, or the smart client):
// `immediate` to each shard's leader; `eventual` to a snapshot reader picked by the selector
// (falling back to the leader), with every search phase of a shard on the same server so that
// all phases read one snapshot. The transport names nodes; it may shortcut to local replicas.
// A read the balancer placed goes where it was placed: `primary` to the leader, a reader group
// to that group's readers (the selector still picks the reader within it).
import type { NodeInfo } from '../coordination/index.js';
import { ShardexError } from '../errors.js';
import type { ShardPhaseRequest, ShardSearcher } from '../distrib/search.js';
import type { IndexStats, ShardSearchResult, StoredDoc } from '../index/index.js';
import type { StoredEntry } from '../ulog/index.js';
import { PRIMARY_TARGET } from './balancer.js';
import { EventualRouter, parseMinVersion, type EventualRouterOptions, type ServedBy } from './eventual.js';
import { DEFAULT_GROUP } from './profiles.js';
import { ReaderSelector } from './selector.js';
import type { EventualOptions, ReaderAnswer } from './snapshot-reader.js';

export interface ReadOptions {
  /** immediate (default): the shard leaders; eventual: snapshot readers, chosen by the selector. */
  readonly consistency?: 'immediate' | 'eventual';
  readonly scanType?: string;
  /** One version for every shard, or a shard:version token (see parseMinVersion). */
  readonly minVersion?: string;
  /**
   * Shard -> the read target the balancer chose: `primary` (the shard leader, whatever the
   * consistency) or a reader group (an eventual read stays in that group). Shards not listed
   * are routed as usual.
   */
  readonly targets?: Readonly<Record<string, string>>;
}

/** Keeps an eventual read inside one reader group: the router for (group, the read's scan type). */
export type GroupRouting = (group: string, scanType: string | undefined) => EventualRouter;

/**
 * EventualRouters confined to one reader group each. The read's scan type still picks the
 * selector profile (attempt plans, busy timeouts, salt); only the group it draws readers from
 * is the balancer's: the group's readers are presented to the selector under the profile's
 * group name. One router (and selector, whose memo is per reader set) per pair.
 */
export class ReaderGroupRouters {
  private readonly probe: ReaderSelector;
  private readonly routers = new Map<string, EventualRouter>();

  constructor(
    private readonly o: {
      readonly profiles?: unknown;
      readonly readers: () => readonly NodeInfo[];
      readonly call: EventualRouterOptions['call'];
    },
  ) {
    this.probe = new ReaderSelector(o.profiles);
  }

  readonly router: GroupRouting = (group, scanType) => {
    const as = this.probe.profileFor(scanType).group;
    const key = `${group}\u0000${as}`;
    let r = this.routers.get(key);
    if (!r) {
      const readers = this.o.readers;
      r = new EventualRouter({
        selector: new ReaderSelector(this.o.profiles),
        readers: () => readers().filter((n) => (n.group || DEFAULT_GROUP) === group).map((n) => ({ ...n, group: as })),
        call: this.o.call,
      });
      this.routers.set(key, r);
    }
    return r;
  };
}

/** Peer calls by node name (data nodes and snapshot readers speak the same gRPC service). */
export interface ReadTransport {
  call<T>(node: string, method: 'get' | 'search', body: object, timeoutMs?: number): Promise<T>;
  /** The shard's live leader, or undefined. */
  leader(collection: string, shard: string): string | undefined;
}

/** Once a reader is chosen for a shard, its later search phases may wait this long for a slot. */
const LATER_PHASE_BUSY_TIMEOUT_MS = 5000;

export class ReadPath {
  constructor(
    private readonly t: ReadTransport,
    private readonly eventual: EventualRouter,
    /** Where a balanced eventual read placed on a reader group goes; absent: the default router. */
    private readonly inGroup?: GroupRouting,
  ) {}

  /** How one shard of a read is served: by its leader, or eventually through a router. */
  private route(shard: string, opts: ReadOptions): EventualRouter | undefined {
    const target = opts.targets?.[shard];
    if (opts.consistency !== 'eventual' || target === PRIMARY_TARGET) return undefined;
    return target !== undefined && this.inGroup ? this.inGroup(target, opts.scanType) : this.eventual;
  }

  private async onLeader<T>(collection: string, shard: string, method: 'get' | 'search', body: object): Promise<{ node: string; value: T }> {
    const leader = this.t.leader(collection, shard);
    if (!leader) throw new ShardexError('SHX_NO_LEADER', `shard ${collection}/${shard} has no leader right now; retry shortly`);
    return { node: leader, value: await this.t.call<T>(leader, method, body) };
  }

  private onReader<T>(reader: string, method: 'get' | 'search', body: object, eventual: EventualOptions): Promise<ReaderAnswer<T>> {
    return this.t.call<ReaderAnswer<T>>(reader, method, { ...body, eventual }, eventual.busyTimeoutMs + 30_000);
  }

  /** Calls a reader; `body.method` names the RPC. For EventualRouter's `call`. */
  callReader<T>(reader: string, body: object, eventual: EventualOptions): Promise<ReaderAnswer<T>> {
    const { method, ...rest } = body as { method: 'get' | 'search' };
    return this.onReader<T>(reader, method, rest, eventual);
  }

  private request(collection: string, shard: string, opts: ReadOptions): { collection: string; shard: string; scanType?: string; minVersion?: number } {
    const minVersion = parseMinVersion(opts.minVersion)(shard);
    return {
      collection,
      shard,
      ...(opts.scanType !== undefined && { scanType: opts.scanType }),
      ...(minVersion !== undefined && { minVersion }),
    };
  }

  /** Real-time get (immediate) or snapshot get (eventual) of ids of one shard. */
  async get(collection: string, shard: string, ids: string[], opts: ReadOptions = {}): Promise<{ entries: Array<StoredEntry | null>; servedBy?: ServedBy }> {
    const body = { collection, shard, ids };
    const router = this.route(shard, opts);
    if (!router) return { entries: (await this.onLeader<Array<StoredEntry | null>>(collection, shard, 'get', body)).value };
    const r = await router.run(this.request(collection, shard, opts), { method: 'get', ...body }, () =>
      this.onLeader<Array<StoredEntry | null>>(collection, shard, 'get', body),
    );
    return { entries: r.value, servedBy: r.servedBy };
  }

  /** One searcher per shard for distributedSearch; eventual choices are recorded in `servedBy`. */
  searchers(collection: string, shards: readonly string[], opts: ReadOptions, servedBy: Record<string, ServedBy>): ShardSearcher[] {
    return shards.map((shard) => {
      let phase: <T>(body: ShardPhaseRequest) => Promise<T>;
      const router = this.route(shard, opts);
      if (!router) {
        phase = async <T>(body: ShardPhaseRequest) => (await this.onLeader<T>(collection, shard, 'search', body)).value;
      } else {
        let chosen: ServedBy | undefined;
        phase = async <T>(body: ShardPhaseRequest): Promise<T> => {
          if (chosen === undefined) {
            const r = await router.run<T>(this.request(collection, shard, opts), { method: 'search', ...body }, () =>
              this.onLeader<T>(collection, shard, 'search', body),
            );
            chosen = r.servedBy;
            servedBy[shard] = r.servedBy;
            return r.value;
          }
          if (chosen.fallback) return (await this.onLeader<T>(collection, shard, 'search', body)).value;
          return (await this.onReader<T>(chosen.node, 'search', body, { busyTimeoutMs: LATER_PHASE_BUSY_TIMEOUT_MS })).result;
        };
      }
      return {
        shard,
        stats: (p) => phase<IndexStats>({ kind: 'stats', collection, shard, params: p }),
        query: (p, stats) => phase<ShardSearchResult>({ kind: 'query', collection, shard, params: p, stats }),
        fetch: (ids, fields) => phase<StoredDoc[]>({ kind: 'fetch', collection, shard, ids: [...ids], ...(fields !== undefined && { fields }) }),
      };
    });
  }
}
