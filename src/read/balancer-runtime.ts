// The per-node shell around the pure ReadBalancer: it turns decisions into settled promises,
// owns the one deadline timer (unref'd: a queue never keeps a process alive), follows the
// settings source, and makes every slot go back exactly once, whether the read ends, fails or
// its client disconnects (a CancelSignal: an AbortSignal, or the HTTP layer's lighter hook).
import { ShardexError } from '../errors.js';
import type { Coordinator } from '../coordination/types.js';
import { READ_BALANCE_CONFIG, parseStoredSettings } from './balance-settings.js';
import { ReadBalancer, type BalanceSetting, type Grant, type Outcome, type ShardNeed, type SlotRow } from './balancer.js';

/** Where the settings live; the node backs it by coordination's /config/read_balance. */
export interface SettingsSource {
  load(): Promise<BalanceSetting[]>;
  /** Calls `onChange` whenever the settings may have changed; returns the unsubscribe. */
  watch(onChange: () => void): () => void;
}

export interface ReadBalancerRuntimeOptions {
  /** readBalance.queueSize: waiting requests per priority. */
  readonly queueSize: number;
  /** readBalance.defaultPriority: given to reads that name none. */
  readonly defaultPriority?: string;
  readonly source?: SettingsSource;
  /** Monotonic milliseconds; injected by tests. */
  readonly now?: () => number;
  /** Every outcome, for metrics (shardex_read_rejected_total{priority,reason}) and logs. */
  readonly onOutcome?: (outcome: Outcome) => void;
  /** A settings load that failed; the last good settings stay in force. */
  readonly onSettingsError?: (err: unknown) => void;
}

/**
 * What the runtime needs of a cancellation signal. An AbortSignal is one; the HTTP layer gives
 * each balanced response a lighter one (responseEnd), since an AbortController, its abort() and
 * its Event cost a read about 25 us in Node 20. Listeners run at most once.
 */
export interface CancelSignal {
  readonly aborted: boolean;
  readonly reason?: unknown;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

export interface ReadAcquire {
  /** The read's own priority (`priority=`); absent -> the node's default. */
  readonly priority?: string;
  readonly shards: readonly ShardNeed[];
  /** The read's whole timeout: time in the queue counts against it. */
  readonly timeoutMs: number;
  /** Aborted when the client disconnects: leaves the queue, or gives the slots back. */
  readonly signal?: CancelSignal;
}

/** Leave to read. `release` is idempotent; an abort of the acquire's signal also releases. */
export interface ReadPermit {
  readonly balanced: boolean;
  readonly priority?: string;
  /** Shard -> target ('primary' or a reader group); empty when unbalanced (route as before). */
  readonly targets: Readonly<Record<string, string>>;
  readonly waitedMs: number;
  /** When the read's timeout ends (clock of `now`): what is left for the shards' calls. */
  readonly deadline: number;
  release(): void;
}

/** A read waiting in a queue: it leaves the queue if its signal fires first. */
class Pending {
  constructor(
    readonly id: string,
    readonly priority: string | undefined,
    readonly started: number,
    readonly deadline: number,
    readonly signal: CancelSignal | undefined,
    readonly resolve: (p: ReadPermit) => void,
    readonly reject: (e: unknown) => void,
    private readonly abandon: (id: string) => void,
  ) {
    signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  private readonly onAbort = (): void => this.abandon(this.id);

  detach(): void {
    this.signal?.removeEventListener('abort', this.onAbort);
  }
}

const NO_TARGETS: Readonly<Record<string, string>> = Object.freeze({});

/**
 * A permit, with the slots it holds. A class rather than closures: a balanced read allocates one
 * object (and one listener when it has a signal) for its whole life.
 */
class Permit implements ReadPermit {
  private released = false;
  private readonly onAbort: (() => void) | undefined;

