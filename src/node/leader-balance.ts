// Leader balance on one node (Solr's REBALANCELEADERS, done continuously): every leader this node
// holds whose shard should be led by another replica (placement.ts's leaderHandovers: to its
// preferred leader once that is live and fit, or off a node that leads more than its share) hands
// its leadership over, and only when that replica says it may lead and holds every version this
// leader does. The handover never makes a write indeterminate:
//   1. the target is asked whether it may lead (active, not recovering, complete, term at the top,
//      in the election, following this leadership);
//   2. the leader stops accepting writes (a definite SHX_NOT_LEADER, which senders retry at the next
//      leader) and waits until every write it accepted is answered: acknowledged (so on the
//      target, which is active) or refused by the usual rules;
//   3. it asks the target again and checks that the target holds its newest version and its term;
//   4. it leaves its election and joins again at the back: the next candidate is elected with a
//      new epoch by the unchanged rules (canLead, terms, fencing) and syncs from its peers.
// Anything that fails before step 4 gives the leadership back its writes and waits before the
// next try at that shard (doubling up to a minute), so that an unfit target never causes churn.
import type { Logger } from 'pino';
import { leaderHandovers, type CollectionState, type Coordinator } from '../coordination/index.js';
import type { ShardReplica } from '../distrib/replica.js';
import type { ShardEffect } from '../distrib/shard-state.js';

/** What a replica answers when a leader asks whether it may take over (the `versions` RPC with `leadCheck`). */
export interface LeadCheck {
  /** Why it may not lead now; absent when it may. */
  readonly unfit?: string;
  readonly maxVersion: number;
}

export interface LeaderBalanceHost {
  readonly name: string;
  readonly coordinator: Coordinator;
  readonly log: Logger;
  replicas(): Iterable<ShardReplica>;
  /** Asks `node` whether its replica of the shard may lead now. */
  leadCheck(node: string, collection: string, shard: string): Promise<LeadCheck>;
  /** Resolves true once every write the replica accepted as leader is answered, false after `ms`. */
  acceptedWritesDone(replica: ShardReplica, ms: number): Promise<boolean>;
  perform(replica: ShardReplica, effects: readonly ShardEffect[]): void;
  /** Whether `node`'s replica holds exactly the versions `replica` holds over the recent log (holdsSameLog). */
  sameLog(replica: ShardReplica, node: string): Promise<boolean>;
  /** Leaves the shard's election and joins it again at the back. */
  resign(replica: ShardReplica): Promise<void>;
  /** Counts a handover's outcome (metrics). */
  counted(outcome: HandoverOutcome, replica: ShardReplica): void;
  isStopping(): boolean;
}

export type HandoverOutcome = 'handed-over' | 'target-unfit' | 'writes-pending' | 'lost';

/** How long a handing-over leader waits for the writes it accepted. */
const DRAIN_MS = 10_000;
const RETRY_MIN_MS = 2_000;
const RETRY_MAX_MS = 60_000;

interface Backoff {
  until: number;
  ms: number;
  /**
   * The shard's replicas (nodes and states) and the collection's rebalance count when it was set:
   * a change of either (the target became active, an operator asked for a rebalance) clears it.
   */
  stamp: string;
}

function stampOf(state: CollectionState, shard: string): string {
  return JSON.stringify([state.leaderRebalances ?? 0, state.shards.find((s) => s.name === shard)?.replicas]);
}

/** Whether `node`'s replica of a shard may be chosen to lead, as the cluster state shows it. */
export function fitInState(coordinator: Coordinator, state: CollectionState): (shard: string, node: string) => boolean {
  return (shard, node) => coordinator.isLive(node) && state.shards.find((s) => s.name === shard)?.replicas.find((r) => r.node === node)?.state === 'active';
}

/** The handovers `state`'s leaders should make, as `coordinator` sees the cluster (shard -> target). */
export function handoversOf(coordinator: Coordinator, state: CollectionState): Map<string, string> {
  return leaderHandovers(state, fitInState(coordinator, state), (shard) => coordinator.leader(state.name, shard)?.node);
}

export class LeaderBalance {
  private readonly h: LeaderBalanceHost;
  private readonly busy = new Set<string>();
  private readonly backoff = new Map<string, Backoff>();
  private timer: NodeJS.Timeout | undefined;

  constructor(host: LeaderBalanceHost) {
    this.h = host;
  }

