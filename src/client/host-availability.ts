// Host failover after MarkLogic DMSDK's HostAvailabilityListener and NoResponseListener.
// What a failed request means is a pure classification of its error; what it does to the host
// set is a pure decision of (failed host, error, listed hosts, suspended hosts, minHosts); a
// thin shell keeps the suspended set and the one refresh timer:
// - the host-unavailable list is the list: an error counts when a code in its `cause` chain
//   is on it (a message such as "socket hang up" stands for its code, and counts only when that
//   code is listed); a node that accepted the request and did not answer within the request
//   timeout counts too (NoResponseListener). An HTTP answer, of any status, never does;
// - such a failure suspends the host for `suspendTimeMs` if that leaves at least `minHosts`
//   hosts, else the job must stop; a host already suspended (or not listed) changes nothing;
// - one pending refresh timer: a new suspension replaces it; when it fires the cluster state is
//   read again and the suspensions end (a host comes back only if the state lists it) -- unless
//   every job whose failures armed it has stopped: then nothing is read for them, and the state
//   is read when the client next sends something.
import type { Logger } from 'pino';
import { ShardexError, isShardexError } from '../errors.js';
import { HOST_UNAVAILABLE_CODES, causeChain, codeMatches, errorCodes, isTransient } from '../distrib/retry.js';
import type { HostSuspendedEvent, HostsRestoredEvent, Scheduler } from './types.js';

export const DEFAULT_SUSPEND_TIME_MS = 10 * 60_000;
export const DEFAULT_MIN_HOSTS = 1;

/** The host-unavailable list by default: the house's one list (distrib/retry.ts). */
export const DEFAULT_HOST_UNAVAILABLE_CODES: readonly string[] = HOST_UNAVAILABLE_CODES;

/** Failures before any byte of the request left: an update that failed so was not applied. */
const BEFORE_SENDING = ['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT', 'ERR_SSL_*', 'ERR_TLS_*'];
const TLS_HANDSHAKE_MESSAGE = /before secure TLS connection was established/i;

/** 503 answers that say nothing was done (the node's definite refusals). */
const DEFINITE_503 = new Set(['SHX_NO_LEADER', 'SHX_NOT_LEADER', 'SHX_STARTING']);

/** The transport's error for an HTTP answer (any status), if the failure is one. */
function answerOf(err: unknown): ShardexError | undefined {
  for (const e of causeChain(err)) if (isShardexError(e) && typeof e.details?.status === 'number') return e;
  return undefined;
}

export interface FailureClass {
  /**
   * `answered`: the host sent an HTTP status; `no-response`: it accepted the request and did not
   * answer within the request timeout; `unreachable`: a socket, DNS or TLS error; `other`: anything else.
   */
  readonly kind: 'answered' | 'no-response' | 'unreachable' | 'other';
  /** The host counts as unavailable (suspend it, send the work elsewhere). */
  readonly hostUnavailable: boolean;
  /** The retry policy may try the request again. */
  readonly retryable: boolean;
  /** An update that failed this way may have been applied. */
  readonly indeterminate: boolean;
}

/** What a failed request means (pure). `codes` is the host-unavailable list. */
export function classifyFailure(err: unknown, codes: readonly string[]): FailureClass {
  const answer = answerOf(err);
  if (answer) {
    const status = answer.details!.status as number;
    // 5xx: the retry policy tries again; 4xx is a refusal, except 429 ("try later").
    return {
      kind: 'answered',
      hostUnavailable: false,
      retryable: status >= 500 || status === 429,
      indeterminate: status >= 500 && !(status === 503 && DEFINITE_503.has(answer.code)),
    };
  }
  if ([...causeChain(err)].some((e) => isShardexError(e) && e.code === 'SHX_TIMEOUT' && e.details?.noResponse === true)) {
    return { kind: 'no-response', hostUnavailable: true, retryable: true, indeterminate: true };
  }
  const found = errorCodes(err);
  if (found.length > 0) {
    const beforeSending = found.some((c) => codeMatches(c, BEFORE_SENDING)) || [...causeChain(err)].some((e) => e instanceof Error && TLS_HANDSHAKE_MESSAGE.test(e.message));
    return { kind: 'unreachable', hostUnavailable: found.some((c) => codeMatches(c, codes)), retryable: true, indeterminate: !beforeSending };
  }
  return { kind: 'other', hostUnavailable: false, retryable: isTransient(err), indeterminate: true };
}

