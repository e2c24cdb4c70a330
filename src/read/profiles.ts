// Scan-server selector profiles: Accumulo's ConfigurableScanServerSelector configuration JSON
// (profiles, attempt plans, busy timeouts), its defaults, and its validation at load, with
// messages that name each bad field.

import { ShardexError } from '../errors.js';
import { isWellFormed } from '../hashrange/murmur3.js';
import { parseDuration } from './duration.js';

/** The group of readers started without `--group`, and of profiles that name none. */
export const DEFAULT_GROUP = 'default';

/** One attempt plan as written in the configuration. */
export interface AttemptPlanConfig {
  /** `"N"` readers, or `"P%"` of the group. */
  readonly servers: string | number;
  /** A duration: `"33ms"`, `"10s"`, `"5m"`, … (a bare number means seconds). */
  readonly busyTimeout: string | number;
  /** Changes the hash, so this plan's candidates are unrelated to other salts' candidates. */
  readonly salt?: string;
}

/** One profile as written in the configuration (Accumulo's `profiles` JSON). */
export interface ProfileConfig {
  readonly isDefault?: boolean;
  readonly maxBusyTimeout: string | number;
  readonly busyTimeoutMultiplier: number;
  readonly scanTypeActivations?: readonly string[];
  readonly group?: string;
  readonly timeToWaitForScanServers?: string | number;
  readonly attemptPlans: readonly AttemptPlanConfig[];
}

/**
 * Accumulo's default profile, except `timeToWaitForScanServers`: ours is `0s`, so that an
 * eventual read with no reader in its group goes to the shard leaders at once.
 */
export const DEFAULT_PROFILES: readonly ProfileConfig[] = Object.freeze([
  Object.freeze({
    isDefault: true,
    maxBusyTimeout: '5m',
    busyTimeoutMultiplier: 8,
    scanTypeActivations: Object.freeze([]),
    timeToWaitForScanServers: '0s',
    attemptPlans: Object.freeze([
      Object.freeze({ servers: '3', busyTimeout: '33ms', salt: 'one' }),
      Object.freeze({ servers: '13', busyTimeout: '33ms', salt: 'two' }),
      Object.freeze({ servers: '100%', busyTimeout: '33ms' }),
    ]),
  }),
]);

export type ServerCount =
  | { readonly kind: 'count'; readonly count: number }
  | { readonly kind: 'percent'; readonly percent: number };

/** A validated attempt plan. */
export interface AttemptPlan {
  readonly servers: ServerCount;
  readonly busyTimeoutMs: number;
  readonly salt: string;
}

/** A validated profile. */
export interface Profile {
  /** `"default"` for the default profile, else its first scan type (or `profiles[i]`). */
  readonly name: string;
  readonly isDefault: boolean;
  readonly scanTypes: readonly string[];
  readonly group: string;
  readonly maxBusyTimeoutMs: number;
  readonly busyTimeoutMultiplier: number;
  readonly timeToWaitMs: number;
  readonly plans: readonly AttemptPlan[];
}

// ---- configuration ------------------------------------------------------------------------

const PROFILE_KEYS = [
  'isDefault',
  'maxBusyTimeout',
  'busyTimeoutMultiplier',
  'scanTypeActivations',
  'group',
  'timeToWaitForScanServers',
  'attemptPlans',
] as const;
const PLAN_KEYS = ['servers', 'busyTimeout', 'salt'] as const;

