import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  PRIMARY_TARGET,
  ReadBalancer,
  allowedTargets,
  type Admission,
  type BalanceRequest,
  type BalanceSetting,
  type Outcome,
  type SlotRow,
} from '../src/read/balancer.js';
import { outcomeError } from '../src/read/balancer-runtime.js';

// ---- helpers ---------------------------------------------------------------------------

const setting = (priority: string, target: string, weight: number, slots: number): BalanceSetting => ({ priority, target, weight, slots });

function balancer(settings: BalanceSetting[], queueSize = 10): ReadBalancer {
  const b = new ReadBalancer({ queueSize });
  b.replaceSettings(settings);
  return b;
}

/** A read of one shard (a target list) or of several (shard -> target list). */
function read(id: string, priority: string | undefined, targets: string[] | Record<string, string[]>, deadline = 1000): BalanceRequest {
  const shards = Array.isArray(targets) ? [{ shard: 'shard1', targets }] : Object.entries(targets).map(([shard, t]) => ({ shard, targets: t }));
  return { id, ...(priority !== undefined && { priority }), shards, deadline };
}

const NOW = 0;

function run(a: Admission | Outcome): Extract<Outcome, { kind: 'run' }> {
  expect(a.kind).toBe('run');
  return a as Extract<Outcome, { kind: 'run' }>;
}

const started = (outcomes: readonly Outcome[]): string[] => outcomes.filter((o) => o.kind === 'run').map((o) => o.request);

function row(b: ReadBalancer, priority: string, target: string): Omit<SlotRow, 'priority' | 'target' | 'weight' | 'up'> {
  const r = b.snapshot().find((x) => x.priority === priority && x.target === target);
  if (!r) throw new Error(`no row ${priority}/${target}`);
  return { limit: r.limit, taken: r.taken, free: r.free, queued: r.queued };
}

// ---- choosing a target -----------------------------------------------------------------

describe('choosing a target', () => {
  it('picks the highest-weight target with a free slot', () => {
    const b = balancer([setting('interactive', 'fast', 10, 1), setting('interactive', 'lowcost', 1, 5)]);
    expect(run(b.request(read('r1', 'interactive', ['lowcost', 'fast']), NOW)).targets).toEqual({ shard1: 'fast' });
  });

  it('falls to a lower weight when the higher one has no free slot', () => {
    const b = balancer([setting('interactive', 'fast', 10, 1), setting('interactive', 'lowcost', 1, 5)]);
    b.request(read('r1', 'interactive', ['fast', 'lowcost']), NOW);
    expect(run(b.request(read('r2', 'interactive', ['fast', 'lowcost']), NOW)).targets).toEqual({ shard1: 'lowcost' });
  });

  it('breaks equal weights by the most free slots', () => {
    const b = balancer([setting('report', 'a', 5, 2), setting('report', 'b', 5, 3)]);
    expect(run(b.request(read('r1', 'report', ['a', 'b']), NOW)).targets.shard1).toBe('b');
    // b now has 2 free, a 2 free: the name decides; then a has 1 free and b 2.
    expect(run(b.request(read('r2', 'report', ['a', 'b']), NOW)).targets.shard1).toBe('a');
    expect(run(b.request(read('r3', 'report', ['a', 'b']), NOW)).targets.shard1).toBe('b');
  });

  it('breaks equal weights and equal free slots by target name', () => {
    const b = balancer([setting('report', 'zeta', 5, 2), setting('report', 'alpha', 5, 2)]);
    expect(run(b.request(read('r1', 'report', ['zeta', 'alpha']), NOW)).targets.shard1).toBe('alpha');
  });

  it('considers only targets both configured for the priority and allowed for the read', () => {
    const b = balancer([setting('report', 'lowcost', 10, 5), setting('report', PRIMARY_TARGET, 1, 1)]);
    // An immediate read may only use the leaders, however heavy the readers' weight.
    expect(run(b.request(read('r1', 'report', allowedTargets('immediate', ['lowcost'])), NOW)).targets.shard1).toBe(PRIMARY_TARGET);
    expect(run(b.request(read('r2', 'report', allowedTargets('eventual', ['lowcost', 'unconfigured'])), NOW)).targets.shard1).toBe('lowcost');
  });

  it('counts slots per (priority, target): another priority uses none of them', () => {
    const b = balancer([setting('interactive', 'fast', 10, 1), setting('report', 'fast', 1, 1)]);
    run(b.request(read('r1', 'report', ['fast']), NOW));
    run(b.request(read('r2', 'interactive', ['fast']), NOW));
    expect(row(b, 'report', 'fast').taken).toBe(1);
    expect(row(b, 'interactive', 'fast').taken).toBe(1);
  });
});

