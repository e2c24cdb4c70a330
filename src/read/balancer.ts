// The read balancer of one node: per-priority FIFO queues, slot counters per (priority,
// target) and weights, after the read balancing of the Prostore data platform (7.7). Pure in
// the house sense: no I/O, no timers, no clock; time comes in as arguments and every operation
// returns the decisions it took (which requests start, run unbalanced, are rejected or time
// out), for a runtime (balancer-runtime.ts) to carry out.
//
// Invariant kept after every operation: the queues are settled, i.e. no queued request could
// take a slot it needs right now. Hence a new request may take any free slot without jumping
// ahead of an earlier request that could use it (FIFO), and a waiting request never blocks a
// later one that can run elsewhere (skip-ahead).

/** The target served by the shard leaders: the only one an `immediate` read may use. */
export const PRIMARY_TARGET = 'primary';

/** A setting `(priority, target, weight, slots)`; a target is a reader group name or `primary`. */
export interface BalanceSetting {
  readonly priority: string;
  readonly target: string;
  /** Higher is preferred. */
  readonly weight: number;
  /** This node's limit of concurrent reads of the priority on the target (cluster: slots x nodes). */
  readonly slots: number;
}

/** One shard a read needs, and the targets its consistency (and the readers' groups) allow. */
export interface ShardNeed {
  readonly shard: string;
  readonly targets: readonly string[];
}

export interface BalanceRequest {
  /** Unique among the requests this balancer has queued. */
  readonly id: string;
  /** Already resolved against the node's default priority; absent = none. */
  readonly priority?: string;
  readonly shards: readonly ShardNeed[];
  /** Same clock as the `now` arguments: a request still queued at this time is answered 504. */
  readonly deadline: number;
}

/** One slot taken on one target. A read holds one grant per distinct target it uses. */
export interface Grant {
  readonly id: number;
  readonly request: string;
  readonly priority: string;
  readonly target: string;
}

export type UnbalancedReason = 'no-priority' | 'no-settings' | 'settings-removed';
/** `not-configured`: no target of the priority is allowed for a shard; `down`: the allowed ones are down. */
export type RejectReason = 'queue-full' | 'not-configured' | 'down';

/** How a request's wait ends. */
export type Outcome =
  | {
      readonly kind: 'run';
      readonly request: string;
      readonly priority: string;
      readonly grants: readonly Grant[];
      /** Shard -> the target that serves it. */
      readonly targets: Readonly<Record<string, string>>;
    }
  | { readonly kind: 'unbalanced'; readonly request: string; readonly priority?: string; readonly reason: UnbalancedReason; readonly message: string }
  | { readonly kind: 'rejected'; readonly request: string; readonly priority: string; readonly reason: RejectReason; readonly message: string }
  | { readonly kind: 'timeout'; readonly request: string; readonly priority: string; readonly message: string };

export type Admission = Outcome | { readonly kind: 'queued'; readonly request: string; readonly priority: string; readonly holding: readonly Grant[] };

/** One row of GET /api/read-slots (Prostore's CHECK_READ_SLOTS), for this node. */
export interface SlotRow {
  readonly priority: string;
  readonly target: string;
  readonly weight: number;
  readonly up: boolean;
  readonly limit: number;
  /** May exceed `limit` after the limit was lowered: nothing is evicted. */
  readonly taken: number;
  readonly free: number;
  /** Queued requests of the priority still waiting for a slot this target could give. */
  readonly queued: number;
}

export interface ReadBalancerOptions {
  /** Waiting requests per priority; 0 = a request that cannot start at once is rejected. */
  readonly queueSize: number;
  /** Sees every slot taken, with the counter after it and the limit: for audits and property tests. */
  readonly onSlotTaken?: (grant: Grant, taken: number, limit: number) => void;
  /** Sees every grant given back; `counted` is false for one from before a reset (it frees nothing). */
  readonly onSlotReturned?: (grant: Grant, counted: boolean) => void;
}

interface Waiting {
  readonly req: BalanceRequest;
  readonly priority: string;
  readonly enqueuedAt: number;
  /** Target -> the grant held on it while the request waits for its other targets. */
  readonly held: Map<string, HeldGrant>;
  /** Shard -> target, for the shards already placed on a held target. */
  readonly placed: Map<string, string>;
}

