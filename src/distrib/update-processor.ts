// The update path, phase by phase (Solr's DistributedUpdateProcessor, without becoming it):
//   NONE        any node: group ops by shard, send each group to its leader (TOLEADER);
//   TOLEADER    the leader: version, write durably, apply, fan out FROMLEADER, acknowledge
//               once every active replica has it or was marked down (terms raised);
//   FROMLEADER  a replica: refuse an older leadership epoch, drop versions not newer than
//               the stored one, never forward.
import type { Logger } from 'pino';
import type { Coordinator, CollectionState } from '../coordination/index.js';
import { ShardexError } from '../errors.js';
import { ShardRouter, parseRange, type RouterName } from '../hashrange/index.js';
import { docText, type UpdateOp } from '../ulog/index.js';
import type { CommandDistributor } from './distributor.js';
import type { ShardUpdate, ShardUpdateResult, WireOp } from './protocol.js';
import type { ShardReplica } from './replica.js';
import { isTransient, linearBackoff, sleep, type BackoffPolicy } from './retry.js';

export interface UpdateResponse {
  /** Lowest achieved replication factor over the shards written. */
  readonly rf: number;
  readonly versions: Record<string, number>;
  readonly minRfMet: boolean;
}

export interface UpdateProcessorOptions {
  readonly self: string;
  readonly coordinator: Coordinator;
  readonly replica: (collection: string, shard: string) => ShardReplica | undefined;
  readonly distributor: CommandDistributor;
  readonly logger: Logger;
  /** Solr: solr.retries.on.forward = 25. */
  readonly forwardRetries?: number;
  /** Solr: solr.retries.to.followers = 3. */
  readonly replicaRetries?: number;
  readonly backoff?: BackoffPolicy;
  /** True once the node is shutting down. */
  readonly isStopping?: () => boolean;
  /** Counts forwards by phase (metrics). */
  readonly onForward?: (phase: 'TOLEADER' | 'FROMLEADER', ops: number) => void;
}

const routers = new WeakMap<CollectionState, ShardRouter>();

/** The router of a collection, built from the ranges in its cluster state. */
export function routerOf(state: CollectionState): ShardRouter {
  let r = routers.get(state);
  if (!r) {
    r = new ShardRouter(
      state.shards.map((s) => ({ ...parseRange(s.range), name: s.name })),
      state.router as RouterName,
    );
    routers.set(state, r);
  }
  return r;
}

/** Groups ops by the shard their id hashes to (pure). */
export function groupByShard(router: ShardRouter, ops: readonly WireOp[]): Map<string, WireOp[]> {
  const groups = new Map<string, WireOp[]>();
  for (const op of ops) {
    const shard = router.route(op.id).shard;
    let g = groups.get(shard);
    if (!g) groups.set(shard, (g = []));
    g.push(op);
  }
  return groups;
}

export class UpdateProcessor {
  private readonly o: UpdateProcessorOptions;
  private readonly backoff: BackoffPolicy;

  constructor(opts: UpdateProcessorOptions) {
    this.o = opts;
    this.backoff = opts.backoff ?? linearBackoff();
  }

  private collection(name: string): CollectionState {
    const state = this.o.coordinator.collection(name);
    if (!state) throw new ShardexError('SHX_COLLECTION_NOT_FOUND', `collection '${name}' does not exist; create it with POST /api/collections`);
    return state;
  }

  /** Phase NONE: a client's update arriving at any node. */
  async update(collection: string, ops: readonly WireOp[], minRf = 1): Promise<UpdateResponse> {
    const state = this.collection(collection);
    const groups = groupByShard(routerOf(state), ops);
    const settled = await Promise.allSettled(
      [...groups].map(([shard, group]) => this.sendToLeader(collection, shard, group, minRf)),
    );
    // No prototype: an id such as "__proto__" is plain data here.
    const versions: Record<string, number> = Object.create(null) as Record<string, number>;
    let rf = Infinity;
    const failures: ShardexError[] = [];
    for (const s of settled) {
      if (s.status === 'rejected') {
        failures.push(s.reason instanceof ShardexError ? s.reason : new ShardexError('SHX_INTERNAL', String(s.reason)));
        continue;
      }
      Object.assign(versions, s.value.versions);
      rf = Math.min(rf, s.value.rf);
    }
    if (failures.length > 0) {
      const first = failures.find((f) => !f.retryable) ?? failures[0]!;
      throw new ShardexError(first.code, failures.map((f) => f.message).join('; '), {
        details: { written: Object.keys(versions).length },
      });
    }
    if (rf === Infinity) rf = 0;
    return { rf, versions, minRfMet: rf >= minRf };
  }

  private async sendToLeader(collection: string, shard: string, ops: WireOp[], minRf: number): Promise<ShardUpdateResult> {
    const update: ShardUpdate = { collection, shard, phase: 'TOLEADER', epoch: 0, ops, minRf, from: this.o.self };
    const retries = this.o.forwardRetries ?? 25;
    for (let attempt = 0; ; attempt++) {
      try {
        // Look the leader up again before every try: it may have changed (Solr's ForwardNode).
        const leader = this.o.coordinator.leader(collection, shard);
        if (!leader) throw new ShardexError('SHX_NO_LEADER', `shard ${collection}/${shard} has no leader right now; retry shortly`);
        if (leader.node === this.o.self) return await this.toLeader(update);
        this.o.onForward?.('TOLEADER', ops.length);
        return await this.o.distributor.submit(leader.node, update, { maxRetries: 0 });
      } catch (err) {
        if (!isTransient(err) || attempt >= retries) throw err;
        await sleep(this.backoff(attempt + 1));
      }
    }
  }

