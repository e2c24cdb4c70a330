// The client's one retry loop: every request of the smart client (plain operations, batches,
// export pages, eventual reads) is sent by `RequestExecutor.run`, with one classification of
// failures (host-availability.ts), the retry decision of the node's loops (distrib/retry.ts:
// budget, backoff, the one Deadline of the caller's timeoutMs and signal), and the job's stop.
// Around each attempt:
// - before: a suspension that ended while its jobs were stopped has the state read first; a job
//   that would run on fewer than minHosts hosts stops; a walk whose shard has no leader (or only
//   suspended hosts) waits, re-reading the state, until one is listed (no retry budget is spent);
// - after a failure: a host-unavailable one suspends the host or stops the job (direct mode;
//   a gateway is never suspended); an answer that says the state is stale has it read again;
//   retryable failures are tried again after a pause, up to the job's maxRetries, never past
//   the deadline (a retry whose pause would end past it is not made: SHX_TIMEOUT names the
//   failure that ended the operation);
// - every failed attempt is reported, saying whether a retry follows and whether an update
//   that failed so far may have been applied (indeterminate).
import type { Logger } from 'pino';
import { ShardexError, isShardexError } from '../errors.js';
import type { Deadline } from '../distrib/deadline.js';
import { decideRetry, sleep, type BackoffPolicy } from '../distrib/retry.js';
import type { ClusterSnapshot } from './cluster-state.js';
import { classifyFailure, minHostsError, type HostAvailability, type SuspensionOwner } from './host-availability.js';
import type { RetryInfo } from './types.js';

/** The failover context of one job (a batcher) or of one plain operation. */
export interface JobContext extends SuspensionOwner {
  readonly minHosts: number;
  readonly maxRetries: number;
  /** The reason the job was stopped, if it was: no new attempt is made. */
  stopReason(): unknown;
  stop(reason: unknown): void;
  /** Aborted when the job stops (or its deadline passes): wakes pauses and parked work. */
  readonly signal?: AbortSignal;
}

/** Where a request goes. */
export type Route =
  /** A shard's leader, else (DMSDK: batchNumber % hosts) a usable host that forwards. */
  | { readonly to: 'leader'; readonly collection: string; readonly shard: string; readonly spread: number; readonly parkWithoutLeader?: boolean }
  /** Any usable host (it forwards or fans out); `preferred` first when it names a usable one. */
  | { readonly to: 'any'; readonly spread: number; readonly preferred?: () => string | undefined }
  /** The request picks its servers itself (eventual reads: the scan-server selector). */
  | { readonly to: 'self' };

/** One failed attempt, as the caller's listeners see it. */
export interface AttemptFailure extends RetryInfo {
  /** Another attempt follows. */
  readonly retrying: boolean;
  /** An update that failed so far may have been applied (some attempt's outcome is unknown). */
  readonly indeterminate: boolean;
}

export interface Request<T> {
  readonly route: Route;
  /** Sends one attempt to `host` (undefined for `self` routes). */
  readonly send: (host: string | undefined) => Promise<T>;
  /** An update (add, delete): track whether a failed attempt may have been applied. */
  readonly update?: boolean;
  /** The first attempt goes to this host (a listener re-applied to the host that served its page). */
  readonly firstHost?: string;
  /**
   * The host a failure is to be blamed on (default: the attempt's); undefined: on no host of the
   * cluster (e.g. a listener's local pipe), so nothing is suspended.
   */
  readonly hostOf?: (err: unknown, host: string | undefined) => string | undefined;
  /** Retry only failures that make a host unavailable (DMSDK's RetryListener), not every retryable one. */
  readonly onlyHostUnavailable?: boolean;
  readonly onFailure?: (f: AttemptFailure) => void;
  /** A `leader` route with parkWithoutLeader: told when the work starts and stops waiting for a leader. */
  readonly onParked?: (parked: boolean) => void;
  /**
   * The caller's deadline and cancellation: its end rejects (SHX_TIMEOUT naming the last failed
   * attempt, or the signal's reason), and no retry pauses past it.
   */
  readonly deadline?: Deadline | undefined;
}

export type Outcome<T> =
  | { readonly ok: true; readonly value: T; readonly host: string | undefined; readonly attempts: number }
  | { readonly ok: false; readonly error: unknown; readonly host: string | undefined; readonly attempts: number; readonly indeterminate: boolean };

/** What the executor needs of the client. */
export interface ExecutorHost {
  /** `gateway`: one URL for the whole cluster; no leader routing, no suspension. */
  readonly gateway: string | undefined;
  readonly hosts: HostAvailability;
  readonly backoff: BackoffPolicy;
  readonly logger: Logger;
  state(): ClusterSnapshot;
  loaded(): boolean;
  refresh(): Promise<unknown>;
}

