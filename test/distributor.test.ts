// The command distributor, against a fake transport (no network): the in-flight bound,
// buffering by op count and by linger, retries of transient failures only, one outcome per
// update, and what close() does to work that has not been sent.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CommandDistributor, type UpdateOutcome, type UpdateTransport } from '../src/distrib/distributor.js';
import type { ShardUpdate, ShardUpdateResult } from '../src/transport/index.js';
import { ShardexError, type ErrorCode } from '../src/errors.js';
import { Deadline } from '../src/distrib/retry.js';

const ok = (rf = 1): UpdateOutcome => ({ ok: true, result: { rf } });
const fail = (code: ErrorCode, message = `failed with ${code}`): UpdateOutcome => ({ ok: false, error: new ShardexError(code, message) });

function update(id: string, ops = 1): ShardUpdate {
  return {
    collection: 'c',
    shard: 'shard1',
    phase: 'FROMLEADER',
    epoch: 1,
    ops: Array.from({ length: ops }, (_, i) => ({ id: ops === 1 ? id : `${id}.${i}`, v: i + 1, doc: { id } })),
    minRf: 1,
    from: 'leader',
  };
}

/** First id of an update: the tests name updates by it. */
const nameOf = (u: ShardUpdate): string => u.ops[0]?.id.split('.')[0] ?? '?';

interface Frame {
  readonly dest: string;
  readonly ids: string[];
}

/**
 * A transport whose answers are scripted per update name and per attempt. `answer` returns
 * the outcome of one update on its n-th delivery (1-based), or throws to fail the frame.
 */
class FakeTransport implements UpdateTransport {
  readonly frames: Frame[] = [];
  readonly deliveries = new Map<string, number>();
  active = 0;
  maxActive = 0;
  /** When set, each send waits for this many macrotask turns before answering. */
  turns = 0;

  constructor(private readonly answer: (name: string, attempt: number, dest: string) => UpdateOutcome = () => ok()) {}

  attempts(name: string): number {
    return this.deliveries.get(name) ?? 0;
  }

  async send(dest: string, updates: readonly ShardUpdate[]): Promise<UpdateOutcome[]> {
    this.active++;
    this.maxActive = Math.max(this.maxActive, this.active);
    try {
      this.frames.push({ dest, ids: updates.map(nameOf) });
      for (let i = 0; i < this.turns; i++) await new Promise((r) => setImmediate(r));
      return updates.map((u) => {
        const name = nameOf(u);
        const n = this.attempts(name) + 1;
        this.deliveries.set(name, n);
        return this.answer(name, n, dest);
      });
    } finally {
      this.active--;
    }
  }
}

/** A transport whose whole frame fails with `err` on every send. */
class ThrowingTransport implements UpdateTransport {
  sends = 0;
  constructor(private readonly err: () => unknown) {}
  async send(): Promise<UpdateOutcome[]> {
    this.sends++;
    throw this.err();
  }
}

const instant = (): number => 0;
const distributors: CommandDistributor[] = [];

function distributor(transport: UpdateTransport, opts: { maxInFlight?: number; flushOps?: number; lingerMs?: number } = {}): CommandDistributor {
  const d = new CommandDistributor({ transport, backoff: instant, flushOps: 1, lingerMs: 0, ...opts });
  distributors.push(d);
  return d;
}

afterEach(() => {
  vi.useRealTimers();
  for (const d of distributors.splice(0)) d.close();
});

async function rejection(p: Promise<unknown>): Promise<ShardexError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(ShardexError);
    return err as ShardexError;
  }
  throw new Error('expected the promise to reject');
}

