import { describe, expect, it } from 'vitest';
import { ShardexError } from '../src/errors.js';
import { parseDuration } from '../src/read/duration.js';

function failure(value: unknown, what = 'profiles[0].maxBusyTimeout'): ShardexError {
  try {
    parseDuration(value as string, what);
  } catch (err) {
    return err as ShardexError;
  }
  throw new Error(`expected ${String(value)} to be rejected`);
}

describe('parseDuration', () => {
  it.each([
    ['33ms', 33],
    ['10s', 10_000],
    ['5m', 300_000],
    ['2h', 7_200_000],
    ['1d', 86_400_000],
    ['36500d', 36_500 * 86_400_000],
    ['0s', 0],
    ['0', 0],
  ])('reads %s as %i ms', (text, ms) => {
    expect(parseDuration(text, 'x')).toBe(ms);
  });

  it('takes a number without a unit as seconds', () => {
    expect(parseDuration('30', 'x')).toBe(30_000);
  });

  it('takes a JSON number as seconds', () => {
    expect(parseDuration(8, 'x')).toBe(8_000);
  });

  it('ignores surrounding white space', () => {
    expect(parseDuration(' 5m ', 'x')).toBe(300_000);
  });

  it.each(['', 's', '5 m', '1.5s', '-1s', '5x', '5MS', '5min', 'soon', '1e3', '0x10'])(
    'rejects the text %j',
    (text) => {
      expect(failure(text).code).toBe('SHX_BAD_CONFIG');
    },
  );

  it.each([-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY])('rejects the number %d', (value) => {
    expect(failure(value).code).toBe('SHX_BAD_CONFIG');
  });

  it.each([null, undefined, true, {}, ['5m']])('rejects the non-duration %j', (value) => {
    expect(failure(value).code).toBe('SHX_BAD_CONFIG');
  });

  it('rejects a duration too large to count exactly in milliseconds', () => {
    expect(failure('999999999999999d').message).toMatch(/too large/);
  });

  it('names the field and the bad value in its message', () => {
    const err = failure('5 minutes', 'profiles[1].attemptPlans[0].busyTimeout');
    expect(err).toBeInstanceOf(ShardexError);
    expect(err.message).toContain('profiles[1].attemptPlans[0].busyTimeout');
    expect(err.message).toContain('"5 minutes"');
    expect(err.message).toMatch(/d, h, m, s or ms/);
  });

  it('is a 400, not retryable', () => {
    const err = failure('later');
    expect(err.status).toBe(400);
    expect(err.retryable).toBe(false);
  });
});