  constructor(
    readonly balanced: boolean,
    readonly priority: string | undefined,
    readonly targets: Readonly<Record<string, string>>,
    readonly waitedMs: number,
    readonly deadline: number,
    private readonly grants: readonly number[],
    private readonly signal: CancelSignal | undefined,
    private readonly giveBack: (grants: readonly number[]) => void,
  ) {
    // The signal now means "the client went away mid-read": give the slots back then.
    if (grants.length > 0 && signal) {
      this.onAbort = () => this.release();
      signal.addEventListener('abort', this.onAbort, { once: true });
    }
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    if (this.onAbort) this.signal!.removeEventListener('abort', this.onAbort);
    if (this.grants.length > 0) this.giveBack(this.grants);
  }
}

/** Map a balancer refusal onto the error catalog, once. */
export function outcomeError(o: Outcome): ShardexError | undefined {
  if (o.kind === 'timeout') return new ShardexError('SHX_TIMEOUT', o.message, { details: { priority: o.priority } });
  if (o.kind !== 'rejected') return undefined;
  // queue-full is 429 (retry later); down targets may come back (503); a read whose consistency
  // no configured target allows is the caller's mismatch: retrying the same read cannot help.
  const code = o.reason === 'queue-full' ? 'SHX_BUSY' : o.reason === 'down' ? 'SHX_UNAVAILABLE' : 'SHX_BAD_REQUEST';
  return new ShardexError(code, o.message, { details: { priority: o.priority, reason: o.reason } });
}

export class ReadBalancerRuntime {
  private readonly balancer: ReadBalancer;
  private readonly pending = new Map<string, Pending>();
  private readonly now: () => number;
  private timer: NodeJS.Timeout | undefined;
  private timerAt: number | undefined;
  private unwatch: (() => void) | undefined;
  private nextId = 1;
  private loading: Promise<void> | undefined;
  private reloadAgain = false;
  private stopped = false;

  constructor(private readonly o: ReadBalancerRuntimeOptions) {
    this.balancer = new ReadBalancer({ queueSize: o.queueSize });
    this.now = o.now ?? (() => performance.now());
  }

  /** Loads the settings and follows their changes. */
  async start(): Promise<void> {
    if (!this.o.source) return;
    this.unwatch = this.o.source.watch(() => void this.reload().catch(() => {}));
    await this.reload();
  }

  /** Re-reads the source now (e.g. right after this node wrote a setting); loads never overlap. */
  reload(): Promise<void> {
    if (!this.o.source) return Promise.resolve();
    if (this.loading) {
      this.reloadAgain = true;
      return this.loading;
    }
    const source = this.o.source;
    this.loading = (async () => {
      try {
        do {
          this.reloadAgain = false;
          let settings: BalanceSetting[];
          try {
            settings = await source.load();
          } catch (err) {
            this.o.onSettingsError?.(err);
            throw err;
          }
          if (!this.stopped) this.apply(this.balancer.replaceSettings(settings));
        } while (this.reloadAgain);
      } finally {
        this.loading = undefined;
      }
    })();
    return this.loading;
  }

