// Host failover after MarkLogic DMSDK's HostAvailabilityListener. The decision is a pure
// function of (failed host, error, listed hosts, suspended hosts, minHosts); a thin shell keeps
// the suspended set and the one refresh timer:
// - a host-unavailable error (matched through the whole cause chain) suspends the host for
//   `suspendTimeMs`, if that leaves at least `minHosts` hosts; otherwise the job must stop;
// - a failure of a host already suspended (or no longer listed) changes nothing; the caller
//   still retries the request elsewhere;
// - one pending refresh timer: a new suspension replaces it; when it fires the cluster state is
//   read again and the suspensions end: a host comes back only if the state lists it.
import type { Logger } from 'pino';
import { ShardexError } from '../errors.js';
import { HOST_UNAVAILABLE_CODES, isHostUnavailable } from '../distrib/retry.js';
import type { HostSuspendedEvent, HostsRestoredEvent, Scheduler } from './types.js';

export const DEFAULT_SUSPEND_TIME_MS = 10 * 60_000;
export const DEFAULT_MIN_HOSTS = 1;

export type HostFailureDecision =
  /** Not a host-unavailable error: the ordinary retry policy decides. */
  | { readonly action: 'not-host-unavailable' }
  /** The host is already suspended or not listed: change nothing, retry elsewhere. */
  | { readonly action: 'unchanged' }
  /** Suspend the host; `remaining` hosts stay usable. */
  | { readonly action: 'suspend'; readonly remaining: readonly string[] }
  /** Suspending would leave fewer than minHosts: stop the job, no retry. */
  | { readonly action: 'stop'; readonly remaining: readonly string[] };

export interface HostFailureInput {
  readonly host: string;
  readonly error: unknown;
  /** Hosts the current cluster state lists. */
  readonly listed: readonly string[];
  readonly suspended: ReadonlySet<string>;
  readonly minHosts: number;
  readonly codes: readonly string[];
}

/** What a failed request to `host` means for the host set (pure). */
export function decideHostFailure(input: HostFailureInput): HostFailureDecision {
  if (!isHostUnavailable(input.error, input.codes)) return { action: 'not-host-unavailable' };
  const usable = input.listed.filter((h) => !input.suspended.has(h));
  if (!usable.includes(input.host)) return { action: 'unchanged' };
  const remaining = usable.filter((h) => h !== input.host);
  // DMSDK: blacklist only while more than minHosts hosts are usable, else stop the job.
  return usable.length > input.minHosts ? { action: 'suspend', remaining } : { action: 'stop', remaining };
}

/** The error a job stops with when a host failure would leave fewer than minHosts hosts. */
export function minHostsError(host: string | undefined, remaining: readonly string[], minHosts: number, cause: unknown): ShardexError {
  const hosts = `${remaining.length} live host(s) (${remaining.join(', ') || 'none'})`;
  const message =
    host === undefined
      ? `stopping: the cluster lists only ${hosts}, fewer than minHosts ${minHosts}`
      : `stopping: host ${host} is unavailable, and without it only ${hosts} would remain, fewer than minHosts ${minHosts}`;
  return new ShardexError('SHX_UNAVAILABLE', message, { ...(cause !== undefined && { cause }), details: { reason: 'minHosts', ...(host && { host }), remaining, minHosts } });
}

export function isMinHostsError(err: unknown): err is ShardexError {
  return err instanceof ShardexError && err.details?.reason === 'minHosts';
}

export interface HostAvailabilityOptions {
  readonly suspendTimeMs: number;
  readonly codes?: readonly string[];
  readonly scheduler: Scheduler;
  readonly now?: () => number;
  /** Reads the cluster state again and returns the hosts it lists. */
  readonly reload: () => Promise<readonly string[]>;
  readonly logger?: Logger;
  readonly onSuspended?: (e: HostSuspendedEvent) => void;
  readonly onRestored?: (e: HostsRestoredEvent) => void;
}

export class HostAvailability {
  readonly codes: readonly string[];
  private readonly o: HostAvailabilityOptions;
  private readonly suspendedHosts = new Set<string>();
  private timer: unknown;
  private closed = false;

  constructor(opts: HostAvailabilityOptions) {
    if (!(Number.isFinite(opts.suspendTimeMs) && opts.suspendTimeMs >= 0)) {
      throw new ShardexError('SHX_BAD_CONFIG', `suspendTimeForHostUnavailableMs must be a duration in ms >= 0, got ${opts.suspendTimeMs}`);
    }
    this.o = opts;
    this.codes = opts.codes ?? HOST_UNAVAILABLE_CODES;
  }

  get suspended(): ReadonlySet<string> {
    return this.suspendedHosts;
  }

  isSuspended(host: string): boolean {
    return this.suspendedHosts.has(host);
  }

  /** Whether a refresh timer is pending (there is never more than one). */
  get refreshPending(): boolean {
    return this.timer !== undefined;
  }

  /** Applies the decision for a failed request and returns it. */
  onFailure(host: string, error: unknown, listed: readonly string[], minHosts: number): HostFailureDecision {
    const decision = decideHostFailure({ host, error, listed, suspended: this.suspendedHosts, minHosts, codes: this.codes });
    if (decision.action === 'suspend') {
      this.suspendedHosts.add(host);
      this.armRefresh();
      const until = (this.o.now ?? Date.now)() + this.o.suspendTimeMs;
      this.o.logger?.warn({ host, remaining: decision.remaining, until: new Date(until).toISOString(), err: describe(error) }, 'host unavailable: suspended');
      this.o.onSuspended?.({ host, error, remaining: decision.remaining, until });
    } else if (decision.action === 'stop') {
      this.o.logger?.error({ host, remaining: decision.remaining, minHosts }, 'host unavailable: would drop below minHosts');
    }
    return decision;
  }

  // One timer per client: a new suspension cancels the pending one (DMSDK).
  private armRefresh(): void {
    if (this.timer !== undefined) this.o.scheduler.clearTimeout(this.timer);
    this.timer = this.o.scheduler.setTimeout(() => {
      this.timer = undefined;
      void this.refresh();
    }, this.o.suspendTimeMs);
    (this.timer as { unref?: () => void })?.unref?.();
  }

  private async refresh(): Promise<void> {
    if (this.closed) return;
    let listed: readonly string[];
    try {
      listed = await this.o.reload();
    } catch (err) {
      // Nobody answered: keep the suspensions and look again after another period.
      this.o.logger?.warn({ err: describe(err) }, 'could not re-read the cluster state after a suspension; trying again later');
      if (!this.closed && this.timer === undefined) this.armRefresh();
      return;
    }
    if (this.closed) return;
    const restored: string[] = [];
    const gone: string[] = [];
    for (const h of this.suspendedHosts) (listed.includes(h) ? restored : gone).push(h);
    this.suspendedHosts.clear();
    this.o.logger?.info({ restored, gone }, 'suspension over: hosts listed by the cluster state are usable again');
    this.o.onRestored?.({ restored, gone });
  }

  close(): void {
    this.closed = true;
    if (this.timer !== undefined) this.o.scheduler.clearTimeout(this.timer);
    this.timer = undefined;
  }
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