const STALE_STATE_CODES = new Set(['SHX_NOT_LEADER', 'SHX_NO_LEADER', 'SHX_STALE_EPOCH']);

export class RequestExecutor {
  /** The latest failed attempt of the requests run under each deadline: its SHX_TIMEOUT names it. */
  private readonly lastFailures = new WeakMap<Deadline, unknown>();

  constructor(private readonly c: ExecutorHost) {}

  /** The error that ends the operation of `deadline` now (naming its last failed attempt), if it is over. */
  ended(deadline: Deadline | undefined): unknown {
    if (deadline === undefined) return undefined;
    const last = this.lastFailures.get(deadline);
    return deadline.ended(last instanceof Error ? `the last attempt failed: ${last.message}` : undefined, last);
  }

  /** The listed data hosts that are not suspended (the gateway, in gateway mode). */
  usableHosts(): string[] {
    if (this.c.gateway !== undefined) return [this.c.gateway];
    return this.c.state().dataHosts().filter((h) => !this.c.hosts.isSuspended(h));
  }

  /** The host an attempt goes to. */
  pick(route: Route, attempt: number): string | undefined {
    if (route.to === 'self') return undefined;
    if (this.c.gateway !== undefined) return this.c.gateway;
    const first = route.to === 'leader' ? this.c.state().leaderHost(route.collection, route.shard) : route.preferred?.();
    if (first !== undefined && !this.c.hosts.isSuspended(first)) return first;
    const usable = this.usableHosts();
    if (usable.length === 0) {
      throw new ShardexError('SHX_UNAVAILABLE', `no usable host: the cluster state lists ${this.c.state().dataHosts().length} data node(s), suspended: ${[...this.c.hosts.suspended].join(', ') || 'none'}`);
    }
    return usable[(route.spread + attempt - 1) % usable.length]!;
  }

  /** No host can serve the shard: the state lists no live leader, or all its replicas' hosts are suspended. */
  shardUnserved(collection: string, shard: string): boolean {
    const s = this.c.state();
    const view = s.collection(collection)?.shards.find((x) => x.name === shard);
    if (!view) return false; // unknown: let the node say so
    const leader = s.leaderHost(collection, shard);
    if (leader === undefined) return true;
    if (this.c.gateway !== undefined) return false;
    const hosts = [leader, ...view.replicas.map((r) => s.httpOf(r.node)).filter((h): h is string => h !== undefined)];
    return hosts.every((h) => this.c.hosts.isSuspended(h));
  }

  /**
   * Sends `req` with failover and retries; never throws. The end of the caller's deadline (or
   * its abort) is a failed outcome too, so that what the attempts made of an update (how many,
   * and whether one may have been applied) reaches the caller with it.
   */
  async run<T>(job: JobContext, req: Request<T>): Promise<Outcome<T>> {
    let indeterminate = false;
    let spent = 0;
    let host: string | undefined;
    const fail = (error: unknown, attempts: number): Outcome<T> => ({ ok: false, error, host, attempts, indeterminate });
    const deadline = req.deadline;
    const pauseSignal = anySignal(deadline?.signal, job.signal);
    for (let attempt = 1; ; attempt++) {
      const stopped = job.stopReason();
      if (stopped !== undefined) return fail(stopped, attempt - 1);
      const ended = this.ended(deadline);
      if (ended !== undefined) return fail(ended, attempt - 1);
      try {
        await this.beforeAttempt(job, req, pauseSignal);
        const reason = job.stopReason();
        if (reason !== undefined) return fail(reason, attempt - 1);
        host = attempt === 1 && req.firstHost !== undefined ? req.firstHost : this.pick(req.route, attempt);
      } catch (err) {
        const reason = this.ended(deadline) ?? job.stopReason();
        return fail(reason ?? err, attempt - 1);
      }
      try {
        return { ok: true, value: await req.send(host), host, attempts: attempt };
      } catch (err) {
        // Recorded first: an attempt cut short by the deadline or an abort may have been applied.
        if (deadline) this.lastFailures.set(deadline, err);
        const failure = classifyFailure(err, this.c.hosts.codes);
        if (req.update && failure.indeterminate) indeterminate = true;
        const cutShort = this.ended(deadline);
        if (cutShort !== undefined) {
          req.onFailure?.({ host: host ?? '', error: err, attempt, hostUnavailable: false, suspended: false, delayMs: 0, retrying: false, indeterminate });
          return fail(cutShort, attempt);
        }
        const blamed = req.hostOf ? req.hostOf(err, host) : host;
        const decision = this.c.gateway === undefined && blamed !== undefined && failure.hostUnavailable ? this.c.hosts.onFailure(blamed, err, this.c.state().dataHosts(), job.minHosts, job) : undefined;
        const info = { host: blamed ?? host ?? '', error: err, attempt, hostUnavailable: decision !== undefined, suspended: decision?.action === 'suspend' };
        if (decision?.action === 'stop') {
          const stop = minHostsError(blamed, decision.remaining, job.minHosts, err);
          job.stop(stop);
          req.onFailure?.({ ...info, delayMs: 0, retrying: false, indeterminate });
          return fail(stop, attempt);
        }
        // The state may name a new leader by now (Solr re-reads it on comm errors and stale leaders).
        const code = isShardexError(err) ? err.code : undefined;
        if (decision !== undefined || req.route.to === 'self' || (code !== undefined && STALE_STATE_CODES.has(code))) await this.c.refresh().catch(() => undefined);
        const route = req.route;
        // A walk waits for its shard's leader without spending its retry budget (no fixed budget).
        const parks = route.to === 'leader' && route.parkWithoutLeader === true && this.shardUnserved(route.collection, route.shard);
        const retryable = (decision !== undefined || (failure.retryable && !req.onlyHostUnavailable)) && job.stopReason() === undefined;
        const next = decideRetry(
          { maxRetries: parks ? Infinity : job.maxRetries, backoff: parks ? NO_PAUSE : this.c.backoff, retryable: () => retryable },
          err,
          parks ? 1 : spent + 1,
          deadline,
        );
        if (!next.retry) {
          req.onFailure?.({ ...info, delayMs: 0, retrying: false, indeterminate });
          // Cut short by the deadline: say so, naming this failure (as the deadline's end would).
          return fail(next.why === 'deadline' ? deadline!.timeout(`a retry would end past it; the last attempt failed: ${(err as Error).message}`, err) : err, attempt);
        }
        if (!parks) spent++;
        const delayMs = next.pauseMs;
        req.onFailure?.({ ...info, delayMs, retrying: true, indeterminate });
        this.c.logger.debug({ host, attempt, delayMs, err: (err as Error).message }, 'retrying');
        if (delayMs > 0) await this.pause(delayMs, deadline, pauseSignal);
      }
    }
  }

