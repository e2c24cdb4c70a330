// One shard replica hosted by a node: its durable store, its search index, and its place in the
// shard, kept by the pure machine of shard-state.ts. This class is the shell around it: it feeds
// the machine events and hands the effects back to whoever performs them.
import type { Logger } from 'pino';
import { ShardIndex, type CollectionSchema, type ReplicaSearcher, type StoredDoc } from '../index/index.js';
import type { CommitPoint, Reconcile, ReplicaStore, UpdateOp } from '../ulog/index.js';
import { Mutex } from './mutex.js';
import { INITIAL, step, type Health, type Role, type ShardEffect, type ShardEvent, type ShardState } from './shard-state.js';

/** What the replica tells its search index after each batch on disk (ReplicaStore's sink). */
export interface ReplicaIndex {
  apply(ops: readonly UpdateOp[]): void;
  /** Records the store's commit point with the index's state at it (a persisted index keeps its segments for snapshot readers). */
  commit?(): Promise<CommitPoint>;
  /** Empties the index (before the replica's data is replaced by a full copy). */
  clear(): Promise<void> | void;
}

/** A replica's searchable index that takes the replica's applied updates (a ShardIndex or a SegmentedIndex). */
export interface BoundIndex extends ReplicaSearcher {
  apply(ops: Iterable<{ readonly id: string; readonly doc: StoredDoc | null }>): void;
}

/** Keeps a replica's search index in step with its applied updates (in memory only; see PersistedIndex). */
export class SearchIndexBinding implements ReplicaIndex {
  index: BoundIndex;
  protected readonly schema: CollectionSchema;

  constructor(schema: CollectionSchema, index?: BoundIndex) {
    this.schema = schema;
    this.index = index ?? new ShardIndex(schema);
  }

  apply(ops: readonly UpdateOp[]): void {
    this.index.apply(ops as readonly { id: string; doc: StoredDoc | null }[]);
  }

  clear(): Promise<void> | void {
    this.index = new ShardIndex(this.schema);
  }
}

export class ShardReplica {
  readonly collection: string;
  readonly shard: string;
  readonly store: ReplicaStore;
  index: ReplicaIndex | undefined;
  /** Serializes version assignment with the local write at the leader. */
  readonly lock = new Mutex();
  /** A recovery is running (at most one at a time). */
  recovering = false;
  /** A catch-up with a new leader is running (at most one at a time). */
  catchingUp = false;
  /** The newest leadership a catch-up was asked for while one ran: caught up with once it ends. */
  catchUpNext: number | undefined;
  private s: ShardState;
  private readonly log: Logger;

  constructor(collection: string, shard: string, store: ReplicaStore, log: Logger) {
    this.collection = collection;
    this.shard = shard;
    this.store = store;
    this.log = log;
    this.s = step(INITIAL, { type: 'opened', fence: store.fence, maxVersion: store.maxVersion }).state;
    // The store tells the index what each batch applied once it is on disk, in the store's order.
    store.setSink((ops) => this.indexApplied(ops));
  }

  get key(): string {
    return `${this.collection}/${this.shard}`;
  }

  get state(): ShardState {
    return this.s;
  }

  get role(): Role {
    return this.s.role;
  }

  /** This replica's own leadership epoch (candidate or leader), else 0. */
  get epoch(): number {
    return this.s.epoch;
  }

  /** Newest leadership epoch seen: older ones are fenced off. */
  get fence(): number {
    return this.s.fence;
  }

  get health(): Health {
    return this.s.health;
  }

  /** Told when the replica's role changes (the node counts leaderships lost). */
  onRoleChange: ((from: Role, to: Role) => void) | undefined;

  /** Feeds one event to the shard's machine; returns the effects the caller must perform. */
  step(event: ShardEvent): readonly ShardEffect[] {
    const before = this.s;
    const { state, effects } = step(before, event);
    this.s = state;
    if (state.role !== before.role || state.health !== before.health) {
      this.log.info({ replica: this.key, role: state.role, epoch: state.epoch, fence: state.fence, health: state.health, event: event.type }, 'replica state changed');
    }
    if (state.role !== before.role) this.onRoleChange?.(before.role, state.role);
    return effects;
  }

  /** Applies ops newer than what is stored, durably (and so to the index). Returns those applied. */
  async apply(ops: readonly UpdateOp[], opts: { readonly fence?: number } = {}): Promise<UpdateOp[]> {
    const applied = await this.store.apply(ops, opts);
    if (applied.length > 0) this.step({ type: 'stored', maxVersion: this.store.maxVersion });
    return applied;
  }

  /** Tells the index; admission made every logged document indexable, so a failure here is a bug to report, not a refusal. */
  indexApplied(ops: readonly UpdateOp[]): void {
    try {
      this.index?.apply(ops);
    } catch (err) {
      this.log.error({ replica: this.key, err }, 'the index refused an admitted update; search results may lack it until the replica is rebuilt');
    }
  }

  /** Records a commit point: what eventual reads see (with the index's segments at it, if it keeps them). */
  commit(): Promise<CommitPoint> {
    return this.index?.commit?.() ?? this.store.commit();
  }

  /** Makes the given ids hold exactly the leader's entries (see ReplicaStore.reconcile); returns how many changed. */
  async reconcile(items: readonly Reconcile[], sinceSync: (version: number) => boolean): Promise<number> {
    return (await this.store.reconcile(items, sinceSync)).length;
  }

  /**
   * Drops everything (before a full copy from the leader); the fence stays. The index goes first
   * (a persisted index of the old data must never outlive it), at the store's turn: no write
   * lands between the two.
   */
  async reset(): Promise<void> {
    const index = this.index;
    await this.store.clear(index ? () => index.clear() : undefined);
  }
}
