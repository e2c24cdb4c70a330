// Bringing a replica up to date from a peer, so that it ends with exactly the peer's id -> version
// map: peer sync (the entries of the peer's update log after our newest version, less a reorder
// window, that our own log lacks: the two logs are compared by their versions first) when the
// peer's log reaches back far enough, else a full copy of the peer's documents followed by a peer
// sync. After a peer sync, our own recent log entries are checked against the peer's log: an
// entry the peer does not hold (a deposed leader's write that nobody acknowledged) is replaced
// by the peer's entry for that id, or removed. Applying is idempotent: the per-id version rule of the
// replica store drops whatever we already have.
import { ShardexError } from '../errors.js';
import type { LogDigest, ReplicaStore, StoredEntry } from '../ulog/index.js';
import type { ShardReplica } from './replica.js';
import { epochBase, epochOf } from './shard-state.js';

/**
 * Updates of one shard reach a replica in any order while requests are in flight; a replica's
 * newest version therefore does not prove it holds every older one. Peer sync re-reads this many
 * versions of the leader's counter below our newest version (far more than can be in flight).
 */
export const REORDER_WINDOW = 50_000;

export interface PeerLogInfo {
  readonly maxVersion: number;
  /** Highest version trimmed from the peer's log: below it the log cannot serve a sync. */
  readonly trimmedThrough: number;
  /** How the peer (the leader) sees the asking replica's state. */
  readonly replicaState?: string;
  /** The peer's latest commit point (what snapshot readers copy). */
  readonly commit?: { readonly version: number; readonly at: number };
  /** The leadership epoch the peer leads with (or the newest it has seen). */
  readonly epoch?: number;
  /** The peer leads and accepts writes (it has announced its epoch and synced from its peers). */
  readonly leading?: boolean;
}

/** What recovery needs from a peer; implemented over gRPC by the node. */
export interface SyncSource {
  info(): Promise<PeerLogInfo>;
  /** The versions in the peer's log after `after`, oldest first, at most `limit` (no documents). */
  logVersions(after: number, limit: number): Promise<number[]>;
  /** The digest of the peer's log versions in (`after`, `upto`]. */
  logDigest(after: number, upto: number): Promise<LogDigest>;
  /** The peer's log entries of these versions (those its log still holds). */
  logEntries(versions: readonly number[]): Promise<StoredEntry[]>;
  /** The peer's current entries (tombstones included) of these ids; undefined where it has none. */
  entries(ids: readonly string[]): Promise<Array<StoredEntry | undefined>>;
  copy(): AsyncIterable<StoredEntry[]>;
}

export type RecoveryMethod = 'peer-sync' | 'full-copy';

export interface RecoveryReport {
  readonly method: RecoveryMethod;
  readonly applied: number;
  readonly copied: number;
  /** Our entries the peer did not hold, replaced by its entries or removed. */
  readonly reverted: number;
  /** Peer sync: log versions compared one by one (0 when the two logs' digests agreed up to our newest version). */
  readonly compared?: number;
  /**
   * Peer sync that compared versions: how many of them only the peer's log held, and only ours
   * (before converging). Both 0 would mean the digests disagreed over the same versions.
   */
  readonly onlyTheirs?: number;
  readonly onlyOurs?: number;
}

/** Told of each page a recovery stores: `copied` documents of a full copy, `applied` log entries of a peer sync. */
export type RecoveryProgress = (step: 'copied' | 'applied', docs: number) => void;

export interface SyncOptions {
  readonly progress?: RecoveryProgress;
  /**
   * Whether what the source gives is still its to give: false once this replica has seen a newer
   * leadership than the one it syncs from. The source may then be a deposed leader that has just
   * applied a write nobody will acknowledge (its replicas refuse it): storing it here would keep
   * that write on a replica that had already fenced its leadership off. Asked in the same turn as
   * each page is handed to the store, so that an announcement heard later orders after that page,
   * as a FROMLEADER update received before it would.
   */
  readonly valid?: () => boolean;
}

/** Throws (retryably: the caller syncs again, from the new leader) once `opts.valid` says no. */
function assertValid(opts: SyncOptions): void {
  if (opts.valid && !opts.valid()) {
    throw new ShardexError('SHX_STALE_EPOCH', 'a newer leadership was seen while syncing: what the old one gave is not stored; syncing again from the new leader');
  }
}

/** Versions per listing page, and entries per fetch (the RPC's bound is 10,000). */
const VERSIONS_PAGE = 50_000;
const ENTRIES_PAGE = 5000;

