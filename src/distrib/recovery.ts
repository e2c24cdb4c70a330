// Bringing a replica up to date from a peer: peer sync (the peer's update log after our
// newest version, less a reorder window) when the peer's log reaches back far enough, else a
// full copy of the peer's documents followed by a peer sync. Both are idempotent: the
// per-id version rule of the replica store drops whatever we already have.
import type { StoredEntry } from '../ulog/index.js';
import type { ShardReplica } from './replica.js';

/**
 * Updates of one shard reach a replica in any order within the time a request is in
 * flight; a replica's newest version therefore does not prove it holds every older one.
 * Peer sync re-reads this much of the version clock (5 minutes) below our newest version.
 */
export const REORDER_WINDOW = 5 * 60 * 1000 * 1024;

export interface PeerLogInfo {
  readonly maxVersion: number;
  /** Highest version trimmed from the peer's log: below it the log cannot serve a sync. */
  readonly trimmedThrough: number;
  /** How the peer (the leader) sees the asking replica's state. */
  readonly replicaState?: string;
  /** The peer's latest commit point (what snapshot readers copy). */
  readonly commit?: { readonly version: number; readonly at: number };
}

/** What recovery needs from a peer; implemented over gRPC by the node. */
export interface SyncSource {
  info(): Promise<PeerLogInfo>;
  updatesAfter(after: number, limit: number): Promise<StoredEntry[]>;
  copy(): AsyncIterable<StoredEntry[]>;
}

export type RecoveryMethod = 'peer-sync' | 'full-copy';

export interface RecoveryReport {
  readonly method: RecoveryMethod;
  readonly applied: number;
  readonly copied: number;
}

const PAGE = 5000;

/** Where a peer sync of `replica` must start reading the peer's log. */
export function syncStart(localMax: number): number {
  return Math.max(0, localMax - REORDER_WINDOW);
}

/** True when the peer's log reaches back to `from` (nothing we may lack was trimmed). */
export function canPeerSync(localMax: number, peer: PeerLogInfo): boolean {
  return localMax === 0 ? peer.trimmedThrough === 0 : peer.trimmedThrough <= syncStart(localMax);
}

/** Applies the peer's log entries after `from`, page by page. Returns the count applied. */
export async function peerSync(replica: ShardReplica, source: SyncSource, from: number): Promise<number> {
  let after = from;
  let applied = 0;
  for (;;) {
    const page = await source.updatesAfter(after, PAGE);
    if (page.length === 0) return applied;
    applied += (await replica.apply(page)).length;
    after = page[page.length - 1]!.version;
    if (page.length < PAGE) return applied;
  }
}

/** Brings `replica` up to the peer's state (what was in the peer when this ran). */
export async function syncFrom(replica: ShardReplica, source: SyncSource, info: PeerLogInfo): Promise<RecoveryReport> {
  const localMax = replica.store.maxVersion;
  if (canPeerSync(localMax, info)) {
    return { method: 'peer-sync', applied: await peerSync(replica, source, syncStart(localMax)), copied: 0 };
  }
  await replica.reset();
  let copied = 0;
  for await (const chunk of source.copy()) copied += (await replica.apply(chunk)).length;
  // Whatever landed at the peer while we copied is in its log after the copy's start.
  const applied = await peerSync(replica, source, syncStart(Math.min(info.maxVersion, replica.store.maxVersion)));
  return { method: 'full-copy', applied, copied };
}
