// Eventual reads on the side where a read starts (a node receiving HTTP, or the smart
// client): the selector picks a snapshot reader for the shard, the reader answers or says
// BUSY, and the selector picks again with the attempts so far, as Accumulo's client does.
// With no reader in the group, or one too far behind `minVersion`, the shard's leader serves.
import { ShardexError } from '../errors.js';
import type { NodeInfo } from '../coordination/index.js';
import type { Attempt, ReaderSelector } from './selector.js';
import type { EventualOptions, ReaderAnswer } from './snapshot-reader.js';

export interface ServedBy {
  /** Name of the serving node (a reader, or the leader on fallback). */
  readonly node: string;
  /** Commit-point version of the snapshot served (readers only). */
  readonly snapshot?: number;
  /** Tries made (BUSY or failed answers plus the one that served). */
  readonly attempts: number;
  /** BUSY answers received. */
  readonly busy: number;
  /** True when the leader served because no reader could. */
  readonly fallback: boolean;
  readonly reason?: string;
}

export interface EventualRequest {
  readonly collection: string;
  readonly shard: string;
  readonly scanType?: string;
  readonly minVersion?: number;
}

export interface EventualRouterOptions {
  readonly selector: ReaderSelector;
  readonly readers: () => readonly NodeInfo[];
  /** Calls a reader with the eventual options added to the body. */
  readonly call: <T>(reader: string, body: object, eventual: EventualOptions) => Promise<ReaderAnswer<T>>;
  /** Tries before the leader serves after all (each BUSY or error is one). */
  readonly maxAttempts?: number;
  readonly sleep?: (ms: number) => Promise<void>;
}

export class EventualRouter {
  constructor(private readonly o: EventualRouterOptions) {}

  /** Runs `body` on a reader chosen for the shard, or `leader()` when none can serve. */
  async run<T>(req: EventualRequest, body: object, leader: () => Promise<{ node: string; value: T }>): Promise<{ value: T; servedBy: ServedBy }> {
    const attempts: Attempt[] = [];
    let busy = 0;
    const fallback = async (reason: string): Promise<{ value: T; servedBy: ServedBy }> => {
      const r = await leader();
      return { value: r.value, servedBy: { node: r.node, attempts: attempts.length + 1, busy, fallback: true, reason } };
    };
    const max = this.o.maxAttempts ?? 8;
    for (;;) {
      const readers = this.o.readers().map((n) => ({ address: n.name, ...(n.group !== undefined && { group: n.group }) }));
      const sel = this.o.selector.select({
        readers,
        collection: req.collection,
        shard: req.shard,
        attempts,
        ...(req.scanType !== undefined && { scanType: req.scanType }),
      });
      if (sel.reader === undefined) {
        if (sel.timeToWaitMs > 0 && attempts.length === 0 && !(await this.waitForReaders(sel.group, sel.timeToWaitMs))) {
          return fallback(`no snapshot reader in group '${sel.group}' appeared within ${sel.timeToWaitMs} ms`);
        }
        if (sel.timeToWaitMs === 0 || attempts.length > 0) return fallback(`no snapshot reader in group '${sel.group}'`);
        continue;
      }
      if (attempts.length >= max) return fallback(`${attempts.length} reader attempts failed or were busy`);
      if (sel.delayMs > 0) await (this.o.sleep ?? delay)(sel.delayMs);
      try {
        const eventual: EventualOptions = { busyTimeoutMs: sel.busyTimeoutMs, ...(req.minVersion !== undefined && { minVersion: req.minVersion }) };
        const ans = await this.o.call<T>(sel.reader, body, eventual);
        return { value: ans.result, servedBy: { node: sel.reader, snapshot: ans.snapshot, attempts: attempts.length + 1, busy, fallback: false } };
      } catch (err) {
        if (err instanceof ShardexError && err.code === 'SHX_SNAPSHOT_BEHIND') return fallback(err.message);
        if (err instanceof ShardexError && (err.status < 500 && err.code !== 'SHX_BUSY')) throw err;
        const isBusy = err instanceof ShardexError && err.code === 'SHX_BUSY';
        if (isBusy) busy++;
        attempts.push({ reader: sel.reader, result: isBusy ? 'busy' : 'error' });
      }
    }
  }

  private async waitForReaders(group: string, ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline) {
      if (this.o.readers().some((r) => (r.group ?? 'default') === group)) return true;
      await (this.o.sleep ?? delay)(Math.min(100, deadline - Date.now()));
    }
    return false;
  }
}

const delay = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Parses a minVersion: one number for every shard, or a token `shard1:v1,shard2:v2` as update
 * responses allow a client to build. Returns the version for `shard` (undefined = none).
 */
export function parseMinVersion(text: string | undefined): (shard: string) => number | undefined {
  if (text === undefined || text === '') return () => undefined;
  if (/^\d+$/.test(text)) {
    const v = Number(text);
    return () => v;
  }
  const map = new Map<string, number>();
  for (const part of text.split(',')) {
    const m = /^([A-Za-z0-9_-]+):(\d+)$/.exec(part.trim());
    if (!m) throw new ShardexError('SHX_BAD_REQUEST', `minVersion must be a version or a list shard:version[,shard:version], got ${JSON.stringify(text)}`);
    map.set(m[1]!, Number(m[2]));
  }
  return (shard) => map.get(shard);
}
