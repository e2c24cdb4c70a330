// Where a read goes, for whoever starts it (a node receiving HTTP, or the smart client):
// `immediate` to each shard's leader; `eventual` to a snapshot reader picked by the selector
// (falling back to the leader), with every search phase of a shard on the same server so that
// all phases read one snapshot. The transport names nodes; it may shortcut to local replicas.
import { ShardexError } from '../errors.js';
import type { ShardPhaseRequest, ShardSearcher } from '../distrib/search.js';
import type { IndexStats, ShardSearchResult, StoredDoc } from '../index/index.js';
import type { StoredEntry } from '../ulog/index.js';
import { parseMinVersion, type EventualRouter, type ServedBy } from './eventual.js';
import type { EventualOptions, ReaderAnswer } from './snapshot-reader.js';

export interface ReadOptions {
  /** immediate (default): the shard leaders; eventual: snapshot readers, chosen by the selector. */
  readonly consistency?: 'immediate' | 'eventual';
  readonly scanType?: string;
  /** One version for every shard, or a shard:version token (see parseMinVersion). */
  readonly minVersion?: string;
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
  ) {}

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
    if (opts.consistency !== 'eventual') return { entries: (await this.onLeader<Array<StoredEntry | null>>(collection, shard, 'get', body)).value };
    const r = await this.eventual.run(this.request(collection, shard, opts), { method: 'get', ...body }, () =>
      this.onLeader<Array<StoredEntry | null>>(collection, shard, 'get', body),
    );
    return { entries: r.value, servedBy: r.servedBy };
  }

  /** One searcher per shard for distributedSearch; eventual choices are recorded in `servedBy`. */
  searchers(collection: string, shards: readonly string[], opts: ReadOptions, servedBy: Record<string, ServedBy>): ShardSearcher[] {
    return shards.map((shard) => {
      let phase: <T>(body: ShardPhaseRequest) => Promise<T>;
      if (opts.consistency !== 'eventual') {
        phase = async <T>(body: ShardPhaseRequest) => (await this.onLeader<T>(collection, shard, 'search', body)).value;
      } else {
        let chosen: ServedBy | undefined;
        phase = async <T>(body: ShardPhaseRequest): Promise<T> => {
          if (chosen === undefined) {
            const r = await this.eventual.run<T>(this.request(collection, shard, opts), { method: 'search', ...body }, () =>
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