// ---- unbalanced reads ------------------------------------------------------------------

describe('unbalanced reads', () => {
  it('runs a read without a priority unbalanced, taking no slot', () => {
    const b = balancer([setting('report', PRIMARY_TARGET, 1, 1)]);
    expect(b.request(read('r1', undefined, [PRIMARY_TARGET]), NOW)).toMatchObject({ kind: 'unbalanced', reason: 'no-priority' });
    expect(row(b, 'report', PRIMARY_TARGET).taken).toBe(0);
  });

  it('runs a read whose priority has no settings unbalanced', () => {
    const b = balancer([setting('report', PRIMARY_TARGET, 1, 0)]);
    expect(b.request(read('r1', 'adhoc', [PRIMARY_TARGET]), NOW)).toMatchObject({ kind: 'unbalanced', priority: 'adhoc', reason: 'no-settings' });
  });
});

// ---- the queue -------------------------------------------------------------------------

describe('the queue of a priority', () => {
  it('queues a read while no allowed target has a free slot, and starts it when one is released', () => {
    const b = balancer([setting('report', 'lowcost', 1, 1)]);
    const first = run(b.request(read('r1', 'report', ['lowcost']), NOW));
    expect(b.request(read('r2', 'report', ['lowcost']), NOW)).toMatchObject({ kind: 'queued', holding: [] });
    expect(row(b, 'report', 'lowcost')).toEqual({ limit: 1, taken: 1, free: 0, queued: 1 });
    const next = b.release(first.grants[0]!.id);
    expect(started(next)).toEqual(['r2']);
    expect(row(b, 'report', 'lowcost')).toEqual({ limit: 1, taken: 1, free: 0, queued: 0 });
  });

  it('serves reads that can use the same targets first in, first out', () => {
    const b = balancer([setting('report', 'lowcost', 1, 1)]);
    const first = run(b.request(read('r1', 'report', ['lowcost']), NOW));
    b.request(read('r2', 'report', ['lowcost']), NOW);
    b.request(read('r3', 'report', ['lowcost']), NOW);
    const second = b.release(first.grants[0]!.id);
    expect(started(second)).toEqual(['r2']);
    expect(started(b.release(run(second[0]!).grants[0]!.id))).toEqual(['r3']);
  });

  it('lets a later read go ahead of a waiting one when it can run on another target', () => {
    const b = balancer([setting('report', 'fast', 10, 1), setting('report', 'lowcost', 1, 1)]);
    run(b.request(read('r1', 'report', ['fast']), NOW));
    expect(b.request(read('r2', 'report', ['fast']), NOW).kind).toBe('queued');
    expect(run(b.request(read('r3', 'report', ['fast', 'lowcost']), NOW)).targets.shard1).toBe('lowcost');
    expect(b.isQueued('r2')).toBe(true);
  });

  it('skips ahead in the queue too: a released slot goes to the first read that can use it', () => {
    const b = balancer([setting('report', 'fast', 10, 1), setting('report', 'lowcost', 1, 1)]);
    run(b.request(read('r1', 'report', ['fast']), NOW));
    const low = run(b.request(read('r2', 'report', ['lowcost']), NOW));
    b.request(read('r3', 'report', ['fast']), NOW);
    b.request(read('r4', 'report', ['lowcost']), NOW);
    expect(started(b.release(low.grants[0]!.id))).toEqual(['r4']);
    expect(b.isQueued('r3')).toBe(true);
  });

  it('rejects a read arriving at a full queue at once with 429 naming the priority', () => {
    const b = balancer([setting('report', 'lowcost', 1, 1)], 2);
    run(b.request(read('r1', 'report', ['lowcost']), NOW));
    b.request(read('r2', 'report', ['lowcost']), NOW);
    b.request(read('r3', 'report', ['lowcost']), NOW);
    const full = b.request(read('r4', 'report', ['lowcost']), NOW);
    expect(full).toMatchObject({ kind: 'rejected', reason: 'queue-full', priority: 'report' });
    const err = outcomeError(full as Outcome)!;
    expect(err).toMatchObject({ code: 'SHX_BUSY', status: 429 });
    expect(err.message).toContain('"report"');
    expect(b.queueLength('report')).toBe(2);
  });

  it('takes nothing for a read refused by a full queue, even the slots it could have had', () => {
    const b = balancer([setting('report', 'lowcost', 1, 1), setting('report', PRIMARY_TARGET, 1, 1)], 0);
    run(b.request(read('r1', 'report', ['lowcost']), NOW));
    expect(b.request(read('r2', 'report', { shard1: [PRIMARY_TARGET], shard2: ['lowcost'] }), NOW).kind).toBe('rejected');
    expect(row(b, 'report', PRIMARY_TARGET).taken).toBe(0);
  });

  it('admits a read that can start at once even when the queue is full: it never enters the queue', () => {
    const b = balancer([setting('report', 'fast', 1, 1), setting('report', 'lowcost', 1, 1)], 1);
    run(b.request(read('r1', 'report', ['fast']), NOW));
    b.request(read('r2', 'report', ['fast']), NOW);
    expect(b.request(read('r3', 'report', ['lowcost']), NOW).kind).toBe('run');
  });

  it('with queueSize 0 never queues: a read runs at once or is refused', () => {
    const b = balancer([setting('report', 'lowcost', 1, 1)], 0);
    run(b.request(read('r1', 'report', ['lowcost']), NOW));
    expect(b.request(read('r2', 'report', ['lowcost']), NOW)).toMatchObject({ kind: 'rejected', reason: 'queue-full' });
  });

  it('removes a cancelled read (its client went away) and gives its place to the next', () => {
    const b = balancer([setting('report', 'a', 1, 1), setting('report', 'b', 1, 1)]);
    run(b.request(read('r1', 'report', ['a']), NOW));
    expect(b.request(read('r2', 'report', { shard1: ['b'], shard2: ['a'] }), NOW)).toMatchObject({ kind: 'queued', holding: [{ target: 'b' }] });
    b.request(read('r3', 'report', ['b']), NOW);
    expect(started(b.cancel('r2'))).toEqual(['r3']);
    expect(b.isQueued('r2')).toBe(false);
  });
});

