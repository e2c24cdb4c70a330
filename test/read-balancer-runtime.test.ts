import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ShardexError } from '../src/errors.js';
import {
  PriorityName,
  TargetName,
  eraseSettings,
  filterSettings,
  isBalanceName,
  parseFilter,
  parseSetting,
  parseStoredSettings,
  storedSettings,
  upsertSetting,
} from '../src/read/balance-settings.js';
import { PRIMARY_TARGET, type BalanceSetting } from '../src/read/balancer.js';
import { ReadBalancerRuntime, coordinatorSettingsSource, type CancelSignal, type ReadAcquire, type ReadPermit, type SettingsSource } from '../src/read/balancer-runtime.js';

const setting = (priority: string, target: string, weight: number, slots: number): BalanceSetting => ({ priority, target, weight, slots });

/** A source whose settings the test changes, announcing each change like a coordination watch. */
function memorySource(initial: BalanceSetting[]): SettingsSource & { set(s: BalanceSetting[]): void } {
  let current = initial;
  const listeners = new Set<() => void>();
  return {
    load: async () => current,
    watch(onChange) {
      listeners.add(onChange);
      return () => listeners.delete(onChange);
    },
    set(s) {
      current = s;
      for (const l of listeners) l();
    },
  };
}

async function runtime(settings: BalanceSetting[], extra: { queueSize?: number; defaultPriority?: string } = {}) {
  const source = memorySource(settings);
  const rt = new ReadBalancerRuntime({ queueSize: extra.queueSize ?? 10, ...(extra.defaultPriority && { defaultPriority: extra.defaultPriority }), source, now: () => Date.now() });
  await rt.start();
  return { rt, source };
}

/** A CancelSignal that shows its listeners; abort() calls each once, as an AbortSignal does. */
function countingSignal(): CancelSignal & { listeners: Set<() => void>; abort(): void } {
  const listeners = new Set<() => void>();
  return {
    aborted: false,
    listeners,
    addEventListener: (_type, l) => void listeners.add(l),
    removeEventListener: (_type, l) => void listeners.delete(l),
    abort() {
      (this as { aborted: boolean }).aborted = true;
      const all = [...listeners];
      listeners.clear();
      for (const l of all) l();
    },
  };
}

const onLowcost = (timeoutMs = 1000, signal?: CancelSignal): ReadAcquire => ({
  priority: 'report',
  shards: [{ shard: 'shard1', targets: ['lowcost'] }],
  timeoutMs,
  ...(signal && { signal }),
});

const taken = (rt: ReadBalancerRuntime, target = 'lowcost') => rt.snapshot().find((r) => r.target === target)?.taken;

async function settled<T>(p: Promise<T>): Promise<'pending' | 'settled'> {
  return Promise.race([p.then(() => 'settled' as const, () => 'settled' as const), new Promise<'pending'>((r) => setImmediate(() => r('pending')))]);
}

