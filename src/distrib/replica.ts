// One shard replica hosted by a node: its durable store, its search index, and its place in
// the shard (leader or follower, leadership epoch, recovery state).
import type { Logger } from 'pino';
import { ShardIndex, type CollectionSchema, type StoredDoc } from '../index/index.js';
import type { ReplicaStore, UpdateOp } from '../ulog/index.js';
import { Mutex } from './mutex.js';

/** What the replica tells its search index after each applied batch. */
export interface ReplicaIndex {
  apply(ops: readonly UpdateOp[]): void;
  clear(): void;
}

/** Keeps a replica's search index in step with its applied updates. */
export class SearchIndexBinding implements ReplicaIndex {
  index: ShardIndex;
  private readonly schema: CollectionSchema;

  constructor(schema: CollectionSchema) {
    this.schema = schema;
    this.index = new ShardIndex(schema);
  }

  apply(ops: readonly UpdateOp[]): void {
    this.index.apply(ops as readonly { id: string; doc: StoredDoc | null }[]);
  }

  clear(): void {
    this.index = new ShardIndex(this.schema);
  }
}

export type ReplicaRole = 'leader' | 'follower';
export type RecoveryState = 'active' | 'recovering';

/** Solr's VersionInfo clock, scaled so that versions stay exact JS integers (< 2^53):
 *  max(now_ms x 1024, last + 1). Solr shifts by 20 bits into a Java long; 10 bits keep
 *  a thousand versions per millisecond per shard before the clock runs ahead, and fit
 *  doubles until the year 2245. */
export function nextVersion(last: number, nowMs: number): number {
  return Math.max(nowMs * 1024, last + 1);
}

export class ShardReplica {
  readonly collection: string;
  readonly shard: string;
  readonly store: ReplicaStore;
  index: ReplicaIndex | undefined;
  role: ReplicaRole = 'follower';
  /** Epoch of this replica's own leadership (when leader). */
  epoch = 0;
  /** Newest leadership epoch seen from any leader: older ones are fenced off. */
  maxEpochSeen = 0;
  state: RecoveryState = 'active';
  /** A recovery is running (at most one at a time). */
  recovering = false;
  /** Serializes version assignment with the local write at the leader. */
  readonly lock = new Mutex();
  private lastVersion: number;
  private readonly log: Logger;

  constructor(collection: string, shard: string, store: ReplicaStore, log: Logger) {
    this.collection = collection;
    this.shard = shard;
    this.store = store;
    this.lastVersion = store.maxVersion;
    this.log = log;
  }

  get key(): string {
    return `${this.collection}/${this.shard}`;
  }

  /** Assigns the next version; call under `lock`. */
  assignVersion(): number {
    this.lastVersion = nextVersion(Math.max(this.lastVersion, this.store.maxVersion), Date.now());
    return this.lastVersion;
  }

  /** Applies ops newer than what is stored, durably, then to the index. Returns those applied. */
  async apply(ops: readonly UpdateOp[]): Promise<UpdateOp[]> {
    const applied = await this.store.apply(ops);
    if (applied.length > 0) this.index?.apply(applied);
    return applied;
  }

  /** Drops everything (before a full copy from the leader). */
  async reset(): Promise<void> {
    await this.store.clear();
    this.index?.clear();
  }

  becomeLeader(epoch: number): void {
    this.role = 'leader';
    this.epoch = epoch;
    this.maxEpochSeen = Math.max(this.maxEpochSeen, epoch);
    this.log.info({ replica: this.key, epoch }, 'replica leads its shard');
  }

  becomeFollower(): void {
    if (this.role === 'leader') this.log.info({ replica: this.key, epoch: this.epoch }, 'replica no longer leads');
    this.role = 'follower';
  }
}
