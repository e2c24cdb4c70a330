// The update path, phase by phase (Solr's DistributedUpdateProcessor, without becoming it):
//   NONE        any node: group ops by shard, send each group to its leader (TOLEADER);
//   TOLEADER    the leader: version, write durably, apply, fan out FROMLEADER, acknowledge
//               once every active replica has it or was marked down (terms raised);
//   FROMLEADER  a replica: refuse an older leadership epoch, drop versions not newer than
//               the stored one, never forward.
// Which role a replica has, which versions it assigns and what a fan-out's outcome means are the
// shard machine's decisions (shard-state.ts); this file sends, writes and answers.
//
// Answers are definite or indeterminate. Definite refusals (every 4xx, SHX_NO_LEADER,
// SHX_NOT_LEADER, SHX_STARTING) are given only before any replica applied anything. Once a write
// may have been applied somewhere, a failure is SHX_INDETERMINATE: it may or may not stand.
import type { Logger } from 'pino';
import type { Coordinator, CollectionState } from '../coordination/index.js';
import { ShardexError } from '../errors.js';
import { currentRequestId } from '../request-id.js';
import { ShardRouter, parseRange, type RouterName } from '../hashrange/index.js';
import type { CollectionSchema } from '../index/index.js';
import { docText, type UpdateOp } from '../ulog/index.js';
import type { CommandDistributor } from './distributor.js';
import { admitOps } from './documents.js';
import type { ShardUpdate, ShardUpdateResult, WireOp } from '../transport/index.js';
import type { ShardReplica } from './replica.js';
import { nodeRetryBackoff, retry, wasNotSent, type BackoffPolicy, type Deadline } from './retry.js';
import type { ShardEffect } from './shard-state.js';

/** Solr's maxRetriesOnForward: retries of an update forwarded to its shard's leader. */
export const DEFAULT_FORWARD_RETRIES = 25;
/** Solr's maxRetriesToFollowers: retries of a leader's update to a replica before it is marked down. */
export const DEFAULT_REPLICA_RETRIES = 3;

/** Error codes that prove nothing was applied anywhere (README: definite refusals). */
const NOTHING_APPLIED: ReadonlySet<string> = new Set(['SHX_NO_LEADER', 'SHX_NOT_LEADER', 'SHX_STARTING', 'SHX_COLLECTION_NOT_FOUND']);

/** True when `err` proves the update it answers was applied nowhere (refused, or never sent). */
export function isDefiniteRefusal(err: unknown): boolean {
  if (!(err instanceof ShardexError)) return false;
  return (err.status >= 400 && err.status < 500) || NOTHING_APPLIED.has(err.code) || wasNotSent(err);
}

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
  /** The collection's schema: the leader admits forwarded documents again before it versions them. */
  readonly schema: (collection: string) => CollectionSchema;
  /** Performs the shard machine's node-level effects (resign, recover, catch-up, auto-commit); it ignores the others. */
  readonly perform: (replica: ShardReplica, effects: readonly ShardEffect[]) => void;
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
  /** Counts replicas marked down because they missed an update (metrics). */
  readonly onMarkedDown?: (replica: string, nodes: readonly string[], ok: boolean) => void;
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

/** Writes a leader accepted (versions given) and has not answered yet, per replica; a handover waits for none to be left. */
class AcceptedWrites {
  private readonly counts = new Map<ShardReplica, number>();
  private readonly waiters = new Map<ShardReplica, Array<() => void>>();

  begin(r: ShardReplica): void {
    this.counts.set(r, (this.counts.get(r) ?? 0) + 1);
  }

  end(r: ShardReplica): void {
    const n = (this.counts.get(r) ?? 1) - 1;
    if (n > 0) return void this.counts.set(r, n);
    this.counts.delete(r);
    const ws = this.waiters.get(r);
    this.waiters.delete(r);
    for (const w of ws ?? []) w();
  }

