// When a node may start index merges. A merge is background work on the same cores as replicas
// that are coming up (opening their index, replaying, recovering); after a restart of the whole
// cluster every node opens its indexes at once, and a merge started then delays them all. So
// merges wait while a replica of this node is opening or recovering, or while a replica of a
// shard this node holds is on a live node and not active yet. A replica on a node that is gone
// does not hold merges back, and none waits longer than `maxHoldMs` in a row (a replica that
// keeps failing to recover). Checkpoints written because the last one is old (0.3 s by default) wait in the
// same moments: on the node holding most replicas, a checkpoint written right after a replay
// took CPU from the replicas still opening. Pure: the caller passes what it sees and the time.

/** What the gate looks at, as the node sees it now. */
export interface MergeGateView {
  /** Replicas of this node still opening. */
  readonly opening: number;
  /** This node's replicas. */
  readonly replicas: Iterable<{ readonly recovering: boolean; readonly collection: string; readonly shard: string }>;
  /** Every replica of a shard, by the cluster state (undefined: the shard is not known). */
  shardReplicas(collection: string, shard: string): ReadonlyArray<{ readonly node: string; readonly state: string }> | undefined;
  isLive(node: string): boolean;
}

/** Why merges wait now, or undefined when nothing holds them. */
export function mergeHold(view: MergeGateView): string | undefined {
  if (view.opening > 0) return 'a replica of this node is opening';
  for (const r of view.replicas) {
    if (r.recovering) return `${r.collection}/${r.shard} is recovering`;
    const coming = view.shardReplicas(r.collection, r.shard)?.find((x) => x.state !== 'active' && view.isLive(x.node));
    if (coming) return `the replica of ${r.collection}/${r.shard} on ${coming.node} is ${coming.state}`;
  }
  return undefined;
}

/**
 * What a replica's periodic checkpoint check may do: while the gate holds background work
 * (`allowed` false) it neither merges nor checkpoints because of age; the count of changes
 * (maxChanges) still makes a checkpoint due, which bounds the journal a crash leaves. A
 * recovering replica's CPU goes to catching up: it checkpoints by count only.
 */
export function checkpointWork(recovering: boolean, allowed: boolean): { byAge: boolean; merge: boolean } {
  return { byAge: allowed && !recovering, merge: allowed };
}

export class MergeGate {
  private heldSince: number | undefined;

  constructor(private readonly maxHoldMs: number) {}

  /** Whether a merge may start at `now`, given whether something holds merges (mergeHold). */
  allows(held: boolean, now: number): boolean {
    if (!held) {
      this.heldSince = undefined;
      return true;
    }
    this.heldSince ??= now;
    return now - this.heldSince >= this.maxHoldMs;
  }
}
