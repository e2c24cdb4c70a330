// Reads between nodes travel as frames on one long-lived Calls stream per destination (get and
// search; the other calls stay unary RPCs). Each frame is answered on its own: out of order, with
// its own error, its own timeout, and a broken stream fails only the reads waiting on it.
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { afterEach, describe, expect, it } from 'vitest';
import { ShardexError } from '../src/errors.js';
import { silentLogger } from '../src/logger.js';
import { currentRequestId, withRequestId } from '../src/request-id.js';
import { PeerClients, PeerServer, type PeerHandlers } from '../src/transport/index.js';
import { recordingHandlers } from './support/peer-handlers.js';
import { rejected as thrown } from './support/errors.js';

const log = silentLogger();
const servers: PeerServer[] = [];
const clients: PeerClients[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  for (const s of servers.splice(0)) s.forceClose();
});

async function serve(handlers: Partial<PeerHandlers>, calls: string[] = []): Promise<{ server: PeerServer; address: string }> {
  const server = new PeerServer({ ...recordingHandlers(calls), ...handlers }, log);
  servers.push(server);
  return { server, address: `127.0.0.1:${await server.listen('127.0.0.1', 0)}` };
}

function client(address: () => string, callTimeoutMs = 5000): PeerClients {
  const c = new PeerClients({ resolve: address, logger: log, callTimeoutMs });
  clients.push(c);
  return c;
}


const query = (q: string) => ({ collection: 'c', shard: 'shard1', kind: 'query', params: { q, limit: 10 } });
const get = (ids: string[]) => ({ collection: 'c', shard: 'shard1', ids });

/** A bare gRPC client of the service, to send frames PeerClients never sends and watch streams end. */
function rawClient(address: string): grpc.Client & Record<'calls' | 'updates', () => grpc.ClientDuplexStream<unknown, unknown>> {
  const pkg = protoLoader.loadSync(fileURLToPath(new URL('../proto/shardex.proto', import.meta.url)), { keepCase: false, longs: Number, defaults: true });
  const { Shardex } = (grpc.loadPackageDefinition(pkg) as unknown as { shardex: { Shardex: grpc.ServiceClientConstructor } }).shardex;
  return new Shardex(address, grpc.credentials.createInsecure()) as unknown as grpc.Client & Record<'calls' | 'updates', () => grpc.ClientDuplexStream<unknown, unknown>>;
}

/** A handler answer that waits for `release(q)`: lets a test decide the order in which reads end. */
function gate() {
  const waiting = new Map<string, () => void>();
  return {
    wait: (key: string) => new Promise<void>((r) => waiting.set(key, r)),
    release: (key: string) => waiting.get(key)!(),
    has: (key: string) => waiting.has(key),
  };
}

