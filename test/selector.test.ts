import { describe, expect, it } from 'vitest';
import { ShardexError } from '../src/errors.js';
import {
  DEFAULT_PROFILES,
  ReaderSelector,
  adaptiveRank,
  candidateCount,
  errorDelayMs,
  rendezvousCandidates,
  type Attempt,
  type ReaderInfo,
  type ReaderStats,
} from '../src/read/index.js';
import { mulberry32 } from '../src/corpus.js';

// ---- helpers ---------------------------------------------------------------------------


function addresses(n: number, prefix = 'reader'): string[] {
  return Array.from({ length: n }, (_, i) => `${prefix}-${i}:7700`);
}

function readers(n: number, group?: string, prefix = 'reader'): ReaderInfo[] {
  return addresses(n, prefix).map((address) => (group === undefined ? { address } : { address, group }));
}

/** `a` BUSY attempts by readers outside every group, so that they exclude nobody. */
function busyAttempts(a: number): Attempt[] {
  return Array.from({ length: a }, (_, i) => ({ reader: `gone-${i}:7700`, result: 'busy' as const }));
}

function sequence<T>(count: number, f: (a: number) => T): T[] {
  return Array.from({ length: count }, (_, a) => f(a));
}

function rejection(config: unknown): ShardexError {
  try {
    new ReaderSelector(config);
  } catch (err) {
    return err as ShardexError;
  }
  throw new Error('expected the configuration to be rejected');
}

function profile(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    isDefault: true,
    maxBusyTimeout: '5m',
    busyTimeoutMultiplier: 8,
    attemptPlans: [{ servers: '3', busyTimeout: '33ms' }],
    ...overrides,
  };
}

function plan(overrides: Record<string, unknown>): Record<string, unknown>[] {
  return [profile({ attemptPlans: [{ servers: '3', busyTimeout: '33ms', ...overrides }] })];
}

// Accumulo's class javadoc example, as JSON text.
const JAVADOC_EXAMPLE = JSON.stringify([
  {
    isDefault: true,
    maxBusyTimeout: '5m',
    busyTimeoutMultiplier: 4,
    attemptPlans: [
      { servers: '3', busyTimeout: '33ms' },
      { servers: '100%', busyTimeout: '100ms' },
    ],
  },
  {
    scanTypeActivations: ['slow'],
    maxBusyTimeout: '20m',
    busyTimeoutMultiplier: 8,
    group: 'lowcost',
    attemptPlans: [
      { servers: '1', busyTimeout: '10s' },
      { servers: '3', busyTimeout: '30s', salt: '42' },
      { servers: '9', busyTimeout: '60s', salt: '84' },
    ],
  },
]);

const THOUSAND = readers(1000);

// ---- the default configuration -----------------------------------------------------------

describe('default configuration', () => {
  const selector = new ReaderSelector();

  it("is Accumulo's default profile, going to the leaders at once when there is no reader", () => {
    expect(selector.profiles).toHaveLength(1);
    expect(selector.defaultProfile).toMatchObject({
      name: 'default',
      isDefault: true,
      group: 'default',
      maxBusyTimeoutMs: 300_000,
      busyTimeoutMultiplier: 8,
      timeToWaitMs: 0,
      plans: [
        { servers: { kind: 'count', count: 3 }, busyTimeoutMs: 33, salt: 'one' },
        { servers: { kind: 'count', count: 13 }, busyTimeoutMs: 33, salt: 'two' },
        { servers: { kind: 'percent', percent: 100 }, busyTimeoutMs: 33, salt: '' },
      ],
    });
  });

  it('is what DEFAULT_PROFILES says', () => {
    expect(new ReaderSelector(DEFAULT_PROFILES).profiles).toEqual(selector.profiles);
  });

  it('draws from 3, 13, then all 1,000 readers as attempts 0, 1, 2, ... are made', () => {
    const k = sequence(9, (a) => selector.select({ readers: THOUSAND, collection: 'c', shard: 'shard1', attempts: busyAttempts(a) }).candidates.length);
    expect(k).toEqual([3, 13, 1000, 1000, 1000, 1000, 1000, 1000, 1000]);
  });

  it('uses busy timeouts 33, 33, 33, then ×8 up to 5 minutes', () => {
    const busy = sequence(9, (a) => selector.select({ readers: THOUSAND, collection: 'c', shard: 'shard1', attempts: busyAttempts(a) }).busyTimeoutMs);
    expect(busy).toEqual([33, 33, 33, 264, 2112, 16896, 135168, 300000, 300000]);
  });

  it('reports the attempt and the plan used', () => {
    const picks = sequence(5, (a) => selector.select({ readers: THOUSAND, collection: 'c', shard: 'shard1', attempts: busyAttempts(a) }));
    expect(picks.map((p) => [p.attempt, p.plan])).toEqual([[0, 0], [1, 1], [2, 2], [3, 2], [4, 2]]);
  });
});