  /** Resolves true once `r` has no accepted write left, false after `ms`. */
  none(r: ShardReplica, ms: number): Promise<boolean> {
    if (!this.counts.has(r)) return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        const ws = this.waiters.get(r) ?? [];
        const i = ws.indexOf(done);
        if (i >= 0) ws.splice(i, 1);
        resolve(false);
      }, ms);
      let ws = this.waiters.get(r);
      if (!ws) this.waiters.set(r, (ws = []));
      ws.push(done);
    });
  }
}

export class UpdateProcessor {
  private readonly o: UpdateProcessorOptions;
  private readonly backoff: BackoffPolicy;
  private readonly accepted = new AcceptedWrites();
  /**
   * By shard state read from coordination (a new object whenever it changes): the leadership and
   * replicas whose terms were last raised above the replicas it had down. While the state stays
   * the same object, those terms stand: a down replica catches its term up only after its leader
   * has seen it recovering (a new state), so each write need not read the terms again.
   */
  private readonly termsAbove = new WeakMap<object, string>();

  constructor(opts: UpdateProcessorOptions) {
    this.o = opts;
    this.backoff = opts.backoff ?? nodeRetryBackoff();
  }

  private collection(name: string): CollectionState {
    const state = this.o.coordinator.collection(name);
    if (!state) throw new ShardexError('SHX_COLLECTION_NOT_FOUND', `collection '${name}' does not exist; create it with POST /api/collections`);
    return state;
  }

  /**
   * Phase NONE: a client's update arriving at any node. `deadline` (the client's `timeoutMs`)
   * bounds the forwards to the leaders and their retries; a leader's fan-out to its replicas
   * runs to its own end whatever the client's deadline, so that no replica is marked down for it.
   */
  async update(collection: string, ops: readonly WireOp[], minRf = 1, deadline?: Deadline): Promise<UpdateResponse> {
    const state = this.collection(collection);
    const groups = groupByShard(routerOf(state), ops);
    const settled = await Promise.allSettled(
      [...groups].map(([shard, group]) => this.sendToLeader(collection, shard, group, minRf, deadline)),
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
      const written = Object.keys(versions).length;
      const message = failures.map((f) => f.message).join('; ');
      // Shards are written independently: once one may have stored its part, the batch as a
      // whole is not refused, it is indeterminate (retrying it is safe: adds and deletes by id are idempotent).
      if (written > 0 || !failures.every(isDefiniteRefusal)) {
        throw new ShardexError('SHX_INDETERMINATE', `the update may be partly or wholly applied: ${message}`, { details: { written } });
      }
      const first = failures.find((f) => !f.retryable) ?? failures[0]!;
      throw new ShardexError(first.code, message, { details: { written: 0 } });
    }
    if (rf === Infinity) rf = 0;
    return { rf, versions, minRfMet: rf >= minRf };
  }

  private async sendToLeader(collection: string, shard: string, ops: WireOp[], minRf: number, deadline: Deadline | undefined): Promise<ShardUpdateResult> {
    const update: ShardUpdate = { collection, shard, phase: 'TOLEADER', epoch: 0, ops, minRf, from: this.o.self, requestId: currentRequestId() };
    let maybeApplied = false;
    const attempt = async (): Promise<ShardUpdateResult> => {
      try {
        // Look the leader up again before every try: it may have changed (Solr's ForwardNode).
        const leader = this.o.coordinator.leader(collection, shard);
        if (!leader) throw new ShardexError('SHX_NO_LEADER', `shard ${collection}/${shard} has no leader right now; retry shortly`);
        if (leader.node === this.o.self) return await this.toLeader(update);
        this.o.onForward?.('TOLEADER', ops.length);
        return await this.o.distributor.submit(leader.node, update, { maxRetries: 0, deadline });
      } catch (err) {
        if (!isDefiniteRefusal(err)) maybeApplied = true;
        throw err;
      }
    };
    try {
      // The request's deadline bounds the forwards: none is tried once the client has given up.
      return await retry(attempt, { maxRetries: this.o.forwardRetries ?? DEFAULT_FORWARD_RETRIES, backoff: this.backoff }, { deadline });
    } catch (err) {
      // An earlier try may have been applied: a later definite refusal does not undo it.
      if (maybeApplied && err instanceof ShardexError && err.status >= 500) {
        throw new ShardexError('SHX_INDETERMINATE', `the update to ${collection}/${shard} may or may not stand: ${err.message}`, { cause: err });
      }
      throw err;
    }
  }