// ---- timeouts --------------------------------------------------------------------------

describe('time in the queue', () => {
  it('answers 504 for a read still queued at its deadline and removes it from the queue', () => {
    const b = balancer([setting('report', 'lowcost', 1, 1)]);
    run(b.request(read('r1', 'report', ['lowcost'], 100), NOW));
    b.request(read('r2', 'report', ['lowcost'], 50), NOW);
    expect(b.nextDeadline()).toBe(50);
    expect(b.tick(49)).toEqual([]);
    const [timeout] = b.tick(50);
    expect(timeout).toMatchObject({ kind: 'timeout', request: 'r2', priority: 'report' });
    expect(outcomeError(timeout!)).toMatchObject({ code: 'SHX_TIMEOUT', status: 504 });
    expect(timeout!.kind === 'timeout' && timeout!.message).toContain('50 ms');
    expect(b.queueLength('report')).toBe(0);
    expect(b.nextDeadline()).toBeUndefined();
  });

  it('answers 504 at once for a read whose deadline has already passed', () => {
    const b = balancer([setting('report', 'lowcost', 1, 1)]);
    expect(b.request(read('r1', 'report', ['lowcost'], 10), 10).kind).toBe('timeout');
  });

  it('gives back the slots a timed-out read held, so the next read can start', () => {
    const b = balancer([setting('report', 'a', 1, 1), setting('report', 'b', 1, 1)]);
    run(b.request(read('r1', 'report', ['a'], 999), NOW));
    b.request(read('r2', 'report', { shard1: ['b'], shard2: ['a'] }, 20), NOW);
    b.request(read('r3', 'report', ['b'], 999), NOW);
    expect(b.tick(20).map((o) => [o.kind, o.request])).toEqual([
      ['timeout', 'r2'],
      ['run', 'r3'],
    ]);
  });
});

// ---- settings changes --------------------------------------------------------------------