// ---- Accumulo's javadoc example -----------------------------------------------------------

describe("Accumulo's javadoc example", () => {
  const selector = new ReaderSelector(JAVADOC_EXAMPLE);
  const lowcost = readers(1000, 'lowcost', 'cheap');
  const everyone = [...THOUSAND, ...lowcost];

  it('default profile: draws from 3, then all 1,000 readers', () => {
    const k = sequence(9, (a) => selector.select({ readers: everyone, collection: 'c', shard: 'shard1', attempts: busyAttempts(a) }).candidates.length);
    expect(k).toEqual([3, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000]);
  });

  it('default profile: busy timeouts 33, 100, then ×4 up to 5 minutes', () => {
    const busy = sequence(9, (a) => selector.select({ readers: everyone, collection: 'c', shard: 'shard1', attempts: busyAttempts(a) }).busyTimeoutMs);
    expect(busy).toEqual([33, 100, 400, 1600, 6400, 25600, 102400, 300000, 300000]);
  });

  it('slow profile: draws from 1, 3, then 9 readers', () => {
    const k = sequence(7, (a) => selector.select({ readers: everyone, collection: 'c', shard: 'shard1', scanType: 'slow', attempts: busyAttempts(a) }).candidates.length);
    expect(k).toEqual([1, 3, 9, 9, 9, 9, 9]);
  });

  it('slow profile: busy timeouts 10 s, 30 s, 60 s, then ×8 up to 20 minutes', () => {
    const busy = sequence(7, (a) => selector.select({ readers: everyone, collection: 'c', shard: 'shard1', scanType: 'slow', attempts: busyAttempts(a) }).busyTimeoutMs);
    expect(busy).toEqual([10000, 30000, 60000, 480000, 1200000, 1200000, 1200000]);
  });

  it('slow profile: uses only readers of the lowcost group', () => {
    const cheap = new Set(lowcost.map((r) => r.address));
    for (let a = 0; a < 4; a++) {
      const pick = selector.select({ readers: everyone, collection: 'c', shard: 'shard1', scanType: 'slow', attempts: busyAttempts(a) });
      expect(pick.group).toBe('lowcost');
      expect(pick.candidates.every((address) => cheap.has(address))).toBe(true);
    }
  });

  it('slow profile: attempts past the third keep the same 9 readers', () => {
    const sets = sequence(6, (a) => selector.select({ readers: everyone, collection: 'c', shard: 'shard1', scanType: 'slow', attempts: busyAttempts(a) }).candidates);
    for (const later of sets.slice(3)) expect(later).toEqual(sets[2]);
  });

  it("slow profile: a salted plan's set need not contain the unsalted plan's reader", () => {
    const outside = sequence(100, (i) => {
      const input = { readers: lowcost, collection: 'c', shard: `shard${i}`, scanType: 'slow' };
      const first = selector.select(input).candidates[0]!;
      return !selector.select({ ...input, attempts: busyAttempts(1) }).candidates.includes(first);
    });
    expect(outside.some(Boolean)).toBe(true);
  });
});

// ---- profiles and groups -------------------------------------------------------------------

describe('profile choice', () => {
  const selector = new ReaderSelector(JAVADOC_EXAMPLE);
  const everyone = [...readers(5), ...readers(5, 'lowcost', 'cheap')];

  it('takes the profile that lists the scan type', () => {
    expect(selector.select({ readers: everyone, collection: 'c', shard: 'shard1', scanType: 'slow' }).profile).toBe('slow');
  });

  it('takes the default profile when no scan type is given', () => {
    expect(selector.select({ readers: everyone, collection: 'c', shard: 'shard1' }).profile).toBe('default');
  });

  it('takes the default profile for an unknown scan type', () => {
    expect(selector.select({ readers: everyone, collection: 'c', shard: 'shard1', scanType: 'mega' }).profile).toBe('default');
  });

  it('accepts the default profile anywhere in the list', () => {
    const config = [
      profile({ isDefault: false, scanTypeActivations: ['slow'], attemptPlans: [{ servers: '1', busyTimeout: '1s' }] }),
      profile(),
    ];
    const picked = new ReaderSelector(config).select({ readers: everyone, collection: 'c', shard: 'shard1' });
    expect(picked.profile).toBe('default');
    expect(picked.busyTimeoutMs).toBe(33);
  });
});

