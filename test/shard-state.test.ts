// The shard machine (src/distrib/shard-state.ts): one rule per test, then properties over random
// event sequences of a whole shard (several replicas, elections with growing epochs).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { EPOCH_UNIT, INITIAL, epochOf, mayStand, step, type ShardEffect, type ShardEvent, type ShardState } from '../src/distrib/shard-state.js';

function run(events: readonly ShardEvent[], from: ShardState = INITIAL): { state: ShardState; effects: ShardEffect[] } {
  let state = from;
  let effects: ShardEffect[] = [];
  for (const e of events) {
    const r = step(state, e);
    state = r.state;
    effects = [...r.effects];
  }
  return { state, effects };
}

const leaderOf = (epoch: number): ShardEvent[] => [
  { type: 'elected', epoch },
  { type: 'ready', epoch },
];
const types = (effects: readonly ShardEffect[]): string[] => effects.map((e) => e.type);

describe('election', () => {
  it('makes an elected replica a candidate that persists and announces its epoch and syncs before it accepts writes', () => {
    const { state, effects } = run([{ type: 'elected', epoch: 4 }]);
    expect(state).toMatchObject({ role: 'candidate', epoch: 4, fence: 4 });
    expect(types(effects)).toEqual(['persistFence', 'announce', 'syncFromPeers']);
    expect(types(step(state, { type: 'update', count: 1 }).effects)).toEqual(['refuse']);
  });

  it('makes the candidate leader once it is ready, and starts auto-commit', () => {
    const { state, effects } = run(leaderOf(4));
    expect(state.role).toBe('leader');
    expect(types(effects)).toEqual(['startAutoCommit']);
  });

  it('ignores a ready of another epoch', () => {
    const { state } = run([{ type: 'elected', epoch: 4 }, { type: 'ready', epoch: 3 }]);
    expect(state.role).toBe('candidate');
  });

  it('resigns an election whose epoch is older than the fence', () => {
    const { state, effects } = run([{ type: 'fromLeader', epoch: 9 }, { type: 'elected', epoch: 5 }]);
    expect(state.role).toBe('follower');
    expect(types(effects)).toEqual(['resign']);
  });

  it('steps down on lost leadership and stops auto-commit', () => {
    const { state, effects } = run([...leaderOf(2), { type: 'lost' }]);
    expect(state).toMatchObject({ role: 'follower', epoch: 0 });
    expect(types(effects)).toEqual(['stopAutoCommit']);
  });
});

describe('versions', () => {
  it('assigns epoch-major versions, strictly increasing within a leadership', () => {
    const { effects, state } = run([...leaderOf(3), { type: 'update', count: 3 }]);
    expect(effects).toEqual([{ type: 'accept', versions: [3 * EPOCH_UNIT + 1, 3 * EPOCH_UNIT + 2, 3 * EPOCH_UNIT + 3] }]);
    expect(state.clock).toBe(3 * EPOCH_UNIT + 3);
  });

  it('stays above versions stored from elsewhere', () => {
    const { effects } = run([...leaderOf(3), { type: 'stored', maxVersion: 3 * EPOCH_UNIT + 500 }, { type: 'update', count: 1 }]);
    expect(effects).toEqual([{ type: 'accept', versions: [3 * EPOCH_UNIT + 501] }]);
  });

  it('orders a newer leadership above an older one whatever the older one assigned', () => {
    const { effects } = run([{ type: 'opened', fence: 2, maxVersion: 2 * EPOCH_UNIT + 9_999_999 }, ...leaderOf(3), { type: 'update', count: 1 }]);
    expect(effects).toEqual([{ type: 'accept', versions: [3 * EPOCH_UNIT + 1] }]);
  });

  it('refuses and resigns when a leadership has used its version space', () => {
    const { effects, state } = run([...leaderOf(1), { type: 'stored', maxVersion: 2 * EPOCH_UNIT - 2 }, { type: 'update', count: 5 }]);
    expect(types(effects)).toEqual(['stopAutoCommit', 'resign', 'refuse']);
    expect(state.role).toBe('follower');
  });

  it('refuses an update at a follower as not the leader', () => {
    expect(step(INITIAL, { type: 'update', count: 1 }).effects).toEqual([{ type: 'refuse', code: 'SHX_NOT_LEADER', why: 'is not the leader' }]);
  });
});

