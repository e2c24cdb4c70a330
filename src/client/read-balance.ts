// The read balancer's admin calls from the client side: settings (stored in coordination, so any
// node will do) and each data node's slot counters (per node, so every node is asked).
import { ShardexError, isShardexError } from '../errors.js';
import { parseFilter, parseSetting, type BalanceFilter } from '../read/balance-settings.js';
import type { BalanceSetting, SlotRow } from '../read/balancer.js';
import { httpCall, type HttpCall } from './transport.js';
import type { FetchLike, RequestOptions } from './types.js';

export type { BalanceSetting, SlotRow };

/** One data node's counters, as GET /api/read-slots answers; `error` when it could not be asked. */
export interface NodeReadSlots {
  readonly node: string;
  readonly host: string;
  readonly slots: readonly SlotRow[];
  readonly error?: string;
}

export interface ReadSlotsOptions extends RequestOptions {
  /** Only this data node (by name); default every live data node. */
  readonly node?: string;
}

export interface ReadBalanceAdminOptions {
  readonly fetch: FetchLike;
  /** Timeout of one HTTP request. */
  readonly timeoutMs: number;
  /** The live data nodes, as recently read as the caller can. */
  readonly nodes: () => Promise<ReadonlyArray<{ readonly name: string; readonly http: string }>>;
}

// A node that cannot answer now: the next one may.
const NEXT_NODE = new Set(['SHX_UNAVAILABLE', 'SHX_STARTING', 'SHX_TIMEOUT']);

const enc = encodeURIComponent;

export class ReadBalanceAdmin {
  constructor(private readonly o: ReadBalanceAdminOptions) {}

  /** Upserts `(priority, target)`; every node applies it without a restart. */
  async set(priority: string, target: string, value: { readonly weight: number; readonly slots: number }, opts: RequestOptions = {}): Promise<BalanceSetting> {
    // Checked here first, with the nodes' own schema: the same message, without a round trip.
    const setting = parseSetting(priority, target, value);
    const body = { weight: setting.weight, slots: setting.slots };
    const res = await this.anyNode<{ setting: BalanceSetting }>({ method: 'PUT', path: `/api/read-balance/${enc(priority)}/${enc(target)}`, body }, opts);
    return res.setting;
  }

  /** The stored settings, optionally of one priority and/or target (unknown ones: an empty list). */
  async get(filter: BalanceFilter = {}, opts: RequestOptions = {}): Promise<BalanceSetting[]> {
    const f = parseFilter(filter);
    const q = new URLSearchParams();
    if (f.priority !== undefined) q.set('priority', f.priority);
    if (f.target !== undefined) q.set('target', f.target);
    const query = q.toString() === '' ? '' : `?${q}`;
    return (await this.anyNode<{ settings: BalanceSetting[] }>({ method: 'GET', path: `/api/read-balance${query}` }, opts)).settings;
  }

  /** Removes one setting, or every setting of `priority`; SHX_NOT_FOUND when none matched. Returns how many went. */
  async erase(priority: string, target?: string, opts: RequestOptions = {}): Promise<number> {
    const path = target === undefined ? `/api/read-balance/${enc(priority)}` : `/api/read-balance/${enc(priority)}/${enc(target)}`;
    return (await this.anyNode<{ removed: number }>({ method: 'DELETE', path }, opts)).removed;
  }

  /** Every data node's limit, taken, free and queued per priority and target. */
  slots(opts: ReadSlotsOptions = {}): Promise<NodeReadSlots[]> {
    return this.eachNode('GET', '/api/read-slots', opts);
  }

  /** Zeroes the counters of every data node (or of `opts.node`); running reads go on. */
  reset(opts: ReadSlotsOptions = {}): Promise<NodeReadSlots[]> {
    return this.eachNode('POST', '/api/read-slots/reset', opts);
  }

  private async anyNode<T>(call: Pick<HttpCall, 'path' | 'body'> & { method: HttpCall['method'] | 'PUT' }, opts: RequestOptions): Promise<T> {
    const nodes = await this.o.nodes();
    if (nodes.length === 0) throw new ShardexError('SHX_UNAVAILABLE', 'the cluster lists no live data node to ask');
    let last: unknown;
    for (const n of nodes) {
      try {
        return (await this.send<T>(n.http, call, opts)).body;
      } catch (err) {
        if (!(isShardexError(err) && NEXT_NODE.has(err.code)) || opts.signal?.aborted) throw err;
        last = err;
      }
    }
    throw last;
  }

  private async eachNode(method: 'GET' | 'POST', path: string, opts: ReadSlotsOptions): Promise<NodeReadSlots[]> {
    let nodes = await this.o.nodes();
    if (opts.node !== undefined) {
      nodes = nodes.filter((n) => n.name === opts.node);
      if (nodes.length === 0) throw new ShardexError('SHX_NOT_FOUND', `no live data node is named ${JSON.stringify(opts.node)}; \`shardex cluster\` lists them`);
    }
    return Promise.all(
      nodes.map(async (n): Promise<NodeReadSlots> => {
        try {
          const { body } = await this.send<{ node: string; slots: SlotRow[] }>(n.http, { method, path }, opts);
          return { node: body.node ?? n.name, host: n.http, slots: body.slots };
        } catch (err) {
          if (opts.signal?.aborted) throw err;
          return { node: n.name, host: n.http, slots: [], error: (err as Error).message };
        }
      }),
    );
  }

  private send<T>(host: string, call: Pick<HttpCall, 'path' | 'body'> & { method: HttpCall['method'] | 'PUT' }, opts: RequestOptions) {
    return httpCall<T>(this.o.fetch, {
      // HttpCall lists the methods the rest of the client uses; fetch sends PUT alike.
      method: call.method as HttpCall['method'],
      host,
      path: call.path,
      ...(call.body !== undefined && { body: call.body }),
      timeoutMs: opts.timeoutMs ?? this.o.timeoutMs,
      ...(opts.signal && { signal: opts.signal }),
    });
  }
}