describe('reader groups', () => {
  const selector = new ReaderSelector(JAVADOC_EXAMPLE);

  it('counts readers registered without a group in the default group', () => {
    const mixed = [...readers(4), ...readers(6, 'lowcost', 'cheap')];
    const pick = selector.select({ readers: mixed, collection: 'c', shard: 'shard1', attempts: busyAttempts(1) });
    expect(pick.group).toBe('default');
    expect([...pick.candidates].sort()).toEqual(addresses(4).sort());
  });

  it('ignores readers of other groups', () => {
    const pick = selector.select({ readers: readers(50, 'other'), collection: 'c', shard: 'shard1' });
    expect(pick.reader).toBeUndefined();
  });

  it('with no reader in the group, names none and says to go to the leaders at once by default', () => {
    const pick = new ReaderSelector().select({ readers: [], collection: 'c', shard: 'shard1', attempts: [{ reader: 'gone:1', result: 'error' }] });
    expect(pick).toMatchObject({ reader: undefined, candidates: [], timeToWaitMs: 0, busyTimeoutMs: 0, delayMs: 0 });
  });

  it("with no reader in the group, reports the profile's time to wait for one", () => {
    const config = [profile({ timeToWaitForScanServers: '2m' })];
    const pick = new ReaderSelector(config).select({ readers: [], collection: 'c', shard: 'shard1' });
    expect(pick.reader).toBeUndefined();
    expect(pick.timeToWaitMs).toBe(120_000);
  });

  it('counts a reader listed twice once', () => {
    const twice = [...readers(2), ...readers(2)];
    const pick = new ReaderSelector().select({ readers: twice, collection: 'c', shard: 'shard1', attempts: busyAttempts(2) });
    expect(pick.candidates).toHaveLength(2);
  });
});

// ---- how many candidates ---------------------------------------------------------------------

describe('candidate count', () => {
  it('takes N readers, or all of them when the group is smaller', () => {
    expect(candidateCount({ kind: 'count', count: 13 }, 1000)).toBe(13);
    expect(candidateCount({ kind: 'count', count: 13 }, 6)).toBe(6);
  });

  it('takes P% of the group, rounded half up', () => {
    expect(candidateCount({ kind: 'percent', percent: 50 }, 5)).toBe(3);
    expect(candidateCount({ kind: 'percent', percent: 10 }, 27)).toBe(3);
    expect(candidateCount({ kind: 'percent', percent: 12.5 }, 1000)).toBe(125);
  });

  it('takes at least one reader for a small percentage', () => {
    expect(candidateCount({ kind: 'percent', percent: 1 }, 10)).toBe(1);
  });

  it('applies the rule to the live group (27 readers: 3, 13, 27; 6 readers: 3, 6, 6)', () => {
    const selector = new ReaderSelector();
    const k = (n: number) => sequence(3, (a) => selector.select({ readers: readers(n), collection: 'c', shard: 'shard1', attempts: busyAttempts(a) }).candidates.length);
    expect(k(27)).toEqual([3, 13, 27]);
    expect(k(6)).toEqual([3, 6, 6]);
  });
});

// ---- rendezvous hashing ----------------------------------------------------------------------

