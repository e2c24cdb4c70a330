// Issue 14, reader items 2 and 3: an eventual read keeps choosing readers with the last attempt
// plan (busy timeout growing to its maximum) until its own deadline, records failed answers as
// attempts, and ends with SHX_TIMEOUT when its deadline passes, whatever it is waiting for.
// The clock is simulated: a reader "takes" its busy timeout before saying BUSY.
import { describe, expect, it } from 'vitest';
import type { NodeInfo } from '../src/coordination/index.js';
import { ShardexError } from '../src/errors.js';
import { EventualRouter } from '../src/read/eventual.js';
import type { Clock } from '../src/distrib/deadline.js';
import { readDeadline } from '../src/read/read-deadline.js';
import { ReaderSelector } from '../src/read/index.js';
import type { EventualOptions } from '../src/read/snapshot-reader.js';

const reader = (name: string, group?: string): NodeInfo => ({ name, http: '', grpc: '', role: 'reader', ...(group !== undefined && { group }) });
const FIVE = ['r1', 'r2', 'r3', 'r4', 'r5'].map((n) => reader(n));
const PROFILES = [
  {
    isDefault: true,
    maxBusyTimeout: '5s',
    busyTimeoutMultiplier: 8,
    attemptPlans: [
      { servers: '3', busyTimeout: '33ms', salt: 'one' },
      { servers: '100%', busyTimeout: '33ms' },
    ],
  },
  { scanTypeActivations: ['patient'], group: 'later', maxBusyTimeout: '5m', busyTimeoutMultiplier: 8, timeToWaitForScanServers: '10m', attemptPlans: [{ servers: '100%', busyTimeout: '33ms' }] },
];

interface Call {
  readonly reader: string;
  readonly at: number;
  readonly eventual: EventualOptions;
}

/** A simulated clock: sleeping advances it (`late` ms more than asked, as a busy event loop's timers fire late). */
function clock(late = 0): Clock & { t: number } {
  const c = {
    t: 0,
    now: () => c.t,
    sleep: async (ms: number, signal?: AbortSignal) => {
      if (signal?.aborted) throw signal.reason;
      c.t += ms + late;
    },
  };
  return c;
}

function setup(answer: (c: Call, n: number) => unknown, readers: () => readonly NodeInfo[] = () => FIVE, late = 0) {
  const time = clock(late);
  const calls: Call[] = [];
  let leaderCalls = 0;
  const router = new EventualRouter({
    selector: new ReaderSelector(PROFILES, { random: () => 0 }),
    readers,
    call: async <T>(r: string, _body: object, eventual: EventualOptions) => {
      const c = { reader: r, at: time.t, eventual };
      calls.push(c);
      const out = answer(c, calls.length);
      if (out instanceof Error) throw out;
      return { snapshot: 7, result: out as T };
    },
  });
  const leader = async () => {
    leaderCalls++;
    return { node: 'leader', value: 'from-leader' };
  };
  const read = (opts: { timeoutMs?: number; signal?: AbortSignal; scanType?: string } = {}) =>
    router.run(
      { collection: 'c', shard: 'shard1', ...(opts.scanType !== undefined && { scanType: opts.scanType }) },
      {},
      leader,
      { deadline: readDeadline('eventual get of c/shard1', opts, time) },
    );
  return { read, calls, time, leaderCalls: () => leaderCalls };
}

/** A reader that keeps the request its whole busy timeout, then says BUSY. */
const busyAfterTimeout = (time: { t: number }) => (c: Call) => {
  time.t += c.eventual.busyTimeoutMs;
  return new ShardexError('SHX_BUSY', 'reader busy');
};

describe('retrying after BUSY', () => {
  it('keeps choosing past the plans, with the busy timeout growing to its maximum, until a reader serves', async () => {
    const s = setup((c, n) => (n <= 10 ? busyAfterTimeout(s.time)(c) : 'doc'));
    const r = await s.read({ timeoutMs: 60_000 });
    expect(r.value).toBe('doc');
    expect(r.servedBy).toMatchObject({ attempts: 11, busy: 10, fallback: false, snapshot: 7 });
    expect(s.leaderCalls()).toBe(0);
    // Plans 0 and 1, then the last plan with 33 ms x 8^k capped at maxBusyTimeout (5 s).
    expect(s.calls.map((c) => c.eventual.busyTimeoutMs)).toEqual([33, 33, 264, 2112, 5000, 5000, 5000, 5000, 5000, 5000, 5000]);
  });

  it('asks the first plan\'s candidates first, then readers not yet tried', async () => {
    const s = setup((c, n) => (n <= 4 ? busyAfterTimeout(s.time)(c) : 'doc'));
    await s.read({ timeoutMs: 60_000 });
    const tried = s.calls.map((c) => c.reader);
    expect(new Set(tried.slice(0, 5)).size).toBe(5);
  });

  it('ends with SHX_TIMEOUT at the read\'s deadline, never asking the leader while readers exist', async () => {
    const s = setup((c) => busyAfterTimeout(s.time)(c));
    const err = await s.read({ timeoutMs: 3000 }).catch((e) => e);
    expect(err).toBeInstanceOf(ShardexError);
    expect(err.code).toBe('SHX_TIMEOUT');
    expect(err.message).toMatch(/eventual get of c\/shard1 did not complete within 3000 ms/);
    expect(err.message).toMatch(/BUSY/);
    expect(s.leaderCalls()).toBe(0);
    // The last try's busy timeout is cut to what was left of the deadline.
    const last = s.calls.at(-1)!;
    expect(last.at + last.eventual.busyTimeoutMs).toBe(3000);
  });
});

