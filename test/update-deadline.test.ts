// One deadline through the nested retries of a write (issue 14, item 10): the node that
// receives an update forwards it to the shard's leader under the request's `timeoutMs` (the
// smart client sends what it will wait for each attempt), and schedules no forward that would
// end past it. Fake timers and a fake coordinator: the leader is listed but never answers.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { CommandDistributor, type UpdateTransport } from '../src/distrib/distributor.js';
import { Deadline } from '../src/distrib/retry.js';
import { UpdateProcessor } from '../src/distrib/update-processor.js';
import type { CollectionState, Coordinator } from '../src/coordination/index.js';
import { ShardexError } from '../src/errors.js';
import { formatRange, partitionRange } from '../src/hashrange/index.js';
import { parseSchema } from '../src/index/schema.js';
import { silentLogger } from '../src/logger.js';

const state: CollectionState = {
  name: 'c',
  numShards: 1,
  replicationFactor: 2,
  router: 'compositeId',
  shards: partitionRange(1).map((r) => ({ name: r.name, range: formatRange(r), replicas: [{ node: 'n1', state: 'active', type: 'leader-eligible' }, { node: 'n2', state: 'active', type: 'leader-eligible' }] })),
};

/** n1 receives updates; the coordinator lists n2 as the leader, and n2 never answers (or `send` says). */
function setup(forwardRetries: number, send?: UpdateTransport['send']): { processor: UpdateProcessor; forwards: () => number; close(): void } {
  const coordinator = { collection: () => state, leader: () => ({ node: 'n2', epoch: 1 }) } as unknown as Coordinator;
  const transport: UpdateTransport = {
    send:
      send ??
      (async (dest) => {
        throw new ShardexError('SHX_UNAVAILABLE', `node ${dest} is unavailable`);
      }),
  };
  const distributor = new CommandDistributor({ transport, flushOps: 1, lingerMs: 0, maxInFlight: 1 });
  let forwards = 0;
  const processor = new UpdateProcessor({
    self: 'n1',
    coordinator,
    replica: () => undefined,
    schema: () => parseSchema({}),
    perform: () => {},
    distributor,
    logger: silentLogger(),
    forwardRetries,
    backoff: (n) => 100 * n,
    onForward: () => forwards++,
  });
  return { processor, forwards: () => forwards, close: () => distributor.close() };
}

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('the deadline of an update', () => {
  it('ends the forwards to the leader: none is tried once a pause would end past it', async () => {
    const s = setup(25);
    // Forwards at 0 and 100; the next pause (200) would end at 300, the deadline.
    const p = s.processor.update('c', [{ id: 'a', doc: { id: 'a' } }], 1, Deadline.after(300)).catch((e: unknown) => e);
    await vi.runAllTimersAsync();
    const err = (await p) as ShardexError;
    expect(err.code).toBe('SHX_INDETERMINATE');
    expect(err.message).toMatch(/node n2 is unavailable/);
    expect(s.forwards()).toBe(2);
    s.close();
  });

  it('without one, the forwards go on to the retry budget', async () => {
    const s = setup(3);
    const p = s.processor.update('c', [{ id: 'a', doc: { id: 'a' } }], 1).catch((e: unknown) => e);
    await vi.runAllTimersAsync();
    expect(((await p) as ShardexError).code).toBe('SHX_INDETERMINATE');
    expect(s.forwards()).toBe(4);
    s.close();
  });

  it('answers a definite 504 (nothing written) when its time was up before any forward was sent', async () => {
    const s = setup(25);
    const err = (await s.processor.update('c', [{ id: 'a', doc: { id: 'a' } }], 1, Deadline.after(0)).catch((e: unknown) => e)) as ShardexError;
    expect(err).toMatchObject({ code: 'SHX_TIMEOUT', status: 504, details: { written: 0 } });
    expect(s.forwards()).toBe(0);
    s.close();
  });

  it('answers a definite 504 when its forward waited past the deadline for a slot and was never sent', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const sent: string[] = [];
    const s = setup(25, async (_dest, updates) => {
      sent.push(...updates.flatMap((u) => u.ops.map((o) => o.id)));
      await gate;
      return updates.map(() => ({ rf: 2, versions: {} }) as never);
    });
    const busy = s.processor.update('c', [{ id: 'first', doc: { id: 'first' } }], 1);
    await vi.advanceTimersByTimeAsync(1);
    const late = s.processor.update('c', [{ id: 'late', doc: { id: 'late' } }], 1, Deadline.after(100)).catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(150);
    release();
    await busy.catch(() => undefined);
    const err = (await late) as ShardexError;
    expect(err).toMatchObject({ code: 'SHX_TIMEOUT', details: { written: 0 } });
    expect(err.message).toMatch(/was not sent/);
    expect(sent).toEqual(['first']);
    s.close();
  });
});