describe('rendezvous candidate set', () => {
  const fifty = addresses(50);

  it('is the same whatever order the readers are listed in', () => {
    const shuffled = [...fifty].reverse();
    for (let i = 0; i < 100; i++) {
      const target = { collection: 'c', shard: `shard${i}`, salt: 'one' };
      expect(rendezvousCandidates(shuffled, target, 3)).toEqual(rendezvousCandidates(fifty, target, 3));
    }
  });

  it('is computed alike by independent selector instances', () => {
    const one = new ReaderSelector(undefined, { random: mulberry32(1) });
    const two = new ReaderSelector(undefined, { random: mulberry32(2) });
    const input = (i: number, a: number) => ({ readers: readers(50), collection: 'c', shard: `shard${i}`, attempts: busyAttempts(a) });
    for (let i = 0; i < 200; i++) {
      for (let a = 0; a < 3; a++) expect(one.select(input(i, a)).candidates).toEqual(two.select(input(i, a)).candidates);
    }
  });

  it('nests the sets of one salt: a smaller set is inside every larger one', () => {
    for (let i = 0; i < 100; i++) {
      const target = { collection: 'c', shard: `shard${i}` };
      let smaller: string[] = [];
      for (let k = 1; k <= 20; k++) {
        const set = rendezvousCandidates(fifty, target, k);
        expect(set).toHaveLength(k);
        expect(set.slice(0, smaller.length)).toEqual(smaller);
        smaller = set;
      }
    }
  });

  it('nests the sets of attempt plans without salt', () => {
    const config = [profile({ attemptPlans: [{ servers: '1', busyTimeout: '1s' }, { servers: '3', busyTimeout: '1s' }, { servers: '9', busyTimeout: '1s' }] })];
    const selector = new ReaderSelector(config);
    for (let i = 0; i < 100; i++) {
      const sets = sequence(3, (a) => selector.select({ readers: readers(100), collection: 'c', shard: `shard${i}`, attempts: busyAttempts(a) }).candidates);
      expect(sets[1]).toEqual(expect.arrayContaining([...sets[0]!]));
      expect(sets[2]).toEqual(expect.arrayContaining([...sets[1]!]));
    }
  });

  it('stays the same when a reader outside the set goes away', () => {
    for (let i = 0; i < 100; i++) {
      const target = { collection: 'c', shard: `shard${i}`, salt: 'one' };
      const before = rendezvousCandidates(fifty, target, 3);
      const outsider = fifty.find((address) => !before.includes(address))!;
      expect(rendezvousCandidates(fifty.filter((a) => a !== outsider), target, 3)).toEqual(before);
    }
  });

  it('stays the same through the selector when a reader outside the set goes away', () => {
    const selector = new ReaderSelector();
    const all = readers(50);
    const before = selector.select({ readers: all, collection: 'c', shard: 'shard7' }).candidates;
    const fewer = all.filter((r) => r.address !== all.find((x) => !before.includes(x.address))!.address);
    expect(selector.select({ readers: fewer, collection: 'c', shard: 'shard7' }).candidates).toEqual(before);
  });

  it('changes by at most one member when a reader joins', () => {
    for (let i = 0; i < 100; i++) {
      const target = { collection: 'c', shard: `shard${i}`, salt: 'one' };
      const before = rendezvousCandidates(fifty, target, 3);
      const after = rendezvousCandidates([...fifty, 'newcomer:7700'], target, 3);
      expect(after.filter((address) => !before.includes(address)).length).toBeLessThanOrEqual(1);
    }
  });

  it('loses a departed member from the set and takes the next reader in hash order', () => {
    const target = { collection: 'c', shard: 'shard3' };
    const four = rendezvousCandidates(fifty, target, 4);
    const gone = four[0]!;
    expect(rendezvousCandidates(fifty.filter((a) => a !== gone), target, 3)).toEqual(four.slice(1));
  });

  it('differs between salts', () => {
    const differ = sequence(100, (i) => {
      const one = rendezvousCandidates(fifty, { collection: 'c', shard: `shard${i}`, salt: 'one' }, 3);
      const two = rendezvousCandidates(fifty, { collection: 'c', shard: `shard${i}`, salt: 'two' }, 3);
      return one.join() !== two.join();
    });
    expect(differ.filter(Boolean).length).toBeGreaterThan(90);
  });

  it('differs between collections for the same shard name', () => {
    const differ = sequence(100, (i) => {
      const a = rendezvousCandidates(fifty, { collection: 'books', shard: `shard${i}` }, 3);
      const b = rendezvousCandidates(fifty, { collection: 'films', shard: `shard${i}` }, 3);
      return a.join() !== b.join();
    });
    expect(differ.filter(Boolean).length).toBeGreaterThan(90);
  });

  it('is the whole group, ordered by address, when k reaches the group size', () => {
    expect(rendezvousCandidates(['b:1', 'c:1', 'a:1'], { collection: 'c', shard: 'shard1' }, 3)).toEqual(['a:1', 'b:1', 'c:1']);
    expect(rendezvousCandidates(['b:1', 'a:1'], { collection: 'c', shard: 'shard1' }, 5)).toEqual(['a:1', 'b:1']);
  });

  it('spreads 10,000 shards over 20 readers: 100 picks per shard touch exactly 3 readers, all 20 used, each within 10% of the mean', () => {
    const selector = new ReaderSelector(undefined, { random: mulberry32(42) });
    const twenty = readers(20);
    const served = new Map<string, number>();
    const perShard: number[] = [];
    for (let s = 0; s < 10_000; s++) {
      const touched = new Set<string>();
      for (let p = 0; p < 100; p++) {
        const reader = selector.select({ readers: twenty, collection: 'c', shard: `shard${s}` }).reader!;
        touched.add(reader);
        served.set(reader, (served.get(reader) ?? 0) + 1);
      }
      perShard.push(touched.size);
    }
    expect(perShard.every((n) => n === 3)).toBe(true);
    expect(served.size).toBe(20);
    const mean = (10_000 * 100) / 20;
    for (const count of served.values()) expect(Math.abs(count - mean) / mean).toBeLessThan(0.1);
  });
});