interface Slot {
  readonly weight: number;
  readonly slots: number;
}

/** The slots one priority has taken on one target since the last reset. */
interface Counter {
  n: number;
}

/** A grant as the balancer keeps it: the counter it counts in, and the reset epoch it was taken in. */
type HeldGrant = Grant & { readonly epoch: number; readonly counter: Counter };

/** The targets `need` may use for a read of `consistency`: `immediate` only the leaders. */
export function allowedTargets(consistency: 'immediate' | 'eventual', readerGroups: readonly string[]): string[] {
  return consistency === 'immediate' ? [PRIMARY_TARGET] : [...readerGroups.filter((g) => g !== PRIMARY_TARGET), PRIMARY_TARGET];
}

/** No shard placed and no target held: a new request. */
const NOTHING: ReadonlyMap<string, string> = new Map<string, string>();
const list = (names: Iterable<string>): string => [...names].join(', ') || 'none';

export class ReadBalancer {
  private readonly queueSize: number;
  private readonly onSlotTaken: ReadBalancerOptions['onSlotTaken'];
  private readonly onSlotReturned: ReadBalancerOptions['onSlotReturned'];
  private readonly config = new Map<string, Map<string, Slot>>();
  /**
   * Priority -> target -> slots taken (nested rather than one joined key: no string built per
   * lookup); a grant holds its counter, so that a release looks nothing up.
   */
  private readonly taken = new Map<string, Map<string, Counter>>();
  private readonly queues = new Map<string, Waiting[]>();
  private readonly waiting = new Map<string, Waiting>();
  private readonly grants = new Map<number, HeldGrant>();
  private readonly down = new Set<string>();
  private nextGrant = 1;
  // reset() starts a new epoch: grants of an older one release nothing (Prostore's
  // RESET_READ_SLOTS), so a counter can never be pushed below zero by a pre-reset read.
  private epoch = 0;

  constructor(options: ReadBalancerOptions) {
    if (!Number.isInteger(options.queueSize) || options.queueSize < 0) throw new RangeError(`queueSize must be a non-negative integer, got ${options.queueSize}`);
    this.queueSize = options.queueSize;
    this.onSlotTaken = options.onSlotTaken;
    this.onSlotReturned = options.onSlotReturned;
  }

  /** Admits, queues or refuses a new request; it never starts any other request. */
  request(req: BalanceRequest, now: number): Admission {
    if (this.waiting.has(req.id)) throw new Error(`read ${req.id} is already queued`);
    if (req.priority === undefined) return { kind: 'unbalanced', request: req.id, reason: 'no-priority', message: 'the read has no priority and the node no default priority' };
    const priority = req.priority;
    if (!this.config.has(priority)) return { kind: 'unbalanced', request: req.id, priority, reason: 'no-settings', message: `priority "${priority}" has no read-balance settings` };
    if (req.deadline > now) {
      // The usual case, every shard taking a slot at once, builds no waiting state. (A plan that
      // places every shard means each has a usable target: the request is servable.)
      const plan = this.plan(priority, req.shards, NOTHING, NOTHING);
      if (plan.complete) return this.startAtOnce(req, priority, plan.placed);
    }
    const w: Waiting = { req, priority, enqueuedAt: now, held: new Map(), placed: new Map() };
    const why = this.unservable(w);
    if (why) return { kind: 'rejected', request: req.id, priority, ...why };
    if (req.deadline <= now) return this.timedOut(w, now);
    const plan = this.plan(priority, req.shards, w.held, w.placed);
    const queue = this.queues.get(priority);
    // A request that can start at once never enters the queue, so only a waiting one meets the bound.
    if (!plan.complete && (queue?.length ?? 0) >= this.queueSize) {
      return { kind: 'rejected', request: req.id, priority, reason: 'queue-full', message: `the read queue of priority "${priority}" is full (${this.queueSize} waiting); retry later` };
    }
    this.commit(w, plan.placed);
    if (plan.complete) return this.started(w);
    if (queue) queue.push(w);
    else this.queues.set(priority, [w]);
    this.waiting.set(req.id, w);
    return { kind: 'queued', request: req.id, priority, holding: [...w.held.values()].map(plain) };
  }

