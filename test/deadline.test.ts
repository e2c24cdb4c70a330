// The one Deadline (src/distrib/deadline.ts) that reads, updates and the client's failover share,
// and the one retry decision under it (decideRetry). Fake timers: nothing depends on speed.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Deadline } from '../src/distrib/deadline.js';
import { decideRetry, linearBackoff, type RetryPolicy } from '../src/distrib/retry.js';
import { ShardexError } from '../src/errors.js';

const unavailable = (): ShardexError => new ShardexError('SHX_UNAVAILABLE', 'node n2 is unavailable');
const policy: RetryPolicy = { maxRetries: 2, backoff: linearBackoff(100, 1000) };

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('decideRetry', () => {
  it('says why no retry follows: not retryable, no retry left, or a pause that would end past the deadline', () => {
    expect(decideRetry(policy, new ShardexError('SHX_BAD_REQUEST', 'bad'), 1)).toEqual({ retry: false, why: 'final' });
    expect(decideRetry(policy, unavailable(), 3)).toEqual({ retry: false, why: 'exhausted' });
    expect(decideRetry(policy, unavailable(), 2, Deadline.after(200))).toEqual({ retry: false, why: 'deadline' });
    expect(decideRetry(policy, unavailable(), 2, Deadline.after(201))).toEqual({ retry: true, pauseMs: 200 });
  });

  it('lets a deadline without a timeout (a signal only) bound nothing but by its signal', () => {
    const ac = new AbortController();
    expect(decideRetry(policy, unavailable(), 1, new Deadline({ signal: ac.signal }))).toEqual({ retry: true, pauseMs: 100 });
  });
});

describe('Deadline', () => {
  it('gives calls a signal that aborts with its own SHX_TIMEOUT when the time is up', async () => {
    const d = Deadline.after(300, { what: 'adding 1 document(s) to docs' });
    const signal = d.abortSignal()!;
    expect(d.abortSignal()).toBe(signal); // one timer, however many calls ask
    await vi.advanceTimersByTimeAsync(299);
    expect(signal.aborted).toBe(false);
    expect(d.ended()).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toMatchObject({ code: 'SHX_TIMEOUT', message: expect.stringMatching(/^adding 1 document\(s\) to docs did not complete within 300 ms/) });
    expect(d.remainingMs()).toBe(0);
    expect(d.expired).toBe(true);
  });

  it('stops its timer when released: a finished operation is never aborted afterwards', async () => {
    const d = Deadline.after(100);
    const signal = d.abortSignal()!;
    d.release();
    await vi.advanceTimersByTimeAsync(1000);
    expect(signal.aborted).toBe(false);
  });

  it('ends with the caller\'s reason when the caller cancels, and is then passed but not expired', () => {
    const ac = new AbortController();
    const d = Deadline.after(10_000, { signal: ac.signal });
    const why = new Error('user pressed stop');
    ac.abort(why);
    expect(d.ended()).toBe(why);
    expect(d.abortSignal()!.aborted).toBe(true);
    expect(d.passed).toBe(true);
    expect(d.expired).toBe(false);
  });

  it('turns a caller signal that timed out (AbortSignal.timeout) into SHX_TIMEOUT naming what it was doing', () => {
    const ac = new AbortController();
    const d = new Deadline({ what: 'eventual get of c/shard1', signal: ac.signal });
    ac.abort(new DOMException('timed out', 'TimeoutError'));
    expect(d.ended('waiting for a reader')).toMatchObject({ code: 'SHX_TIMEOUT', message: expect.stringMatching(/before its deadline \(waiting for a reader\)/) });
  });

  it('makes no timer for a deadline without a timeout', () => {
    const d = new Deadline({});
    expect(d.remainingMs()).toBe(Infinity);
    expect(d.abortSignal()).toBeUndefined();
    expect(vi.getTimerCount()).toBe(0);
  });

  it('cuts a pause short at the deadline and ends with SHX_TIMEOUT', async () => {
    const d = Deadline.after(50);
    const p = d.pause(10_000, 'waiting for a leader').catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(50);
    expect(await p).toMatchObject({ code: 'SHX_TIMEOUT', message: expect.stringMatching(/\(waiting for a leader\)/) });
  });

  it('names the earlier of two deadlines', () => {
    const a = Deadline.after(100);
    const b = Deadline.after(50);
    expect(Deadline.earliest(a, b)).toBe(b);
    expect(Deadline.earliest(undefined, a)).toBe(a);
  });
});