describe('fencing', () => {
  it('refuses an update from an epoch older than the fence', () => {
    const { effects } = run([{ type: 'fromLeader', epoch: 5 }, { type: 'fromLeader', epoch: 4 }]);
    expect(effects[0]).toMatchObject({ type: 'refuse', code: 'SHX_STALE_EPOCH' });
  });

  it('moves and persists the fence on a newer epoch, and accepts the same epoch again without persisting', () => {
    expect(types(run([{ type: 'fromLeader', epoch: 5 }]).effects)).toEqual(['persistFence', 'catchUp', 'accept']);
    expect(types(run([{ type: 'fromLeader', epoch: 5 }, { type: 'fromLeader', epoch: 5 }]).effects)).toEqual(['accept']);
  });

  it('restores the persisted fence at open', () => {
    const { effects } = run([{ type: 'opened', fence: 7, maxVersion: 0 }, { type: 'fromLeader', epoch: 6 }]);
    expect(effects[0]).toMatchObject({ code: 'SHX_STALE_EPOCH' });
  });

  it('deposes a leader that hears from a newer epoch', () => {
    const { state, effects } = run([...leaderOf(3), { type: 'fromLeader', epoch: 4 }]);
    expect(state.role).toBe('follower');
    expect(types(effects)).toEqual(['persistFence', 'stopAutoCommit', 'catchUp', 'accept']);
  });
});

describe('fan-out outcomes', () => {
  it('acknowledges with the leader and every replica that acknowledged', () => {
    const { effects } = run([...leaderOf(1), { type: 'fannedOut', acked: ['b', 'c'], stale: [], unreachable: [] }]);
    expect(effects).toEqual([{ type: 'acknowledge', rf: 3 }]);
  });

  it('marks unreachable replicas down before it acknowledges', () => {
    const out = run([...leaderOf(1), { type: 'fannedOut', acked: ['b'], stale: [], unreachable: ['c'] }]);
    expect(out.effects).toEqual([{ type: 'markDown', nodes: ['c'] }]);
    expect(step(out.state, { type: 'markedDown', ok: true, acked: 1 }).effects).toEqual([{ type: 'acknowledge', rf: 2 }]);
  });

  it('does not acknowledge when missed replicas could not be marked down: resigns, recovers, answers indeterminate', () => {
    const out = run([...leaderOf(1), { type: 'fannedOut', acked: [], stale: [], unreachable: ['c'] }, { type: 'markedDown', ok: false, acked: 0 }]);
    expect(out.state).toMatchObject({ role: 'follower', health: 'dirty' });
    expect(types(out.effects)).toEqual(['stopAutoCommit', 'resign', 'recover', 'refuse']);
    expect(out.effects.at(-1)).toMatchObject({ code: 'SHX_INDETERMINATE' });
  });

  it('a deposed leader (a replica saw a newer epoch) never acknowledges, answers indeterminate and recovers', () => {
    const out = run([...leaderOf(1), { type: 'fannedOut', acked: ['b'], stale: ['c'], unreachable: [] }]);
    expect(out.state).toMatchObject({ role: 'follower', health: 'dirty' });
    expect(types(out.effects)).toEqual(['stopAutoCommit', 'resign', 'recover', 'refuse']);
  });

  it('does not acknowledge a fan-out that ends after leadership was lost', () => {
    const out = run([...leaderOf(1), { type: 'lost' }, { type: 'fannedOut', acked: ['b'], stale: [], unreachable: [] }]);
    expect(types(out.effects)).toEqual(['recover', 'refuse']);
  });
});

describe('recovery and standing for leadership', () => {
  it('a dirty replica stays dirty while it recovers and is active after', () => {
    const dirty = run([...leaderOf(1), { type: 'fannedOut', acked: [], stale: ['b'], unreachable: [] }]).state;
    const recovering = step(dirty, { type: 'recoveryStarted' }).state;
    expect(recovering.health).toBe('dirty');
    expect(step(recovering, { type: 'recoveryFinished' }).state.health).toBe('active');
  });

  it('a dirty replica may not stand while another active replica can lead, and may when none can', () => {
    const dirty = run([...leaderOf(1), { type: 'fannedOut', acked: [], stale: ['b'], unreachable: [] }]).state;
    expect(mayStand(dirty, 1)).toBe(false);
    expect(mayStand(dirty, 0)).toBe(true);
    expect(mayStand(step(INITIAL, { type: 'recoveryStarted' }).state, 0)).toBe(false);
    expect(mayStand(INITIAL, 3)).toBe(true);
  });
});