/**
 * Where a peer sync must start: REORDER_WINDOW versions below `localMax`. Versions are
 * epoch-major, so when that point falls below our newest epoch's base it is taken from the
 * newest version we hold of an earlier epoch (`earlierMax`) instead: the gap between epochs holds no versions.
 */
export function syncStart(localMax: number, earlierMax = 0): number {
  const start = localMax - REORDER_WINDOW;
  if (start >= epochBase(epochOf(localMax))) return Math.max(0, start);
  return Math.max(0, Math.min(start, earlierMax - REORDER_WINDOW));
}

/**
 * syncStart() for the newest version `store` holds, or where a peer sync still under way began
 * if that is lower (the store's sync floor): a sync stopped part way (a newer leadership seen)
 * may have stored the peer's newer entries, whose versions would move the window above writes of
 * this replica (a deposed leader's) that it had not compared yet.
 */
export async function syncStartOf(store: ReplicaStore): Promise<number> {
  const localMax = store.maxVersion;
  const base = epochBase(epochOf(localMax));
  const earlier = localMax - REORDER_WINDOW < base ? await store.newestVersionBelow(base) : 0;
  const start = syncStart(localMax, earlier);
  const floor = store.syncFloor;
  return floor === undefined ? start : Math.min(start, floor);
}

/** True when the peer's log reaches back to `from` (nothing we may lack was trimmed). */
export function canPeerSync(localMax: number, from: number, peer: PeerLogInfo): boolean {
  return localMax === 0 ? peer.trimmedThrough === 0 : peer.trimmedThrough <= from;
}

/** Every version a paged listing yields after `from`, oldest first. */
async function listAll(from: number, page: (after: number, limit: number) => Promise<number[]>): Promise<number[]> {
  const out: number[] = [];
  for (let after = from; ; ) {
    const versions = await page(after, VERSIONS_PAGE);
    for (const v of versions) out.push(v);
    if (versions.length < VERSIONS_PAGE) return out;
    after = versions[versions.length - 1]!;
  }
}

/** What a comparison of the two logs after `from` found. */
export interface LogComparison {
  /** The peer's log versions after `from` (after the point up to which the two logs agree). */
  readonly theirs: ReadonlySet<number>;
  /** Our log versions after the same point (before the missing ones were applied). */
  readonly ours: readonly number[];
  /** Entries of the peer's log we did not hold, applied. */
  readonly applied: number;
  /** Versions listed on both sides (those after the point where the digests agree). */
  readonly compared: number;
}

/** Our newest version when both logs hold the same versions from `from` up to it; else `from`. */
async function agreedThrough(replica: ShardReplica, source: SyncSource, from: number): Promise<number> {
  const localMax = replica.store.maxVersion;
  if (localMax <= from) return from;
  const [theirs, ours] = await Promise.all([source.logDigest(from, localMax), replica.store.logDigest(from, localMax)]);
  return theirs.count === ours.count && theirs.hash === ours.hash ? localMax : from;
}

/**
 * Whether the peer's log holds exactly our versions from where a peer sync would start up to our
 * newest (digests compared): a replica about to be handed the leadership must not hold a write
 * this leader lacks (a deposed leader's write it has not recovered from yet) nor lack one.
 */
export async function holdsSameLog(replica: ShardReplica, source: SyncSource): Promise<boolean> {
  const from = await syncStartOf(replica.store);
  const max = replica.store.maxVersion;
  return max <= from || (await agreedThrough(replica, source, from)) === max;
}

/**
 * Peer sync: compares the versions of the two logs after `from` (keys only) and fetches and
 * applies only the peer's entries our log lacks. A replica that restarts with what its leader
 * has transfers a list of versions, not the documents of the reorder window. First the two logs
 * up to our newest version are compared by digest (Solr's fingerprint): when they agree, only
 * the versions after it are listed.
 */
