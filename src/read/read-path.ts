// Where a read goes, for whoever starts it (a node receiving HTTP, or the smart client):
// `immediate` to each shard's leader; `eventual` to a snapshot reader picked by the selector
// (falling back to the leader), with every search phase of a shard on the same server so that
// all phases read one snapshot. A later phase waits for a scan slot as long as the plan that
// chose the reader says; answered BUSY (or failing), the shard goes back to the selector with
// its attempts so far and restarts on another reader holding a snapshot at least as new, so
// that no shard ever reads backwards. The transport names nodes; it may shortcut to local
// replicas. A read the balancer placed goes where it was placed: `primary` to the leader, a
// reader group to that group's readers (the selector still picks the reader within it). One
// deadline (the read's timeoutMs and signal) bounds every wait and call of the read.
import type { NodeInfo } from '../coordination/index.js';
import { ShardexError } from '../errors.js';
import type { ShardPhaseRequest, ShardQueryResult, ShardSearcher, StatsChanged } from '../distrib/search.js';
import type { IndexStats, StoredDoc } from '../index/index.js';
import type { StoredEntry } from '../ulog/index.js';
import { PRIMARY_TARGET } from './balancer.js';
import { EventualRouter, parseMinVersion, readerFailure, type EventualRequest, type EventualResult, type EventualRouterOptions, type ServedBy } from './eventual.js';
import { DEFAULT_GROUP } from './profiles.js';
import type { Deadline } from '../distrib/deadline.js';
import { readDeadline, type ReadDeadlineOptions } from './read-deadline.js';
import { ReaderSelector, type Attempt } from './selector.js';
import type { EventualOptions, ReaderAnswer } from './snapshot-reader.js';

export interface ReadOptions extends ReadDeadlineOptions {
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
  /** The caller's own deadline (the smart client's operation): then timeoutMs and signal are its. */
  readonly deadline?: Deadline;
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

/** How long a reader may take to answer once its scan started (beyond its busy timeout). */
const READER_ANSWER_MS = 30_000;

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

  private async onLeader<T>(collection: string, shard: string, method: 'get' | 'search', body: object, deadline: Deadline): Promise<{ node: string; value: T }> {
    const leader = this.t.leader(collection, shard);
    if (!leader) throw new ShardexError('SHX_NO_LEADER', `shard ${collection}/${shard} has no leader right now; retry shortly`);
    const doing = `waiting for ${leader}`;
    deadline.check(doing);
    // The call's own timeout is what is left of the deadline; only a signal needs a race (no
    // timer per read on the hot path).
    const call = this.t.call<T>(leader, method, body, deadline.cap(READER_ANSWER_MS));
    try {
      return { node: leader, value: await (deadline.signal ? deadline.within(call, doing) : call) };
    } catch (err) {
      throw deadline.ended(doing) ?? err;
    }
  }

  private onReader<T>(reader: string, method: 'get' | 'search', body: object, eventual: EventualOptions): Promise<ReaderAnswer<T>> {
    return this.t.call<ReaderAnswer<T>>(reader, method, { ...body, eventual }, eventual.busyTimeoutMs + READER_ANSWER_MS);
  }

  /** Calls a reader; `body.method` names the RPC. For EventualRouter's `call`. */
  callReader<T>(reader: string, body: object, eventual: EventualOptions): Promise<ReaderAnswer<T>> {
    const { method, ...rest } = body as { method: 'get' | 'search' };
    return this.onReader<T>(reader, method, rest, eventual);
  }

  private request(collection: string, shard: string, opts: ReadOptions): EventualRequest {
    const minVersion = parseMinVersion(opts.minVersion)(shard);
    return {
      collection,
      shard,
      ...(opts.scanType !== undefined && { scanType: opts.scanType }),
      ...(minVersion !== undefined && { minVersion }),
    };
  }

  /**
   * The read's deadline: the caller's own, or one made of its timeoutMs and signal. A caller's
   * deadline with neither a timeout nor a signal gets the read's default timeout.
   */
  private deadline(what: string, opts: ReadOptions): Deadline {
    const own = opts.deadline;
    if (own === undefined) return readDeadline(what, opts);
    return own.timeoutMs !== undefined || own.signal !== undefined ? own : readDeadline(what);
  }

