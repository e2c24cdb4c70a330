import { describe, expect, it } from 'vitest';
import { checkpointWork, MergeGate, mergeHold, type MergeGateView } from '../src/node/merge-gate.js';

function view(o: { opening?: number; mine?: Array<{ shard: string; recovering?: boolean }>; states?: Record<string, Array<[string, string]>>; live?: string[] }): MergeGateView {
  return {
    opening: o.opening ?? 0,
    replicas: (o.mine ?? [{ shard: 's1' }]).map((r) => ({ collection: 'c', shard: r.shard, recovering: r.recovering ?? false })),
    shardReplicas: (_c, s) => o.states?.[s]?.map(([node, state]) => ({ node, state })),
    isLive: (node) => (o.live ?? ['n1', 'n2', 'n3']).includes(node),
  };
}

describe('mergeHold', () => {
  it('holds nothing when every replica of the shards held here is active', () => {
    expect(mergeHold(view({ states: { s1: [['n1', 'active'], ['n2', 'active']] } }))).toBeUndefined();
  });

  it('holds merges while a replica of this node opens or recovers', () => {
    expect(mergeHold(view({ opening: 1 }))).toMatch(/opening/);
    expect(mergeHold(view({ mine: [{ shard: 's1' }, { shard: 's2', recovering: true }] }))).toMatch(/c\/s2 is recovering/);
  });

  it('holds merges while a peer replica on a live node is down or recovering, not when its node is gone', () => {
    expect(mergeHold(view({ states: { s1: [['n1', 'active'], ['n2', 'down']] } }))).toMatch(/on n2 is down/);
    expect(mergeHold(view({ states: { s1: [['n1', 'active'], ['n2', 'recovering']] } }))).toMatch(/on n2 is recovering/);
    expect(mergeHold(view({ states: { s1: [['n1', 'active'], ['n2', 'down']] }, live: ['n1', 'n3'] }))).toBeUndefined();
  });

  it('looks only at the shards this node holds', () => {
    expect(mergeHold(view({ mine: [{ shard: 's1' }], states: { s1: [['n1', 'active']], s2: [['n2', 'down']] } }))).toBeUndefined();
  });
});

describe('MergeGate', () => {
  it('lets merges wait at most maxHoldMs in a row, and counts again after a free moment', () => {
    const gate = new MergeGate(60_000);
    expect(gate.allows(false, 0)).toBe(true);
    expect(gate.allows(true, 1_000)).toBe(false);
    expect(gate.allows(true, 60_999)).toBe(false);
    expect(gate.allows(true, 61_000)).toBe(true);
    expect(gate.allows(false, 62_000)).toBe(true);
    expect(gate.allows(true, 63_000)).toBe(false);
  });
});

describe('checkpointWork', () => {
  it('while replicas come up, checkpoints by count only and merges nothing; a recovering replica checkpoints by count only', () => {
    expect(checkpointWork(false, true)).toEqual({ byAge: true, merge: true });
    expect(checkpointWork(false, false)).toEqual({ byAge: false, merge: false });
    expect(checkpointWork(true, true)).toEqual({ byAge: false, merge: true });
    expect(checkpointWork(true, false)).toEqual({ byAge: false, merge: false });
  });
});