describe('in-flight bound', () => {
  it('never has more requests in flight than maxInFlight, under many submits to many destinations', async () => {
    const t = new FakeTransport();
    t.turns = 3;
    const d = distributor(t, { maxInFlight: 4 });
    const submits: Promise<ShardUpdateResult>[] = [];
    for (let i = 0; i < 300; i++) submits.push(d.submit(`node${i % 25}`, update(`u${i}`), { maxRetries: 0 }));
    await Promise.all(submits);
    expect(t.frames.length).toBeGreaterThanOrEqual(25);
    expect(t.maxActive).toBe(4);
    expect(d.stats.maxInFlightSeen).toBe(4);
    expect(d.stats.inFlight).toBe(0);
  });

  it('keeps the bound while retries are re-queued among fresh submits', async () => {
    // Every third update fails transiently twice before it succeeds.
    const t = new FakeTransport((name, attempt) => (Number(name.slice(1)) % 3 === 0 && attempt <= 2 ? fail('SHX_UNAVAILABLE') : ok()));
    t.turns = 2;
    const d = distributor(t, { maxInFlight: 3 });
    const submits: Promise<ShardUpdateResult>[] = [];
    for (let i = 0; i < 150; i++) submits.push(d.submit(`node${i % 10}`, update(`u${i}`), { maxRetries: 2 }));
    await Promise.all(submits);
    expect(t.maxActive).toBe(3);
    expect(d.stats.retried).toBe(50 * 2);
  });

  it('with a bound of 1 sends one request at a time', async () => {
    const t = new FakeTransport();
    t.turns = 1;
    const d = distributor(t, { maxInFlight: 1 });
    await Promise.all(Array.from({ length: 40 }, (_, i) => d.submit(`node${i % 4}`, update(`u${i}`), { maxRetries: 0 })));
    expect(t.maxActive).toBe(1);
  });
});

describe('buffering', () => {
  it('sends a destination buffer as one frame once it holds flushOps ops, without waiting for the linger', async () => {
    vi.useFakeTimers();
    const t = new FakeTransport();
    const d = distributor(t, { flushOps: 5, lingerMs: 60_000 });
    const a = d.submit('n1', update('a', 2), { maxRetries: 0 });
    const b = d.submit('n1', update('b', 2), { maxRetries: 0 });
    await vi.advanceTimersByTimeAsync(0);
    expect(t.frames).toEqual([]);
    const c = d.submit('n1', update('c', 1), { maxRetries: 0 });
    await expect(Promise.all([a, b, c])).resolves.toHaveLength(3);
    expect(t.frames).toEqual([{ dest: 'n1', ids: ['a', 'b', 'c'] }]);
  });

  it('sends what a destination buffered once the linger has passed, in one frame', async () => {
    vi.useFakeTimers();
    const t = new FakeTransport();
    const d = distributor(t, { flushOps: 1000, lingerMs: 5 });
    const all = ['a', 'b', 'c', 'd'].map((id) => d.submit('n1', update(id), { maxRetries: 0 }));
    await vi.advanceTimersByTimeAsync(4);
    expect(t.frames).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    await expect(Promise.all(all)).resolves.toHaveLength(4);
    expect(t.frames).toEqual([{ dest: 'n1', ids: ['a', 'b', 'c', 'd'] }]);
  });

  it('keeps one buffer per destination', async () => {
    vi.useFakeTimers();
    const t = new FakeTransport();
    const d = distributor(t, { flushOps: 1000, lingerMs: 5 });
    const all = [
      d.submit('n1', update('a'), { maxRetries: 0 }),
      d.submit('n2', update('b'), { maxRetries: 0 }),
      d.submit('n1', update('c'), { maxRetries: 0 }),
    ];
    await vi.advanceTimersByTimeAsync(5);
    await Promise.all(all);
    expect(t.frames).toHaveLength(2);
    expect(t.frames).toContainEqual({ dest: 'n1', ids: ['a', 'c'] });
    expect(t.frames).toContainEqual({ dest: 'n2', ids: ['b'] });
  });

  it('flushAll sends every buffer now', async () => {
    vi.useFakeTimers();
    const t = new FakeTransport();
    const d = distributor(t, { flushOps: 1000, lingerMs: 60_000 });
    const all = [d.submit('n1', update('a'), { maxRetries: 0 }), d.submit('n2', update('b'), { maxRetries: 0 })];
    d.flushAll();
    await expect(Promise.all(all)).resolves.toHaveLength(2);
    expect(t.frames).toHaveLength(2);
  });
});

