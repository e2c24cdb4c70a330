// The scan-server selector: which snapshot reader serves an eventual read of one shard, and
// how long that reader may keep the request queued before answering BUSY. A port of the
// semantics of Accumulo's ConfigurableScanServerSelector in its rendezvous-hashing form
// (2.1.5+ and main), configured with the same profile JSON. Pure: the caller passes the
// live readers and the attempts already made; randomness is injected. The only state is a
// memo of candidate sets, cleared whenever the reader set changes, so every answer is the one
// the stateless algorithm would give.

import { exponentialBackoff, withJitter, type BackoffPolicy } from '../distrib/retry.js';
import { murmur3 } from '../hashrange/murmur3.js';
import { DEFAULT_GROUP, DEFAULT_PROFILES, loadProfiles, type Profile, type ServerCount } from './profiles.js';
export { DEFAULT_GROUP, DEFAULT_PROFILES, loadProfiles, type AttemptPlan, type AttemptPlanConfig, type Profile, type ProfileConfig, type ServerCount } from './profiles.js';

/** A live snapshot reader, as registered in coordination. */
export interface ReaderInfo {
  readonly address: string;
  /** Absent = the default group. */
  readonly group?: string;
}

export type AttemptResult = 'busy' | 'error';

/** A try already made for this shard in this request. */
export interface Attempt {
  readonly reader: string;
  readonly result: AttemptResult;
}

/**
 * What the adaptive ordering knows about a reader, as Elasticsearch's ResponseCollectorService
 * keeps it: EWMAs of the response time seen by this client, the service time and queue size
 * reported by the reader, and this client's requests in flight to it.
 */
export interface ReaderStats {
  readonly responseMs: number;
  readonly serviceMs: number;
  readonly queueSize: number;
  readonly outstanding: number;
}

export interface SelectInput {
  /** Every live reader (all groups); the selector keeps those of the profile's group. */
  readonly readers: readonly ReaderInfo[];
  readonly collection: string;
  readonly shard: string;
  /** Picks the profile that lists it; absent or unknown -> the default profile. */
  readonly scanType?: string;
  /** Tries already made for this shard in this request, oldest first. */
  readonly attempts?: readonly Attempt[];
  /** Used only by a selector built with `adaptive: true`; keyed by reader address. */
  readonly stats?: ReadonlyMap<string, ReaderStats>;
}

export interface Selection {
  /**
   * The reader to ask, or `undefined` when the profile's group has no reader: the caller waits
   * up to `timeToWaitMs` for one to appear (selecting again), then reads from the shard leader.
   */
  readonly reader: string | undefined;
  /** How long the reader may keep the request queued before answering BUSY; 0 = no limit. */
  readonly busyTimeoutMs: number;
  /** How long to wait before sending, after errors (not BUSY answers); 0 = at once. */
  readonly delayMs: number;
  /** The plan's rendezvous candidate set, in hash order (the whole group, by address, if k >= n). */
  readonly candidates: readonly string[];
  /** The candidates the pick was drawn from: those not yet tried, or all if every one was. */
  readonly choices: readonly string[];
  readonly profile: string;
  readonly group: string;
  /** Attempts already made: the `a` of the rules. */
  readonly attempt: number;
  /** Index of the attempt plan used: min(a, plans - 1). */
  readonly plan: number;
  /** The profile's time to wait for a reader to appear when the group is empty. */
  readonly timeToWaitMs: number;
}

export interface ReaderSelectorOptions {
  /** Uniform in [0, 1); injected so tests can seed it. */
  readonly random?: () => number;
  /**
   * Order the choice within the candidate set by Elasticsearch's adaptive replica selection
   * rank (from `SelectInput.stats`) instead of uniformly at random. Off by default.
   */
  readonly adaptive?: boolean;
  /** How many reader addresses the remembered candidate sets may hold (default 1,000,000). */
  readonly cacheLimit?: number;
}

// Accumulo's computeDelay is the house's doubling back-off: 100 ms, doubling, at most 30 s.
const ERROR_BACKOFF = exponentialBackoff(100, 30_000);

/**
 * The longest wait before the next try after `errors` ERROR attempts: min(30 s, 100 ms · 2^(e-1)).
 * The selector jitters it (up to 20% shorter, with its injected random), as every retry pause
 * of the house is, so that clients that failed together do not come back together.
 */
export function errorDelayMs(errors: number): number {
  return errors <= 0 ? 0 : ERROR_BACKOFF(errors);
}

/**
 * The busy timeout for attempt `a`: the plan's own; past the last plan the last plan's, times
 * the multiplier once per extra attempt, capped at the profile's maximum. (The cap applies only
 * there, as in Accumulo: a plan's own timeout may exceed it.)
 */
export function busyTimeoutMs(profile: Profile, attempt: number): number {
  const plans = profile.plans;
  const last = plans.length - 1;
  const base = plans[Math.min(attempt, last)]!.busyTimeoutMs;
  if (attempt <= last) return base;
  const grown = Math.floor(base * profile.busyTimeoutMultiplier ** (attempt - last));
  return Math.min(profile.maxBusyTimeoutMs, grown);
}