  /** Phase TOLEADER, at the shard's leader. */
  async toLeader(update: ShardUpdate): Promise<ShardUpdateResult> {
    const replica = this.o.replica(update.collection, update.shard);
    const current = this.o.coordinator.leader(update.collection, update.shard);
    if (!replica || !this.o.coordinator.canActAsLeader() || (current !== undefined && current.epoch > replica.epoch)) {
      throw this.notLeader(update, 'is not the leader');
    }
    // Admission again, before the lock: after the log write, applying cannot fail.
    admitOps(update.ops, this.o.schema(update.collection));
    return this.lead(replica, update);
  }

  /**
   * Resolves true once the writes `replica` accepted as leader have all been answered (a leader
   * handing over refuses new ones meanwhile), false after `ms`.
   */
  acceptedWritesDone(replica: ShardReplica, ms: number): Promise<boolean> {
    return this.accepted.none(replica, ms);
  }

  private async lead(replica: ShardReplica, update: ShardUpdate): Promise<ShardUpdateResult> {
    let accepted = false;
    try {
      const ops = await replica.lock.run(async () => {
        const effects = replica.step({ type: 'update', count: update.ops.length });
        this.perform(replica, effects);
        const refused = effects.find((e) => e.type === 'refuse');
        if (refused) throw this.notLeader(update, refused.why);
        // Counted in the same turn as the machine's decision: a handover that starts later waits for it.
        accepted = true;
        this.accepted.begin(replica);
        const versions = effects.find((e) => e.type === 'accept')?.versions ?? [];
        // The text is made here if the request did not bring it: the log and every replica use it.
        const versioned: UpdateOp[] = update.ops.map((op, i) => ({ id: op.id, version: versions[i]!, doc: op.doc, text: docText(op) }));
        await replica.apply(versioned);
        return versioned;
      });
      const rf = await this.fanOut(replica, ops, update.minRf);
      const versions: Record<string, number> = Object.create(null) as Record<string, number>;
      for (const op of ops) versions[op.id] = op.version;
      return { rf, versions };
    } finally {
      if (accepted) this.accepted.end(replica);
    }
  }

  private notLeader(update: ShardUpdate, why: string): ShardexError {
    return new ShardexError('SHX_NOT_LEADER', `${this.o.self} ${why} of ${update.collection}/${update.shard}; retry to reach the leader (nothing was applied)`);
  }

  /** Hands the effects to the node, which performs those that are its own (it ignores the replies this processor gives). */
  private perform(replica: ShardReplica, effects: readonly ShardEffect[]): void {
    if (effects.length > 0) this.o.perform(replica, effects);
  }

