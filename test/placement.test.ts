// Replica and leader placement (src/coordination/placement.ts): pure, so checked exhaustively on
// small clusters and by properties on random ones.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { balanceLeaders, leaderHandovers, leaderTargets, placeReplicas, preferredLeaders, rebalancedPreferences } from '../src/coordination/placement.js';
import type { CollectionState } from '../src/coordination/types.js';

const nodes = (n: number): string[] => Array.from({ length: n }, (_, i) => `node${i + 1}`);
const maxLoad = (leaders: readonly (string | undefined)[]): number => {
  const per = new Map<string, number>();
  for (const l of leaders) if (l !== undefined) per.set(l, (per.get(l) ?? 0) + 1);
  return Math.max(0, ...per.values());
};

function collection(placement: readonly (readonly string[])[], preferred?: readonly string[]): CollectionState {
  return {
    name: 'c',
    numShards: placement.length,
    replicationFactor: placement[0]?.length ?? 1,
    router: 'compositeId',
    shards: placement.map((replicas, i) => ({
      name: `shard${i + 1}`,
      range: '0-0',
      replicas: replicas.map((node) => ({ node, state: 'active' as const, type: 'leader-eligible' as const })),
      ...(preferred && { preferredLeader: preferred[i]! }),
    })),
  };
}

describe('preferred leaders at creation', () => {
  it('no node is preferred for more than ceil(S/N) shards, for every cluster up to 7 nodes, 12 shards and rf 3', () => {
    for (let n = 1; n <= 7; n++) {
      for (let s = 1; s <= 12; s++) {
        for (let rf = 1; rf <= Math.min(3, n); rf++) {
          const placement = placeReplicas(nodes(n), s, rf);
          const preferred = preferredLeaders(placement);
          preferred.forEach((p, i) => expect(placement[i]).toContain(p));
          expect(maxLoad(preferred), `${n} nodes, ${s} shards, rf ${rf}`).toBeLessThanOrEqual(Math.ceil(s / n));
        }
      }
    }
  });

  it('spreads the dev cluster (3 nodes, 2 shards x 2) over two nodes', () => {
    const preferred = preferredLeaders(placeReplicas(nodes(3), 2, 2));
    expect(new Set(preferred).size).toBe(2);
  });
});

describe('balanceLeaders', () => {
  it('reaches the least possible maximum, each shard led by one of its candidates', () => {
    fc.assert(
      fc.property(fc.array(fc.uniqueArray(fc.integer({ min: 1, max: 5 }), { minLength: 0, maxLength: 3 }), { maxLength: 8 }), (raw) => {
        const candidates = raw.map((c) => c.map((n) => `n${n}`));
        const chosen = balanceLeaders(candidates);
        chosen.forEach((l, i) => (candidates[i]!.length === 0 ? expect(l).toBeUndefined() : expect(candidates[i]).toContain(l)));
        // No assignment does better: brute force over every choice.
        let best = Infinity;
        const walk = (i: number, acc: string[]): void => {
          if (i === candidates.length) return void (best = Math.min(best, maxLoad(acc)));
          if (candidates[i]!.length === 0) return walk(i + 1, acc);
          for (const c of candidates[i]!) walk(i + 1, [...acc, c]);
        };
        walk(0, []);
        expect(maxLoad(chosen)).toBe(best === Infinity ? 0 : best);
      }),
      { numRuns: 300, seed: 15 },
    );
  });

  it('keeps each shard on its first candidate when that is balanced already', () => {
    expect(balanceLeaders([['a', 'b'], ['b', 'c'], ['c', 'a']])).toEqual(['a', 'b', 'c']);
  });

  it('moves a shard off its first candidate only when another shard needs the room', () => {
    expect(balanceLeaders([['a', 'b'], ['a'], ['c', 'a']])).toEqual(['b', 'a', 'c']);
  });
});