describe('settings changed while reads are queued', () => {
  it('releases the queued reads of a priority whose settings are removed to run unbalanced, in order', () => {
    const b = balancer([setting('report', 'lowcost', 1, 1)]);
    const running = run(b.request(read('r1', 'report', ['lowcost']), NOW));
    b.request(read('r2', 'report', ['lowcost']), NOW);
    b.request(read('r3', 'report', ['lowcost']), NOW);
    const out = b.removeSetting('report', 'lowcost');
    expect(out.map((o) => [o.kind, o.request])).toEqual([
      ['unbalanced', 'r2'],
      ['unbalanced', 'r3'],
    ]);
    expect(out[0]).toMatchObject({ reason: 'settings-removed' });
    // The running read kept its slot; releasing it later changes nothing else.
    expect(b.release(running.grants[0]!.id)).toEqual([]);
    expect(b.request(read('r4', 'report', ['lowcost']), NOW).kind).toBe('unbalanced');
  });

  it('rejects a queued read whose only target is no longer configured, saying why', () => {
    const b = balancer([setting('report', 'lowcost', 1, 1), setting('report', 'fast', 1, 1)]);
    run(b.request(read('r1', 'report', ['lowcost']), NOW));
    b.request(read('r2', 'report', ['lowcost']), NOW);
    const [o] = b.removeSetting('report', 'lowcost');
    expect(o).toMatchObject({ kind: 'rejected', request: 'r2', reason: 'not-configured' });
    expect(o!.kind === 'rejected' && o!.message).toMatch(/shard1.*lowcost.*configured on fast/);
  });

  it('admits queued reads at once when slots are raised', () => {
    const b = balancer([setting('report', 'lowcost', 1, 1)]);
    run(b.request(read('r1', 'report', ['lowcost']), NOW));
    b.request(read('r2', 'report', ['lowcost']), NOW);
    b.request(read('r3', 'report', ['lowcost']), NOW);
    expect(started(b.setSetting(setting('report', 'lowcost', 1, 3)))).toEqual(['r2', 'r3']);
    expect(row(b, 'report', 'lowcost')).toEqual({ limit: 3, taken: 3, free: 0, queued: 0 });
  });

  it('evicts nothing when slots are lowered, and admits again only once taken falls under the new limit', () => {
    const b = balancer([setting('report', 'lowcost', 1, 3)]);
    const grants = ['r1', 'r2', 'r3'].map((id) => run(b.request(read(id, 'report', ['lowcost']), NOW)).grants[0]!.id);
    expect(b.setSetting(setting('report', 'lowcost', 1, 1))).toEqual([]);
    expect(row(b, 'report', 'lowcost')).toEqual({ limit: 1, taken: 3, free: 0, queued: 0 });
    expect(b.request(read('r4', 'report', ['lowcost']), NOW).kind).toBe('queued');
    expect(b.release(grants[0]!)).toEqual([]);
    expect(b.release(grants[1]!)).toEqual([]);
    expect(started(b.release(grants[2]!))).toEqual(['r4']);
  });

  it('applies a new weight to queued and new reads; a running read keeps its target', () => {
    const b = balancer([setting('report', 'fast', 10, 1), setting('report', 'lowcost', 1, 0)]);
    const r1 = run(b.request(read('r1', 'report', ['fast', 'lowcost']), NOW));
    b.request(read('r2', 'report', ['fast', 'lowcost']), NOW);
    const out = b.replaceSettings([setting('report', 'fast', 1, 1), setting('report', 'lowcost', 10, 1)]);
    expect(out.map((o) => [o.request, o.kind === 'run' && o.targets.shard1])).toEqual([['r2', 'lowcost']]);
    expect(r1.targets.shard1).toBe('fast');
    expect(row(b, 'report', 'fast').taken).toBe(1);
  });
});

// ---- targets down ------------------------------------------------------------------------