describe('retries', () => {
  const transientThrows: Array<[string, () => unknown]> = [
    ['ShardexError SHX_UNAVAILABLE', () => new ShardexError('SHX_UNAVAILABLE', 'node n1 is unavailable')],
    ['an error with code ECONNREFUSED', () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' })],
    ['ECONNRESET deep in the cause chain', () => new Error('stream failed', { cause: new Error('write failed', { cause: Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }) }) })],
    ['a gRPC-like status {code: 14} (UNAVAILABLE)', () => ({ code: 14, details: 'No connection established' })],
    ['a gRPC-like status {code: 4} (DEADLINE_EXCEEDED)', () => ({ code: 4, details: 'Deadline exceeded' })],
  ];

  for (const [what, err] of transientThrows) {
    it(`retries a frame failing with ${what} exactly maxRetries times, then reports it`, async () => {
      const t = new ThrowingTransport(err);
      const d = distributor(t);
      const e = await rejection(d.submit('n1', update('a'), { maxRetries: 3 }));
      expect(t.sends).toBe(4);
      expect(e.retryable).toBe(true);
      expect(d.stats.retried).toBe(3);
      expect(d.stats.failed).toBe(1);
    });
  }

  it('reports a gRPC-like status with its details and the destination', async () => {
    const t = new ThrowingTransport(() => ({ code: 14, details: 'No connection established' }));
    const d = distributor(t);
    const e = await rejection(d.submit('n7', update('a'), { maxRetries: 1 }));
    expect(t.sends).toBe(2);
    expect(e.code).toBe('SHX_UNAVAILABLE');
    expect(e.message).toContain('n7');
    expect(e.message).toContain('No connection established');
  });

  it('reports a transient failure with maxRetries 0 after one attempt', async () => {
    const t = new ThrowingTransport(() => Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }));
    const d = distributor(t);
    const e = await rejection(d.submit('n1', update('a'), { maxRetries: 0 }));
    expect(t.sends).toBe(1);
    expect(e.code).toBe('SHX_UNAVAILABLE');
    expect(e.message).toContain('n1');
  });

  it('retries a transient per-update outcome and succeeds when the destination recovers', async () => {
    const t = new FakeTransport((_name, attempt) => (attempt <= 2 ? fail('SHX_UNAVAILABLE') : ok(2)));
    const d = distributor(t);
    await expect(d.submit('n1', update('a'), { maxRetries: 3 })).resolves.toEqual({ rf: 2 });
    expect(t.attempts('a')).toBe(3);
  });

  it('reports a transient per-update outcome after 1 + maxRetries attempts', async () => {
    const t = new FakeTransport(() => fail('SHX_UNAVAILABLE', 'replica is restarting'));
    const d = distributor(t);
    const e = await rejection(d.submit('n1', update('a'), { maxRetries: 2 }));
    expect(t.attempts('a')).toBe(3);
    expect(e.code).toBe('SHX_UNAVAILABLE');
    expect(e.message).toBe('replica is restarting');
  });

  it('asks resolveDest for the destination again before each retry', async () => {
    const t = new FakeTransport((_name, _attempt, dest) => (dest === 'new-leader' ? ok() : fail('SHX_NOT_LEADER')));
    const d = distributor(t);
    await d.submit('old-leader', update('a'), { maxRetries: 2, resolveDest: () => 'new-leader' });
    expect(t.frames.map((f) => f.dest)).toEqual(['old-leader', 'new-leader']);
  });

  const notRetried: Array<[ErrorCode, string]> = [
    ['SHX_BAD_REQUEST', 'rejected input'],
    ['SHX_BAD_DOCUMENT', 'rejected input'],
    ['SHX_BAD_ID', 'rejected input'],
    ['SHX_STALE_EPOCH', 'a deposed sender'],
    ['SHX_INTERNAL', 'a non-transient failure'],
  ];
  for (const [code, why] of notRetried) {
    it(`does not retry ${code} (${why}) and reports it as is`, async () => {
      const t = new FakeTransport(() => fail(code, `the update was refused: ${code}`));
      const d = distributor(t);
      const e = await rejection(d.submit('n1', update('a'), { maxRetries: 5 }));
      expect(t.attempts('a')).toBe(1);
      expect(e.code).toBe(code);
      expect(e.message).toBe(`the update was refused: ${code}`);
      expect(d.stats.retried).toBe(0);
    });
  }

  it('does not retry a frame that threw a rejected-input error', async () => {
    const t = new ThrowingTransport(() => new ShardexError('SHX_BAD_REQUEST', 'unknown update phase'));
    const d = distributor(t);
    const e = await rejection(d.submit('n1', update('a'), { maxRetries: 5 }));
    expect(t.sends).toBe(1);
    expect(e.code).toBe('SHX_BAD_REQUEST');
  });

  it('does not retry a frame that threw a plain programming error', async () => {
    const t = new ThrowingTransport(() => new TypeError('cannot read properties of undefined'));
    const d = distributor(t);
    const e = await rejection(d.submit('n1', update('a'), { maxRetries: 5 }));
    expect(t.sends).toBe(1);
    expect(e.code).toBe('SHX_INTERNAL');
  });
});