  /** Sends `req` and returns its value, or throws the error it failed with. */
  async value<T>(job: JobContext, req: Request<T>): Promise<T> {
    const out = await this.run(job, req);
    if (out.ok) return out.value;
    throw out.error;
  }

  private async beforeAttempt(job: JobContext, req: Request<unknown>, wake: AbortSignal | undefined): Promise<void> {
    if (this.c.gateway !== undefined) {
      if (req.route.to === 'leader' && req.route.parkWithoutLeader) await this.park(job, req, req.route.collection, req.route.shard, wake);
      return;
    }
    await this.c.hosts.refreshIfDue().catch(() => undefined);
    const live = this.usableHosts();
    if (this.c.loaded() && live.length < job.minHosts) {
      const stop = minHostsError(undefined, live, job.minHosts, undefined);
      job.stop(stop);
      throw stop;
    }
    if (req.route.to === 'leader' && req.route.parkWithoutLeader) await this.park(job, req, req.route.collection, req.route.shard, wake);
  }

  /** Waits, re-reading the state with the one backoff, until the shard has a usable leader. */
  private async park(job: JobContext, req: Request<unknown>, collection: string, shard: string, wake: AbortSignal | undefined): Promise<void> {
    if (!this.shardUnserved(collection, shard)) return;
    const since = Date.now();
    this.c.logger.info({ collection, shard }, 'shard has no leader (or only suspended hosts): its work waits for the cluster state to list one');
    req.onParked?.(true);
    for (let n = 1; this.shardUnserved(collection, shard); n++) {
      // Stopped (or past the deadline) while waiting: the work stays parked, the loop ends it.
      if (job.stopReason() !== undefined || req.deadline?.passed) return;
      await this.pause(this.c.backoff(n), req.deadline, wake);
      await this.c.refresh().catch(() => undefined);
    }
    req.onParked?.(false);
    this.c.logger.info({ collection, shard, waitedMs: Date.now() - since }, 'shard has a leader again: its work resumes');
  }

  /** A backoff pause, cut short by the deadline (the loop then ends the operation) or the job's stop. */
  private async pause(ms: number, deadline: Deadline | undefined, wake: AbortSignal | undefined): Promise<void> {
    try {
      await sleep(deadline ? Math.min(ms, deadline.remainingMs()) : ms, wake);
    } catch (err) {
      if (wake?.aborted) return; // cancelled or stopped: the loop sees it
      throw err;
    }
  }
}

/** Parked work retries as soon as the state lists a leader: park() did the waiting. */
const NO_PAUSE: BackoffPolicy = () => 0;

function anySignal(...signals: Array<AbortSignal | undefined>): AbortSignal | undefined {
  const s = signals.filter((x): x is AbortSignal => x !== undefined);
  return s.length === 0 ? undefined : s.length === 1 ? s[0] : AbortSignal.any(s);
}