  /** Waits for slots (or decides the read runs unbalanced); rejects with a ShardexError. */
  acquire(req: ReadAcquire): Promise<ReadPermit> {
    try {
      return Promise.resolve(this.admit(req));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * acquire without a promise when the answer is immediate (the usual case: a free slot and
   * nobody waiting, or no balancing): the permit itself, or the promise of one when the read must
   * wait. A refusal throws the ShardexError. For the node's hot path: an await costs a read more
   * than the balancer does.
   */
  admit(req: ReadAcquire): ReadPermit | Promise<ReadPermit> {
    if (this.stopped) throw stopping();
    const signal = req.signal;
    if (signal?.aborted) throw aborted(signal);
    const id = String(this.nextId++);
    const priority = req.priority ?? this.o.defaultPriority;
    const started = this.now();
    const deadline = started + req.timeoutMs;
    const admission = this.balancer.request({ id, priority, shards: req.shards, deadline }, started);
    if (admission.kind !== 'queued') {
      // Decided at once: nothing waits, so no pending entry, no promise and no queued listener.
      this.o.onOutcome?.(admission);
      const error = outcomeError(admission);
      if (error) throw error;
      return this.permit(admission, priority, started, deadline, signal, started);
    }
    return new Promise<ReadPermit>((resolve, reject) => {
      this.pending.set(id, new Pending(id, priority, started, deadline, signal, resolve, reject, this.abandon));
      this.arm();
    });
  }

  /** acquire, run `read`, release however it ends. */
  async run<T>(req: ReadAcquire, read: (permit: ReadPermit) => Promise<T>): Promise<T> {
    const permit = await this.acquire(req);
    try {
      return await read(permit);
    } finally {
      permit.release();
    }
  }

  setTargetUp(target: string, up: boolean): void {
    this.apply(this.balancer.setTargetUp(target, up));
  }

  /** POST /api/read-slots/reset: zeroes counters; running reads go on and release nothing twice. */
  reset(): void {
    this.apply(this.balancer.reset());
  }

  /** GET /api/read-slots. */
  snapshot(): SlotRow[] {
    return this.balancer.snapshot();
  }

  settings(): BalanceSetting[] {
    return this.balancer.settings();
  }

  /** For shardex_read_queue_length{priority}. */
  queueLength(priority: string): number {
    return this.balancer.queueLength(priority);
  }

  /** Stops following the settings and answers every queued read 503. Running reads keep their permits. */
  stop(): void {
    this.stopped = true;
    this.unwatch?.();
    this.unwatch = undefined;
    this.disarm();
    const queued = [...this.pending.values()];
    this.pending.clear();
    for (const p of queued) {
      p.detach();
      this.balancer.cancel(p.id);
      p.reject(stopping());
    }
  }

  // ---- internals ------------------------------------------------------------------------

  /** A queued read's client went away: it leaves the queue. */
  private readonly abandon = (id: string): void => {
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    p.detach();
    p.reject(aborted(p.signal));
    this.apply(this.balancer.cancel(id));
    this.arm();
  };

  /** A permit's release: its grants go back, once (the permit sees to that). */
  private readonly giveBack = (grants: readonly number[]): void => this.apply(this.balancer.release(grants));

  /**
   * Carries out decisions: each settles its read's promise exactly once. No decision (the usual
   * release) leaves the queues as they were, and so the timer.
   */
  private apply(outcomes: readonly Outcome[]): void {
    if (outcomes.length === 0) return;
    const now = this.now();
    for (const o of outcomes) {
      this.o.onOutcome?.(o);
      const p = this.pending.get(o.request);
      if (!p) {
        // Cannot happen for a run (only pending reads are queued); give the slots back anyway.
        if (o.kind === 'run') this.giveBack(grantIds(o.grants));
        continue;
      }
      this.pending.delete(o.request);
      p.detach();
      const error = outcomeError(o);
      if (error) p.reject(error);
      else p.resolve(this.permit(o, p.priority, p.started, p.deadline, p.signal, now));
    }
    this.arm();
  }

  /** The permit of a read that runs (`run`) or goes unbalanced; refusals never get one. */
  private permit(o: Outcome, priority: string | undefined, started: number, deadline: number, signal: CancelSignal | undefined, now: number): Permit {
    const waitedMs = Math.max(0, now - started);
    if (o.kind === 'run') return new Permit(true, o.priority, o.targets, waitedMs, deadline, grantIds(o.grants), signal, this.giveBack);
    return new Permit(false, o.kind === 'unbalanced' ? o.priority : priority, NO_TARGETS, waitedMs, deadline, NO_GRANTS, undefined, this.giveBack);
  }

  /** One timer, at the earliest queued deadline. */
  private arm(): void {
    const at = this.balancer.nextDeadline();
    if (at === this.timerAt) return;
    this.disarm();
    if (at === undefined || this.stopped) return;
    this.timerAt = at;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.timerAt = undefined;
      this.apply(this.balancer.tick(this.now()));
      this.arm();
    }, Math.max(0, at - this.now()));
    this.timer.unref();
  }

  private disarm(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = undefined;
  }
}

const NO_GRANTS: readonly number[] = Object.freeze([]);

function grantIds(grants: readonly Grant[]): number[] {
  return grants.map((g) => g.id);
}

function stopping(): ShardexError {
  return new ShardexError('SHX_UNAVAILABLE', 'the node is stopping');
}

function aborted(signal: CancelSignal | undefined): ShardexError {
  // No catalog code for "client went away" (nobody reads the answer); 503 is the closest.
  return new ShardexError('SHX_UNAVAILABLE', 'the read was cancelled: its client went away', { cause: signal?.reason });
}

/**
 * Settings from coordination's /config/read_balance. The Coordinator offers no watch on config
 * documents, so this polls (unref'd) and reports a change only when the document's text changed;
 * the node also calls runtime.reload() right after its own PUT/DELETE so that it sees it at once.
 */
export function coordinatorSettingsSource(coordinator: Pick<Coordinator, 'getConfig'>, options: { pollMs?: number } = {}): SettingsSource {
  const pollMs = options.pollMs ?? 1000;
  return {
    load: async () => parseStoredSettings(await coordinator.getConfig(READ_BALANCE_CONFIG)),
    watch(onChange) {
      let last: string | undefined;
      let busy = false;
      const poll = async (): Promise<void> => {
        if (busy) return;
        busy = true;
        try {
          const text = JSON.stringify((await coordinator.getConfig(READ_BALANCE_CONFIG)) ?? null);
          if (last !== undefined && text !== last) onChange();
          last = text;
        } catch {
          // Coordination unreachable: keep the settings in force, try again at the next poll.
        } finally {
          busy = false;
        }
      };
      void poll();
      const timer = setInterval(() => void poll(), pollMs);
      timer.unref();
      return () => clearInterval(timer);
    },
  };
}