describe('a target that is down', () => {
  it('takes no new reads: they go to the next usable target', () => {
    const b = balancer([setting('report', 'fast', 10, 5), setting('report', PRIMARY_TARGET, 1, 5)]);
    b.setTargetUp('fast', false);
    expect(run(b.request(read('r1', 'report', ['fast', PRIMARY_TARGET]), NOW)).targets.shard1).toBe(PRIMARY_TARGET);
    expect(b.snapshot().find((r) => r.target === 'fast')).toMatchObject({ up: false, taken: 0 });
  });

  it('rejects at once a read none of whose configured targets is up, saying which are down', () => {
    const b = balancer([setting('report', 'fast', 10, 5)]);
    b.setTargetUp('fast', false);
    const o = b.request(read('r1', 'report', ['fast', PRIMARY_TARGET]), NOW);
    expect(o).toMatchObject({ kind: 'rejected', reason: 'down' });
    expect(o.kind === 'rejected' && o.message).toContain('fast are down');
    expect(outcomeError(o as Outcome)).toMatchObject({ code: 'SHX_UNAVAILABLE', status: 503 });
  });

  it('rejects at once a read its consistency keeps off every configured target', () => {
    const b = balancer([setting('report', 'lowcost', 10, 5)]);
    const o = b.request(read('r1', 'report', allowedTargets('immediate', ['lowcost'])), NOW);
    expect(o).toMatchObject({ kind: 'rejected', reason: 'not-configured' });
    expect(o.kind === 'rejected' && o.message).toMatch(/may use primary, the priority is configured on lowcost/);
    expect(outcomeError(o as Outcome)).toMatchObject({ code: 'SHX_BAD_REQUEST', status: 400 });
  });

  it('rejects a queued read whose targets all go down', () => {
    const b = balancer([setting('report', 'fast', 10, 1)]);
    run(b.request(read('r1', 'report', ['fast']), NOW));
    b.request(read('r2', 'report', ['fast']), NOW);
    expect(b.setTargetUp('fast', false)).toMatchObject([{ kind: 'rejected', request: 'r2', reason: 'down' }]);
  });

  it('makes a queued read give back a slot it held there, and place that shard elsewhere', () => {
    const b = balancer([setting('report', 'fast', 10, 1), setting('report', PRIMARY_TARGET, 1, 1), setting('report', 'lowcost', 1, 1)]);
    run(b.request(read('r1', 'report', ['lowcost']), NOW));
    expect(b.request(read('r2', 'report', { shard1: ['fast', PRIMARY_TARGET], shard2: ['lowcost'] }), NOW)).toMatchObject({ kind: 'queued', holding: [{ target: 'fast' }] });
    b.setTargetUp('fast', false);
    expect(row(b, 'report', 'fast').taken).toBe(0);
    expect(row(b, 'report', PRIMARY_TARGET).taken).toBe(1);
  });

  it('hands the slots of a queued read rejected for it to an earlier read at once', () => {
    const b = balancer([setting('report', 'z', 10, 1), setting('report', 't', 1, 1), setting('report', 'w', 1, 1)]);
    run(b.request(read('r0', 'report', ['w']), NOW));
    expect(b.request(read('a', 'report', { shard1: ['z', 't'], shard2: ['w'] }), NOW)).toMatchObject({ holding: [{ target: 'z' }] });
    expect(b.request(read('b', 'report', { shard1: ['t'], shard2: ['z'] }), NOW)).toMatchObject({ holding: [{ target: 't' }] });
    // z down: a gives z back and needs t, which b holds; b can no longer be served and gives t back.
    expect(b.setTargetUp('z', false)).toMatchObject([{ kind: 'rejected', request: 'b', reason: 'down' }]);
    expect(row(b, 'report', 't')).toMatchObject({ taken: 1, queued: 0 });
    expect(b.isQueued('a')).toBe(true);
  });

  it('admits queued reads when it comes back up', () => {
    const b = balancer([setting('report', 'fast', 10, 1), setting('report', PRIMARY_TARGET, 1, 1)]);
    b.setTargetUp('fast', false);
    run(b.request(read('r1', 'report', ['fast', PRIMARY_TARGET]), NOW));
    b.request(read('r2', 'report', ['fast', PRIMARY_TARGET]), NOW);
    expect(b.setTargetUp('fast', true).map((o) => o.kind === 'run' && o.targets.shard1)).toEqual(['fast']);
  });
});

// ---- reads over several shards -----------------------------------------------------------

describe('a read over several shards', () => {
  it('takes one slot per target it uses, not one per shard', () => {
    const b = balancer([setting('report', 'lowcost', 1, 2)]);
    const r = run(b.request(read('r1', 'report', { shard1: ['lowcost'], shard2: ['lowcost'], shard3: ['lowcost'] }), NOW));
    expect(r.grants).toHaveLength(1);
    expect(row(b, 'report', 'lowcost').taken).toBe(1);
  });

  it('takes one slot on each target when its shards land on different ones', () => {
    const b = balancer([setting('report', 'lowcost', 10, 2), setting('report', PRIMARY_TARGET, 1, 2)]);
    const r = run(b.request(read('r1', 'report', { shard1: ['lowcost', PRIMARY_TARGET], shard2: [PRIMARY_TARGET] }), NOW));
    expect(r.targets).toEqual({ shard1: 'lowcost', shard2: PRIMARY_TARGET });
    expect(r.grants.map((g) => g.target).sort()).toEqual(['lowcost', PRIMARY_TARGET]);
  });

  it('holds the slots it got while it waits for the others, and starts with all of them', () => {
    const b = balancer([setting('report', 'lowcost', 10, 1), setting('report', PRIMARY_TARGET, 1, 1)]);
    const blocker = run(b.request(read('r1', 'report', ['lowcost']), NOW));
    expect(b.request(read('r2', 'report', { shard1: [PRIMARY_TARGET], shard2: ['lowcost'] }), NOW)).toMatchObject({ kind: 'queued', holding: [{ target: PRIMARY_TARGET }] });
    // The held leader slot is not free for a later read.
    expect(b.request(read('r3', 'report', [PRIMARY_TARGET]), NOW).kind).toBe('queued');
    const out = b.release(blocker.grants[0]!.id);
    expect(started(out)).toEqual(['r2']);
    expect(run(out[0]!).grants.map((g) => g.target).sort()).toEqual(['lowcost', PRIMARY_TARGET]);
    expect(b.isQueued('r3')).toBe(true);
  });

  it('places a shard on a target it already holds rather than take a slot on an equal-weight one', () => {
    const b = balancer([setting('report', 'a', 5, 1), setting('report', 'b', 5, 9)]);
    const r = run(b.request(read('r1', 'report', { shard1: ['a'], shard2: ['a', 'b'] }), NOW));
    expect(r.targets).toEqual({ shard1: 'a', shard2: 'a' });
    expect(r.grants).toHaveLength(1);
  });
});

