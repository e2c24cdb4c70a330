// Durations in the read configuration are written the way Accumulo writes them
// (ConfigurationTypeHelper.getTimeInMillis): a whole number followed by one of d, h, m, s, ms;
// a bare number means seconds. Parsing is strict so that a typo in a profile fails at load
// rather than silently becoming "wait forever" or "never wait".

import { ShardexError } from '../errors.js';

const MS_PER_UNIT: Readonly<Record<string, number>> = {
  d: 86_400_000,
  h: 3_600_000,
  m: 60_000,
  s: 1_000,
  ms: 1,
};

const DURATION = /^(\d+)(d|h|m|s|ms)?$/;

const EXPECTED = 'expected a whole number followed by d, h, m, s or ms (a bare number means seconds), e.g. "33ms", "10s" or "5m"';

function bad(what: string, value: unknown, why: string): ShardexError {
  return new ShardexError('SHX_BAD_CONFIG', `${what}: bad duration ${describe(value)}: ${why}`, {
    details: { field: what },
  });
}

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number') return String(value);
  if (value === undefined) return 'undefined';
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/**
 * Parses a duration such as `"33ms"`, `"10s"`, `"5m"`, `"2h"`, `"1d"` or `"30"` (seconds) into
 * milliseconds. A number is taken as seconds. `what` names the field in error messages.
 * Throws `SHX_BAD_CONFIG` for anything else: negative, fractional, unknown unit, empty, or a value
 * too large to represent exactly.
 */
export function parseDuration(text: string | number, what: string): number {
  if (typeof text === 'number') {
    if (!Number.isInteger(text) || text < 0) throw bad(what, text, EXPECTED);
    return checked(what, text, text * MS_PER_UNIT.s!);
  }
  if (typeof text !== 'string') throw bad(what, text, EXPECTED);
  const match = DURATION.exec(text.trim());
  if (match === null) throw bad(what, text, EXPECTED);
  const amount = Number(match[1]);
  const unit = match[2] ?? 's';
  return checked(what, text, amount * MS_PER_UNIT[unit]!);
}

function checked(what: string, value: unknown, ms: number): number {
  if (!Number.isSafeInteger(ms)) throw bad(what, value, 'too large');
  return ms;
}