  /** Gives slots back (a read ended); unknown or already released grants are ignored. */
  release(grantIds: number | readonly number[]): Outcome[] {
    const touched: string[] = [];
    for (const id of typeof grantIds === 'number' ? [grantIds] : grantIds) {
      const g = this.grants.get(id);
      if (!g) continue;
      this.giveBack(g);
      if (!touched.includes(g.priority)) touched.push(g.priority);
    }
    return this.drain(touched);
  }

  /** Removes a queued request (its client went away), giving back what it held. */
  cancel(requestId: string): Outcome[] {
    const w = this.waiting.get(requestId);
    if (!w) return [];
    this.dequeue(w);
    return this.drain([w.priority]);
  }

  /** Answers 504 for the queued requests whose deadline is at or before `now`. */
  tick(now: number): Outcome[] {
    const out: Outcome[] = [];
    const touched = new Set<string>();
    for (const w of [...this.waiting.values()]) {
      if (w.req.deadline > now) continue;
      if (w.held.size > 0) touched.add(w.priority);
      this.dequeue(w);
      out.push(this.timedOut(w, now));
    }
    return out.concat(this.drain(touched));
  }

  /** The earliest deadline among queued requests: when the runtime should call tick. */
  nextDeadline(): number | undefined {
    let next: number | undefined;
    for (const w of this.waiting.values()) if (next === undefined || w.req.deadline < next) next = w.req.deadline;
    return next;
  }

  /** Upserts one setting; queued requests of its priority are re-evaluated at once. */
  setSetting(s: BalanceSetting): Outcome[] {
    return this.replaceSettings([...this.settings().filter((o) => o.priority !== s.priority || o.target !== s.target), s]);
  }

  removeSetting(priority: string, target: string): Outcome[] {
    return this.replaceSettings(this.settings().filter((o) => o.priority !== priority || o.target !== target));
  }

  /**
   * Makes `settings` the whole configuration (as loaded from coordination). Running reads keep
   * their grants; a priority left without settings releases its queue to run unbalanced; the
   * other queues are re-evaluated against the new weights and limits.
   */
  replaceSettings(settings: readonly BalanceSetting[]): Outcome[] {
    const next = new Map<string, Map<string, Slot>>();
    for (const s of settings) {
      checkSetting(s);
      let targets = next.get(s.priority);
      if (!targets) next.set(s.priority, (targets = new Map()));
      targets.set(s.target, { weight: s.weight, slots: s.slots });
    }
    const out: Outcome[] = [];
    for (const [priority, queue] of [...this.queues]) {
      if (next.has(priority)) continue;
      for (const w of [...queue]) {
        this.dequeue(w);
        out.push({ kind: 'unbalanced', request: w.req.id, priority, reason: 'settings-removed', message: `the read-balance settings of priority "${priority}" were removed` });
      }
    }
    this.config.clear();
    for (const [p, t] of next) this.config.set(p, t);
    return out.concat(this.drain(this.queues.keys()));
  }

  settings(): BalanceSetting[] {
    const out: BalanceSetting[] = [];
    for (const [priority, targets] of this.config) for (const [target, s] of targets) out.push({ priority, target, ...s });
    return out;
  }

  /** A down target (e.g. a reader group without live readers) takes no new requests. */
  setTargetUp(target: string, up: boolean): Outcome[] {
    if (up === !this.down.has(target)) return [];
    if (up) this.down.delete(target);
    else this.down.add(target);
    return this.drain(this.queues.keys());
  }

  isUp(target: string): boolean {
    return !this.down.has(target);
  }

  /** Zeroes this node's counters without stopping anything (RESET_READ_SLOTS). */
  reset(): Outcome[] {
    this.epoch++;
    this.taken.clear();
    return this.drain(this.queues.keys());
  }

  isQueued(requestId: string): boolean {
    return this.waiting.has(requestId);
  }

  queueLength(priority: string): number {
    return this.queues.get(priority)?.length ?? 0;
  }