// ---- reset -------------------------------------------------------------------------------

describe('reset of the slot counters', () => {
  it('zeroes taken; releasing a grant from before the reset pushes no counter below zero', () => {
    const b = balancer([setting('report', 'lowcost', 1, 1)]);
    const old = run(b.request(read('r1', 'report', ['lowcost']), NOW));
    b.reset();
    expect(row(b, 'report', 'lowcost')).toEqual({ limit: 1, taken: 0, free: 1, queued: 0 });
    const fresh = run(b.request(read('r2', 'report', ['lowcost']), NOW));
    expect(b.release(old.grants[0]!.id)).toEqual([]);
    expect(row(b, 'report', 'lowcost').taken).toBe(1);
    b.release(fresh.grants[0]!.id);
    expect(row(b, 'report', 'lowcost').taken).toBe(0);
  });

  it('admits queued reads at once, up to a full new set of slots', () => {
    const b = balancer([setting('report', 'lowcost', 1, 2)]);
    run(b.request(read('r1', 'report', ['lowcost']), NOW));
    run(b.request(read('r2', 'report', ['lowcost']), NOW));
    for (const id of ['r3', 'r4', 'r5']) b.request(read(id, 'report', ['lowcost']), NOW);
    expect(started(b.reset())).toEqual(['r3', 'r4']);
  });

  it('ignores a release of a grant given twice, or unknown', () => {
    const b = balancer([setting('report', 'lowcost', 1, 2)]);
    const r = run(b.request(read('r1', 'report', ['lowcost']), NOW));
    run(b.request(read('r2', 'report', ['lowcost']), NOW));
    b.release(r.grants[0]!.id);
    b.release([r.grants[0]!.id, 12345]);
    expect(row(b, 'report', 'lowcost').taken).toBe(1);
  });
});

describe('the slot snapshot (GET /api/read-slots)', () => {
  it('lists limit, taken, free and queued per priority and target, sorted', () => {
    const b = balancer([setting('report', 'lowcost', 1, 1), setting('interactive', 'fast', 10, 2), setting('report', PRIMARY_TARGET, 1, 0)]);
    run(b.request(read('r1', 'report', ['lowcost']), NOW));
    b.request(read('r2', 'report', ['lowcost', PRIMARY_TARGET]), NOW);
    expect(b.snapshot()).toEqual([
      { priority: 'interactive', target: 'fast', weight: 10, up: true, limit: 2, taken: 0, free: 2, queued: 0 },
      { priority: 'report', target: 'lowcost', weight: 1, up: true, limit: 1, taken: 1, free: 0, queued: 1 },
      { priority: 'report', target: PRIMARY_TARGET, weight: 1, up: true, limit: 0, taken: 0, free: 0, queued: 1 },
    ]);
  });
});

// ---- properties over random histories ----------------------------------------------------

const PRIORITIES = ['a', 'b'] as const;
const TARGETS = ['x', 'y', PRIMARY_TARGET] as const;

type Command =
  | { op: 'request'; priority: string | undefined; shards: string[][]; ttl: number }
  | { op: 'release'; pick: number }
  | { op: 'cancel'; pick: number }
  | { op: 'set'; priority: string; target: string; weight: number; slots: number }
  | { op: 'remove'; priority: string; target: string }
  | { op: 'up'; target: string; up: boolean }
  | { op: 'tick'; advance: number }
  | { op: 'reset' };