function show(value: unknown): string {
  if (value === undefined) return 'nothing';
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Validates the profile JSON (text or parsed). Throws SHX_BAD_CONFIG listing every problem. */
export function loadProfiles(config: unknown): Profile[] {
  let value = config;
  if (typeof config === 'string') {
    try {
      value = JSON.parse(config);
    } catch (err) {
      throw new ShardexError('SHX_BAD_CONFIG', `read selector profiles: not valid JSON: ${(err as Error).message}`);
    }
  }
  const problems: string[] = [];
  const profiles: Profile[] = [];
  if (!Array.isArray(value)) {
    problems.push(`profiles: expected a JSON array of profiles, got ${show(value)}`);
  } else if (value.length === 0) {
    problems.push('profiles: empty; exactly one profile must have "isDefault": true');
  } else {
    value.forEach((raw, i) => {
      const profile = loadProfile(raw, `profiles[${i}]`, problems);
      if (profile !== undefined) profiles.push(profile);
    });
    checkProfileSet(value, problems);
  }
  if (problems.length > 0) {
    throw new ShardexError('SHX_BAD_CONFIG', `bad read selector profiles: ${problems.join('; ')}`, {
      details: { problems },
    });
  }
  return profiles;
}

// Rules across profiles, checked on the raw entries so that they are reported even when a
// profile has other problems too.
function checkProfileSet(raw: readonly unknown[], problems: string[]): void {
  const defaults: string[] = [];
  const activatedBy = new Map<string, string>();
  raw.forEach((entry, i) => {
    if (!isRecord(entry)) return;
    const path = `profiles[${i}]`;
    if (entry.isDefault === true) defaults.push(path);
    const types = entry.scanTypeActivations;
    if (!Array.isArray(types)) return;
    for (const type of types) {
      if (typeof type !== 'string') continue;
      const owner = activatedBy.get(type);
      if (owner === path) {
        problems.push(`${path}.scanTypeActivations: scan type ${show(type)} is listed twice`);
      } else if (owner !== undefined) {
        problems.push(
          `${path}.scanTypeActivations: scan type ${show(type)} already activates ${owner}; a scan type may activate at most one profile`,
        );
      } else {
        activatedBy.set(type, path);
      }
    }
  });
  if (defaults.length === 0) {
    problems.push('profiles: no default profile; exactly one profile must have "isDefault": true');
  } else if (defaults.length > 1) {
    problems.push(`profiles: more than one default profile (${defaults.join(', ')}); exactly one may have "isDefault": true`);
  }
}

function unknownKeys(raw: Record<string, unknown>, known: readonly string[], path: string, problems: string[]): void {
  for (const key of Object.keys(raw)) {
    if (!known.includes(key)) problems.push(`${path}: unknown key ${show(key)} (known keys: ${known.join(', ')})`);
  }
}

function duration(raw: unknown, path: string, problems: string[]): number | undefined {
  if (raw === undefined) {
    problems.push(`${path}: missing (a duration such as "33ms", "10s" or "5m")`);
    return undefined;
  }
  try {
    return parseDuration(raw as string | number, path);
  } catch (err) {
    problems.push((err as Error).message);
    return undefined;
  }
}

function loadProfile(raw: unknown, path: string, problems: string[]): Profile | undefined {
  if (!isRecord(raw)) {
    problems.push(`${path}: expected an object, got ${show(raw)}`);
    return undefined;
  }
  const before = problems.length;
  unknownKeys(raw, PROFILE_KEYS, path, problems);

  const isDefault = raw.isDefault ?? false;
  if (typeof isDefault !== 'boolean') problems.push(`${path}.isDefault: expected true or false, got ${show(raw.isDefault)}`);

  const maxBusyTimeoutMs = duration(raw.maxBusyTimeout, `${path}.maxBusyTimeout`, problems);

  const multiplier = raw.busyTimeoutMultiplier;
  if (multiplier === undefined) {
    problems.push(
      `${path}.busyTimeoutMultiplier: missing; busy timeouts past the last attempt plan grow by this factor (a whole number >= 1)`,
    );
  } else if (typeof multiplier !== 'number' || !Number.isSafeInteger(multiplier) || multiplier < 1) {
    problems.push(`${path}.busyTimeoutMultiplier: must be a whole number >= 1, got ${show(multiplier)}`);
  }

  const scanTypes = raw.scanTypeActivations ?? [];
  if (!Array.isArray(scanTypes) || !scanTypes.every((t) => typeof t === 'string' && t !== '')) {
    problems.push(`${path}.scanTypeActivations: expected a list of non-empty strings, got ${show(raw.scanTypeActivations)}`);
  }

  const group = raw.group ?? DEFAULT_GROUP;
  if (typeof group !== 'string' || group === '') {
    problems.push(`${path}.group: expected a non-empty string, got ${show(raw.group)}`);
  }

  const timeToWaitMs = duration(raw.timeToWaitForScanServers ?? '0s', `${path}.timeToWaitForScanServers`, problems);

  const plans: AttemptPlan[] = [];
  if (raw.attemptPlans === undefined) {
    problems.push(`${path}.attemptPlans: missing; a profile needs at least one attempt plan`);
  } else if (!Array.isArray(raw.attemptPlans) || raw.attemptPlans.length === 0) {
    problems.push(`${path}.attemptPlans: expected a non-empty list of attempt plans, got ${show(raw.attemptPlans)}`);
  } else {
    raw.attemptPlans.forEach((plan: unknown, j: number) => {
      const loaded = loadPlan(plan, `${path}.attemptPlans[${j}]`, problems);
      if (loaded !== undefined) plans.push(loaded);
    });
  }

  if (problems.length > before) return undefined;
  const types = scanTypes as string[];
  return {
    name: isDefault === true ? 'default' : (types[0] ?? path),
    isDefault: isDefault as boolean,
    scanTypes: Object.freeze([...types]),
    group: group as string,
    maxBusyTimeoutMs: maxBusyTimeoutMs!,
    busyTimeoutMultiplier: multiplier as number,
    timeToWaitMs: timeToWaitMs!,
    plans: Object.freeze(plans),
  };
}

function loadPlan(raw: unknown, path: string, problems: string[]): AttemptPlan | undefined {
  if (!isRecord(raw)) {
    problems.push(`${path}: expected an object, got ${show(raw)}`);
    return undefined;
  }
  const before = problems.length;
  unknownKeys(raw, PLAN_KEYS, path, problems);
  const servers = loadServers(raw.servers, `${path}.servers`, problems);
  const busyTimeout = duration(raw.busyTimeout, `${path}.busyTimeout`, problems);
  const salt = raw.salt ?? '';
  if (typeof salt !== 'string') {
    problems.push(`${path}.salt: expected a string, got ${show(raw.salt)}`);
  } else if (!isWellFormed(salt)) {
    problems.push(`${path}.salt: not well-formed Unicode (a lone surrogate)`);
  }
  if (problems.length > before) return undefined;
  return Object.freeze({ servers: servers!, busyTimeoutMs: busyTimeout!, salt: salt as string });
}

const WHOLE = /^[+-]?\d+$/;
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)$/;
const SERVERS_HELP = 'a count such as "3" or a percentage of the group such as "100%"';