describe('handover (leader balance)', () => {
  it('a leader handing over refuses new writes definitely (SHX_NOT_LEADER) and gives no versions', () => {
    const handing = run([...leaderOf(2), { type: 'handOver' }]).state;
    expect(handing).toMatchObject({ role: 'leader', handingOver: true });
    const r = step(handing, { type: 'update', count: 1 });
    expect(r.effects).toEqual([{ type: 'refuse', code: 'SHX_NOT_LEADER', why: 'is handing its leadership over and accepts no new writes' }]);
    expect(r.state.clock).toBe(handing.clock);
  });

  it('a write accepted before the handover is still acknowledged while it hands over', () => {
    const handing = run([...leaderOf(2), { type: 'update', count: 1 }, { type: 'handOver' }]).state;
    expect(step(handing, { type: 'fannedOut', acked: ['b'], stale: [], unreachable: [] }).effects).toEqual([{ type: 'acknowledge', rf: 2 }]);
  });

  it('accepts writes again when the handover is cancelled, with versions after those given before', () => {
    const before = run([...leaderOf(2), { type: 'update', count: 2 }]).state;
    const again = run([{ type: 'handOver' }, { type: 'handOverCancelled' }], before).state;
    expect(again.handingOver).toBe(false);
    const accepted = step(again, { type: 'update', count: 1 }).effects.find((e) => e.type === 'accept');
    expect(accepted).toEqual({ type: 'accept', versions: [before.clock + 1] });
  });

  it('ends with the leadership: a follower, or the next leadership, accepts as usual', () => {
    const lost = run([...leaderOf(2), { type: 'handOver' }, { type: 'lost' }]).state;
    expect(lost).toMatchObject({ role: 'follower', handingOver: false });
    const next = run(leaderOf(3), lost).state;
    expect(types(step(next, { type: 'update', count: 1 }).effects)).toEqual(['accept']);
  });

  it('only a leader that is ready and active hands over', () => {
    expect(step(INITIAL, { type: 'handOver' }).state.handingOver).toBe(false);
    expect(run([{ type: 'elected', epoch: 1 }, { type: 'handOver' }]).state.handingOver).toBe(false);
  });
});

// ---- properties over a whole shard ------------------------------------------------------------

type Action =
  | { readonly kind: 'elect'; readonly replica: number }
  | { readonly kind: 'write'; readonly replica: number; readonly count: number }
  | { readonly kind: 'deliver'; readonly from: number; readonly to: number }
  | { readonly kind: 'lose'; readonly replica: number }
  | { readonly kind: 'restart'; readonly replica: number };

const REPLICAS = 3;
const action: fc.Arbitrary<Action> = fc.oneof(
  fc.record({ kind: fc.constant('elect' as const), replica: fc.nat(REPLICAS - 1) }),
  fc.record({ kind: fc.constant('write' as const), replica: fc.nat(REPLICAS - 1), count: fc.integer({ min: 1, max: 4 }) }),
  fc.record({ kind: fc.constant('deliver' as const), from: fc.nat(REPLICAS - 1), to: fc.nat(REPLICAS - 1) }),
  fc.record({ kind: fc.constant('lose' as const), replica: fc.nat(REPLICAS - 1) }),
  fc.record({ kind: fc.constant('restart' as const), replica: fc.nat(REPLICAS - 1) }),
);