const targetSet = fc.subarray([...TARGETS], { minLength: 1 });
// Few shapes repeat often, so that reads with the same needs meet in one queue (the FIFO check).
const SHAPES: string[][][] = [[['x']], [['y']], [['x', PRIMARY_TARGET]], [[PRIMARY_TARGET]], [['x'], [PRIMARY_TARGET]], [['x', 'y'], ['y']]];
const shape = fc.oneof({ arbitrary: fc.constantFrom(...SHAPES), weight: 3 }, { arbitrary: fc.array(targetSet, { minLength: 1, maxLength: 3 }), weight: 1 });
const command: fc.Arbitrary<Command> = fc.oneof(
  { arbitrary: fc.record({ op: fc.constant('request' as const), priority: fc.constantFrom('a', 'b', 'none', undefined), shards: shape, ttl: fc.integer({ min: 0, max: 40 }) }), weight: 6 },
  { arbitrary: fc.record({ op: fc.constant('release' as const), pick: fc.nat() }), weight: 4 },
  { arbitrary: fc.record({ op: fc.constant('cancel' as const), pick: fc.nat() }), weight: 1 },
  { arbitrary: fc.record({ op: fc.constant('set' as const), priority: fc.constantFrom(...PRIORITIES), target: fc.constantFrom(...TARGETS), weight: fc.integer({ min: 0, max: 3 }), slots: fc.integer({ min: 0, max: 3 }) }), weight: 2 },
  { arbitrary: fc.record({ op: fc.constant('remove' as const), priority: fc.constantFrom(...PRIORITIES), target: fc.constantFrom(...TARGETS) }), weight: 1 },
  { arbitrary: fc.record({ op: fc.constant('up' as const), target: fc.constantFrom(...TARGETS), up: fc.boolean() }), weight: 1 },
  { arbitrary: fc.record({ op: fc.constant('tick' as const), advance: fc.integer({ min: 0, max: 15 }) }), weight: 2 },
  { arbitrary: fc.constant({ op: 'reset' as const }), weight: 1 },
);

