// Eventual reads on the side where a read starts (a node receiving HTTP, or the smart
// client): the selector picks a snapshot reader for the shard, the reader answers or says
// BUSY, and the selector picks again with the attempts so far, as Accumulo's client does:
// past the last attempt plan it keeps choosing with that plan, the busy timeout growing to the
// profile's maximum, until the read's own deadline (ThriftScanner loops the same way). A reader
// that fails (not BUSY) is an ERROR attempt: the selector picks again after its back-off. The
// shard's leader serves only when the profile's group has no reader and the wait for one is
// over, or when no reader holds a snapshot as new as `minVersion`.
import { ShardexError } from '../errors.js';
import type { NodeInfo } from '../coordination/index.js';
import type { Deadline } from '../distrib/deadline.js';
import { decideRetry } from '../distrib/retry.js';
import { readDeadline } from './read-deadline.js';
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
  /** Failed answers (not BUSY) received: each was retried on a reader the selector picked. */
  readonly errors?: number;
  /** True when the leader served because no reader could. */
  readonly fallback: boolean;
  readonly reason?: string;
  /** Later search phases that went to another reader after a BUSY or failed answer. */
  readonly restarts?: number;
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
}

/** Where a routing starts from: the read's deadline and, for a later phase, the attempts so far. */
export interface EventualRoute {
  readonly deadline?: Deadline;
  /** Attempts already made for this shard in this read (appended to). */
  readonly attempts?: Attempt[];
}

export interface EventualResult<T> {
  readonly value: T;
  readonly servedBy: ServedBy;
  /** The busy timeout the serving reader was asked with (0 when the leader served). */
  readonly busyTimeoutMs: number;
}

/** How the selector counts a reader's answer that was not a result. */
export type ReaderFailure = 'busy' | 'error' | 'behind' | 'request';

/**
 * BUSY, a snapshot behind `minVersion`, the request's own fault (4xx: every reader would say the
 * same), or a failed attempt (anything else: unreachable, timed out, 5xx, unknown).
 */
export function readerFailure(err: unknown): ReaderFailure {
  if (!(err instanceof ShardexError)) return 'error';
  if (err.code === 'SHX_BUSY') return 'busy';
  if (err.code === 'SHX_SNAPSHOT_BEHIND') return 'behind';
  // A reader that has not seen a new collection yet is behind in coordination, not wrong.
  if (err.status >= 400 && err.status < 500 && err.code !== 'SHX_COLLECTION_NOT_FOUND') return 'request';
  return 'error';
}

/** Poll step while a group has no reader (Accumulo waits 100 ms first, too). */
const READER_POLL_MS = 100;

export class EventualRouter {
  constructor(private readonly o: EventualRouterOptions) {}

  /** Runs `body` on a reader chosen for the shard, or `leader()` when none can serve. */
  async run<T>(req: EventualRequest, body: object, leader: () => Promise<{ node: string; value: T }>, route: EventualRoute = {}): Promise<EventualResult<T>> {
    const deadline = route.deadline ?? readDeadline(`eventual read of ${req.collection}/${req.shard}`);
    const attempts = route.attempts ?? [];
    const count = (result: Attempt['result']): number => attempts.reduce((n, a) => n + (a.result === result ? 1 : 0), 0);
    // Set while no reader of the group is there: what a deadline that ends the wait reports,
    // whether it ends during the pause or at the next turn's check.
    let waitingFor: string | undefined;
    const doing = (): string => waitingFor ?? (attempts.length === 0 ? 'before any reader answered' : `after ${attempts.length} reader attempts, ${count('busy')} BUSY`);
    const fallback = async (reason: string): Promise<EventualResult<T>> => {
      const r = await leader();
      return { value: r.value, busyTimeoutMs: 0, servedBy: { node: r.node, attempts: attempts.length + 1, busy: count('busy'), errors: count('error'), fallback: true, reason } };
    };
    let emptySince: number | undefined;
    let lastFailure: unknown;
    for (;;) {
      deadline.check(doing());
      const readers = this.o.readers().map((n) => ({ address: n.name, ...(n.group !== undefined && { group: n.group }) }));
      const sel = this.o.selector.select({
        readers,
        collection: req.collection,
        shard: req.shard,
        attempts,
        ...(req.scanType !== undefined && { scanType: req.scanType }),
      });
      if (sel.reader === undefined) {
        const now = deadline.now();
        emptySince ??= now;
        const waited = now - emptySince;
        if (waited >= sel.timeToWaitMs) {
          return fallback(sel.timeToWaitMs === 0 ? `no snapshot reader in group '${sel.group}'` : `no snapshot reader in group '${sel.group}' appeared within ${sel.timeToWaitMs} ms`);
        }
        waitingFor = `waiting for a snapshot reader in group '${sel.group}'`;
        await deadline.pause(Math.min(READER_POLL_MS, sel.timeToWaitMs - waited), doing());
        continue;
      }
      emptySince = undefined;
      waitingFor = undefined;
      if (sel.delayMs > 0) {
        // The selector's back-off after failed readers, under the house's one retry decision:
        // a pause that would end past the read's deadline ends the read now, not at the deadline.
        const next = decideRetry({ maxRetries: Infinity, backoff: () => sel.delayMs, retryable: () => true }, lastFailure, attempts.length, deadline);
        if (!next.retry) throw deadline.timeout(doing(), lastFailure);
        await deadline.pause(next.pauseMs, doing());
      }
      const eventual: EventualOptions = { busyTimeoutMs: deadline.cap(sel.busyTimeoutMs), ...(req.minVersion !== undefined && { minVersion: req.minVersion }) };
      try {
        const ans = await deadline.within(this.o.call<T>(sel.reader, body, eventual), doing());
        return {
          value: ans.result,
          busyTimeoutMs: sel.busyTimeoutMs,
          servedBy: { node: sel.reader, snapshot: ans.snapshot, attempts: attempts.length + 1, busy: count('busy'), errors: count('error'), fallback: false },
        };
      } catch (err) {
        const ended = deadline.ended(doing());
        if (ended !== undefined) throw ended;
        const failure = readerFailure(err);
        if (failure === 'behind') return fallback((err as Error).message);
        if (failure === 'request') throw err;
        attempts.push({ reader: sel.reader, result: failure });
        lastFailure = err;
      }
    }
  }
}

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