  /** Phase TOLEADER, at the shard's leader. */
  async toLeader(update: ShardUpdate): Promise<ShardUpdateResult> {
    const replica = this.o.replica(update.collection, update.shard);
    const current = this.o.coordinator.leader(update.collection, update.shard);
    if (
      !replica ||
      replica.role !== 'leader' ||
      !this.o.coordinator.canActAsLeader() ||
      (current !== undefined && current.epoch > replica.epoch)
    ) {
      throw new ShardexError('SHX_NOT_LEADER', `${this.o.self} is not the leader of ${update.collection}/${update.shard}; retry to refresh the leader`);
    }
    const ops = await replica.lock.run(async () => {
      // The text is made here if the request did not bring it: the log and every replica use it.
      const versioned: UpdateOp[] = update.ops.map((op) => ({ id: op.id, version: replica.assignVersion(), doc: op.doc, text: docText(op) }));
      await replica.apply(versioned);
      return versioned;
    });
    const rf = 1 + (await this.fanOut(replica, ops, update.minRf));
    const versions: Record<string, number> = Object.create(null) as Record<string, number>;
    for (const op of ops) versions[op.id] = op.version;
    return { rf, versions };
  }

  /** Sends FROMLEADER to every replica that is not down; returns how many acknowledged. */
  private async fanOut(replica: ShardReplica, ops: readonly UpdateOp[], minRf: number): Promise<number> {
    const state = this.collection(replica.collection);
    const shard = state.shards.find((s) => s.name === replica.shard);
    const others = (shard?.replicas ?? []).filter((r) => r.node !== this.o.self && r.state !== 'down');
    // A replica whose node is gone will miss this update: mark it down now, without retries.
    const gone = others.filter((r) => !this.o.coordinator.isLive(r.node)).map((r) => r.node);
    const targets = others.filter((r) => this.o.coordinator.isLive(r.node));
    if (gone.length > 0) await this.markBehind(replica, targets.map((t) => t.node), gone);
    if (targets.length === 0) return 0;
    const wire: WireOp[] = ops.map((op) => ({ id: op.id, v: op.version, doc: op.doc, text: op.text }));
    const update: ShardUpdate = {
      collection: replica.collection,
      shard: replica.shard,
      phase: 'FROMLEADER',
      epoch: replica.epoch,
      ops: wire,
      minRf,
      from: this.o.self,
    };
    this.o.onForward?.('FROMLEADER', ops.length * targets.length);
    const settled = await Promise.allSettled(
      targets.map((t) => this.o.distributor.submit(t.node, update, { maxRetries: this.o.replicaRetries ?? 3 })),
    );
    let acked = 0;
    const behind: string[] = [];
    settled.forEach((s, i) => {
      if (s.status === 'fulfilled') acked++;
      else if (s.reason instanceof ShardexError && s.reason.code === 'SHX_STALE_EPOCH') {
        replica.becomeFollower();
        throw new ShardexError('SHX_NOT_LEADER', `${this.o.self} was deposed as leader of ${replica.key}; retry to reach the new leader`);
      } else behind.push(targets[i]!.node);
    });
    if (behind.length > 0) await this.markBehind(replica, targets.map((t) => t.node).filter((n) => !behind.includes(n)), behind);
    return acked;
  }

  /**
   * A replica that missed an acknowledged update must recover before it serves or leads:
   * raise the healthy replicas' terms above its term, then mark it down. If coordination
   * cannot record that, the write is not acknowledged.
   */
  private async markBehind(replica: ShardReplica, healthy: string[], behind: string[]): Promise<void> {
    // A stopping node's sends fail because it stops, not because the replicas are behind.
    if (this.o.isStopping?.()) throw new ShardexError('SHX_UNAVAILABLE', `${this.o.self} is shutting down; retry on another node`);
    this.o.logger.warn({ replica: replica.key, behind }, 'replicas missed an update; marking them down');
    try {
      await this.o.coordinator.raiseTerms(replica.collection, replica.shard, [this.o.self, ...healthy], behind);
      for (const node of behind) await this.o.coordinator.setReplicaState(replica.collection, replica.shard, node, 'down');
    } catch (err) {
      throw new ShardexError('SHX_UNAVAILABLE', `could not mark replicas ${behind.join(', ')} of ${replica.key} down: ${(err as Error).message}`, { cause: err });
    }
  }

  /** Phase FROMLEADER, at a replica. */
  async fromLeader(update: ShardUpdate): Promise<ShardUpdateResult> {
    const replica = this.o.replica(update.collection, update.shard);
    if (!replica) throw new ShardexError('SHX_NOT_FOUND', `${this.o.self} hosts no replica of ${update.collection}/${update.shard}`);
    // Check the whole request before it may move the fence: a malformed update changes nothing.
    const ops: UpdateOp[] = [];
    for (const op of update.ops) {
      if (typeof op.v !== 'number') throw new ShardexError('SHX_BAD_REQUEST', `update for '${op.id}' from ${update.from} has no version`);
      ops.push({ id: op.id, version: op.v, doc: op.doc, text: op.text });
    }
    if (update.epoch < replica.maxEpochSeen) {
      throw new ShardexError('SHX_STALE_EPOCH', `update from ${update.from} carries leadership epoch ${update.epoch}, older than ${replica.maxEpochSeen}`);
    }
    replica.maxEpochSeen = update.epoch;
    if (replica.role === 'leader' && update.epoch > replica.epoch) replica.becomeFollower();
    // Applied (durably) even while recovering: the per-id version rule makes it safe to mix
    // with what the recovery copies, and an acknowledged update is then on disk.
    const applied = await replica.apply(ops);
    return { rf: 1, applied: applied.length };
  }
}