  /**
   * Sends FROMLEADER to every replica that is not down and lets the shard machine judge the
   * outcome; returns the achieved replication factor, or throws its refusal.
   */
  private async fanOut(replica: ShardReplica, ops: readonly UpdateOp[], minRf: number): Promise<number> {
    const state = this.collection(replica.collection);
    const shard = state.shards.find((s) => s.name === replica.shard);
    const others = (shard?.replicas ?? []).filter((r) => r.node !== this.o.self && r.state !== 'down');
    // Replicas already down miss this update too: before it is acknowledged, the terms must say
    // so (Solr's ensureTermsAreHigher), or one of them, restarted and not yet recovering, could
    // be elected without it once this leader is gone.
    const skipped = (shard?.replicas ?? []).filter((r) => r.node !== this.o.self && r.state === 'down').map((r) => r.node);
    // A replica whose node is gone will miss this update: it is marked down now, without retries.
    const gone = others.filter((r) => !this.o.coordinator.isLive(r.node)).map((r) => r.node);
    const targets = others.filter((r) => this.o.coordinator.isLive(r.node)).map((r) => r.node);
    const acked: string[] = [];
    const stale: string[] = [];
    const unreachable: string[] = [...gone];
    if (targets.length > 0) {
      const wire: WireOp[] = ops.map((op) => ({ id: op.id, v: op.version, doc: op.doc, text: op.text }));
      const update: ShardUpdate = { collection: replica.collection, shard: replica.shard, phase: 'FROMLEADER', epoch: replica.epoch, ops: wire, minRf, from: this.o.self, requestId: currentRequestId() };
      this.o.onForward?.('FROMLEADER', ops.length * targets.length);
      const settled = await Promise.allSettled(targets.map((t) => this.o.distributor.submit(t, update, { maxRetries: this.o.replicaRetries ?? DEFAULT_REPLICA_RETRIES })));
      settled.forEach((s, i) => {
        if (s.status === 'fulfilled') acked.push(targets[i]!);
        else if (s.reason instanceof ShardexError && s.reason.code === 'SHX_STALE_EPOCH') stale.push(targets[i]!);
        else unreachable.push(targets[i]!);
      });
    }
    let effects = replica.step({ type: 'fannedOut', acked, stale, unreachable });
    const markDown = effects.find((e) => e.type === 'markDown');
    if (markDown) {
      const ok = await this.markBehind(replica, acked, markDown.nodes, skipped);
      this.o.onMarkedDown?.(replica.key, markDown.nodes, ok);
      effects = replica.step({ type: 'markedDown', ok, acked: acked.length });
    } else if (skipped.length > 0 && shard && effects.some((e) => e.type === 'acknowledge')) {
      const raised = `${replica.epoch} ${acked.join(',')}`;
      if (this.termsAbove.get(shard) !== raised) {
        const ok = await this.markBehind(replica, acked, [], skipped);
        if (ok) this.termsAbove.set(shard, raised);
        effects = replica.step({ type: 'markedDown', ok, acked: acked.length });
      }
    }
    this.perform(replica, effects);
    const refused = effects.find((e) => e.type === 'refuse');
    if (refused) {
      this.o.logger.warn({ replica: replica.key, why: refused.why }, 'update not acknowledged');
      throw new ShardexError(refused.code, `${this.o.self} ${refused.why} (${replica.key}); retry: adds and deletes by id are idempotent`);
    }
    const ack = effects.find((e) => e.type === 'acknowledge');
    return ack?.rf ?? 1;
  }

  /**
   * A replica that missed an acknowledged update must recover before it serves or leads:
   * raise the healthy replicas' terms above its term, then mark it down (`down`: replicas
   * marked down before, which need only the terms). False when coordination could not record
   * that (the write is then not acknowledged).
   */
  private async markBehind(replica: ShardReplica, healthy: string[], behind: readonly string[], down: readonly string[]): Promise<boolean> {
    // A stopping node's sends fail because it stops, not because the replicas are behind.
    if (this.o.isStopping?.()) return false;
    if (behind.length > 0) this.o.logger.warn({ replica: replica.key, behind }, 'replicas missed an update; marking them down');
    try {
      // One read of the terms, and a write only when a healthy replica is not above them all yet.
      await this.o.coordinator.raiseTerms(replica.collection, replica.shard, [this.o.self, ...healthy], [...behind, ...down]);
      for (const node of behind) await this.o.coordinator.setReplicaState(replica.collection, replica.shard, node, 'down');
      return true;
    } catch (err) {
      this.o.logger.warn({ replica: replica.key, behind, err: (err as Error).message }, 'could not mark replicas down');
      return false;
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
    const effects = replica.step({ type: 'fromLeader', epoch: update.epoch });
    this.perform(replica, effects);
    const refused = effects.find((e) => e.type === 'refuse');
    if (refused) throw new ShardexError('SHX_STALE_EPOCH', `update from ${update.from} ${refused.why}`);
    // Applied (durably) even while recovering: the per-id version rule makes it safe to mix
    // with what the recovery copies, and an acknowledged update is then on disk. The fence moves
    // in the same batch; an empty update is a new leader's announcement of its epoch.
    const applied = await replica.apply(ops, { fence: update.epoch });
    return { rf: 1, applied: applied.length };
  }
}