  /** Looks at every shard this node leads and starts the handovers the targets ask for. */
  check(): void {
    if (this.h.isStopping()) return;
    const now = Date.now();
    let nextTry = Infinity;
    const movesOf = new Map<string, Map<string, string>>();
    for (const r of this.h.replicas()) {
      if (r.role !== 'leader' || r.state.handingOver || this.busy.has(r.key)) continue;
      const state = this.h.coordinator.collection(r.collection);
      if (!state) continue;
      let moves = movesOf.get(r.collection);
      if (!moves) movesOf.set(r.collection, (moves = handoversOf(this.h.coordinator, state)));
      const target = moves.get(r.shard);
      if (target === undefined || target === this.h.name) continue;
      const b = this.backoff.get(r.key);
      if (b && b.until > now && b.stamp === stampOf(state, r.shard)) {
        nextTry = Math.min(nextTry, b.until);
        continue;
      }
      void this.handOver(r, target, stampOf(state, r.shard));
    }
    if (nextTry < Infinity && !this.timer) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.check();
      }, nextTry - now);
      this.timer.unref();
    }
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private async handOver(r: ShardReplica, target: string, stamp: string): Promise<void> {
    const { collection, shard } = r;
    const epoch = r.epoch;
    const log = this.h.log.child({ replica: r.key, to: target, epoch });
    this.busy.add(r.key);
    const stillLeading = (): boolean => !this.h.isStopping() && r.role === 'leader' && r.epoch === epoch;
    let outcome: HandoverOutcome = 'lost';
    let why = '';
    try {
      const first = await this.h.leadCheck(target, collection, shard);
      if (first.unfit !== undefined) {
        outcome = 'target-unfit';
        why = first.unfit;
        return;
      }
      if (!stillLeading()) return;
      this.h.perform(r, r.step({ type: 'handOver' }));
      if (!r.state.handingOver) return;
      log.info('handing leadership over: refusing new writes until those accepted are answered');
      if (!(await this.h.acceptedWritesDone(r, DRAIN_MS))) {
        outcome = 'writes-pending';
        why = `writes accepted before the handover were not answered within ${DRAIN_MS} ms`;
        return;
      }
      if (!stillLeading()) return;
      // Every acknowledged write is on every active replica now; make sure the target is one of
      // them, holds all we hold and is not behind in term (it was not marked down meanwhile).
      const state = this.h.coordinator.collection(collection);
      const [again, terms] = await Promise.all([this.h.leadCheck(target, collection, shard), this.h.coordinator.terms(collection, shard)]);
      const top = Math.max(0, ...Object.values(terms));
      if (!state || !fitInState(this.h.coordinator, state)(shard, target)) why = `${target} is no longer live and active`;
      else if (again.unfit !== undefined) why = again.unfit;
      else if ((terms[target] ?? 0) < top) why = `${target}'s term ${terms[target] ?? 0} is behind ${top}`;
      else if (again.maxVersion < r.store.maxVersion) why = `${target} holds versions up to ${again.maxVersion}, behind this leader's ${r.store.maxVersion}`;
      else if (again.maxVersion > r.store.maxVersion) why = `${target} holds versions up to ${again.maxVersion}, past this leader's ${r.store.maxVersion}: it must recover first`;
      else if (!(await this.h.sameLog(r, target))) why = `${target}'s recent log differs from this leader's (a write it kept that no one acknowledged?): it must recover first`;
      if (why !== '') {
        outcome = 'target-unfit';
        return;
      }
      if (!stillLeading()) return;
      await this.h.resign(r);
      outcome = 'handed-over';
      log.info({ maxVersion: r.store.maxVersion }, 'leadership handed over: left the election so that the target is elected');
    } catch (err) {
      outcome = 'target-unfit';
      why = `could not ask ${target}: ${(err as Error).message}`;
    } finally {
      this.busy.delete(r.key);
      if (r.state.handingOver) this.h.perform(r, r.step({ type: 'handOverCancelled' }));
      this.h.counted(outcome, r);
      if (outcome !== 'handed-over' && outcome !== 'lost') {
        const prev = this.backoff.get(r.key);
        const ms = prev ? Math.min(prev.ms * 2, RETRY_MAX_MS) : RETRY_MIN_MS;
        this.backoff.set(r.key, { until: Date.now() + ms, ms, stamp });
        log.warn({ why, retryInMs: ms }, 'leadership not handed over; this node keeps leading');
        this.check();
      } else {
        // Should the target not be elected after all (its own check at the head of the queue
        // failed), this node leads again: it waits before the next try.
        this.backoff.set(r.key, { until: Date.now() + RETRY_MIN_MS, ms: RETRY_MIN_MS, stamp });
      }
    }
  }
}