/** k for a plan in a group of n readers: min(n, N), or max(1, round(P% of n)). */
export function candidateCount(servers: ServerCount, n: number): number {
  if (servers.kind === 'count') return Math.min(n, servers.count);
  return Math.max(1, Math.round((servers.percent / 100) * n));
}

// A second, unrelated murmur3 seed widens the rendezvous key to 53 bits, so that two readers
// practically never tie; the address breaks a remaining tie.
const SECOND_SEED = 0x2545f491;

// Length-prefixed fields make the hashed text an injective encoding of the tuple.
function field(value: string): string {
  return `${value.length}:${value}`;
}

function rendezvousKey(prefix: string, address: string, salt: string): number {
  const text = prefix + field(address) + field(salt);
  const high = murmur3(text, 0) >>> 0;
  const low = murmur3(text, SECOND_SEED) >>> 11;
  return high * 2 ** 21 + low;
}

/**
 * Rendezvous (highest-random-weight) hashing: the `k` readers with the smallest hash of
 * (collection, shard, reader address, salt), smallest first; all of them, by address, when
 * k >= n. Every client computes the same set; sets for k1 < k2 with the same salt are nested;
 * removing a reader outside the set leaves it unchanged.
 */
export function rendezvousCandidates(
  addresses: readonly string[],
  target: { readonly collection: string; readonly shard: string; readonly salt?: string },
  k: number,
): string[] {
  const distinct = [...new Set(addresses)];
  if (k >= distinct.length) return distinct.sort(compareStrings);
  if (k <= 0) return [];
  const prefix = field(target.collection) + field(target.shard);
  const salt = target.salt ?? '';
  const ranked = distinct.map((address) => ({ address, key: rendezvousKey(prefix, address, salt) }));
  ranked.sort((x, y) => x.key - y.key || compareStrings(x.address, y.address));
  return ranked.slice(0, k).map((r) => r.address);
}

function compareStrings(x: string, y: string): number {
  return x < y ? -1 : x > y ? 1 : 0;
}

/**
 * Elasticsearch's adaptive replica selection rank (C3): R − S + (1 + outstanding·clients + q)³·S,
 * with R the response-time EWMA, S the service-time EWMA, q the queue-size EWMA (truncated).
 * Lower is better.
 */
export function adaptiveRank(stats: ReaderStats, clients: number): number {
  const queue = 1 + stats.outstanding * clients + Math.trunc(stats.queueSize);
  return stats.responseMs - stats.serviceMs + queue ** 3 * stats.serviceMs;
}

export class ReaderSelector {
  readonly profiles: readonly Profile[];
  readonly defaultProfile: Profile;
  private readonly byScanType: ReadonlyMap<string, Profile>;
  private readonly random: () => number;
  private readonly errorBackoff: BackoffPolicy;
  private readonly adaptive: boolean;
  private readonly cacheLimit: number;
  private groups: ReadonlyMap<string, readonly string[]> = new Map();
  private lastReaders: readonly ReaderInfo[] = [];
  private readonly cache = new Map<string, readonly string[]>();
  private cacheWeight = 0;
  private readonly sortedGroups = new Map<string, readonly string[]>();

  /**
   * `profiles`: Accumulo's profile JSON, as text or parsed; absent = DEFAULT_PROFILES.
   * Throws SHX_BAD_CONFIG naming every problem found.
   */
  constructor(profiles: unknown = DEFAULT_PROFILES, options: ReaderSelectorOptions = {}) {
    this.profiles = loadProfiles(profiles);
    this.defaultProfile = this.profiles.find((p) => p.isDefault)!;
    const byScanType = new Map<string, Profile>();
    for (const profile of this.profiles) for (const type of profile.scanTypes) byScanType.set(type, profile);
    this.byScanType = byScanType;
    this.random = options.random ?? Math.random;
    this.errorBackoff = withJitter(ERROR_BACKOFF, 0.2, this.random);
    this.adaptive = options.adaptive ?? false;
    this.cacheLimit = options.cacheLimit ?? 1_000_000;
  }

  /** The profile a scan type activates; none or unknown -> the default profile. */
  profileFor(scanType?: string): Profile {
    return (scanType === undefined ? undefined : this.byScanType.get(scanType)) ?? this.defaultProfile;
  }