export async function peerSync(replica: ShardReplica, source: SyncSource, from: number, opts: SyncOptions = {}): Promise<LogComparison> {
  const start = await agreedThrough(replica, source, from);
  const theirs = await listAll(start, (after, limit) => source.logVersions(after, limit));
  const ours = await listAll(start, (after, limit) => replica.store.logVersionsAfter(after, limit));
  const have = new Set(ours);
  const missing = theirs.filter((v) => !have.has(v));
  let applied = 0;
  for (let i = 0; i < missing.length; i += ENTRIES_PAGE) {
    const wanted = missing.slice(i, i + ENTRIES_PAGE);
    const page = await source.logEntries(wanted);
    // The peer trims its log as it goes: an entry listed above may be gone by now, and a sync
    // that went on without it would end with the replica lacking a write, and counted whole.
    if (page.length < wanted.length) {
      throw new ShardexError('SHX_UNAVAILABLE', `peer sync of ${replica.key}: the peer's update log no longer holds ${wanted.length - page.length} of the versions listed (trimmed during the sync); the next attempt copies the replica whole`);
    }
    assertValid(opts);
    const done = await replica.apply(page);
    applied += done.length;
    opts.progress?.('applied', done.length);
    // Those superseded here by a newer version still go to our log, as they are in the peer's.
    if (done.length < page.length) {
      const versions = new Set(done.map((e) => e.version));
      assertValid(opts);
      await replica.store.recordSuperseded(page.filter((e) => !versions.has(e.version)));
    }
  }
  return { theirs: new Set(theirs), ours, applied, compared: theirs.length + ours.length };
}

/**
 * Makes every id whose current version we logged after `from` and the peer's log lacks hold what
 * the peer holds for it, and removes the other such versions from our log. Normally there are
 * none; those there are are writes a deposed leader applied and nobody acknowledged. A version
 * that may have reached us from the peer after it answered (`info`) is left alone: one of the
 * peer's own epoch newer than its newest version then.
 */
export async function converge(replica: ShardReplica, source: SyncSource, info: PeerLogInfo, logs: LogComparison, opts: SyncOptions = {}): Promise<number> {
  const peerEpoch = info.epoch ?? epochOf(info.maxVersion);
  const sinceSync = (v: number): boolean => v > info.maxVersion && epochOf(v) >= peerEpoch;
  const unknown = logs.ours.filter((v) => !sinceSync(v) && !logs.theirs.has(v));
  const suspects: string[] = [];
  for (let i = 0; i < unknown.length; i += ENTRIES_PAGE) {
    for (const e of await replica.store.logEntries(unknown.slice(i, i + ENTRIES_PAGE))) {
      if ((await replica.store.versionOf(e.id)) === e.version) suspects.push(e.id);
    }
  }
  let reverted = 0;
  for (let i = 0; i < suspects.length; i += ENTRIES_PAGE) {
    const chunk = suspects.slice(i, i + ENTRIES_PAGE);
    const theirs = await source.entries(chunk);
    assertValid(opts);
    reverted += await replica.reconcile(chunk.map((id, j) => ({ id, leader: theirs[j] })), sinceSync);
  }
  // Those a newer write replaced here leave the log too: synced from us later, they would bring
  // a write nobody acknowledged back to another replica.
  for (let i = 0; i < unknown.length; i += ENTRIES_PAGE) await replica.store.dropStaleLog(unknown.slice(i, i + ENTRIES_PAGE));
  return reverted;
}

/** Brings `replica` to the peer's state (what was in the peer when this ran). */
export async function syncFrom(replica: ShardReplica, source: SyncSource, info: PeerLogInfo, opts: SyncOptions = {}): Promise<RecoveryReport> {
  const localMax = replica.store.maxVersion;
  const from = await syncStartOf(replica.store);
  if (canPeerSync(localMax, from, info)) {
    // Kept until the logs have converged (see syncStartOf).
    await replica.store.setSyncFloor(from);
    const logs = await peerSync(replica, source, from, opts);
    const reverted = localMax === 0 ? 0 : await converge(replica, source, info, logs, opts);
    await replica.store.setSyncFloor(undefined);
    const report = { method: 'peer-sync' as const, applied: logs.applied, copied: 0, reverted, compared: logs.compared };
    if (logs.compared === 0) return report;
    const onlyOurs = logs.ours.filter((v) => !logs.theirs.has(v)).length;
    return { ...report, onlyTheirs: logs.theirs.size - (logs.ours.length - onlyOurs), onlyOurs };
  }
  assertValid(opts);
  await replica.reset();
  // A copy stopped part way is not finished by a sync of the newest versions: the next one
  // compares from the start (and copies again when the peer's log no longer reaches back).
  await replica.store.setSyncFloor(0);
  let copied = 0;
  for await (const chunk of source.copy()) {
    assertValid(opts);
    const n = (await replica.apply(chunk)).length;
    copied += n;
    opts.progress?.('copied', n);
  }
  // Whatever landed at the peer while we copied is in its log after the copy's start.
  const { applied } = await peerSync(replica, source, syncStart(Math.min(info.maxVersion, replica.store.maxVersion)), opts);
  await replica.store.setSyncFloor(undefined);
  return { method: 'full-copy', applied, copied, reverted: 0 };
}