// ---- the reader set between calls -------------------------------------------------------------

describe('reader set between calls', () => {
  it('answers after a membership change as a fresh selector would', () => {
    const selector = new ReaderSelector();
    const before = readers(40);
    const after = [...before.slice(5), ...readers(5, undefined, 'late')];
    for (let i = 0; i < 50; i++) selector.select({ readers: before, collection: 'c', shard: `shard${i}` });
    for (let i = 0; i < 50; i++) {
      const input = { readers: after, collection: 'c', shard: `shard${i}` };
      expect(selector.select(input).candidates).toEqual(new ReaderSelector().select(input).candidates);
    }
  });

  it('notices a reader list that the caller changed in place', () => {
    const selector = new ReaderSelector();
    const list = readers(2);
    expect(selector.select({ readers: list, collection: 'c', shard: 'shard1' }).candidates).toHaveLength(2);
    list.push({ address: 'late:7700' });
    expect(selector.select({ readers: list, collection: 'c', shard: 'shard1' }).candidates).toContain('late:7700');
  });

  it('gives the same answers when it may remember almost nothing', () => {
    const tiny = new ReaderSelector(undefined, { cacheLimit: 3 });
    const roomy = new ReaderSelector();
    for (let round = 0; round < 2; round++) {
      for (let i = 0; i < 30; i++) {
        const input = { readers: THOUSAND, collection: 'c', shard: `shard${i}`, attempts: busyAttempts(i % 3) };
        expect(tiny.select(input).candidates).toEqual(roomy.select(input).candidates);
      }
    }
  });
});

// ---- retries -----------------------------------------------------------------------------------

describe('retries within one request', () => {
  const config = [profile({ attemptPlans: [{ servers: '3', busyTimeout: '33ms' }] })];
  const group = readers(30);
  const base = { readers: group, collection: 'c', shard: 'shard9' };
  const set = new ReaderSelector(config).select(base).candidates;

  it('does not pick a reader that answered BUSY for this shard', () => {
    const selector = new ReaderSelector(config, { random: mulberry32(7) });
    for (let i = 0; i < 50; i++) {
      const pick = selector.select({ ...base, attempts: [{ reader: set[0]!, result: 'busy' }] });
      expect(pick.reader).not.toBe(set[0]);
      expect(pick.choices).toEqual(set.slice(1));
    }
  });

  it('does not pick a reader that failed with an error for this shard', () => {
    const selector = new ReaderSelector(config, { random: mulberry32(7) });
    const attempts: Attempt[] = [{ reader: set[0]!, result: 'error' }, { reader: set[2]!, result: 'busy' }];
    for (let i = 0; i < 20; i++) expect(selector.select({ ...base, attempts }).reader).toBe(set[1]);
  });

  it('picks among the whole set again once every candidate was tried', () => {
    const selector = new ReaderSelector(config, { random: mulberry32(7) });
    const attempts: Attempt[] = set.map((reader) => ({ reader, result: 'busy' }));
    const picks = new Set(sequence(100, () => selector.select({ ...base, attempts }).reader));
    expect([...picks].sort()).toEqual([...set].sort());
  });

  it('is not affected by tries of readers outside the set', () => {
    const outside = group.map((r) => r.address).filter((a) => !set.includes(a));
    const attempts: Attempt[] = outside.map((reader) => ({ reader, result: 'busy' }));
    const pick = new ReaderSelector(config).select({ ...base, attempts });
    expect(pick.choices).toEqual(set);
  });

  it('picks uniformly at random among the remaining candidates', () => {
    const selector = new ReaderSelector(config, { random: mulberry32(11) });
    const counts = new Map<string, number>();
    for (let i = 0; i < 30_000; i++) {
      const reader = selector.select(base).reader!;
      counts.set(reader, (counts.get(reader) ?? 0) + 1);
    }
    expect([...counts.keys()].sort()).toEqual([...set].sort());
    for (const count of counts.values()) expect(Math.abs(count - 10_000)).toBeLessThan(500);
  });

  it('maps the injected random number onto the choices in hash order', () => {
    expect(new ReaderSelector(config, { random: () => 0 }).select(base).reader).toBe(set[0]);
    expect(new ReaderSelector(config, { random: () => 0.5 }).select(base).reader).toBe(set[1]);
    expect(new ReaderSelector(config, { random: () => 0.9999999 }).select(base).reader).toBe(set[2]);
  });
});