  snapshot(): SlotRow[] {
    const rows: SlotRow[] = [];
    for (const [priority, targets] of [...this.config].sort(([a], [b]) => compare(a, b))) {
      const queue = this.queues.get(priority) ?? [];
      for (const [target, s] of [...targets].sort(([a], [b]) => compare(a, b))) {
        const taken = this.takenOf(priority, target);
        const queued = queue.filter((w) => w.req.shards.some((n) => !w.placed.has(n.shard) && n.targets.includes(target))).length;
        rows.push({ priority, target, weight: s.weight, up: this.isUp(target), limit: s.slots, taken, free: Math.max(0, s.slots - taken), queued });
      }
    }
    return rows;
  }

  // ---- internals ------------------------------------------------------------------------

  private takenOf(priority: string, target: string): number {
    return this.taken.get(priority)?.get(target)?.n ?? 0;
  }

  private usable(priority: string, target: string): boolean {
    return this.config.get(priority)?.has(target) === true && !this.down.has(target);
  }

  private anyUsable(priority: string, targets: readonly string[]): boolean {
    for (const t of targets) if (this.usable(priority, t)) return true;
    return false;
  }

  /** Why the request can never be placed as things stand, or undefined. */
  private unservable(w: Waiting): { reason: RejectReason; message: string } | undefined {
    for (const need of w.req.shards) {
      if (w.placed.has(need.shard) || this.anyUsable(w.priority, need.targets)) continue;
      const configured = this.config.get(w.priority) ?? new Map<string, Slot>();
      const allowed = need.targets.filter((t) => configured.has(t));
      const lead = `no read target of priority "${w.priority}" can serve shard ${need.shard}`;
      if (allowed.length === 0) {
        return { reason: 'not-configured', message: `${lead}: the read may use ${list(need.targets)}, the priority is configured on ${list(configured.keys())}` };
      }
      return { reason: 'down', message: `${lead}: its targets ${list(allowed)} are down` };
    }
    return undefined;
  }

  /**
   * Places the unplaced shards, without changing anything: for each, among its usable targets
   * that the request already holds or that have a free slot, the highest weight; among equal
   * weights one already held (it costs no slot), then the most free slots, then the name.
   */
  private plan(
    priority: string,
    shards: readonly ShardNeed[],
    held: ReadonlyMap<string, unknown>,
    placedBefore: ReadonlyMap<string, string>,
  ): { placed: Array<[string, string]>; complete: boolean } {
    // Every admission plans: the lookups are made once, not per candidate.
    const configured = this.config.get(priority);
    const counts = this.taken.get(priority);
    /** Targets this plan takes a slot on, besides those the request holds. */
    const taking: string[] = [];
    const placed: Array<[string, string]> = [];
    let complete = true;
    for (const need of shards) {
      if (placedBefore.has(need.shard)) continue;
      let best: Candidate | undefined;
      for (const target of need.targets) {
        const s = configured?.get(target);
        if (!s || this.down.has(target)) continue;
        const c = { target, weight: s.weight, held: held.has(target) || taking.includes(target), free: s.slots - (counts?.get(target)?.n ?? 0) };
        if (!c.held && c.free <= 0) continue;
        if (!best || better(c, best)) best = c;
      }
      if (!best) {
        complete = false;
        continue;
      }
      if (!best.held) taking.push(best.target);
      placed.push([need.shard, best.target]);
    }
    return { placed, complete };
  }

  private commit(w: Waiting, placed: ReadonlyArray<[string, string]>): void {
    for (const [shard, target] of placed) {
      if (!w.held.has(target)) w.held.set(target, this.take(w.req.id, w.priority, target));
      w.placed.set(shard, target);
    }
  }

  /** A request that never waited: its slots, and the outcome that starts it. */
  private startAtOnce(req: BalanceRequest, priority: string, placed: ReadonlyArray<[string, string]>): Outcome {
    const grants: Grant[] = [];
    const targets: Record<string, string> = {};
    for (const [shard, target] of placed) {
      targets[shard] = target;
      if (!grants.some((g) => g.target === target)) grants.push(plain(this.take(req.id, priority, target)));
    }
    return { kind: 'run', request: req.id, priority, grants, targets };
  }

