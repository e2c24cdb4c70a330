// Issue 12: the HTTP layer's end-of-response signal (responseEnd), which a balanced read holds its
// slots until. It replaced an AbortController per response: the slots must still go back exactly
// once, when the response has been sent or when its client goes away, and a queued read whose
// client goes away must still leave the queue.
import { EventEmitter, once } from 'node:events';
import type { ServerResponse } from 'node:http';
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { responseEnd } from '../src/node/http/read-balance.js';
import { ReadBalancerRuntime, type ReadPermit } from '../src/read/balancer-runtime.js';

interface Held {
  /** Settles with the read's permit, or its refusal. */
  readonly permit: Promise<ReadPermit>;
  /** Resolves when the server has closed the response (sent, or its client went away). */
  readonly closed: Promise<unknown>;
  /** Lets the handler answer. */
  readonly answer: () => void;
}

describe('responseEnd', () => {
  let rt: ReadBalancerRuntime;
  let app: FastifyInstance;
  let url: string;
  let held: Held[];
  /** Emits 'held' when a read's server side has reached the balancer. */
  let arrivals: EventEmitter;
  const taken = () => rt.snapshot()[0]!.taken;

  async function serve(slots: number): Promise<void> {
    const settings = [{ priority: 'report', target: 'primary', weight: 1, slots }];
    rt = new ReadBalancerRuntime({ queueSize: 10, source: { load: async () => settings, watch: () => () => {} } });
    await rt.start();
    // As the node's balanced reads do: the slot is given back by the response's end, not by the handler.
    app.get('/read', async (_req, reply) => {
      let answer!: () => void;
      const answered = new Promise<void>((r) => (answer = r));
      const closed = once(reply.raw, 'close');
      const permit = rt.acquire({ priority: 'report', shards: [{ shard: 'shard1', targets: ['primary'] }], timeoutMs: 60_000, signal: responseEnd(reply)() });
      const h = { permit, closed, answer };
      held.push(h);
      arrivals.emit('held', h);
      await permit;
      await answered;
      return { ok: true };
    });
    url = await app.listen({ port: 0, host: '127.0.0.1' });
  }

  /** A GET whose server side has reached the balancer; `abort` disconnects its client. */
  async function read(): Promise<{ held: Held; response: Promise<Response | Error>; abort: () => void }> {
    const client = new AbortController();
    const arrived = once(arrivals, 'held') as Promise<[Held]>;
    const response = fetch(`${url}/read`, { signal: client.signal }).catch((err: Error) => err);
    const [h] = await arrived;
    return { held: h, response, abort: () => client.abort() };
  }

  beforeEach(() => {
    // Closes the connections of reads still held when a test ends, without waiting for them.
    app = Fastify({ forceCloseConnections: true });
    held = [];
    arrivals = new EventEmitter();
  });
  afterEach(async () => {
    for (const h of held) h.answer();
    rt.stop();
    await app.close();
  });

  it('gives the slot back once the response has been sent, and not again on release', async () => {
    await serve(2);
    const sent = await read();
    const other = await read();
    await Promise.all([sent.held.permit, other.held.permit]);
    expect(taken()).toBe(2);
    sent.held.answer();
    expect(((await sent.response) as Response).status).toBe(200);
    await sent.held.closed;
    expect(taken()).toBe(1);
    (await sent.held.permit).release();
    expect(taken()).toBe(1);
  });

  it('gives the slot back when the client disconnects mid-read, and not again when the read ends', async () => {
    await serve(2);
    const gone = await read();
    const other = await read();
    await Promise.all([gone.held.permit, other.held.permit]);
    gone.abort();
    await gone.held.closed;
    expect(taken()).toBe(1);
    gone.held.answer();
    (await gone.held.permit).release();
    expect(taken()).toBe(1);
    expect(await gone.response).toBeInstanceOf(Error);
  });

  it('takes a read whose client disconnects while it waits out of the queue', async () => {
    await serve(1);
    const running = await read();
    await running.held.permit;
    const queued = await read();
    expect(rt.queueLength('report')).toBe(1);
    queued.abort();
    await expect(queued.held.permit).rejects.toMatchObject({ code: 'SHX_UNAVAILABLE', message: expect.stringMatching(/client went away/) });
    expect(rt.queueLength('report')).toBe(0);
    expect(taken()).toBe(1);
  });

  it('is already aborted when made for a response that has closed: the read takes nothing', async () => {
    await serve(1);
    const signal = responseEnd({ raw: { closed: true } as ServerResponse } as FastifyReply)();
    expect(signal.aborted).toBe(true);
    await expect(rt.acquire({ priority: 'report', shards: [{ shard: 'shard1', targets: ['primary'] }], timeoutMs: 1000, signal })).rejects.toMatchObject({ code: 'SHX_UNAVAILABLE' });
    expect(taken()).toBe(0);
  });
});