// ---- timing decisions ------------------------------------------------------------------------

describe('busy timeouts', () => {
  it("keeps a plan's own timeout even above the maximum", () => {
    const config = [profile({ maxBusyTimeout: '1m', attemptPlans: [{ servers: '3', busyTimeout: '10m' }] })];
    const selector = new ReaderSelector(config);
    const busy = sequence(2, (a) => selector.select({ readers: THOUSAND, collection: 'c', shard: 'shard1', attempts: busyAttempts(a) }).busyTimeoutMs);
    expect(busy).toEqual([600_000, 60_000]);
  });

  it('stays at the maximum however many attempts were made', () => {
    const pick = new ReaderSelector().select({ readers: THOUSAND, collection: 'c', shard: 'shard1', attempts: busyAttempts(2000) });
    expect(pick.busyTimeoutMs).toBe(300_000);
  });
});

describe('delay after errors', () => {
  it('is min(30 s, 100 ms · 2^(e-1)) after e errors', () => {
    expect(sequence(12, (e) => errorDelayMs(e))).toEqual([0, 100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
  });

  it('is zero when no attempt failed', () => {
    expect(new ReaderSelector().select({ readers: THOUSAND, collection: 'c', shard: 'shard1' }).delayMs).toBe(0);
  });

  it('does not grow with BUSY answers', () => {
    expect(new ReaderSelector().select({ readers: THOUSAND, collection: 'c', shard: 'shard1', attempts: busyAttempts(5) }).delayMs).toBe(0);
  });

  it('counts only the errors among the attempts', () => {
    const attempts: Attempt[] = [
      { reader: 'x:1', result: 'error' },
      { reader: 'y:1', result: 'busy' },
      { reader: 'z:1', result: 'error' },
      { reader: 'w:1', result: 'busy' },
    ];
    const pick = new ReaderSelector().select({ readers: THOUSAND, collection: 'c', shard: 'shard1', attempts });
    // Two errors: at most 200 ms, jittered down by up to 20%.
    expect(pick.delayMs).toBeGreaterThanOrEqual(160);
    expect(pick.delayMs).toBeLessThanOrEqual(200);
    expect(pick.attempt).toBe(4);
  });

  it('jitters the wait after errors with its random (clients that failed together spread out)', () => {
    const attempts: Attempt[] = [{ reader: 'x:1', result: 'error' }, { reader: 'z:1', result: 'error' }, { reader: 'y:1', result: 'error' }];
    const delayWith = (r: number): number => new ReaderSelector(undefined, { random: () => r }).select({ readers: THOUSAND, collection: 'c', shard: 'shard1', attempts }).delayMs;
    expect(delayWith(0)).toBe(400);
    expect(delayWith(0.5)).toBe(360);
    expect(delayWith(0.999)).toBe(320);
  });
});

// ---- adaptive ordering (optional) -----------------------------------------------------------------

describe('adaptive ordering within the candidate set', () => {
  const config = [profile()];
  const base = { readers: readers(30), collection: 'c', shard: 'shard2' };
  const set = new ReaderSelector(config).select(base).candidates;
  const fast: ReaderStats = { responseMs: 5, serviceMs: 2, queueSize: 0, outstanding: 0 };
  const slow: ReaderStats = { responseMs: 80, serviceMs: 40, queueSize: 6, outstanding: 2 };
  const stats = new Map<string, ReaderStats>([
    [set[0]!, slow],
    [set[1]!, fast],
    [set[2]!, slow],
  ]);

  it('ranks by the ARS formula R − S + (1 + outstanding·clients + q)³·S', () => {
    expect(adaptiveRank({ responseMs: 10, serviceMs: 2, queueSize: 1.7, outstanding: 1 }, 3)).toBe(10 - 2 + (1 + 3 + 1) ** 3 * 2);
  });

  it('is off by default: statistics are ignored', () => {
    expect(new ReaderSelector(config, { random: () => 0 }).select({ ...base, stats }).reader).toBe(set[0]);
  });

  it('when on, picks the best-ranked candidate', () => {
    const selector = new ReaderSelector(config, { adaptive: true, random: mulberry32(3) });
    for (let i = 0; i < 20; i++) expect(selector.select({ ...base, stats }).reader).toBe(set[1]);
  });

  it('when on, still picks only within the candidate set', () => {
    const outsider = base.readers.map((r) => r.address).find((a) => !set.includes(a))!;
    const withOutsider = new Map([...stats, [outsider, { responseMs: 0, serviceMs: 0, queueSize: 0, outstanding: 0 }]]);
    const pick = new ReaderSelector(config, { adaptive: true }).select({ ...base, stats: withOutsider });
    expect(pick.reader).toBe(set[1]);
  });

  it('when on, tries an unmeasured candidate first', () => {
    const partial = new Map<string, ReaderStats>([[set[0]!, fast], [set[1]!, fast]]);
    expect(new ReaderSelector(config, { adaptive: true }).select({ ...base, stats: partial }).reader).toBe(set[2]);
  });

  it('when on, still skips readers already tried', () => {
    const attempts: Attempt[] = [{ reader: set[1]!, result: 'busy' }];
    const pick = new ReaderSelector(config, { adaptive: true, random: () => 0 }).select({ ...base, stats, attempts });
    expect(pick.reader).not.toBe(set[1]);
  });
});

// ---- configuration validation ---------------------------------------------------------------

describe('configuration', () => {
  it('accepts JSON text and the parsed value alike', () => {
    expect(new ReaderSelector(JAVADOC_EXAMPLE).profiles).toEqual(new ReaderSelector(JSON.parse(JAVADOC_EXAMPLE)).profiles);
  });

  it('defaults group to "default", salt to "", scan types to none and the wait to 0', () => {
    const [only] = new ReaderSelector([profile()]).profiles;
    expect(only).toMatchObject({ group: 'default', scanTypes: [], timeToWaitMs: 0, plans: [{ salt: '' }] });
  });

  it('accepts a JSON number as a count of readers', () => {
    const [only] = new ReaderSelector(plan({ servers: 4 })).profiles;
    expect(only!.plans[0]!.servers).toEqual({ kind: 'count', count: 4 });
  });

  it('accepts a fractional percentage', () => {
    const [only] = new ReaderSelector(plan({ servers: '12.5%' })).profiles;
    expect(only!.plans[0]!.servers).toEqual({ kind: 'percent', percent: 12.5 });
  });

  it('rejects with SHX_BAD_CONFIG, a 400', () => {
    const err = rejection([]);
    expect(err).toBeInstanceOf(ShardexError);
    expect(err.code).toBe('SHX_BAD_CONFIG');
    expect(err.status).toBe(400);
  });

  it.each<[string, unknown, RegExp]>([
    ['text that is not JSON', '[{', /not valid JSON/],
    ['a value that is not a list', { isDefault: true }, /profiles: expected a JSON array of profiles/],
    ['an empty list', [], /profiles: empty/],
    ['a profile that is not an object', [profile(), 3], /profiles\[1\]: expected an object, got 3/],
    ['no default profile', [profile({ isDefault: false })], /no default profile; exactly one profile must have "isDefault": true/],
    ['two default profiles', [profile(), profile()], /more than one default profile \(profiles\[0\], profiles\[1\]\)/],
    [
      'a scan type in two profiles',
      [profile({ scanTypeActivations: ['mega'] }), profile({ isDefault: false, scanTypeActivations: ['mega'] })],
      /profiles\[1\]\.scanTypeActivations: scan type "mega" already activates profiles\[0\]/,
    ],
    ['a scan type listed twice', [profile({ scanTypeActivations: ['mega', 'mega'] })], /scan type "mega" is listed twice/],
    ['scan types that are not strings', [profile({ scanTypeActivations: 'slow' })], /profiles\[0\]\.scanTypeActivations: expected a list of non-empty strings/],
    ['an unknown profile key', [profile({ abc: 1 })], /profiles\[0\]: unknown key "abc"/],
    ['a misspelt profile key', [profile({ maxBusyTimeOut: '5m' })], /profiles\[0\]: unknown key "maxBusyTimeOut"/],
    ['an unknown plan key', plan({ server: '3' }), /profiles\[0\]\.attemptPlans\[0\]: unknown key "server"/],
    ['isDefault that is not a boolean', [profile({ isDefault: 'yes' })], /profiles\[0\]\.isDefault: expected true or false, got "yes"/],
    ['servers "0"', plan({ servers: '0' }), /attemptPlans\[0\]\.servers: the number of readers must be positive, got "0"/],
    ['servers "-3"', plan({ servers: '-3' }), /servers: the number of readers must be positive, got "-3"/],
    ['servers "0%"', plan({ servers: '0%' }), /servers: a percentage must be above 0% and at most 100%, got "0%"/],
    ['servers over "100%"', plan({ servers: '101%' }), /servers: a percentage must be above 0% and at most 100%, got "101%"/],
    ['servers "abc"', plan({ servers: 'abc' }), /servers: not a number: "abc"/],
    ['servers "NaN%"', plan({ servers: 'NaN%' }), /servers: not a number: "NaN%"/],
    ['servers "Infinity%"', plan({ servers: 'Infinity%' }), /servers: not a number: "Infinity%"/],
    ['servers "1.5"', plan({ servers: '1.5' }), /servers: not a whole number: "1.5"/],
    ['servers missing', [profile({ attemptPlans: [{ busyTimeout: '33ms' }] })], /attemptPlans\[0\]\.servers: missing/],
    ['servers of the wrong type', plan({ servers: true }), /servers: expected a count such as "3" or a percentage/],
    ['a missing multiplier', [{ isDefault: true, maxBusyTimeout: '5m', attemptPlans: [{ servers: '3', busyTimeout: '33ms' }] }], /profiles\[0\]\.busyTimeoutMultiplier: missing/],
    ['a zero multiplier', [profile({ busyTimeoutMultiplier: 0 })], /busyTimeoutMultiplier: must be a whole number >= 1, got 0/],
    ['a negative multiplier', [profile({ busyTimeoutMultiplier: -2 })], /busyTimeoutMultiplier: must be a whole number >= 1, got -2/],
    ['a fractional multiplier', [profile({ busyTimeoutMultiplier: 1.5 })], /busyTimeoutMultiplier: must be a whole number >= 1, got 1.5/],
    ['a multiplier given as text', [profile({ busyTimeoutMultiplier: '8' })], /busyTimeoutMultiplier: must be a whole number >= 1, got "8"/],
    ['a missing maximum busy timeout', [profile({ maxBusyTimeout: undefined })], /profiles\[0\]\.maxBusyTimeout: missing/],
    ['a bad maximum busy timeout', [profile({ maxBusyTimeout: '5 minutes' })], /profiles\[0\]\.maxBusyTimeout: bad duration "5 minutes"/],
    ['a bad plan busy timeout', plan({ busyTimeout: '-1s' }), /attemptPlans\[0\]\.busyTimeout: bad duration "-1s"/],
    ['a missing plan busy timeout', [profile({ attemptPlans: [{ servers: '3' }] })], /attemptPlans\[0\]\.busyTimeout: missing/],
    ['a bad time to wait for readers', [profile({ timeToWaitForScanServers: 'soon' })], /timeToWaitForScanServers: bad duration "soon"/],
    ['an empty group', [profile({ group: '' })], /profiles\[0\]\.group: expected a non-empty string, got ""/],
    ['a group that is not a string', [profile({ group: 7 })], /profiles\[0\]\.group: expected a non-empty string, got 7/],
    ['missing attempt plans', [profile({ attemptPlans: undefined })], /profiles\[0\]\.attemptPlans: missing/],
    ['no attempt plans', [profile({ attemptPlans: [] })], /profiles\[0\]\.attemptPlans: expected a non-empty list/],
    ['a plan that is not an object', [profile({ attemptPlans: ['3'] })], /attemptPlans\[0\]: expected an object, got "3"/],
    ['a salt that is not a string', plan({ salt: 42 }), /attemptPlans\[0\]\.salt: expected a string, got 42/],
    ['a salt with a lone surrogate', plan({ salt: 'a\uD800' }), /attemptPlans\[0\]\.salt: not well-formed Unicode/],
  ])('rejects %s', (_, config, message) => {
    expect(rejection(config).message).toMatch(message);
  });

  it('names every problem at once', () => {
    const err = rejection([profile({ abc: 1, busyTimeoutMultiplier: 0, attemptPlans: [{ servers: '0%', busyTimeout: 'x' }] }), profile()]);
    expect(err.details?.problems).toHaveLength(5);
    for (const part of ['unknown key "abc"', 'busyTimeoutMultiplier', 'servers', 'busyTimeout: bad duration', 'more than one default']) {
      expect(err.message).toContain(part);
    }
  });
});