export type HostFailureDecision =
  /** Not a host-unavailable failure: the ordinary retry policy decides. */
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
  if (!classifyFailure(input.error, input.codes).hostUnavailable) return { action: 'not-host-unavailable' };
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

/** Whoever's failure suspended a host: a job, which may stop; absent: the client's own operations. */
export interface SuspensionOwner {
  stopReason(): unknown;
}

export interface HostAvailabilityOptions {
  readonly suspendTimeMs: number;
  readonly codes: readonly string[];
  readonly scheduler: Scheduler;
  readonly now?: () => number;
  /** Reads the cluster state again and returns the hosts it lists. */
  readonly reload: () => Promise<readonly string[]>;
  readonly logger?: Logger;
  readonly onSuspended?: (e: HostSuspendedEvent) => void;
  readonly onRestored?: (e: HostsRestoredEvent) => void;
}

const CLIENT: SuspensionOwner = { stopReason: () => undefined };

export class HostAvailability {
  readonly codes: readonly string[];
  private readonly o: HostAvailabilityOptions;
  /** Suspended host -> when (a sequence number) and for whom. */
  private readonly suspensions = new Map<string, { seq: number; owner: SuspensionOwner }>();
  private seq = 0;
  private timer: unknown;
  private due = false;
  private refreshing: Promise<void> | undefined;
  private closed = false;

  constructor(opts: HostAvailabilityOptions) {
    this.o = opts;
    this.codes = opts.codes;
  }

  get suspended(): ReadonlySet<string> {
    return new Set(this.suspensions.keys());
  }

  isSuspended(host: string): boolean {
    return this.suspensions.has(host);
  }

  /** Whether a refresh timer is pending (there is never more than one). */
  get refreshPending(): boolean {
    return this.timer !== undefined;
  }

  /** The suspension is over but the state was not read (its jobs had stopped): read it before the next request. */
  get refreshDue(): boolean {
    return this.due;
  }

  /** Applies the decision for a failed request and returns it. */
  onFailure(host: string, error: unknown, listed: readonly string[], minHosts: number, owner?: SuspensionOwner): HostFailureDecision {
    const decision = decideHostFailure({ host, error, listed, suspended: this.suspended, minHosts, codes: this.codes });
    if (decision.action === 'suspend') {
      this.suspensions.set(host, { seq: ++this.seq, owner: owner ?? CLIENT });
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
      this.fire();
    }, this.o.suspendTimeMs);
    (this.timer as { unref?: () => void })?.unref?.();
  }

  private fire(): void {
    if (this.closed) return;
    // DMSDK's refresh task does nothing for a stopped batcher.
    const wanted = [...this.suspensions.values()].some((s) => s.owner.stopReason() === undefined);
    if (!wanted) {
      this.due = true;
      this.o.logger?.debug({ suspended: [...this.suspensions.keys()] }, 'suspension over, its jobs stopped: the cluster state is read when next needed');
      return;
    }
    void this.refresh();
  }

  /** Reads the state now if a suspension ended without it; concurrent callers share one read. */
  async refreshIfDue(): Promise<void> {
    if (this.due) await this.refresh();
  }

  private refresh(): Promise<void> {
    this.refreshing ??= this.reload().finally(() => (this.refreshing = undefined));
    return this.refreshing;
  }

  private async reload(): Promise<void> {
    if (this.closed) return;
    // A host suspended while the state is read stays suspended until its own timer.
    const upTo = this.seq;
    let listed: readonly string[];
    try {
      listed = await this.o.reload();
    } catch (err) {
      // Nobody answered: keep the suspensions and look again after another period.
      this.o.logger?.warn({ err: describe(err) }, 'could not re-read the cluster state after a suspension; trying again later');
      this.due = false;
      if (!this.closed && this.timer === undefined) this.armRefresh();
      return;
    }
    if (this.closed) return;
    this.due = false;
    const restored: string[] = [];
    const gone: string[] = [];
    for (const [h, s] of [...this.suspensions]) {
      if (s.seq > upTo) continue;
      (listed.includes(h) ? restored : gone).push(h);
      this.suspensions.delete(h);
    }
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