describe('leaderTargets', () => {
  const placement = placeReplicas(nodes(3), 6, 2);
  const state = collection(placement, preferredLeaders(placement));

  it('targets the preferred leaders when every replica is fit', () => {
    const targets = leaderTargets(state, () => true);
    expect(state.shards.map((s) => targets.get(s.name))).toEqual(state.shards.map((s) => s.preferredLeader));
  });

  it('spreads the shards of a node that is gone over the others, then gives them back when it returns', () => {
    const without = leaderTargets(state, (_s, n) => n !== 'node1');
    expect([...without.values()]).not.toContain('node1');
    expect(maxLoad([...without.values()])).toBe(3);
    // node1's two shards both have node2 as their other replica: one of node2's own goes to node3, no more.
    expect(state.shards.filter((s) => s.preferredLeader !== 'node1' && without.get(s.name) !== s.preferredLeader)).toHaveLength(1);
    const back = leaderTargets(state, () => true);
    expect(maxLoad([...back.values()])).toBe(2);
  });

  it('leaves a shard without a target when none of its replicas is fit', () => {
    expect(leaderTargets(state, () => false).get('shard1')).toBeUndefined();
  });
});

describe('leaderHandovers', () => {
  const placement = placeReplicas(nodes(3), 6, 2);
  const state = collection(placement, preferredLeaders(placement));
  const ledBy = (leaders: Record<string, string>) => (shard: string) => leaders[shard];

  it('moves a shard back to its preferred leader once it is fit', () => {
    // After node1's failure its shards (1 and 4) went to node2, which now leads four.
    const leaders = { shard1: 'node2', shard2: 'node2', shard3: 'node3', shard4: 'node2', shard5: 'node2', shard6: 'node3' };
    expect(Object.fromEntries(leaderHandovers(state, () => true, ledBy(leaders)))).toEqual({ shard1: 'node1', shard4: 'node1' });
  });

  it('moves shards off a node that leads more than its share while a node is away, and only as many as needed', () => {
    const leaders = { shard1: 'node2', shard2: 'node2', shard3: 'node3', shard4: 'node2', shard5: 'node2', shard6: 'node3' };
    const moves = leaderHandovers(state, (_s, n) => n !== 'node1', ledBy(leaders));
    expect([...moves.values()]).toEqual(['node3']);
  });

  it('leaves leaders within the bound where they are when a replica is down for a moment', () => {
    const leaders = Object.fromEntries(state.shards.map((s) => [s.name, s.preferredLeader!]));
    // node2's replica of shard1 is down: the balanced choice shifts, the leaders stay.
    expect(leaderHandovers(state, (s, n) => !(s === 'shard1' && n === 'node2'), ledBy(leaders)).size).toBe(0);
  });

  it('reaches the bound from any start, moving each shard at most once, towards its target', () => {
    fc.assert(
      fc.property(fc.array(fc.nat(1), { minLength: 6, maxLength: 6 }), fc.nat(3), (picks, away) => {
        const fit = (_s: string, n: string) => n !== `node${away}`;
        const leaders: Record<string, string> = {};
        state.shards.forEach((s, i) => {
          const live = s.replicas.map((r) => r.node).filter((n) => fit(s.name, n));
          leaders[s.name] = live[picks[i]! % live.length]!;
        });
        const moved = new Set<string>();
        for (let round = 0; round < 10; round++) {
          const moves = leaderHandovers(state, fit, ledBy(leaders));
          if (moves.size === 0) break;
          for (const [shard, to] of moves) {
            expect(moved.has(shard)).toBe(false);
            moved.add(shard);
            leaders[shard] = to;
          }
        }
        expect(leaderHandovers(state, fit, ledBy(leaders)).size).toBe(0);
        expect(maxLoad(Object.values(leaders))).toBeLessThanOrEqual(Math.ceil(6 / (away === 0 ? 3 : 2)));
      }),
      { numRuns: 200, seed: 5 },
    );
  });
});

describe('rebalancedPreferences (BALANCESHARDUNIQUE)', () => {
  it('balances a collection whose preferences are all on one node, keeping the current leaders where it can', () => {
    const placement = [['node1', 'node2'], ['node1', 'node3'], ['node2', 'node3']];
    const state = collection(placement, ['node1', 'node1', 'node2']);
    const next = rebalancedPreferences(state, (s) => (s === 'shard2' ? 'node3' : 'node1'));
    expect(Object.fromEntries(next)).toEqual({ shard1: 'node1', shard2: 'node3', shard3: 'node2' });
  });

  it('gives a collection created without preferences one per node', () => {
    const placement = placeReplicas(nodes(3), 3, 3);
    const next = rebalancedPreferences(collection(placement), () => 'node1');
    expect(maxLoad([...next.values()])).toBe(1);
  });
});
