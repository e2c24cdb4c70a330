// Replica and leader placement: pure. Replicas of one shard go to distinct nodes, and
// consecutive shards start on consecutive nodes. Leaders are spread by a preferred leader per
// shard (Solr's `preferredLeader` property, which BALANCESHARDUNIQUE assigns one per node) and by
// leaderTargets, which says which replica should lead each shard right now.
import type { CollectionState } from './types.js';

export function placeReplicas(nodes: readonly string[], numShards: number, replicationFactor: number): string[][] {
  if (replicationFactor > nodes.length) {
    throw new RangeError(`replicationFactor ${replicationFactor} exceeds ${nodes.length} nodes`);
  }
  const out: string[][] = [];
  for (let s = 0; s < numShards; s++) {
    const replicas: string[] = [];
    for (let r = 0; r < replicationFactor; r++) replicas.push(nodes[(s + r) % nodes.length]!);
    out.push(replicas);
  }
  return out;
}

/**
 * One leader per shard, chosen among the shard's `candidates` (in order of preference), so that
 * the most shards any node leads is as small as it can be: ceil(S/N) whenever the replicas allow
 * it (S shards with a candidate, N nodes among the candidates). Among the assignments that reach
 * that bound, each shard keeps its first candidate unless another shard needs the room: a shard
 * whose preferred node is under the bound is never moved off it. A shard without candidates gets
 * undefined.
 */
export function balanceLeaders(candidates: readonly (readonly string[])[]): (string | undefined)[] {
  const nodes = new Set(candidates.flat());
  const shards = candidates.filter((c) => c.length > 0).length;
  if (shards === 0) return candidates.map(() => undefined);
  for (let cap = Math.ceil(shards / nodes.size); ; cap++) {
    const assigned = assignWithin(candidates, cap);
    if (assigned) return assigned;
  }
}

/** Every shard with a candidate gets one, no node more than `cap` (b-matching by augmenting paths), or undefined when that cannot be. */
function assignWithin(candidates: readonly (readonly string[])[], cap: number): (string | undefined)[] | undefined {
  const leader: (string | undefined)[] = candidates.map(() => undefined);
  const led = new Map<string, number[]>();
  const take = (shard: number, node: string): void => {
    leader[shard] = node;
    let list = led.get(node);
    if (!list) led.set(node, (list = []));
    list.push(shard);
  };
  // First every shard's preferred node, while it has room: moves below only make room.
  candidates.forEach((c, s) => {
    const first = c[0];
    if (first !== undefined && (led.get(first)?.length ?? 0) < cap) take(s, first);
  });
  const place = (shard: number, seen: Set<string>): boolean => {
    // A node with room first (fewest moves), in order of preference; then make room by moving.
    for (const node of candidates[shard]!) {
      if (!seen.has(node) && (led.get(node)?.length ?? 0) < cap) {
        take(shard, node);
        return true;
      }
    }
    for (const node of candidates[shard]!) {
      if (seen.has(node)) continue;
      seen.add(node);
      const list = led.get(node) ?? [];
      if (list.length < cap) {
        take(shard, node);
        return true;
      }
      // The node is full: move one of its shards elsewhere (later-preferred shards first).
      for (let i = list.length - 1; i >= 0; i--) {
        const other = list[i]!;
        list.splice(i, 1);
        if (place(other, seen)) {
          take(shard, node);
          return true;
        }
        list.splice(i, 0, other);
        leader[other] = node;
      }
    }
    return false;
  };
  for (let s = 0; s < candidates.length; s++) {
    if (leader[s] !== undefined || candidates[s]!.length === 0) continue;
    if (!place(s, new Set())) return undefined;
  }
  return leader;
}

/** The preferred leader of each placed shard at creation: spread over the nodes as evenly as the placement allows. */
export function preferredLeaders(placement: readonly (readonly string[])[]): string[] {
  return balanceLeaders(placement).map((n, s) => n ?? placement[s]![0]!);
}

/**
 * Which replica should lead each shard of `state` now, among those `fit` says may (live, active):
 * its preferred leader first, then its replicas in order, balanced over the fit nodes. Depends on
 * the state and fitness only, never on who leads now, so that a handover never changes the
 * targets of other shards (no churn). Shard name -> node, or undefined when no replica is fit.
 */
export function leaderTargets(state: CollectionState, fit: (shard: string, node: string) => boolean): Map<string, string | undefined> {
  const candidates = state.shards.map((s) => {
    const nodes = s.replicas.map((r) => r.node).filter((n) => fit(s.name, n));
    const p = s.preferredLeader;
    return p !== undefined && nodes.includes(p) ? [p, ...nodes.filter((n) => n !== p)] : nodes;
  });
  const chosen = balanceLeaders(candidates);
  return new Map(state.shards.map((s, i) => [s.name, chosen[i]]));
}

/**
 * Solr's BALANCESHARDUNIQUE for the preferred leader: one per shard over every node that holds
 * a replica (live or not, so that a node that returns gets its share back), keeping each shard's
 * current preferred leader, then its current leader, where the balance allows.
 */
export function rebalancedPreferences(state: CollectionState, leaders: (shard: string) => string | undefined): Map<string, string> {
  const candidates = state.shards.map((s) => {
    const nodes = s.replicas.map((r) => r.node);
    const first = [s.preferredLeader, leaders(s.name)].filter((n): n is string => n !== undefined && nodes.includes(n));
    return [...new Set([...first, ...nodes])];
  });
  const chosen = balanceLeaders(candidates);
  return new Map(state.shards.map((s, i) => [s.name, chosen[i] ?? s.replicas[0]!.node]));
}

/**
 * The handovers a collection's leaders should make now: shard name -> the replica to hand to.
 * A shard moves only to its target (leaderTargets), and only when that target is its preferred
 * leader or when its leader leads more shards than the balanced bound: once every node is within
 * the bound, shards off their target for other reasons (a replica down for a moment shifts the
 * balanced choice) stay where they are, so that short failures cause no rounds of handovers.
 */
export function leaderHandovers(state: CollectionState, fit: (shard: string, node: string) => boolean, leaderOf: (shard: string) => string | undefined): Map<string, string> {
  const targets = leaderTargets(state, fit);
  const bound = Math.max(0, ...countBy(targets.values()).values());
  const leads = countBy(state.shards.map((s) => leaderOf(s.name)));
  const moves = new Map<string, string>();
  for (const s of state.shards) {
    const leader = leaderOf(s.name);
    const target = targets.get(s.name);
    if (leader === undefined || target === undefined || target === leader) continue;
    if (target === s.preferredLeader || (leads.get(leader) ?? 0) > bound) moves.set(s.name, target);
  }
  return moves;
}

function countBy(values: Iterable<string | undefined>): Map<string, number> {
  const counts = new Map<string, number>();
  for (const v of values) if (v !== undefined) counts.set(v, (counts.get(v) ?? 0) + 1);
  return counts;
}