describe('the Calls stream', () => {
  it('answers many reads at once on one stream, each with its own answer, in the order they end', async () => {
    const g = gate();
    const { address } = await serve({
      search: async (r) => {
        const q = (r as { params: { q: string } }).params.q;
        await g.wait(q);
        return { q, requestId: currentRequestId() };
      },
      get: async (r) => (r as { ids: string[] }).ids.map((id) => ({ id, requestId: currentRequestId() })),
    });
    const c = client(() => address);
    const ended: string[] = [];
    const reads = ['a', 'b', 'c'].map((q) => withRequestId(`req-${q}`, () => c.call<{ q: string }>('n1', 'search', query(q))).then((r) => (ended.push(r.q), r)));
    await expect.poll(() => ['a', 'b', 'c'].every((q) => g.has(q))).toBe(true);
    // A get sent after them is answered while they wait.
    expect(await withRequestId('req-get', () => c.call('n1', 'get', get(['x', 'y'])))).toEqual([
      { id: 'x', requestId: 'req-get' },
      { id: 'y', requestId: 'req-get' },
    ]);
    g.release('c');
    g.release('a');
    g.release('b');
    expect(await Promise.all(reads)).toEqual([
      { q: 'a', requestId: 'req-a' },
      { q: 'b', requestId: 'req-b' },
      { q: 'c', requestId: 'req-c' },
    ]);
    expect(ended).toEqual(['c', 'a', 'b']);
  });

  it('fails only the read whose handler failed, with its error code, and says what was wrong with a bad request', async () => {
    const { address } = await serve({
      search: async (r) => {
        const q = (r as { params: { q: string } }).params.q;
        if (q === 'missing') throw new ShardexError('SHX_NOT_FOUND', "collection 'c' does not exist");
        if (q === 'bug') throw new TypeError('x is undefined');
        return { q };
      },
    });
    const c = client(() => address);
    const [missing, bug, fine] = await Promise.allSettled([c.call('n1', 'search', query('missing')), c.call('n1', 'search', query('bug')), c.call('n1', 'search', query('ok'))]);
    expect(missing).toMatchObject({ status: 'rejected', reason: { code: 'SHX_NOT_FOUND', status: 404, message: "collection 'c' does not exist" } });
    expect(bug).toMatchObject({ status: 'rejected', reason: { code: 'SHX_INTERNAL', message: 'x is undefined' } });
    expect(fine).toEqual({ status: 'fulfilled', value: { q: 'ok' } });
    const bad = await thrown(c.call('n1', 'get', { collection: 'c', shard: 'shard1', ids: 'not-a-list' }));
    expect(bad).toMatchObject({ code: 'SHX_BAD_REQUEST', status: 400 });
    expect(bad.message).toContain('ids');
    expect(await c.call('n1', 'search', query('after'))).toEqual({ q: 'after' });
  });

  it('times a read out on its own, and the stream goes on serving the others', async () => {
    const { address } = await serve({
      search: async (r) => {
        const q = (r as { params: { q: string } }).params.q;
        if (q === 'never') await new Promise(() => undefined);
        return { q };
      },
    });
    const c = client(() => address, 300);
    const late = await thrown(c.call('n1', 'search', query('never')));
    expect(late).toMatchObject({ code: 'SHX_TIMEOUT', retryable: true });
    expect(late.message).toContain('n1 did not answer in time');
    expect(await c.call('n1', 'search', query('next'))).toEqual({ q: 'next' });
  });

  it('fails the reads waiting on a stream that breaks as unavailable (retryable), and opens a new one for the next read', async () => {
    const g = gate();
    let at = '';
    const answering = (name: string): Partial<PeerHandlers> => ({
      search: async (r) => {
        const q = (r as { params: { q: string } }).params.q;
        if (q === 'stuck') await g.wait(q);
        return { q, server: name };
      },
    });
    const first = await serve(answering('first'));
    at = first.address;
    const c = client(() => at);
    const stuck = c.call('n1', 'search', query('stuck'));
    await expect.poll(() => g.has('stuck')).toBe(true);
    first.server.forceClose();
    expect(await thrown(stuck)).toMatchObject({ code: 'SHX_UNAVAILABLE', retryable: true });
    // The node comes back at another address: the next read reaches it on a new channel and stream.
    const second = await serve(answering('second'));
    at = second.address;
    expect(await c.call('n1', 'search', query('again'))).toEqual({ q: 'again', server: 'second' });
  });

  it('ends its open streams at close, once each has sent the answers it owes, with an OK status', async () => {
    const g = gate();
    const { server, address } = await serve({
      search: async (r) => {
        const q = (r as { params: { q: string } }).params.q;
        if (q === 'slow') await g.wait(q);
        return { q };
      },
    });
    const raw = rawClient(address);
    try {
      // Two open streams the client never hangs up: the server must end them itself.
      const updates = raw.updates();
      const calls = raw.calls();
      const replies: Array<{ id: number; result: { ok: boolean; body: Buffer } }> = [];
      calls.on('data', (r: { id: number; result: { ok: boolean; body: Buffer } }) => replies.push(r));
      const statusOf = (s: grpc.ClientDuplexStream<unknown, unknown>) =>
        new Promise<number>((resolve) => {
          s.on('status', (st: grpc.StatusObject) => resolve(st.code));
          s.on('error', () => undefined);
        });
      const ended = Promise.all([statusOf(updates), statusOf(calls)]);
      calls.write({ id: 1, method: 'search', body: Buffer.from(JSON.stringify(query('slow'))), requestId: '' });
      await expect.poll(() => g.has('slow')).toBe(true);
      const closed = server.close();
      g.release('slow');
      expect(await ended).toEqual([grpc.status.OK, grpc.status.OK]);
      expect(replies.map((r) => [r.id, r.result.ok, JSON.parse(r.result.body.toString())])).toEqual([[1, true, { q: 'slow' }]]);
      await closed;
    } finally {
      raw.close();
    }
  });

  it('keeps commit, versions and the log on unary calls', async () => {
    const calls: string[] = [];
    const { address } = await serve({}, calls);
    const c = client(() => address);
    expect(await c.call('n1', 'versions', { collection: 'c', shard: 'shard1' })).toEqual({ maxVersion: 7, trimmedThrough: 0 });
    expect(await c.call('n1', 'commit', { collection: 'c', shard: 'shard1' })).toEqual({ version: 0, at: 0 });
    expect(calls).toEqual(['versions', 'commit']);
  });

  it('refuses a frame naming anything but get or search, and serves the next one', async () => {
    const calls: string[] = [];
    const { address } = await serve({}, calls);
    const raw = rawClient(address);
    try {
      const stream = raw.calls();
      const replies: Array<{ id: number; result: { ok: boolean; code: string; message: string } }> = [];
      stream.on('data', (r: { id: number; result: { ok: boolean; code: string; message: string } }) => replies.push(r));
      stream.on('error', () => undefined); // the cancel at the end
      stream.write({ id: 1, method: 'commit', body: Buffer.from(JSON.stringify({ collection: 'c', shard: 'shard1' })), requestId: '' });
      stream.write({ id: 2, method: 'get', body: Buffer.from(JSON.stringify(get(['a']))), requestId: '' });
      await expect.poll(() => replies.length).toBe(2);
      const byId = new Map(replies.map((r) => [r.id, r.result]));
      expect(byId.get(1)).toMatchObject({ ok: false, code: 'SHX_BAD_REQUEST' });
      expect(byId.get(1)!.message).toContain("unknown call 'commit'");
      expect(byId.get(2)).toMatchObject({ ok: true });
      expect(calls).toEqual(['get']);
      stream.end();
    } finally {
      raw.close();
    }
  });
});