  select(input: SelectInput): Selection {
    const profile = this.profileFor(input.scanType);
    const attempts = input.attempts ?? [];
    const attempt = attempts.length;
    const plan = Math.min(attempt, profile.plans.length - 1);
    const members = this.readersOf(input.readers, profile.group);
    if (members.length === 0) {
      return {
        reader: undefined,
        busyTimeoutMs: 0,
        delayMs: 0,
        candidates: [],
        choices: [],
        profile: profile.name,
        group: profile.group,
        attempt,
        plan,
        timeToWaitMs: profile.timeToWaitMs,
      };
    }
    const { servers, salt } = profile.plans[plan]!;
    const k = candidateCount(servers, members.length);
    const candidates = this.candidates(members, profile.group, input.collection, input.shard, salt, k);
    let choices = candidates;
    let errors = 0;
    if (attempt > 0) {
      const tried = new Set<string>();
      for (const a of attempts) {
        tried.add(a.reader);
        if (a.result === 'error') errors++;
      }
      const untried = candidates.filter((address) => !tried.has(address));
      if (untried.length > 0) choices = untried;
    }
    return {
      reader: this.pick(choices, input.stats),
      busyTimeoutMs: busyTimeoutMs(profile, attempt),
      delayMs: errors <= 0 ? 0 : this.errorBackoff(errors),
      candidates,
      choices,
      profile: profile.name,
      group: profile.group,
      attempt,
      plan,
      timeToWaitMs: profile.timeToWaitMs,
    };
  }

  private pick(choices: readonly string[], stats: ReadonlyMap<string, ReaderStats> | undefined): string {
    const pool = this.adaptive && stats !== undefined ? bestRanked(choices, stats) : choices;
    if (pool.length === 1) return pool[0]!;
    const index = Math.min(pool.length - 1, Math.floor(this.random() * pool.length));
    return pool[index]!;
  }

  private candidates(
    members: readonly string[],
    group: string,
    collection: string,
    shard: string,
    salt: string,
    k: number,
  ): readonly string[] {
    if (k >= members.length) return this.wholeGroup(group, members);
    const key = field(group) + field(collection) + field(shard) + field(salt) + k;
    const known = this.cache.get(key);
    if (known !== undefined) return known;
    const computed = Object.freeze(rendezvousCandidates(members, { collection, shard, salt }, k));
    // Bounded by the addresses held, as Accumulo bounds its cache by weight.
    for (const [oldest, set] of this.cache) {
      if (this.cacheWeight + k <= this.cacheLimit) break;
      this.cache.delete(oldest);
      this.cacheWeight -= set.length;
    }
    this.cache.set(key, computed);
    this.cacheWeight += k;
    return computed;
  }

  // k >= n: every shard's set is the whole group, so one copy serves them all.
  private wholeGroup(group: string, members: readonly string[]): readonly string[] {
    let sorted = this.sortedGroups.get(group);
    if (sorted === undefined) {
      sorted = Object.freeze([...members].sort(compareStrings));
      this.sortedGroups.set(group, sorted);
    }
    return sorted;
  }

  // The readers of one group. The memo of candidate sets is valid only for one reader set, so
  // it is dropped whenever any group's membership differs from the previous call's. The list
  // is compared by content, not identity, so a caller may reuse and mutate its array.
  private readersOf(readers: readonly ReaderInfo[], group: string): readonly string[] {
    if (!sameList(this.lastReaders, readers)) {
      const sets = new Map<string, Set<string>>();
      for (const reader of readers) {
        const name = groupOf(reader);
        let members = sets.get(name);
        if (members === undefined) sets.set(name, (members = new Set()));
        members.add(reader.address);
      }
      if (!sameGroups(this.groups, sets)) {
        this.cache.clear();
        this.cacheWeight = 0;
        this.sortedGroups.clear();
        this.groups = new Map([...sets].map(([name, members]) => [name, [...members]]));
      }
      this.lastReaders = readers.map((r) => ({ address: r.address, group: groupOf(r) }));
    }
    return this.groups.get(group) ?? [];
  }
}

function groupOf(reader: ReaderInfo): string {
  return reader.group === undefined || reader.group === '' ? DEFAULT_GROUP : reader.group;
}

function sameList(before: readonly ReaderInfo[], after: readonly ReaderInfo[]): boolean {
  if (before.length !== after.length) return false;
  for (let i = 0; i < after.length; i++) {
    const was = before[i]!;
    const is = after[i]!;
    if (was.address !== is.address || was.group !== groupOf(is)) return false;
  }
  return true;
}

function sameGroups(
  before: ReadonlyMap<string, readonly string[]>,
  after: ReadonlyMap<string, ReadonlySet<string>>,
): boolean {
  if (before.size !== after.size) return false;
  for (const [group, previous] of before) {
    const now = after.get(group);
    if (now === undefined || now.size !== previous.length) return false;
    for (const address of previous) if (!now.has(address)) return false;
  }
  return true;
}

// ES sorts readers without stats first, so that each gets measured; ties stay random.
function bestRanked(choices: readonly string[], stats: ReadonlyMap<string, ReaderStats>): readonly string[] {
  let best = Infinity;
  let pool: string[] = [];
  for (const address of choices) {
    const known = stats.get(address);
    const rank = known === undefined ? -Infinity : adaptiveRank(known, stats.size);
    if (rank < best) {
      best = rank;
      pool = [address];
    } else if (rank === best) {
      pool.push(address);
    }
  }
  return pool.length > 0 ? pool : choices;
}