describe('deadlines', () => {
  it('schedules no retry whose pause would end past the update\'s deadline: the last failure is final', async () => {
    vi.useFakeTimers({ now: 1_000_000 });
    const t = new FakeTransport(() => fail('SHX_UNAVAILABLE'));
    const d = new CommandDistributor({ transport: t, backoff: (n) => 100 * n, flushOps: 1, lingerMs: 0 });
    distributors.push(d);
    // Sent at 0; retry after 100 (ends before 250); the next pause, 200, would end at 300.
    const p = rejection(d.submit('n2', update('a'), { maxRetries: 25, deadline: Deadline.after(250) }));
    await vi.runAllTimersAsync();
    expect((await p).code).toBe('SHX_UNAVAILABLE');
    expect(t.attempts('a')).toBe(2);
    expect(d.stats).toMatchObject({ retried: 1, failed: 1 });
  });

  it('does not send an update whose deadline passed while it waited for a slot', async () => {
    vi.useFakeTimers({ now: 1_000_000 });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const sent: string[] = [];
    const transport: UpdateTransport = {
      send: async (_dest, updates) => {
        sent.push(...updates.map(nameOf));
        if (updates.some((u) => nameOf(u) === 'slow')) await gate;
        return updates.map(() => ok());
      },
    };
    const d = new CommandDistributor({ transport, backoff: instant, flushOps: 1, lingerMs: 0, maxInFlight: 1 });
    distributors.push(d);
    const slow = d.submit('n2', update('slow'), { maxRetries: 0 });
    await vi.advanceTimersByTimeAsync(1);
    const late = rejection(d.submit('n2', update('late'), { maxRetries: 3, deadline: Deadline.after(100) }));
    await vi.advanceTimersByTimeAsync(150);
    release();
    await slow;
    const err = await late;
    expect(err.code).toBe('SHX_TIMEOUT');
    expect(err.message).toMatch(/waited past its deadline and was not sent/);
    expect(sent).toEqual(['slow']);
  });
});