describe('ReadBalancerRuntime', () => {
  beforeEach(() => vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] }));
  afterEach(() => vi.useRealTimers());

  it('grants a permit at once when a slot is free, naming the target of each shard', async () => {
    const { rt } = await runtime([setting('report', 'lowcost', 1, 1)]);
    const p = await rt.acquire(onLowcost());
    expect(p).toMatchObject({ balanced: true, priority: 'report', targets: { shard1: 'lowcost' }, waitedMs: 0 });
    expect(taken(rt)).toBe(1);
  });

  it('admits without a promise when a slot is free, and with one when the read must wait', async () => {
    const { rt } = await runtime([setting('report', 'lowcost', 1, 1)], { queueSize: 1 });
    const first = rt.admit(onLowcost());
    expect(first).not.toBeInstanceOf(Promise);
    expect(first).toMatchObject({ balanced: true, targets: { shard1: 'lowcost' } });
    const second = rt.admit(onLowcost());
    expect(second).toBeInstanceOf(Promise);
    expect(() => rt.admit(onLowcost())).toThrow(expect.objectContaining({ code: 'SHX_BUSY' }));
    (first as ReadPermit).release();
    expect(await second).toMatchObject({ balanced: true });
  });

  it('gives the slots back exactly once however often release is called', async () => {
    const { rt } = await runtime([setting('report', 'lowcost', 1, 1)]);
    const first = await rt.acquire(onLowcost());
    const second = rt.acquire(onLowcost());
    const third = rt.acquire(onLowcost());
    first.release();
    first.release();
    expect(await settled(second)).toBe('settled');
    expect(await settled(third)).toBe('pending');
    expect(taken(rt)).toBe(1);
  });

  it('resolves a queued read when a slot is released, counting its wait', async () => {
    const { rt } = await runtime([setting('report', 'lowcost', 1, 1)]);
    const first = await rt.acquire(onLowcost());
    const waiting = rt.acquire(onLowcost());
    vi.advanceTimersByTime(30);
    first.release();
    expect(await waiting).toMatchObject({ balanced: true, waitedMs: 30 });
  });

  it('answers 504 when the timeout passes in the queue, and removes the read', async () => {
    const { rt } = await runtime([setting('report', 'lowcost', 1, 1)]);
    await rt.acquire(onLowcost());
    const waiting = rt.acquire(onLowcost(100));
    const err = waiting.catch((e: unknown) => e);
    vi.advanceTimersByTime(100);
    expect(await err).toMatchObject({ code: 'SHX_TIMEOUT', status: 504 });
    expect(rt.queueLength('report')).toBe(0);
  });

  it('still times out a queued read after an earlier one left the queue', async () => {
    const { rt } = await runtime([setting('report', 'lowcost', 1, 1)]);
    await rt.acquire(onLowcost());
    const signal = countingSignal();
    const first = rt.acquire(onLowcost(100, signal)).catch((e: unknown) => e);
    const second = rt.acquire(onLowcost(200)).catch((e: unknown) => e);
    vi.advanceTimersByTime(50);
    signal.abort();
    expect(await first).toMatchObject({ code: 'SHX_UNAVAILABLE' });
    vi.advanceTimersByTime(150);
    expect(await second).toMatchObject({ code: 'SHX_TIMEOUT', status: 504 });
    expect(rt.queueLength('report')).toBe(0);
  });

  it('answers 429 naming the priority when the queue is full', async () => {
    const { rt } = await runtime([setting('report', 'lowcost', 1, 1)], { queueSize: 1 });
    await rt.acquire(onLowcost());
    void rt.acquire(onLowcost());
    const err = (await rt.acquire(onLowcost()).catch((e: unknown) => e)) as ShardexError;
    expect(err).toMatchObject({ code: 'SHX_BUSY', status: 429 });
    expect(err.message).toContain('"report"');
  });

  it('removes a queued read whose client disconnects', async () => {
    const { rt } = await runtime([setting('report', 'lowcost', 1, 1)]);
    await rt.acquire(onLowcost());
    const ac = new AbortController();
    const waiting = rt.acquire(onLowcost(1000, ac.signal)).catch((e: unknown) => e);
    ac.abort();
    expect(await waiting).toBeInstanceOf(ShardexError);
    expect(rt.queueLength('report')).toBe(0);
  });

  it('gives the slots back when the client of a running read disconnects, and not again on release', async () => {
    const { rt } = await runtime([setting('report', 'lowcost', 1, 2)]);
    const ac = new AbortController();
    const p = await rt.acquire(onLowcost(1000, ac.signal));
    await rt.acquire(onLowcost());
    ac.abort();
    expect(taken(rt)).toBe(1);
    p.release();
    expect(taken(rt)).toBe(1);
  });

  it('leaves no listener on the signal of a read that ran at once, once it is released', async () => {
    const { rt } = await runtime([setting('report', 'lowcost', 1, 1)]);
    const signal = countingSignal();
    const p = await rt.acquire(onLowcost(1000, signal));
    expect(signal.listeners.size).toBe(1);
    p.release();
    expect(signal.listeners.size).toBe(0);
    expect(taken(rt)).toBe(0);
  });

  it('swaps the listener of a queued read for its running one when it starts, and gives its slot back on abort', async () => {
    const { rt } = await runtime([setting('report', 'lowcost', 1, 1)]);
    const first = await rt.acquire(onLowcost());
    const signal = countingSignal();
    const waiting = rt.acquire(onLowcost(1000, signal));
    expect(signal.listeners.size).toBe(1);
    first.release();
    const p = await waiting;
    expect(signal.listeners.size).toBe(1);
    signal.abort();
    expect(taken(rt)).toBe(0);
    expect(signal.listeners.size).toBe(0);
    p.release();
    expect(taken(rt)).toBe(0);
  });

  it('adds no listener for a read that runs unbalanced', async () => {
    const { rt } = await runtime([]);
    const signal = countingSignal();
    await rt.acquire(onLowcost(1000, signal));
    expect(signal.listeners.size).toBe(0);
  });

  it('releases the slots of run() when the read throws', async () => {
    const { rt } = await runtime([setting('report', 'lowcost', 1, 1)]);
    await expect(rt.run(onLowcost(), async () => Promise.reject(new Error('shard failed')))).rejects.toThrow('shard failed');
    expect(taken(rt)).toBe(0);
  });

  it("gives a read without priority the node's default priority", async () => {
    const { rt } = await runtime([setting('report', PRIMARY_TARGET, 1, 1)], { defaultPriority: 'report' });
    expect(await rt.acquire({ shards: [{ shard: 'shard1', targets: [PRIMARY_TARGET] }], timeoutMs: 100 })).toMatchObject({ balanced: true, priority: 'report' });
  });

  it('lets a read run unbalanced when its priority has no settings', async () => {
    const { rt } = await runtime([]);
    const p = await rt.acquire(onLowcost());
    expect(p).toMatchObject({ balanced: false, targets: {} });
    p.release();
  });

  it('follows the settings source live: removed settings release queued reads unbalanced', async () => {
    const { rt, source } = await runtime([setting('report', 'lowcost', 1, 1)]);
    await rt.acquire(onLowcost());
    const waiting = rt.acquire(onLowcost());
    source.set([]);
    expect(await waiting).toMatchObject({ balanced: false });
  });

  it('applies raised slots from the source at once', async () => {
    const { rt, source } = await runtime([setting('report', 'lowcost', 1, 1)]);
    await rt.acquire(onLowcost());
    const waiting = rt.acquire(onLowcost());
    source.set([setting('report', 'lowcost', 1, 2)]);
    expect(await waiting).toMatchObject({ balanced: true });
  });

  it('answers queued reads 503 when the node stops', async () => {
    const { rt } = await runtime([setting('report', 'lowcost', 1, 1)]);
    await rt.acquire(onLowcost());
    const waiting = rt.acquire(onLowcost()).catch((e: unknown) => e);
    rt.stop();
    expect(await waiting).toMatchObject({ code: 'SHX_UNAVAILABLE' });
  });
});

