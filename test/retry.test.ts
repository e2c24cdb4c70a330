// The one retry executor (src/distrib/retry.ts): which failures it tries again, how long it
// pauses (with jitter), how many retries, and the deadline that bounds them all. Fake timers:
// every pause and every deadline is on the fake clock, so nothing here depends on speed.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DEFAULT_HOST_UNAVAILABLE_CODES, classifyFailure } from '../src/client/index.js';
import { Deadline, HOST_UNAVAILABLE_CODES, isHostUnavailable, isTransient, linearBackoff, nextPause, retry, withJitter, type RetryPolicy } from '../src/distrib/retry.js';
import { ShardexError } from '../src/errors.js';

const unavailable = (): ShardexError => new ShardexError('SHX_UNAVAILABLE', 'node n2 is unavailable');
const refused = (): ShardexError => new ShardexError('SHX_BAD_REQUEST', 'bad input');
const policy = (maxRetries: number, stepMs = 100): RetryPolicy => ({ maxRetries, backoff: linearBackoff(stepMs, 10 * stepMs) });

/** An attempt that fails with `errors[n-1]` on its n-th call and then succeeds. */
function scripted(errors: Array<() => Error>): { attempt: (n: number) => Promise<string>; calls: number[] } {
  const calls: number[] = [];
  return {
    calls,
    attempt: async (n) => {
      calls.push(n);
      const e = errors[n - 1];
      if (e) throw e();
      return `ok after ${n}`;
    },
  };
}

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('retry', () => {
  it('tries a transient failure again after the policy\'s pauses, and returns the first success', async () => {
    const s = scripted([unavailable, unavailable]);
    const pauses: number[] = [];
    const p = retry(s.attempt, policy(5), { onRetry: (_e, _n, ms) => pauses.push(ms) });
    await vi.runAllTimersAsync();
    await expect(p).resolves.toBe('ok after 3');
    expect(s.calls).toEqual([1, 2, 3]);
    expect(pauses).toEqual([100, 200]);
  });

  it('throws the last failure once the retries are spent', async () => {
    const s = scripted([unavailable, unavailable, unavailable, unavailable]);
    const p = retry(s.attempt, policy(2)).catch((e: unknown) => e);
    await vi.runAllTimersAsync();
    expect(await p).toMatchObject({ code: 'SHX_UNAVAILABLE' });
    expect(s.calls).toEqual([1, 2, 3]);
  });

  it('never tries again a failure another attempt cannot cure', async () => {
    const s = scripted([refused]);
    await expect(retry(s.attempt, policy(10))).rejects.toMatchObject({ code: 'SHX_BAD_REQUEST' });
    expect(s.calls).toEqual([1]);
  });

  it('stops at the deadline: no pause that would end past it, the last failure thrown', async () => {
    const s = scripted(Array.from({ length: 100 }, () => unavailable));
    // Pauses 100, 200, 300...: after attempts at t=0, 100 and 300, the next pause would end at 600 > 550.
    const p = retry(s.attempt, policy(Infinity), { deadline: Deadline.after(550) }).catch((e: unknown) => e);
    await vi.runAllTimersAsync();
    expect(await p).toMatchObject({ code: 'SHX_UNAVAILABLE' });
    expect(s.calls).toEqual([1, 2, 3]);
  });

  it('makes no attempt once the deadline has passed, and says nothing was done', async () => {
    const s = scripted([]);
    const deadline = Deadline.after(10);
    vi.advanceTimersByTime(10);
    await expect(retry(s.attempt, policy(3), { deadline })).rejects.toMatchObject({ code: 'SHX_TIMEOUT', message: expect.stringMatching(/nothing was done/) });
    expect(s.calls).toEqual([]);
  });

  it('ends a pause when the signal aborts, with the signal\'s reason', async () => {
    const s = scripted([unavailable, unavailable]);
    const ac = new AbortController();
    const p = retry(s.attempt, policy(5), { deadline: new Deadline({ signal: ac.signal }) }).catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(50);
    ac.abort(new Error('caller gave up'));
    expect(await p).toMatchObject({ message: 'caller gave up' });
    expect(s.calls).toEqual([1]);
  });
});

describe('nextPause, the decision timer-driven loops share', () => {
  it('gives the backoff\'s pause for a retryable failure within the budget and the deadline, else undefined', () => {
    const pol = policy(2);
    expect(nextPause(pol, unavailable(), 1)).toBe(100);
    expect(nextPause(pol, unavailable(), 2)).toBe(200);
    expect(nextPause(pol, unavailable(), 3)).toBeUndefined();
    expect(nextPause(pol, refused(), 1)).toBeUndefined();
    expect(nextPause(pol, unavailable(), 1, Deadline.after(100))).toBeUndefined();
    expect(nextPause(pol, unavailable(), 1, Deadline.after(101))).toBe(100);
    expect(nextPause({ ...pol, retryable: () => true }, refused(), 1)).toBe(100);
  });
});

describe('withJitter and Deadline', () => {
  it('scales each pause down by at most the fraction', () => {
    const base = linearBackoff(100, 1000);
    expect(withJitter(base, 0.2, () => 0)(3)).toBe(300);
    expect(withJitter(base, 0.2, () => 0.5)(3)).toBe(270);
    expect(withJitter(base, 0.2, () => 0.999999)(3)).toBe(240);
  });

  it('picks the earlier of two deadlines, and counts down', () => {
    const a = Deadline.after(100);
    const b = Deadline.after(50);
    expect(Deadline.earliest(a, b)).toBe(b);
    expect(Deadline.earliest(undefined, a)).toBe(a);
    expect(Deadline.earliest(a, undefined)).toBe(a);
    expect(Deadline.earliest(undefined, undefined)).toBeUndefined();
    vi.advanceTimersByTime(30);
    expect(b.remainingMs()).toBe(20);
    expect(b.passed).toBe(false);
    vi.advanceTimersByTime(20);
    expect(b.passed).toBe(true);
    expect(b.remainingMs()).toBe(0);
  });
});

describe('one failure classification for the node and the client', () => {
  const coded = (code: string | number, message = 'failed'): Error => Object.assign(new Error(message), { code });
  const wrapped = (cause: Error): Error => new Error('fetch failed', { cause });

  it('counts as transient every code on the client\'s host-unavailable list, through the cause chain', () => {
    expect(DEFAULT_HOST_UNAVAILABLE_CODES).toBe(HOST_UNAVAILABLE_CODES);
    for (const code of ['ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_SOCKET', 'ERR_SSL_WRONG_VERSION_NUMBER', 'ERR_TLS_CERT_ALTNAME_INVALID']) {
      expect(isTransient(wrapped(coded(code))), code).toBe(true);
      expect(classifyFailure(wrapped(coded(code)), DEFAULT_HOST_UNAVAILABLE_CODES).hostUnavailable, code).toBe(true);
    }
    expect(isTransient(coded(14, 'UNAVAILABLE: no connection'))).toBe(true);
  });

  it('reads a message as its code, which counts only when that code is listed', () => {
    expect(isHostUnavailable(new Error('socket hang up'))).toBe(true);
    expect(isHostUnavailable(new Error('socket hang up'), ['EPIPE'])).toBe(false);
    expect(isHostUnavailable(wrapped(new Error('other side closed')), ['UND_ERR_SOCKET'])).toBe(true);
  });

  it('never counts a refused request or an unknown code', () => {
    expect(isTransient(refused())).toBe(false);
    expect(isTransient(coded('EACCES'))).toBe(false);
    expect(isHostUnavailable(coded('ERR_INVALID_ARG_TYPE'))).toBe(false);
  });
});