  /** Takes one slot of `priority` on `target` for a request. */
  private take(request: string, priority: string, target: string): HeldGrant {
    let counts = this.taken.get(priority);
    if (!counts) this.taken.set(priority, (counts = new Map()));
    let counter = counts.get(target);
    // A counter at zero stays in its map: deleting and adding it again on every read churns the table.
    if (!counter) counts.set(target, (counter = { n: 0 }));
    counter.n++;
    const g = { id: this.nextGrant++, request, priority, target, epoch: this.epoch, counter };
    this.grants.set(g.id, g);
    this.onSlotTaken?.(plain(g), counter.n, this.config.get(priority)!.get(target)!.slots);
    return g;
  }

  private giveBack(g: HeldGrant): void {
    this.grants.delete(g.id);
    this.onSlotReturned?.(plain(g), g.epoch === this.epoch);
    // A grant from before a reset counts in a counter the reset dropped: it frees nothing.
    if (g.epoch === this.epoch) g.counter.n = Math.max(0, g.counter.n - 1);
  }

  private dequeue(w: Waiting): void {
    const queue = this.queues.get(w.priority)!;
    queue.splice(queue.indexOf(w), 1);
    if (queue.length === 0) this.queues.delete(w.priority);
    this.waiting.delete(w.req.id);
    for (const g of w.held.values()) this.giveBack(g);
    w.held.clear();
  }

  private started(w: Waiting): Outcome {
    const grants: Grant[] = [];
    for (const g of w.held.values()) grants.push(plain(g));
    const targets: Record<string, string> = {};
    for (const [shard, target] of w.placed) targets[shard] = target;
    return { kind: 'run', request: w.req.id, priority: w.priority, grants, targets };
  }

  private timedOut(w: Waiting, now: number): Outcome {
    const waited = Math.max(0, now - w.enqueuedAt);
    return { kind: 'timeout', request: w.req.id, priority: w.priority, message: `the read timed out after ${Math.round(waited)} ms in the queue of priority "${w.priority}"` };
  }

  /**
   * Settles the queues of `priorities`: one FIFO pass each, every request taking what it can
   * (so a waiting request keeps the slots it got and later ones run where it cannot). A pass
   * whose rejection gave slots back may have freed one an earlier request now needs: repeat.
   */
  private drain(priorities: Iterable<string>): Outcome[] {
    const out: Outcome[] = [];
    for (const priority of [...priorities]) {
      // Most releases touch a priority nobody waits in: nothing to settle.
      if (!this.queues.has(priority)) continue;
      let again = true;
      while (again) {
        again = false;
        for (const w of [...(this.queues.get(priority) ?? [])]) {
          // A held slot on a target no longer usable is given back: the read has not started
          // there. Nobody of this priority can use that slot either, so no need to pass again.
          for (const [target, g] of [...w.held]) {
            if (this.usable(priority, target)) continue;
            this.giveBack(g);
            w.held.delete(target);
            for (const [shard, t] of [...w.placed]) if (t === target) w.placed.delete(shard);
          }
          const why = this.unservable(w);
          if (why) {
            if (w.held.size > 0) again = true;
            this.dequeue(w);
            out.push({ kind: 'rejected', request: w.req.id, priority, ...why });
            continue;
          }
          const plan = this.plan(priority, w.req.shards, w.held, w.placed);
          this.commit(w, plan.placed);
          if (!plan.complete) continue;
          const queue = this.queues.get(priority)!;
          queue.splice(queue.indexOf(w), 1);
          if (queue.length === 0) this.queues.delete(priority);
          this.waiting.delete(w.req.id);
          out.push(this.started(w));
        }
      }
    }
    return out;
  }
}

interface Candidate {
  readonly target: string;
  readonly weight: number;
  readonly held: boolean;
  readonly free: number;
}

function better(a: Candidate, b: Candidate): boolean {
  if (a.weight !== b.weight) return a.weight > b.weight;
  if (a.held !== b.held) return a.held;
  if (a.free !== b.free) return a.free > b.free;
  return compare(a.target, b.target) < 0;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function plain(g: Grant): Grant {
  return { id: g.id, request: g.request, priority: g.priority, target: g.target };
}

function checkSetting(s: BalanceSetting): void {
  if (!Number.isFinite(s.weight)) throw new RangeError(`weight of ${s.priority}/${s.target} must be a finite number`);
  if (!Number.isInteger(s.slots) || s.slots < 0) throw new RangeError(`slots of ${s.priority}/${s.target} must be a non-negative integer`);
}