describe('failed answers', () => {
  it('records a reader\'s failure as an attempt, backs off, and asks another reader', async () => {
    const s = setup((_c, n) => (n <= 2 ? new ShardexError('SHX_UNAVAILABLE', 'reader went away') : n === 3 ? new Error('socket hang up') : 'doc'));
    const r = await s.read({ timeoutMs: 60_000 });
    expect(r.value).toBe('doc');
    expect(r.servedBy).toMatchObject({ attempts: 4, busy: 0, errors: 3, fallback: false });
    expect(new Set(s.calls.slice(0, 3).map((c) => c.reader)).size).toBe(3);
    // The selector's error back-off: 100, 200, 400 ms before the 2nd, 3rd and 4th tries.
    expect(s.calls.map((c) => c.at)).toEqual([0, 100, 300, 700]);
  });

  it('throws the request\'s own fault (4xx) at once: every reader would say the same', async () => {
    const s = setup(() => new ShardexError('SHX_BAD_QUERY', 'unbalanced parenthesis'));
    await expect(s.read()).rejects.toMatchObject({ code: 'SHX_BAD_QUERY' });
    expect(s.calls).toHaveLength(1);
  });

  it('ends with SHX_TIMEOUT as soon as the next back-off would end past the deadline', async () => {
    const s = setup(() => new ShardexError('SHX_UNAVAILABLE', 'down'));
    const err = await s.read({ timeoutMs: 1000 }).catch((e) => e);
    expect(err.code).toBe('SHX_TIMEOUT');
    // Pauses of 100, 200 and 400 ms after the first three errors; the fourth (800 ms) would end
    // past the deadline, so the read ends at 700 ms with the last reader's failure as its cause.
    expect(s.time.t).toBe(700);
    expect(err.cause?.code).toBe('SHX_UNAVAILABLE');
    expect(s.leaderCalls()).toBe(0);
  });
});

describe('the read\'s deadline', () => {
  it('bounds the wait for a reader to appear (timeToWaitForScanServers longer than the deadline)', async () => {
    const s = setup(() => 'doc');
    const err = await s.read({ timeoutMs: 1500, scanType: 'patient' }).catch((e) => e);
    expect(err.code).toBe('SHX_TIMEOUT');
    expect(err.message).toMatch(/waiting for a snapshot reader in group 'later'/);
    expect(s.time.t).toBe(1500);
    expect(s.leaderCalls()).toBe(0);
  });

  it('says it was waiting for a reader when its deadline passes between two looks (a timer that fires late)', async () => {
    // Looks every 100 ms that each take 102: after 14 of them 101 ms are left, the 15th pause
    // (100 ms, within the deadline) ends past it, and the next look finds the time up.
    const s = setup(() => 'doc', () => [], 2);
    const err = await s.read({ timeoutMs: 14 * 102 + 101, scanType: 'patient' }).catch((e) => e);
    expect(err.code).toBe('SHX_TIMEOUT');
    expect(s.time.t).toBe(15 * 102);
    expect(err.message).toMatch(/waiting for a snapshot reader in group 'later'/);
  });

  it('serves from a reader that appears while the read waits', async () => {
    let looks = 0;
    // The reader registers while the read is polling (its fourth look).
    const s = setup(() => 'doc', () => (++looks >= 4 ? [reader('l1', 'later')] : []));
    const r = await s.read({ timeoutMs: 60_000, scanType: 'patient' });
    expect(r.servedBy).toMatchObject({ node: 'l1', fallback: false });
    expect(s.time.t).toBe(300);
  });

  it('falls back to the leader only when the group is empty and the wait is over', async () => {
    const s = setup(() => 'doc', () => []);
    const r = await s.read({ timeoutMs: 60_000 });
    expect(r.servedBy).toMatchObject({ node: 'leader', fallback: true });
    expect(r.servedBy.reason).toMatch(/no snapshot reader in group 'default'/);
  });

  it('stops waiting for a reader\'s answer when its deadline passes', async () => {
    const router = new EventualRouter({
      selector: new ReaderSelector(PROFILES),
      readers: () => FIVE,
      call: () => new Promise(() => undefined),
    });
    const deadline = readDeadline('eventual get of c/shard1', { timeoutMs: 30 });
    const err = await router.run({ collection: 'c', shard: 'shard1' }, {}, async () => ({ node: 'leader', value: 1 }), { deadline }).catch((e) => e);
    expect(err.code).toBe('SHX_TIMEOUT');
  });

  it('ends with the caller\'s reason when its signal aborts, and SHX_TIMEOUT for a timeout signal', async () => {
    const router = new EventualRouter({ selector: new ReaderSelector(PROFILES), readers: () => FIVE, call: () => new Promise(() => undefined) });
    const run = (signal: AbortSignal) =>
      router.run({ collection: 'c', shard: 'shard1' }, {}, async () => ({ node: 'leader', value: 1 }), { deadline: readDeadline('eventual get of c/shard1', { signal }) });
    const cancelled = new AbortController();
    const reason = new Error('caller cancelled');
    const p = run(cancelled.signal).catch((e) => e);
    cancelled.abort(reason);
    expect(await p).toBe(reason);
    const timedOut = await run(AbortSignal.timeout(20)).catch((e) => e);
    expect(timedOut.code).toBe('SHX_TIMEOUT');
  });
});