describe('properties over random event sequences of a shard', () => {
  it('versions strictly increase across leader changes; no replica accepts an older epoch; a deposed leader never acknowledges', () => {
    fc.assert(
      fc.property(fc.array(action, { maxLength: 120 }), (actions) => {
        let nextEpoch = 1;
        let replicas: ShardState[] = Array.from({ length: REPLICAS }, () => INITIAL);
        // What each replica has persisted: its fence survives a restart, its clock is its newest stored version.
        const persisted = Array.from({ length: REPLICAS }, () => ({ fence: 0, maxVersion: 0 }));
        // The epoch of each replica's latest write request, with the versions it was given.
        const pending: Array<{ epoch: number; versions: number[] } | undefined> = Array(REPLICAS).fill(undefined);
        let highest = 0;
        let highestEpoch = 0;
        const apply = (i: number, e: ShardEvent): ShardEffect[] => {
          const r = step(replicas[i]!, e);
          replicas = replicas.map((s, j) => (j === i ? r.state : s));
          for (const eff of r.effects) if (eff.type === 'persistFence') persisted[i]!.fence = Math.max(persisted[i]!.fence, eff.epoch);
          return [...r.effects];
        };
        for (const a of actions) {
          if (a.kind === 'elect') {
            // Coordination hands out growing epochs; the old leader may not have noticed yet.
            const epoch = nextEpoch++;
            apply(a.replica, { type: 'elected', epoch });
            apply(a.replica, { type: 'ready', epoch });
          } else if (a.kind === 'write') {
            const before = replicas[a.replica]!;
            const effects = apply(a.replica, { type: 'update', count: a.count });
            const accept = effects.find((e) => e.type === 'accept');
            if (accept) {
              expect(before.role).toBe('leader');
              const versions = [...accept.versions!];
              for (const v of versions) {
                // Strictly increasing across the whole shard's history of acknowledged-or-not writes
                // within an epoch, and every newer epoch's versions above every older one's.
                if (epochOf(v) === highestEpoch) expect(v).toBeGreaterThan(highest);
                expect(epochOf(v)).toBeGreaterThanOrEqual(highestEpoch);
                expect(epochOf(v)).toBe(before.epoch);
              }
              if (epochOf(versions[0]!) > highestEpoch) highestEpoch = epochOf(versions[0]!);
              highest = Math.max(highest, ...versions.filter((v) => epochOf(v) === highestEpoch));
              persisted[a.replica]!.maxVersion = Math.max(persisted[a.replica]!.maxVersion, ...versions);
              pending[a.replica] = { epoch: before.epoch, versions };
            }
          } else if (a.kind === 'deliver') {
            // The leader's latest write reaches one replica (FROMLEADER), and the leader judges the answer.
            const p = pending[a.from];
            if (!p || a.from === a.to) continue;
            const fence = replicas[a.to]!.fence;
            const answer = apply(a.to, { type: 'fromLeader', epoch: p.epoch });
            const refused = answer.some((e) => e.type === 'refuse');
            expect(refused).toBe(p.epoch < fence);
            if (!refused) {
              expect(replicas[a.to]!.fence).toBeGreaterThanOrEqual(p.epoch);
              apply(a.to, { type: 'stored', maxVersion: Math.max(...p.versions) });
              persisted[a.to]!.maxVersion = Math.max(persisted[a.to]!.maxVersion, ...p.versions);
            }
            const wasLeader = replicas[a.from]!.role === 'leader' && replicas[a.from]!.epoch === p.epoch;
            const judged = apply(a.from, { type: 'fannedOut', acked: refused ? [] : [`r${a.to}`], stale: refused ? [`r${a.to}`] : [], unreachable: [] });
            const acked = judged.some((e) => e.type === 'acknowledge');
            // Only a leader of the write's epoch that no replica has fenced off acknowledges.
            if (acked) expect(wasLeader && !refused).toBe(true);
            if (refused) expect(replicas[a.from]!.role).toBe('follower');
            pending[a.from] = undefined;
          } else if (a.kind === 'lose') {
            apply(a.replica, { type: 'lost' });
          } else {
            // kill -9 and start again: only what was persisted survives.
            replicas = replicas.map((s, j) => (j === a.replica ? step(INITIAL, { type: 'opened', ...persisted[j]! }).state : s));
            pending[a.replica] = undefined;
          }
          // A replica's fence never goes backwards, not even across a restart.
          replicas.forEach((s, i) => expect(s.fence).toBeGreaterThanOrEqual(persisted[i]!.fence));
        }
      }),
      { numRuns: 500, seed: 20261201 },
    );
  });

  it('a replica never accepts an epoch older than one it accepted, in any order of deliveries', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 50 }), { maxLength: 60 }), (epochs) => {
        let s = INITIAL;
        let newest = 0;
        for (const epoch of epochs) {
          const r = step(s, { type: 'fromLeader', epoch });
          const accepted = r.effects.some((e) => e.type === 'accept');
          expect(accepted).toBe(epoch >= newest);
          if (accepted) newest = epoch;
          s = r.state;
        }
      }),
      { numRuns: 500, seed: 7 },
    );
  });
});
