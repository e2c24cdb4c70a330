// The ZNodeStore contract, run against the embedded store and against a real ZooKeeper: the
// cluster coordination is written once against the interface, so both must behave alike.

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { MAX_DATA_BYTES, MemoryZNodeServer } from '../src/coordination/memory-store.js';
import { StoreError } from '../src/coordination/store.js';
import type { SessionState, StoreErrorCode, WatchEvent, ZNodeStore } from '../src/coordination/store.js';
import { ZooKeeperStore } from '../src/coordination/zookeeper-store.js';
import { ProxiedSessions, TcpProxy, zkConnect, zkServer } from './support/zookeeper.js';
import { MessageChannel } from 'node:worker_threads';
import { PortZNodeStore, servePort } from '../src/coordination/port-store.js';
import { freePort } from '../src/node/local-zookeeper.js';
import { openTreeStore } from '../src/coordination/tree-store.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const WAIT = { timeout: 20_000, interval: 10 };

/** What the contract needs from an implementation: sessions, and the failures a network causes. */
interface Harness {
  /** A new session on this test's own namespace. */
  connect(options?: { sessionTimeoutMs?: number }): Promise<ZNodeStore>;
  /** Makes the server expire the store's session; resolves once it has (the client may not know yet). */
  expire(store: ZNodeStore): Promise<void>;
  /** Cuts the store off its server (it reports 'disconnected') until heal(). */
  partition(store: ZNodeStore): Promise<void>;
  heal(store: ZNodeStore): Promise<void>;
  /** Closes every session and server it opened. */
  close(): Promise<void>;
}

function memoryHarness(): Harness {
  const server = new MemoryZNodeServer();
  return {
    connect: async (options) => server.connect({ chroot: '/shardex', sessionTimeoutMs: options?.sessionTimeoutMs }),
    expire: async (store) => server.expire(store.sessionId),
    partition: async (store) => server.disconnect(store.sessionId),
    heal: async (store) => server.reconnect(store.sessionId),
    close: () => server.close(),
  };
}

/**
 * The embedded server with its tree on disk (tree-store.ts): every answer and watch waits for the
 * journal, and the contract must hold all the same.
 */