/** Drives a balancer through `commands`, checking the invariants after every step. */
function simulate(initial: BalanceSetting[], queueSize: number, commands: Command[]): void {
  // A model of the live grants, from the balancer's own reports: every slot taken within its
  // limit, every grant given back exactly once, counted only if taken since the last reset.
  const problems: string[] = [];
  const live = new Map<number, { key: string; epoch: number }>();
  let epoch = 0;
  const b = new ReadBalancer({
    queueSize,
    onSlotTaken: (g, taken, limit) => {
      if (taken > limit) problems.push(`${g.priority}/${g.target} taken ${taken} > limit ${limit}`);
      if (live.has(g.id)) problems.push(`grant ${g.id} given twice`);
      live.set(g.id, { key: `${g.priority}/${g.target}`, epoch });
    },
    onSlotReturned: (g, counted) => {
      const l = live.get(g.id);
      if (!l) problems.push(`grant ${g.id} returned twice`);
      else if (counted !== (l.epoch === epoch)) problems.push(`grant ${g.id} counted=${counted} across a reset`);
      live.delete(g.id);
    },
  });
  b.replaceSettings(initial);
  let now = 0;
  const reqs: BalanceRequest[] = [];
  const ends = new Map<string, number>();
  const queued: string[] = [];
  const running = new Map<string, number[]>();
  const order = new Map<string, number>();

  const settle = (id: string, o: Admission | Outcome): void => {
    expect(b.isQueued(id), `${id} is still queued after ending`).toBe(o.kind === 'queued');
    if (o.kind === 'queued') {
      queued.push(id);
      return;
    }
    const i = queued.indexOf(id);
    if (i >= 0) queued.splice(i, 1);
    ends.set(id, (ends.get(id) ?? 0) + 1);
    if (o.kind !== 'run') return;
    const req = reqs[order.get(id)!]!;
    const config = b.settings();
    // Every shard on an allowed, configured, up target; one grant per distinct target.
    for (const need of req.shards) {
      const t = o.targets[need.shard]!;
      expect(need.targets).toContain(t);
      expect(config.some((s) => s.priority === o.priority && s.target === t)).toBe(true);
      expect(b.isUp(t)).toBe(true);
    }
    expect(o.grants.map((g) => g.target).sort()).toEqual([...new Set(Object.values(o.targets))].sort());
    for (const g of o.grants) expect(live.has(g.id), `grant ${g.id} of ${id} is live`).toBe(true);
    running.set(id, o.grants.map((g) => g.id));
  };

  const step = (outcomes: readonly Outcome[], newcomer?: string): void => {
    const startedNow = new Set(outcomes.filter((o) => o.kind === 'run').map((o) => o.request));
    if (newcomer !== undefined) startedNow.add(newcomer);
    for (const o of outcomes) {
      expect(queued, `${o.request} ended without being queued`).toContain(o.request);
      settle(o.request, o);
    }
    // FIFO among reads of one priority with the same needs: none starts while an older one waits.
    for (const id of startedNow) {
      const r = reqs[order.get(id)!]!;
      for (const w of queued) {
        const q = reqs[order.get(w)!]!;
        if (order.get(w)! < order.get(id)! && q.priority === r.priority && JSON.stringify(q.shards) === JSON.stringify(r.shards)) {
          throw new Error(`${id} started while the older ${w} with the same needs still waits`);
        }
      }
    }
    const rows = new Map(b.snapshot().map((r) => [`${r.priority}/${r.target}`, r]));
    const model = new Map<string, number>();
    for (const l of live.values()) if (l.epoch === epoch) model.set(l.key, (model.get(l.key) ?? 0) + 1);
    for (const [k, r] of rows) {
      if (r.taken < 0) throw new Error(`${k} taken ${r.taken} < 0`);
      if (r.taken !== (model.get(k) ?? 0)) throw new Error(`${k} taken ${r.taken}, live grants since the reset ${model.get(k) ?? 0}`);
      if (r.free !== Math.max(0, r.limit - r.taken)) throw new Error(`${k} free ${r.free} with limit ${r.limit} and taken ${r.taken}`);
    }
    // Settled: no queued read could start now. (Sufficient test: each shard has a usable target with a free slot.)
    for (const id of queued) {
      const q = reqs[order.get(id)!]!;
      const startable = q.shards.every((n) => n.targets.some((t) => b.isUp(t) && (rows.get(`${q.priority}/${t}`)?.free ?? 0) > 0));
      if (startable) throw new Error(`${id} waits although every shard it needs has a free slot`);
    }
    expect(problems).toEqual([]);
  };

  for (const c of commands) {
    switch (c.op) {
      case 'request': {
        const id = `r${reqs.length}`;
        const req: BalanceRequest = { id, ...(c.priority !== undefined && { priority: c.priority }), shards: c.shards.map((targets, i) => ({ shard: `s${i}`, targets })), deadline: now + c.ttl };
        order.set(id, reqs.length);
        reqs.push(req);
        const a = b.request(req, now);
        settle(id, a);
        step([], a.kind === 'run' ? id : undefined);
        break;
      }
      case 'release': {
        const ids = [...running.keys()];
        if (ids.length === 0) break;
        const id = ids[c.pick % ids.length]!;
        const grants = running.get(id)!;
        running.delete(id);
        step(b.release(grants));
        for (const g of grants) expect(live.has(g)).toBe(false);
        break;
      }
      case 'cancel': {
        if (queued.length === 0) break;
        const id = queued[c.pick % queued.length]!;
        queued.splice(queued.indexOf(id), 1);
        ends.set(id, (ends.get(id) ?? 0) + 1);
        step(b.cancel(id));
        break;
      }
      case 'set':
        step(b.setSetting(setting(c.priority, c.target, c.weight, c.slots)));
        break;
      case 'remove':
        step(b.removeSetting(c.priority, c.target));
        break;
      case 'up':
        step(b.setTargetUp(c.target, c.up));
        break;
      case 'tick':
        now += c.advance;
        step(b.tick(now));
        break;
      case 'reset':
        epoch++;
        step(b.reset());
        break;
    }
  }
  // Wind down: every running read ends, every deadline passes; then nothing is left anywhere.
  for (const [id, grants] of [...running]) {
    running.delete(id);
    step(b.release(grants));
  }
  now += 1000;
  step(b.tick(now));
  for (const [id, grants] of [...running]) {
    running.delete(id);
    step(b.release(grants));
  }
  expect(queued).toEqual([]);
  for (const r of reqs) expect(ends.get(r.id), `${r.id} ended ${ends.get(r.id) ?? 0} times`).toBe(1);
  for (const r of b.snapshot()) expect(r.taken, `${r.priority}/${r.target} still taken`).toBe(0);
  expect([...live.keys()], 'grants never given back').toEqual([]);
}

describe('properties over random histories of requests, releases, settings and time', () => {
  const settingsArb = fc.array(
    fc.record({ priority: fc.constantFrom(...PRIORITIES), target: fc.constantFrom(...TARGETS), weight: fc.integer({ min: 0, max: 3 }), slots: fc.integer({ min: 0, max: 3 }) }),
    { minLength: 1, maxLength: 6, size: 'max' },
  );

  it('keeps taken within the limit at admission and never negative, ends every request exactly once, and keeps FIFO', () => {
    fc.assert(
      fc.property(settingsArb, fc.integer({ min: 0, max: 4 }), fc.array(command, { minLength: 20, maxLength: 150, size: 'max' }), (initial, queueSize, commands) => {
        const unique = [...new Map(initial.map((s) => [`${s.priority}/${s.target}`, s])).values()];
        simulate(unique, queueSize, commands);
      }),
      { numRuns: 200 },
    );
  });
});