describe('outcomes', () => {
  it('settles each update of a mixed frame independently', async () => {
    vi.useFakeTimers();
    const t = new FakeTransport((name, attempt) => {
      if (name === 'good') return ok(2);
      if (name === 'bad') return fail('SHX_BAD_DOCUMENT', 'document 0 has no "id"');
      if (name === 'flaky') return attempt === 1 ? fail('SHX_UNAVAILABLE') : ok(3);
      return fail('SHX_UNAVAILABLE', 'still down');
    });
    const d = distributor(t, { flushOps: 1000, lingerMs: 1 });
    const good = d.submit('n1', update('good'), { maxRetries: 2 });
    const bad = d.submit('n1', update('bad'), { maxRetries: 2 });
    const flaky = d.submit('n1', update('flaky'), { maxRetries: 2 });
    const down = d.submit('n1', update('down'), { maxRetries: 2 });
    const settled = Promise.allSettled([good, bad, flaky, down]);
    await vi.runAllTimersAsync();
    const [g, b, f, dn] = await settled;
    expect(t.frames[0]).toEqual({ dest: 'n1', ids: ['good', 'bad', 'flaky', 'down'] });
    expect(g).toEqual({ status: 'fulfilled', value: { rf: 2 } });
    expect(b.status === 'rejected' && (b.reason as ShardexError).code).toBe('SHX_BAD_DOCUMENT');
    expect(f).toEqual({ status: 'fulfilled', value: { rf: 3 } });
    expect(dn.status === 'rejected' && (dn.reason as ShardexError).message).toBe('still down');
    expect([t.attempts('good'), t.attempts('bad'), t.attempts('flaky'), t.attempts('down')]).toEqual([1, 1, 2, 3]);
  });

  it('fails an update the destination gave no outcome for, and still settles the others', async () => {
    const t: UpdateTransport = { send: async () => [ok()] };
    const d = distributor(t, { flushOps: 2, lingerMs: 60_000 });
    const [a, b] = await Promise.allSettled([d.submit('n1', update('a'), { maxRetries: 3 }), d.submit('n1', update('b'), { maxRetries: 3 })]);
    expect(a.status).toBe('fulfilled');
    expect(b.status === 'rejected' && (b.reason as ShardexError).code).toBe('SHX_INTERNAL');
  });
});

describe('close', () => {
  it('rejects buffered updates without sending them', async () => {
    const t = new FakeTransport();
    const d = distributor(t, { flushOps: 1000, lingerMs: 60_000 });
    const a = d.submit('n1', update('a'), { maxRetries: 3 });
    const b = d.submit('n2', update('b'), { maxRetries: 3 });
    d.close();
    const [ea, eb] = await Promise.all([rejection(a), rejection(b)]);
    expect(ea.code).toBe('SHX_UNAVAILABLE');
    expect(eb.code).toBe('SHX_UNAVAILABLE');
    expect(t.frames).toEqual([]);
  });

  it('rejects submits made after close', async () => {
    const t = new FakeTransport();
    const d = distributor(t);
    d.close();
    expect((await rejection(d.submit('n1', update('a'), { maxRetries: 3 }))).code).toBe('SHX_UNAVAILABLE');
    expect(t.frames).toEqual([]);
  });

  it('rejects frames still waiting for a free slot without sending them', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const sent: string[] = [];
    const t: UpdateTransport = {
      send: async (_dest, updates) => {
        sent.push(...updates.map(nameOf));
        await gate;
        return updates.map(() => ok());
      },
    };
    const d = distributor(t, { maxInFlight: 1 });
    const first = d.submit('n1', update('a'), { maxRetries: 0 });
    const waiting = d.submit('n2', update('b'), { maxRetries: 0 });
    await vi.waitFor(() => expect(sent).toEqual(['a']));
    d.close();
    release();
    await expect(first).resolves.toEqual({ rf: 1 });
    expect((await rejection(waiting)).code).toBe('SHX_UNAVAILABLE');
    expect(sent).toEqual(['a']);
  });

  it('rejects an update waiting for its retry pause at once, without sending it again', async () => {
    const t = new FakeTransport(() => fail('SHX_UNAVAILABLE'));
    const d = new CommandDistributor({ transport: t, backoff: () => 3_600_000, flushOps: 1, lingerMs: 0 });
    distributors.push(d);
    const p = d.submit('n1', update('a'), { maxRetries: 3 });
    await vi.waitFor(() => expect(d.stats.retried).toBe(1));
    d.close();
    expect((await rejection(p)).code).toBe('SHX_UNAVAILABLE');
    expect(t.attempts('a')).toBe(1);
  });
});