function persistentHarness(): Harness {
  const root = mkdtempSync(join(tmpdir(), 'shardex-contract-'));
  const opened = openTreeStore({ dir: join(root, 'coordinator') });
  return {
    connect: async (options) => (await opened).connect({ chroot: '/shardex', sessionTimeoutMs: options?.sessionTimeoutMs }),
    expire: async (store) => (await opened).expire(store.sessionId),
    partition: async (store) => (await opened).disconnect(store.sessionId),
    heal: async (store) => (await opened).reconnect(store.sessionId),
    async close() {
      await (await opened).close();
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/** The embedded server seen from another thread's side of a MessagePort (the dev cluster's workers). */
function portHarness(): Harness {
  const server = new MemoryZNodeServer();
  const stores: PortZNodeStore[] = [];
  return {
    async connect(options) {
      const { port1, port2 } = new MessageChannel();
      servePort(port1, server, { chroot: '/shardex', ...(options?.sessionTimeoutMs !== undefined && { sessionTimeoutMs: options.sessionTimeoutMs }) });
      const store = new PortZNodeStore(port2);
      stores.push(store);
      await store.ready;
      return store;
    },
    expire: async (store) => server.expire(store.sessionId),
    partition: async (store) => server.disconnect(store.sessionId),
    heal: async (store) => server.reconnect(store.sessionId),
    async close() {
      for (const s of stores) await s.close().catch(() => undefined);
      await server.close();
    },
  };
}

/** Each store reaches ZooKeeper through a proxy of its own, so that its network can fail alone. */
function zooKeeperHarness(): Harness {
  const sessions = new ProxiedSessions('contract', 4_000);
  return {
    connect: (options) => sessions.connect(options?.sessionTimeoutMs),
    async expire(store) {
      const proxy = sessions.proxyOf(store);
      proxy.blackhole();
      // The server closes a session's connection when it expires the session.
      await proxy.serverClosedAll(30_000);
      proxy.heal();
    },
    async partition(store) {
      const proxy = sessions.proxyOf(store);
      proxy.blackhole();
      proxy.reset();
    },
    async heal(store) {
      sessions.proxyOf(store).heal();
    },
    close: () => sessions.close(),
  };
}

const buf = (s: string) => Buffer.from(s);

/** A watcher that records its events. */
function recorder() {
  const events: WatchEvent[] = [];
  return {
    events,
    watcher: (event: WatchEvent) => {
      events.push(event);
    },
    async nth(n: number): Promise<WatchEvent> {
      await vi.waitFor(() => expect(events.length).toBeGreaterThanOrEqual(n), WAIT);
      return events[n - 1]!;
    },
  };
}

function sessionStates(store: ZNodeStore): SessionState[] {
  const states: SessionState[] = [];
  store.onSessionState((state) => states.push(state));
  return states;
}

async function until(condition: () => boolean | Promise<boolean>): Promise<void> {
  await vi.waitFor(async () => expect(await condition()).toBe(true), WAIT);
}

async function expectCode(promise: Promise<unknown>, code: StoreErrorCode): Promise<void> {
  const err = await promise.then(
    () => new Error(`expected ${code}, but it succeeded`),
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StoreError);
  expect((err as StoreError).code).toBe(code);
}

function contract(name: string, makeHarness: () => Harness): void {
  describe(`ZNodeStore contract: ${name}`, () => {
    let harness: Harness;
    let a: ZNodeStore;
    let b: ZNodeStore;

    beforeEach(async () => {
      harness = makeHarness();
      a = await harness.connect();
      b = await harness.connect();
    });

    afterEach(async () => {
      await harness?.close();
    });

    describe('paths', () => {
      it('refuses malformed paths with a TypeError', async () => {
        for (const path of ['', 'n', '/n/', '/a//b', '/a/../b']) {
          await expect(a.get(path)).rejects.toBeInstanceOf(TypeError);
          await expect(a.create(path, buf(''), 'persistent')).rejects.toBeInstanceOf(TypeError);
        }
      });
    });

    describe('create', () => {
      it('creates a persistent node that other sessions read, and returns its path', async () => {
        expect(await a.create('/n', buf('x'), 'persistent')).toBe('/n');
        const node = await b.get('/n');
        expect(node?.data.toString()).toBe('x');
        expect(node?.version).toBe(0);
      });

      it('fails with NODE_EXISTS when the node exists', async () => {
        await a.create('/n', buf('x'), 'persistent');
        await expectCode(b.create('/n', buf('y'), 'persistent'), 'NODE_EXISTS');
        expect((await a.get('/n'))?.data.toString()).toBe('x');
      });

      it('fails with NO_NODE when the parent is missing', async () => {
        await expectCode(a.create('/missing/n', buf(''), 'persistent'), 'NO_NODE');
      });

      it('fails with NO_CHILDREN_FOR_EPHEMERALS under an ephemeral node', async () => {
        await a.create('/e', buf(''), 'ephemeral');
        await expectCode(a.create('/e/child', buf(''), 'persistent'), 'NO_CHILDREN_FOR_EPHEMERALS');
      });

      it(`takes data up to ${MAX_DATA_BYTES} bytes and refuses more with a RangeError`, async () => {
        await a.create('/big', Buffer.alloc(MAX_DATA_BYTES, 1), 'persistent');
        expect((await b.get('/big'))?.data.length).toBe(MAX_DATA_BYTES);
        await expect(a.create('/bigger', Buffer.alloc(MAX_DATA_BYTES + 1), 'persistent')).rejects.toBeInstanceOf(RangeError);
        await expect(a.set('/big', Buffer.alloc(MAX_DATA_BYTES + 1))).rejects.toBeInstanceOf(RangeError);
      });

      it('keeps empty data as an empty buffer', async () => {
        await a.create('/n', Buffer.alloc(0), 'persistent');
        const node = await a.get('/n');
        expect(Buffer.isBuffer(node?.data)).toBe(true);
        expect(node?.data.length).toBe(0);
      });
    });

    describe('sequential nodes', () => {
      it('get a zero-padded 10-digit counter kept per parent', async () => {
        await a.mkdirp('/q');
        await a.mkdirp('/r');
        expect(await a.create('/q/n_', buf(''), 'persistent_sequential')).toBe('/q/n_0000000000');
        expect(await b.create('/q/n_', buf(''), 'ephemeral_sequential')).toBe('/q/n_0000000001');
        expect(await a.create('/r/n_', buf(''), 'persistent_sequential')).toBe('/r/n_0000000000');
      });

      it('count every child created under the parent, and never reuse a number after a delete', async () => {
        await a.mkdirp('/q');
        expect(await a.create('/q/n_', buf(''), 'persistent_sequential')).toBe('/q/n_0000000000');
        await a.create('/q/plain', buf(''), 'persistent');
        await a.delete('/q/n_0000000000');
        await a.delete('/q/plain');
        expect(await a.create('/q/n_', buf(''), 'persistent_sequential')).toBe('/q/n_0000000002');
      });

      it('may be ephemeral: an ephemeral sequential node goes with its session', async () => {
        await b.mkdirp('/q');
        const path = await a.create('/q/e_', buf(''), 'ephemeral_sequential');
        expect(await b.children('/q')).toEqual([path.slice('/q/'.length)]);
        await a.close();
        expect(await b.children('/q')).toEqual([]);
      });
    });

    describe('get and set', () => {
      it('get returns undefined for a missing node', async () => {
        expect(await a.get('/missing')).toBeUndefined();
      });

      it('set replaces the data, bumps the version by one and returns it', async () => {
        await a.create('/n', buf('v0'), 'persistent');
        expect(await b.set('/n', buf('v1'))).toBe(1);
        expect(await a.set('/n', buf('v2'))).toBe(2);
        const node = await b.get('/n');
        expect(node?.data.toString()).toBe('v2');
        expect(node?.version).toBe(2);
      });

      it('set with the current version succeeds; with another it fails with BAD_VERSION and changes nothing', async () => {
        await a.create('/n', buf('v0'), 'persistent');
        expect(await a.set('/n', buf('v1'), 0)).toBe(1);
        await expectCode(b.set('/n', buf('stale'), 0), 'BAD_VERSION');
        const node = await a.get('/n');
        expect(node?.data.toString()).toBe('v1');
        expect(node?.version).toBe(1);
      });

      it('set fails with NO_NODE for a missing node', async () => {
        await expectCode(a.set('/missing', buf('x')), 'NO_NODE');
      });
    });

    describe('delete', () => {
      it('deletes a leaf node', async () => {
        await a.create('/n', buf(''), 'persistent');
        await b.delete('/n');
        expect(await a.exists('/n')).toBe(false);
      });

      it('fails with NO_NODE for a missing node', async () => {
        await expectCode(a.delete('/missing'), 'NO_NODE');
      });

      it('fails with NOT_EMPTY for a node with children', async () => {
        await a.mkdirp('/p/c');
        await expectCode(a.delete('/p'), 'NOT_EMPTY');
        expect(await a.exists('/p/c')).toBe(true);
      });

      it('with a version, deletes only at that version (BAD_VERSION otherwise)', async () => {
        await a.create('/n', buf(''), 'persistent');
        await a.set('/n', buf('x'));
        await expectCode(a.delete('/n', 0), 'BAD_VERSION');
        await a.delete('/n', 1);
        expect(await a.exists('/n')).toBe(false);
      });
    });

    describe('children', () => {
      it('lists child names, not paths', async () => {
        await a.mkdirp('/p/x');
        await a.mkdirp('/p/y');
        expect((await b.children('/p')).sort()).toEqual(['x', 'y']);
      });

      it("lists the store's own namespace at '/'", async () => {
        await a.mkdirp('/top');
        expect(await b.children('/')).toEqual(['top']);
      });

      it('fails with NO_NODE for a missing node', async () => {
        await expectCode(a.children('/missing'), 'NO_NODE');
      });
    });

    describe('mkdirp', () => {
      it('creates missing ancestors as empty persistent nodes', async () => {
        await a.mkdirp('/x/y/z');
        for (const path of ['/x', '/x/y', '/x/y/z']) {
          expect((await b.get(path))?.data.length).toBe(0);
        }
        await a.close();
        expect(await b.exists('/x/y/z')).toBe(true);
      });

      it('leaves an existing path and its data alone', async () => {
        await a.create('/x', buf('keep'), 'persistent');
        await a.mkdirp('/x');
        await b.mkdirp('/x');
        const node = await a.get('/x');
        expect(node?.data.toString()).toBe('keep');
        expect(node?.version).toBe(0);
      });

      it('fails with NO_CHILDREN_FOR_EPHEMERALS below an ephemeral node', async () => {
        await a.create('/e', buf(''), 'ephemeral');
        await expectCode(b.mkdirp('/e/x'), 'NO_CHILDREN_FOR_EPHEMERALS');
      });
    });

    describe('deleteRecursive', () => {
      it('deletes a node and its whole subtree, ephemerals of other sessions included', async () => {
        await a.mkdirp('/t/a/b');
        await a.mkdirp('/t/c');
        await b.create('/t/c/e', buf(''), 'ephemeral');
        await a.create('/keep', buf(''), 'persistent');
        await a.deleteRecursive('/t');
        expect(await a.exists('/t')).toBe(false);
        expect(await b.exists('/t/c/e')).toBe(false);
        expect(await a.exists('/keep')).toBe(true);
      });

      it('does nothing for a missing node', async () => {
        await a.deleteRecursive('/missing');
      });

      it("at '/' empties the namespace and keeps its root", async () => {
        await a.mkdirp('/x/y');
        await a.mkdirp('/z');
        await a.deleteRecursive('/');
        expect(await b.children('/')).toEqual([]);
        expect(await b.create('/again', buf(''), 'persistent')).toBe('/again');
      });
    });

    describe('watches', () => {
      it('a get watch fires data_changed for the first change only (one-shot)', async () => {
        await a.create('/n', buf('0'), 'persistent');
        const first = recorder();
        await a.get('/n', first.watcher);
        await b.set('/n', buf('1'));
        expect(await first.nth(1)).toEqual({ type: 'data_changed', path: '/n' });
        await b.set('/n', buf('2'));
        // Events arrive in order: once a later watch has fired, the first would have fired again.
        const later = recorder();
        await a.get('/n', later.watcher);
        await b.set('/n', buf('3'));
        await later.nth(1);
        expect(first.events).toHaveLength(1);
      });

      it('a get watch fires deleted when the node is deleted', async () => {
        await a.create('/n', buf(''), 'persistent');
        const rec = recorder();
        await a.get('/n', rec.watcher);
        await b.delete('/n');
        expect(await rec.nth(1)).toEqual({ type: 'deleted', path: '/n' });
      });

      it('a get watch on a missing node fires created when it is created', async () => {
        const rec = recorder();
        expect(await a.get('/n', rec.watcher)).toBeUndefined();
        await b.create('/n', buf(''), 'persistent');
        expect(await rec.nth(1)).toEqual({ type: 'created', path: '/n' });
      });

      it('an exists watch fires created, then (set again) data_changed, then deleted', async () => {
        const rec = recorder();
        expect(await a.exists('/n', rec.watcher)).toBe(false);
        await b.create('/n', buf(''), 'persistent');
        expect(await rec.nth(1)).toEqual({ type: 'created', path: '/n' });
        expect(await a.exists('/n', rec.watcher)).toBe(true);
        await b.set('/n', buf('x'));
        expect(await rec.nth(2)).toEqual({ type: 'data_changed', path: '/n' });
        await a.exists('/n', rec.watcher);
        await b.delete('/n');
        expect(await rec.nth(3)).toEqual({ type: 'deleted', path: '/n' });
      });

      it("a children watch fires children_changed when a child is added or removed, not when a child's data changes", async () => {
        await a.mkdirp('/p/c');
        const added = recorder();
        await a.children('/p', added.watcher);
        await b.set('/p/c', buf('data'));
        await b.create('/p/d', buf(''), 'persistent');
        expect(await added.nth(1)).toEqual({ type: 'children_changed', path: '/p' });
        const removed = recorder();
        await a.children('/p', removed.watcher);
        await b.delete('/p/d');
        expect(await removed.nth(1)).toEqual({ type: 'children_changed', path: '/p' });
        expect(added.events).toHaveLength(1);
      });

      it('a children watch fires deleted when the node itself is deleted', async () => {
        await a.mkdirp('/p');
        const rec = recorder();
        await a.children('/p', rec.watcher);
        await b.delete('/p');
        expect(await rec.nth(1)).toEqual({ type: 'deleted', path: '/p' });
      });

      it('a watcher set twice on the same node is called once per change', async () => {
        await a.create('/n', buf(''), 'persistent');
        const rec = recorder();
        await a.get('/n', rec.watcher);
        await a.exists('/n', rec.watcher);
        await b.set('/n', buf('x'));
        await rec.nth(1);
        const later = recorder();
        await a.get('/n', later.watcher);
        await b.set('/n', buf('y'));
        await later.nth(1);
        expect(rec.events).toHaveLength(1);
      });

      it('calls watchers asynchronously, never inside the call that made the change', async () => {
        await a.create('/n', buf(''), 'persistent');
        const rec = recorder();
        await a.get('/n', rec.watcher);
        const setting = a.set('/n', buf('x'));
        expect(rec.events).toEqual([]);
        await setting;
        await rec.nth(1);
      });

      it('delivers the events of a session in the order of the changes', async () => {
        await a.mkdirp('/x');
        await a.mkdirp('/y');
        await a.mkdirp('/z');
        const rec = recorder();
        for (const path of ['/x', '/y', '/z']) await a.get(path, rec.watcher);
        await b.set('/y', buf('1'));
        await b.set('/z', buf('1'));
        await b.set('/x', buf('1'));
        await rec.nth(3);
        expect(rec.events.map((e) => e.path)).toEqual(['/y', '/z', '/x']);
      });
    });

    describe('sessions', () => {
      it('have distinct ids', () => {
        expect(a.sessionId).not.toBe(b.sessionId);
      });

      it("closing a session removes its ephemeral nodes and fires other sessions' watches", async () => {
        await a.create('/e', buf(''), 'ephemeral');
        const rec = recorder();
        expect(await b.exists('/e', rec.watcher)).toBe(true);
        await a.close();
        expect(await rec.nth(1)).toEqual({ type: 'deleted', path: '/e' });
        expect(await b.exists('/e')).toBe(false);
      });

      it('a closed store fails every operation with CLOSED', async () => {
        await a.close();
        await expectCode(a.get('/'), 'CLOSED');
        await expectCode(a.create('/n', buf(''), 'persistent'), 'CLOSED');
        await a.close();
      });

      it('a partition: disconnected, operations fail with CONNECTION_LOSS; healed: connected, same session, ephemerals kept, missed watch events delivered', async () => {
        await a.create('/e', buf(''), 'ephemeral');
        await b.create('/w', buf('0'), 'persistent');
        const rec = recorder();
        await a.get('/w', rec.watcher);
        const states = sessionStates(a);
        const sessionId = a.sessionId;

        await harness.partition(a);
        await until(() => states.includes('disconnected'));
        await expectCode(a.get('/w'), 'CONNECTION_LOSS');
        await b.set('/w', buf('changed while cut off'));

        await harness.heal(a);
        await until(() => states.includes('connected'));
        expect(states).toEqual(['disconnected', 'connected']);
        expect(a.sessionId).toBe(sessionId);
        expect(await rec.nth(1)).toEqual({ type: 'data_changed', path: '/w' });
        expect(await b.exists('/e')).toBe(true);
      });

      it('expiry: ephemerals vanish, watches are dropped, the store reports disconnected, expired, connected and goes on with a new session', async () => {
        const c = await harness.connect({ sessionTimeoutMs: 1_500 });
        const states = sessionStates(c);
        await c.create('/e', buf(''), 'ephemeral');
        await b.create('/w', buf('0'), 'persistent');
        const dropped = recorder();
        await c.get('/w', dropped.watcher);
        const gone = recorder();
        await b.exists('/e', gone.watcher);
        const oldSession = c.sessionId;

        await harness.expire(c);
        expect(await gone.nth(1)).toEqual({ type: 'deleted', path: '/e' });
        await until(() => states.includes('connected'));
        expect(states).toEqual(['disconnected', 'expired', 'connected']);
        expect(c.sessionId).not.toBe(oldSession);

        // The new session works, holds what the caller re-registers, and only its own watches fire.
        const fresh = recorder();
        await c.get('/w', fresh.watcher);
        await b.set('/w', buf('1'));
        await fresh.nth(1);
        expect(dropped.events).toEqual([]);
        await c.create('/e', buf(''), 'ephemeral');
        expect(await b.exists('/e')).toBe(true);
        await c.close();
        expect(await b.exists('/e')).toBe(false);
      });
    });
  });
}

contract('MemoryZNodeServer', memoryHarness);
contract('PortZNodeStore (MemoryZNodeServer over a MessagePort)', portHarness);
contract('MemoryZNodeServer with its tree on disk (openTreeStore)', persistentHarness);
contract('ZooKeeperStore', zooKeeperHarness);

describe('MemoryZNodeServer', () => {
  let server: MemoryZNodeServer;
  beforeEach(() => {
    server = new MemoryZNodeServer({ sessionTimeoutMs: 50 });
  });
  afterEach(async () => {
    await server.close();
  });

  it("ends the session of a worker whose thread ends without closing it (its port closes): its ephemerals go", async () => {
    const { Worker } = await import('node:worker_threads');
    const observer = server.connect();
    const { port1, port2 } = new MessageChannel();
    servePort(port1, server);
    // A thread that opens the session and creates an ephemeral (its live node), then dies of an
    // uncaught error when told to.
    const worker = new Worker(
      `const { workerData, parentPort } = require('node:worker_threads');
       workerData.port.on('message', (m) => {
         if (m.kind === 'state') workerData.port.postMessage({ kind: 'request', id: 1, op: 'create', args: ['/live', new Uint8Array(), 'ephemeral'] });
       });
       parentPort.on('message', () => { throw new Error('the node thread crashed'); });`,
      { eval: true, workerData: { port: port2 }, transferList: [port2] },
    );
    worker.on('error', () => undefined);
    const exited = new Promise((r) => worker.once('exit', r));
    const until = async (want: boolean): Promise<boolean> => {
      for (let i = 0; i < 400 && (await observer.exists('/live')) !== want; i++) await new Promise((r) => setTimeout(r, 5));
      return observer.exists('/live');
    };
    expect(await until(true)).toBe(true);
    worker.postMessage('crash');
    await exited;
    expect(await until(false)).toBe(false);
  });

  it('creates the chroot of a session', async () => {
    server.connect({ chroot: '/a/b' });
    expect(await server.connect().exists('/a/b')).toBe(true);
  });

  it('expires a session partitioned for longer than its timeout; the client learns it when it reconnects', async () => {
    const store = server.connect();
    const observer = server.connect({ sessionTimeoutMs: 60_000 });
    const states = sessionStates(store);
    await store.create('/e', buf(''), 'ephemeral');
    const gone = recorder();
    await observer.exists('/e', gone.watcher);
    const sessionId = store.sessionId;

    server.disconnect(sessionId);
    expect(await gone.nth(1)).toEqual({ type: 'deleted', path: '/e' });
    expect(states).toEqual(['disconnected']);
    server.reconnect(sessionId);
    await until(() => states.includes('connected'));
    expect(states).toEqual(['disconnected', 'expired', 'connected']);
    expect(store.sessionId).not.toBe(sessionId);
  });

  it("keeps a session closed while partitioned (and its ephemerals) until it expires, as ZooKeeper can't hear the close", async () => {
    const store = server.connect();
    const observer = server.connect({ sessionTimeoutMs: 60_000 });
    await store.create('/e', buf(''), 'ephemeral');
    server.disconnect(store.sessionId);
    await store.close();
    const gone = recorder();
    expect(await observer.exists('/e', gone.watcher)).toBe(true);
    expect(await gone.nth(1)).toEqual({ type: 'deleted', path: '/e' });
  });

  it('reports a throwing watcher to the logger and goes on delivering', async () => {
    const errors: unknown[] = [];
    const logged = new MemoryZNodeServer({ logger: { info: () => {}, warn: () => {}, error: (obj) => errors.push(obj) } });
    try {
      const store = logged.connect();
      await store.create('/n', buf(''), 'persistent');
      const rec = recorder();
      await store.get('/n', () => {
        throw new Error('watcher bug');
      });
      await store.get('/n', rec.watcher);
      await store.set('/n', buf('x'));
      await rec.nth(1);
      expect(errors).toHaveLength(1);
    } finally {
      await logged.close();
    }
  });
});

describe('ZooKeeperStore', () => {
  const cleanup: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step().catch(() => {});
  });

  it('gets the test ZooKeeper from the environment too, for the processes tests start', () => {
    expect(process.env.SHARDEX_TEST_ZK).toBe(zkServer());
  });

  it('creates a nested chroot that is missing', async () => {
    const connectString = `${zkConnect('chroot')}/a/b`;
    const store = await ZooKeeperStore.connect({ connectString, sessionTimeoutMs: 4_000 });
    cleanup.push(() => store.close());
    await store.create('/n', buf(''), 'persistent');
    const root = await ZooKeeperStore.connect({ connectString: zkServer(), sessionTimeoutMs: 4_000 });
    cleanup.push(() => root.close());
    expect(await root.exists(`${connectString.slice(connectString.indexOf('/'))}/n`)).toBe(true);
  });

  it('rejects, naming the connect string, when ZooKeeper is unreachable', async () => {
    const port = await closedPort();
    const connectString = `127.0.0.1:${port}/shardex`;
    await expect(ZooKeeperStore.connect({ connectString, sessionTimeoutMs: 2_000, connectTimeoutMs: 1_000 })).rejects.toThrow(connectString);
  });

  it('notices a silent connection (read timeout), reports disconnected, and reconnects within the session', async () => {
    const proxy = await TcpProxy.start(zkServer());
    cleanup.push(() => proxy.close());
    // Long enough that detection (2/3 of it) plus reconnection stay well inside the session.
    const store = await ZooKeeperStore.connect({ connectString: proxy.address + zkConnect('silent').slice(zkServer().length), sessionTimeoutMs: 10_000 });
    cleanup.push(() => store.close());
    const states = sessionStates(store);
    const sessionId = store.sessionId;
    proxy.blackhole();
    await until(() => states.includes('disconnected'));
    proxy.heal();
    await until(() => states.includes('connected'));
    expect(states).toEqual(['disconnected', 'connected']);
    expect(store.sessionId).toBe(sessionId);
  });

  it('close() resolves when ZooKeeper has become unreachable', async () => {
    const proxy = await TcpProxy.start(zkServer());
    cleanup.push(() => proxy.close());
    const store = await ZooKeeperStore.connect({ connectString: proxy.address, sessionTimeoutMs: 4_000 });
    cleanup.push(() => store.close());
    const states = sessionStates(store);
    await proxy.close();
    await until(() => states.includes('disconnected'));
    await store.close();
    await expectCode(store.get('/'), 'CLOSED');
  });
});

/** A port nothing listens on. */
const closedPort = freePort;