describe('coordinatorSettingsSource', () => {
  it('reads /config/read_balance, absent meaning no settings', async () => {
    const docs: Record<string, unknown> = {};
    const source = coordinatorSettingsSource({ getConfig: async (name) => docs[name] });
    expect(await source.load()).toEqual([]);
    docs.read_balance = storedSettings([setting('report', 'lowcost', 1, 2)]);
    expect(await source.load()).toEqual([setting('report', 'lowcost', 1, 2)]);
  });

  it('refuses a corrupt document with SHX_BAD_CONFIG', async () => {
    const source = coordinatorSettingsSource({ getConfig: async () => ({ settings: [{ priority: 'report', target: 'lowcost', weight: -1, slots: 1 }] }) });
    await expect(source.load()).rejects.toMatchObject({ code: 'SHX_BAD_CONFIG' });
  });
});

describe('read-balance settings (SET/GET/ERASE_READ_BALANCE)', () => {
  const all = [setting('report', 'lowcost', 1, 2), setting('report', PRIMARY_TARGET, 1, 1), setting('interactive', 'fast', 10, 1)];

  it('updates the setting of the same priority and target, else adds one', () => {
    expect(upsertSetting(all, setting('report', 'lowcost', 5, 4)).filter((s) => s.priority === 'report')).toEqual([
      setting('report', 'lowcost', 5, 4),
      setting('report', PRIMARY_TARGET, 1, 1),
    ]);
    expect(upsertSetting(all, setting('adhoc', 'lowcost', 1, 1))).toHaveLength(4);
  });

  it('erases one setting, or all of a priority when no target is named', () => {
    expect(eraseSettings(all, 'report', 'lowcost').removed).toBe(1);
    expect(eraseSettings(all, 'report')).toMatchObject({ removed: 2, settings: [setting('interactive', 'fast', 10, 1)] });
  });

  it('filters by priority and target; unknown ones give an empty list, not an error', () => {
    expect(filterSettings(all, parseFilter({ priority: 'report' }))).toHaveLength(2);
    expect(filterSettings(all, parseFilter({ priority: 'report', target: PRIMARY_TARGET }))).toEqual([setting('report', PRIMARY_TARGET, 1, 1)]);
    expect(filterSettings(all, parseFilter({ priority: 'nope' }))).toEqual([]);
    expect(filterSettings(all, parseFilter({ target: 'no such group!' }))).toEqual([]);
  });

  it('checks a PUT body and names, saying which field is wrong', () => {
    expect(parseSetting('report', 'lowcost', { weight: 2, slots: 3 })).toEqual(setting('report', 'lowcost', 2, 3));
    expect(() => parseSetting('report', 'lowcost', { weight: 2 })).toThrow(/slots/);
    expect(() => parseSetting('report', 'lowcost', { weight: 2, slots: 1.5 })).toThrow(/slots/);
    expect(() => parseSetting('report', 'lowcost', { weight: 2, slots: 1, extra: true })).toThrow(/extra/);
    expect(() => parseSetting('bad name', 'lowcost', { weight: 2, slots: 1 })).toThrow(/priority/);
  });

  it('checks a priority or target name without zod exactly as the schemas do', () => {
    for (const name of ['report', 'a', 'x'.repeat(64), 'x'.repeat(65), '', 'a b', 'a/b', 'é', 'ok.name-1_', 'new\nline', 7, undefined, null]) {
      expect(isBalanceName(name), JSON.stringify(name)).toBe(PriorityName.safeParse(name).success);
      expect(isBalanceName(name), JSON.stringify(name)).toBe(TargetName.safeParse(name).success);
    }
  });

  it('refuses a stored document with the same priority and target twice', () => {
    expect(() => parseStoredSettings({ settings: [setting('report', 'x', 1, 1), setting('report', 'x', 2, 2)] })).toThrow(/duplicate setting for report\/x/);
  });
});