function loadServers(raw: unknown, path: string, problems: string[]): ServerCount | undefined {
  if (raw === undefined) {
    problems.push(`${path}: missing (${SERVERS_HELP})`);
    return undefined;
  }
  const text = typeof raw === 'number' ? String(raw) : raw;
  if (typeof text !== 'string') {
    problems.push(`${path}: expected ${SERVERS_HELP}, got ${show(raw)}`);
    return undefined;
  }
  if (text.endsWith('%')) {
    const body = text.slice(0, -1);
    if (!DECIMAL.test(body)) {
      problems.push(`${path}: not a number: ${show(raw)} (expected ${SERVERS_HELP})`);
      return undefined;
    }
    const percent = Number(body);
    if (!(percent > 0 && percent <= 100)) {
      problems.push(`${path}: a percentage must be above 0% and at most 100%, got ${show(raw)}`);
      return undefined;
    }
    return { kind: 'percent', percent };
  }
  if (!WHOLE.test(text)) {
    const why = DECIMAL.test(text) ? 'not a whole number' : 'not a number';
    problems.push(`${path}: ${why}: ${show(raw)} (expected ${SERVERS_HELP})`);
    return undefined;
  }
  const count = Number(text);
  if (count <= 0) {
    problems.push(`${path}: the number of readers must be positive, got ${show(raw)}`);
    return undefined;
  }
  return { kind: 'count', count };
}
