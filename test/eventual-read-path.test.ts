// Issue 14, reader items 2 and 5: later search phases of a shard use the busy timeout of the
// plan that chose the reader; a BUSY (or failed) later phase restarts the shard on another
// reader holding a snapshot at least as new; the read's timeoutMs bounds the leader's call too.
import { describe, expect, it, vi } from 'vitest';
import { Deadline } from '../src/distrib/deadline.js';
import type { NodeInfo } from '../src/coordination/index.js';
import { ShardexError } from '../src/errors.js';
import { EventualRouter } from '../src/read/eventual.js';
import { DEFAULT_READ_TIMEOUT_MS, ReadPath, ReaderSelector, type ServedBy } from '../src/read/index.js';
import type { EventualOptions } from '../src/read/snapshot-reader.js';

const reader = (name: string): NodeInfo => ({ name, http: '', grpc: '', role: 'reader' });
const PROFILES = [{ isDefault: true, maxBusyTimeout: '5m', busyTimeoutMultiplier: 8, attemptPlans: [{ servers: '1', busyTimeout: '250ms', salt: 'a' }, { servers: '100%', busyTimeout: '700ms' }] }];

interface Sent {
  readonly node: string;
  readonly kind?: string;
  readonly eventual?: EventualOptions;
  readonly timeoutMs?: number;
}

function setup(answer: (s: Sent) => unknown, readers: NodeInfo[] = [reader('r1'), reader('r2'), reader('r3')]) {
  const sent: Sent[] = [];
  const transport = {
    leader: () => 'leader',
    call: async <T>(node: string, _method: 'get' | 'search', body: object, timeoutMs?: number): Promise<T> => {
      const b = body as { kind?: string; eventual?: EventualOptions };
      const s: Sent = { node, ...(b.kind !== undefined && { kind: b.kind }), ...(b.eventual && { eventual: b.eventual }), ...(timeoutMs !== undefined && { timeoutMs }) };
      sent.push(s);
      const out = await answer(s);
      if (out instanceof Error) throw out;
      return out as T;
    },
  };
  let path: ReadPath;
  const router = new EventualRouter({ selector: new ReaderSelector(PROFILES, { random: () => 0 }), readers: () => readers, call: (r, b, e) => path.callReader(r, b, e) });
  path = new ReadPath(transport, router);
  return { path, sent };
}

const snapshotOf: Record<string, number> = { r1: 5, r2: 5, r3: 9 };

describe('later search phases on a reader', () => {
  it('wait for a slot as long as the plan that chose the reader says, on that same reader', async () => {
    const { path, sent } = setup((s) => ({ snapshot: snapshotOf[s.node], result: {} }));
    const servedBy = {};
    const [s1] = path.searchers('c', ['shard1'], { consistency: 'eventual' }, servedBy);
    await s1!.stats({});
    await s1!.query({}, {} as never);
    await s1!.fetch(['a'], undefined);
    expect(sent.map((s) => [s.node, s.kind, s.eventual?.busyTimeoutMs])).toEqual([
      [sent[0]!.node, 'stats', 250],
      [sent[0]!.node, 'query', 250],
      [sent[0]!.node, 'fetch', 250],
    ]);
  });

  it('restarts the shard on another reader after a BUSY later phase, needing a snapshot at least as new', async () => {
    let first: string | undefined;
    const { path, sent } = setup((s) => {
      first ??= s.node;
      if (s.kind === 'fetch' && s.node === first) return new ShardexError('SHX_BUSY', 'reader busy');
      return { snapshot: snapshotOf[s.node], result: [{ id: 'a' }] };
    });
    const servedBy: Record<string, ServedBy> = {};
    const [s1] = path.searchers('c', ['shard1'], { consistency: 'eventual' }, servedBy);
    await s1!.stats({});
    const docs = await s1!.fetch(['a'], undefined);
    expect(docs).toEqual([{ id: 'a' }]);
    const fetches = sent.filter((s) => s.kind === 'fetch');
    expect(fetches).toHaveLength(2);
    expect(fetches[1]!.node).not.toBe(first);
    // The second plan's busy timeout, and the snapshot the earlier phase read as the floor.
    expect(fetches[1]!.eventual).toEqual({ busyTimeoutMs: 700, minVersion: snapshotOf[first!] });
    expect(servedBy.shard1).toMatchObject({ node: fetches[1]!.node, restarts: 1, busy: 1, fallback: false });
  });

  it('restarts after a failed later phase too (the reader went away between phases)', async () => {
    let first: string | undefined;
    const { path, sent } = setup((s) => {
      first ??= s.node;
      if (s.kind === 'query' && s.node === first) return new ShardexError('SHX_UNAVAILABLE', 'node is shutting down');
      return { snapshot: 5, result: {} };
    });
    const servedBy: Record<string, ServedBy> = {};
    const [s1] = path.searchers('c', ['shard1'], { consistency: 'eventual' }, servedBy);
    await s1!.stats({});
    await s1!.query({}, {} as never);
    expect(sent.filter((s) => s.kind === 'query').map((s) => s.node)).toEqual([first, expect.not.stringMatching(first!)]);
    expect(servedBy.shard1).toMatchObject({ restarts: 1, errors: 1 });
  });
});

describe('the read deadline on the read path', () => {
  it('gives the leader\'s call what is left of timeoutMs', async () => {
    const { path, sent } = setup(() => [null]);
    await path.get('c', 'shard1', ['a'], { timeoutMs: 2000 });
    expect(sent[0]!.node).toBe('leader');
    expect(sent[0]!.timeoutMs).toBeLessThanOrEqual(2000);
    expect(sent[0]!.timeoutMs).toBeGreaterThan(0);
  });

  it('ends an eventual get with SHX_TIMEOUT while the reader keeps it queued', async () => {
    const { path } = setup(() => new Promise(() => undefined));
    await expect(path.get('c', 'shard1', ['a'], { consistency: 'eventual', timeoutMs: 50 })).rejects.toMatchObject({ code: 'SHX_TIMEOUT' });
  });

  it('ends an eventual search phase with SHX_TIMEOUT when the signal\'s timeout fires', async () => {
    let n = 0;
    const { path } = setup(() => (++n === 1 ? { snapshot: 5, result: {} } : new Promise(() => undefined)));
    const [s1] = path.searchers('c', ['shard1'], { consistency: 'eventual', signal: AbortSignal.timeout(50) }, {});
    await s1!.stats({});
    await expect(s1!.query({}, {} as never)).rejects.toMatchObject({ code: 'SHX_TIMEOUT' });
  });

  it('follows the caller\'s own deadline, and gives one with neither a timeout nor a signal the read\'s default', async () => {
    const { path } = setup(() => new Promise(() => undefined));
    const own = Deadline.after(40, { what: 'getting c/a' });
    await expect(path.get('c', 'shard1', ['a'], { consistency: 'eventual', deadline: own })).rejects.toMatchObject({ code: 'SHX_TIMEOUT', message: expect.stringMatching(/^getting c\/a did not complete within 40 ms/) });
    vi.useFakeTimers();
    try {
      const open = path.get('c', 'shard1', ['a'], { consistency: 'eventual', deadline: new Deadline({ what: 'getting c/a' }) }).catch((e: unknown) => e);
      await vi.advanceTimersByTimeAsync(DEFAULT_READ_TIMEOUT_MS);
      expect(await open).toMatchObject({ code: 'SHX_TIMEOUT', message: expect.stringMatching(/within 30000 ms/) });
    } finally {
      vi.useRealTimers();
    }
  });
});