  /** Real-time get (immediate) or snapshot get (eventual) of ids of one shard. */
  async get(collection: string, shard: string, ids: string[], opts: ReadOptions = {}): Promise<{ entries: Array<StoredEntry | null>; servedBy?: ServedBy }> {
    const body = { collection, shard, ids };
    const router = this.route(shard, opts);
    const deadline = this.deadline(`${router ? 'eventual' : 'immediate'} get of ${collection}/${shard}`, opts);
    const leader = (): Promise<{ node: string; value: Array<StoredEntry | null> }> => this.onLeader(collection, shard, 'get', body, deadline);
    if (!router) return { entries: (await leader()).value };
    const r = await router.run(this.request(collection, shard, opts), { method: 'get', ...body }, leader, { deadline });
    return { entries: r.value, servedBy: r.servedBy };
  }

  /** One searcher per shard for distributedSearch; eventual choices are recorded in `servedBy`. */
  searchers(collection: string, shards: readonly string[], opts: ReadOptions, servedBy: Record<string, ServedBy>): ShardSearcher[] {
    const deadline = this.deadline(`${opts.consistency === 'eventual' ? 'eventual' : 'immediate'} search of ${collection}`, opts);
    return shards.map((shard) => {
      const router = this.route(shard, opts);
      const onLeader = <T>(body: ShardPhaseRequest): Promise<{ node: string; value: T }> => this.onLeader<T>(collection, shard, 'search', body, deadline);
      const phase = router
        ? this.readerPhases(router, this.request(collection, shard, opts), deadline, onLeader, (s) => (servedBy[shard] = s))
        : async <T>(body: ShardPhaseRequest): Promise<T> => (await onLeader<T>(body)).value;
      return {
        shard,
        stats: (p) => phase<IndexStats>({ kind: 'stats', collection, shard, params: p }),
        query: (p, stats, expect) => phase<ShardQueryResult | StatsChanged>({ kind: 'query', collection, shard, params: p, stats, ...(expect && { expect }) }),
        fetch: (ids, fields) => phase<StoredDoc[]>({ kind: 'fetch', collection, shard, ids: [...ids], ...(fields !== undefined && { fields }) }),
      };
    });
  }

  /**
   * The search phases of one shard on snapshot readers: the first phase is routed by the
   * selector; later ones go to the same reader with the busy timeout of the plan that chose it.
   * A BUSY or failed later phase records the attempt and routes that phase again, requiring a
   * snapshot at least as new as the one already read.
   */
  private readerPhases(
    router: EventualRouter,
    request: EventualRequest,
    deadline: Deadline,
    onLeader: <T>(body: ShardPhaseRequest) => Promise<{ node: string; value: T }>,
    record: (s: ServedBy) => void,
  ): <T>(body: ShardPhaseRequest) => Promise<T> {
    const attempts: Attempt[] = [];
    let chosen: EventualResult<unknown> | undefined;
    let restarts = 0;
    const route = async <T>(body: ShardPhaseRequest, atLeast?: number): Promise<T> => {
      const req = atLeast === undefined ? request : { ...request, minVersion: Math.max(request.minVersion ?? 0, atLeast) };
      const r = await router.run<T>(req, { method: 'search', ...body }, () => onLeader<T>(body), { deadline, attempts });
      chosen = r;
      record(restarts > 0 ? { ...r.servedBy, restarts } : r.servedBy);
      return r.value;
    };
    return async <T>(body: ShardPhaseRequest): Promise<T> => {
      const was = chosen;
      if (was === undefined) return route<T>(body);
      if (was.servedBy.fallback) return (await onLeader<T>(body)).value;
      const reader = was.servedBy.node;
      const eventual: EventualOptions = { busyTimeoutMs: deadline.cap(was.busyTimeoutMs), ...(request.minVersion !== undefined && { minVersion: request.minVersion }) };
      const doing = `${body.kind} phase on ${reader}`;
      try {
        deadline.check(doing);
        return (await deadline.within(this.onReader<T>(reader, 'search', body, eventual), doing)).result;
      } catch (err) {
        const ended = deadline.ended(doing);
        if (ended !== undefined) throw ended;
        const failure = readerFailure(err);
        if (failure === 'request') throw err;
        attempts.push({ reader, result: failure === 'busy' ? 'busy' : 'error' });
        restarts++;
        return route<T>(body, was.servedBy.snapshot);
      }
    };
  }
}
