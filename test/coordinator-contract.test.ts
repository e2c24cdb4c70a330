// The Coordinator contract, run against the embedded store and against a real ZooKeeper:
// `ClusterCoordinator` is written once over `ZNodeStore`, so live nodes, collection state,
// elections, terms and session handling must behave alike over both (issue 3, item 6).
//
// Waits are on events (onChange, candidate callbacks, store calls) with a deadline; only what
// has no event (the leader grace period, which is measured on a clock) is polled.

import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ClusterCoordinator } from '../src/coordination/cluster.js';
import { MemoryZNodeServer } from '../src/coordination/memory-store.js';
import type { CreateMode, NodeData, SessionState, Watcher, ZNodeStore } from '../src/coordination/store.js';
import type { CollectionSpec, Coordinator, ElectionCandidate, NodeInfo, NodeRole } from '../src/coordination/types.js';
import { openTreeStore } from '../src/coordination/tree-store.js';
import { ZooKeeperStore } from '../src/coordination/zookeeper-store.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ShardexError } from '../src/errors.js';
import { ProxiedSessions, zkServer } from './support/zookeeper.js';

const WAIT_MS = 30_000;
/** A shorter deadline for the tests that pinned the former cache and election races. */
const BUG_WAIT_MS = 10_000;
/** Long enough that a session never expires unless a test expires it. */
const LONG_SESSION_MS = 30_000;
/** For tests that expire a session: ZooKeeper needs the session timeout to pass to expire it. */
const SHORT_SESSION_MS = 2_000;

// ---- harnesses: sessions, and what a network does to them --------------------------------

/** What the contract needs from a store implementation. */
interface Harness {
  /** A new session on this test's own namespace. */
  connect(options?: { sessionTimeoutMs?: number }): Promise<ZNodeStore>;
  /** Cuts the store off its server: it reports 'disconnected'; its session lives on until it times out. */
  partition(store: ZNodeStore): Promise<void>;
  /** With the store partitioned: resolves once the server has expired its session (its ephemerals are gone). */
  expire(store: ZNodeStore): Promise<void>;
  /** Ends a partition: the store reaches its server again (and learns of an expiry, if there was one). */
  heal(store: ZNodeStore): Promise<void>;
  /** Ends every partition; then closes every session and server it opened. */
  close(): Promise<void>;
}

function memoryHarness(): Harness {
  return embeddedHarness(Promise.resolve(new MemoryZNodeServer()), async () => {});
}

/** The embedded server with its tree on disk (tree-store.ts): every answer and watch waits for the journal. */
function persistentHarness(): Harness {
  const root = mkdtempSync(join(tmpdir(), 'shardex-contract-'));
  return embeddedHarness(openTreeStore({ dir: join(root, 'coordinator') }), async () => rmSync(root, { recursive: true, force: true }));
}

function embeddedHarness(opened: Promise<MemoryZNodeServer>, cleanup: () => Promise<void>): Harness {
  // The session a store had when it was cut off: the server knows it by that id.
  const cut = new Map<ZNodeStore, string>();
  return {
    connect: async (options) => (await opened).connect({ chroot: '/shardex', sessionTimeoutMs: options?.sessionTimeoutMs ?? LONG_SESSION_MS }),
    partition: async (store) => {
      cut.set(store, store.sessionId);
      (await opened).disconnect(store.sessionId);
    },
    expire: async (store) => (await opened).expire(cut.get(store) ?? store.sessionId),
    heal: async (store) => {
      (await opened).reconnect(cut.get(store) ?? store.sessionId);
      cut.delete(store);
    },
    close: async () => {
      const server = await opened;
      for (const id of cut.values()) server.reconnect(id);
      await server.close();
      await cleanup();
    },
  };
}

/**
 * Each store reaches ZooKeeper through a TCP proxy of its own, so that its network can fail alone.
 * A partition blackholes the proxy and resets its connections (the client reports 'disconnected'
 * at once and its reconnection attempts go unanswered); the server expires the session when the
 * session timeout has passed, which the harness sees as a sentinel ephemeral vanishing.
 */
function zooKeeperHarness(): Harness {
  const sessions = new ProxiedSessions('coordinator', LONG_SESSION_MS);
  const chroot = sessions.chroot;
  const sentinels = new Map<ZNodeStore, string>();
  let observer: ZNodeStore | undefined;
  return {
    connect: (options) => sessions.connect(options?.sessionTimeoutMs),
    async partition(store) {
      await store.mkdirp('/harness');
      sentinels.set(store, await store.create('/harness/session_', Buffer.alloc(0), 'ephemeral_sequential'));
      const proxy = sessions.proxyOf(store);
      proxy.blackhole();
      proxy.reset();
    },
    async expire(store) {
      const sentinel = sentinels.get(store);
      if (sentinel === undefined) throw new Error('expire() needs a partitioned store');
      observer ??= await ZooKeeperStore.connect({ connectString: zkServer() + chroot, sessionTimeoutMs: LONG_SESSION_MS });
      const watcher = observer;
      await waitFor(`the server to expire session ${store.sessionId}`, () => false, (wake) => {
        let stopped = false;
        const check = () => {
          if (stopped) return;
          void watcher.exists(sentinel, check).then((present) => (present ? undefined : wake(true)), () => undefined);
        };
        check();
        return () => {
          stopped = true;
        };
      });
    },
    async heal(store) {
      sessions.proxyOf(store).heal();
      sentinels.delete(store);
    },
    close: () => sessions.close(observer ? [observer] : []),
  };
}

// ---- waiting on events ------------------------------------------------------------------------

/**
 * Resolves once `condition` holds: checked at once and whenever `subscribe` wakes it (or when it
 * is woken with `true`); rejects after `ms`, naming `what`.
 */
function waitFor(
  what: string,
  condition: () => boolean,
  subscribe: (wake: (done?: boolean) => void) => () => void,
  ms = WAIT_MS,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let settled = false;
    let unsubscribe: () => void = () => {};
    const finish = (err?: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      unsubscribe();
      if (err) reject(err);
      else resolve();
    };
    const timer = setTimeout(() => finish(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
    const wake = (done?: boolean) => {
      if (!settled && (done === true || condition())) finish();
    };
    unsubscribe = subscribe(wake);
    wake();
  });
}

/** Waits for a coordinator's cached view to satisfy `condition`, re-checked on each onChange. */
function whenCached(c: Coordinator, what: string, condition: () => boolean, ms = WAIT_MS): Promise<void> {
  return waitFor(what, condition, (wake) => c.onChange(() => wake()), ms);
}

/** For what has no event (a clock): polls every 20 ms until `condition` holds, or fails at the deadline. */
function poll(what: string, condition: () => boolean): Promise<void> {
  return waitFor(what, condition, (wake) => {
    const timer = setInterval(() => wake(), 20);
    return () => clearInterval(timer);
  });
}

/** A deferred boolean, for a canLead() that answers when the test says so. */
function gate(): { promise: Promise<boolean>; open(value: boolean): void } {
  let open!: (value: boolean) => void;
  const promise = new Promise<boolean>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

// ---- what the tests observe -------------------------------------------------------------------

/**
 * A store that counts the calls made through it, records the paths it set exists-watches on, and
 * can hold back the answer to one call (the call itself reaches the store at once), as a slow
 * network or an event handled before an earlier answer would.
 */
class RecordingStore implements ZNodeStore {
  calls = 0;
  /** Calls whose answer the caller has not had yet. */
  pending = 0;
  readonly existsWatches: string[] = [];
  /** '<op> <path>' of every call that failed, oldest first. */
  readonly failed: string[] = [];
  private readonly listeners = new Set<() => void>();
  private held: { op: string; path: string; reached: () => void; gate: Promise<void> } | undefined;

  constructor(readonly inner: ZNodeStore) {}

  get sessionId(): string {
    return this.inner.sessionId;
  }

  /** Subscribes to every call made through the store, and to every answer it passes on (for waitFor). */
  onCall(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Resolves once no call made through the store awaits its answer. */
  idle(): Promise<void> {
    return waitFor('the store to have no call in flight', () => this.pending === 0, (wake) => this.onCall(() => wake()));
  }

  /**
   * Holds back the answer to the next `op` on `path`. `reached` resolves when that call is made;
   * `release()` passes the answer on and resolves once the caller has run on it.
   */
  hold(op: 'get' | 'children' | 'exists', path: string): { reached: Promise<void>; release(): Promise<void> } {
    let reached!: () => void;
    const wasReached = new Promise<void>((resolve) => {
      reached = resolve;
    });
    let open!: () => void;
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    this.held = { op, path, reached, gate };
    return {
      reached: wasReached,
      release: async () => {
        open();
        // The caller's continuations are microtasks: they have all run by the next macrotask.
        await new Promise<void>((resolve) => setImmediate(resolve));
      },
    };
  }

  private record<T>(op: string, path: string, call: () => Promise<T>): Promise<T> {
    this.calls += 1;
    this.pending += 1;
    let result = call().catch((err: unknown) => {
      this.failed.push(`${op} ${path}`);
      throw err;
    });
    const held = this.held;
    if (held && held.op === op && held.path === path) {
      this.held = undefined;
      held.reached();
      result = result.then(
        async (value) => {
          await held.gate;
          return value;
        },
        async (err: unknown) => {
          await held.gate;
          throw err;
        },
      );
    }
    const settled = () => {
      this.pending -= 1;
      this.changed();
    };
    void result.then(settled, settled);
    this.changed();
    return result;
  }

  private changed(): void {
    for (const l of [...this.listeners]) l();
  }

  create(path: string, data: Buffer, mode: CreateMode): Promise<string> {
    return this.record('create', path, () => this.inner.create(path, data, mode));
  }
  mkdirp(path: string): Promise<void> {
    return this.record('mkdirp', path, () => this.inner.mkdirp(path));
  }
  get(path: string, watch?: Watcher): Promise<NodeData | undefined> {
    return this.record('get', path, () => this.inner.get(path, watch));
  }
  set(path: string, data: Buffer, version?: number): Promise<number> {
    return this.record('set', path, () => this.inner.set(path, data, version));
  }
  delete(path: string, version?: number): Promise<void> {
    return this.record('delete', path, () => this.inner.delete(path, version));
  }
  deleteRecursive(path: string): Promise<void> {
    return this.record('deleteRecursive', path, () => this.inner.deleteRecursive(path));
  }
  children(path: string, watch?: Watcher): Promise<string[]> {
    return this.record('children', path, () => this.inner.children(path, watch));
  }
  exists(path: string, watch?: Watcher): Promise<boolean> {
    if (watch) this.existsWatches.push(path);
    return this.record('exists', path, () => this.inner.exists(path, watch));
  }
  onSessionState(listener: (state: SessionState) => void): () => void {
    return this.inner.onSessionState(listener);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

/** An election candidate that records what it is told; canLead() answers `may`. */
class Candidate implements ElectionCandidate {
  readonly epochs: number[] = [];
  lost = 0;
  asked = 0;
  may: boolean | (() => Promise<boolean>) = true;
  private readonly listeners = new Set<() => void>();

  constructor(readonly name: string) {}

  async canLead(): Promise<boolean> {
    this.asked += 1;
    this.changed();
    return typeof this.may === 'function' ? this.may() : this.may;
  }
  onElected(epoch: number): void {
    this.epochs.push(epoch);
    this.changed();
  }
  onLost(): void {
    this.lost += 1;
    this.changed();
  }

  until(what: string, condition: () => boolean): Promise<void> {
    return waitFor(`${this.name}: ${what}`, condition, (wake) => {
      const l = () => wake();
      this.listeners.add(l);
      return () => this.listeners.delete(l);
    });
  }

  private changed(): void {
    for (const l of [...this.listeners]) l();
  }
}

const nodeInfo = (name: string, role: NodeRole = 'data', port = 8983): NodeInfo => ({
  name,
  http: `http://${name}:${port}`,
  grpc: `${name}:${port + 1000}`,
  role,
});

const spec = (name: string, numShards: number, replicationFactor: number, router: 'compositeId' | 'hash' = 'compositeId'): CollectionSpec => ({
  name,
  numShards,
  replicationFactor,
  router,
});

const names = (c: Coordinator) => c.liveNodes().map((n) => n.name).sort();

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => new Error('expected a rejection, but it succeeded'),
    (err: unknown) => err,
  );
}

async function expectShardexError(promise: Promise<unknown>, code: string): Promise<void> {
  const err = await rejection(promise);
  expect(err).toBeInstanceOf(ShardexError);
  expect((err as ShardexError).code).toBe(code);
}

// ---- the contract -----------------------------------------------------------------------------

interface Member {
  readonly coord: ClusterCoordinator;
  /** The store the coordinator uses, counting its calls. */
  readonly store: RecordingStore;
  /** The session under it, for the harness (partition, expire, heal). */
  readonly session: ZNodeStore;
}

interface MemberOptions {
  readonly role?: NodeRole;
  readonly port?: number;
  readonly sessionTimeoutMs?: number;
  readonly leaderGraceMs?: number;
}

function contract(name: string, makeHarness: () => Harness): void {
  describe(`Coordinator contract: ${name}`, () => {
    let harness: Harness;
    let members: Member[];
    /** A plain session for reading the raw znodes in assertions. */
    let inspector: ZNodeStore;

    /** A started coordinator; registered as a live node when `node` is given, else a watcher only (a client). */
    async function member(node?: string, o: MemberOptions = {}): Promise<Member> {
      const session = await harness.connect({ sessionTimeoutMs: o.sessionTimeoutMs ?? LONG_SESSION_MS });
      const store = new RecordingStore(session);
      const coord = new ClusterCoordinator({
        store,
        logger: pino({ level: process.env.SHARDEX_TEST_LOG ?? 'silent' }),
        leaderGraceMs: o.leaderGraceMs ?? 60_000,
        electionRetryMs: 50,
      });
      const m = { coord, store, session };
      members.push(m);
      await coord.start(node === undefined ? undefined : nodeInfo(node, o.role, o.port));
      return m;
    }

    /** Members whose live caches all list exactly `expected`. */
    async function allSee(expected: string[], ...ms: Member[]): Promise<void> {
      await Promise.all(ms.map((m) => whenCached(m.coord, `${m.coord.self?.name ?? 'client'} to see ${expected.join(',')} live`, () => names(m.coord).join() === [...expected].sort().join())));
    }

    /** The election queue of a shard, head first: node names in sequence order, and their znode paths. */
    async function queue(collection: string, shard: string): Promise<Array<{ node: string; path: string }>> {
      const dir = `/collections/${collection}/leader_elect/${shard}`;
      const children = (await inspector.children(dir)).sort((a, b) => Number(a.slice(a.lastIndexOf('_') + 1)) - Number(b.slice(b.lastIndexOf('_') + 1)));
      const out: Array<{ node: string; path: string }> = [];
      for (const child of children) {
        const d = await inspector.get(`${dir}/${child}`);
        if (d) out.push({ node: d.data.toString('utf8'), path: `${dir}/${child}` });
      }
      return out;
    }

    /** Waits until the election queue of c/shard1 lists `expected`, re-read after each store call `m` makes. */
    async function queueBecomes(m: Member, expected: string[]): Promise<void> {
      await waitFor(`the queue of c/shard1 to be ${expected.join(',')}`, () => false, (wake) => {
        const check = () => void queue('c', 'shard1').then((q) => wake(q.map((e) => e.node).join() === expected.join()), () => undefined);
        check();
        return m.store.onCall(check);
      });
    }

    /** Partitions a member and resolves once its coordinator has heard that it is disconnected. */
    async function cutOff(m: Member): Promise<void> {
      const states: SessionState[] = [];
      // Registered after the coordinator's listener: when it hears, so has the coordinator.
      const off = m.session.onSessionState((st) => states.push(st));
      await harness.partition(m.session);
      await waitFor(`${m.coord.self?.name ?? 'client'} to report disconnected`, () => states.includes('disconnected'), (wake) => m.session.onSessionState(() => wake()));
      off();
    }

    async function leaderZNode(collection: string, shard: string): Promise<unknown> {
      const d = await inspector.get(`/collections/${collection}/leaders/${shard}`);
      return d && d.data.length > 0 ? JSON.parse(d.data.toString('utf8')) : undefined;
    }

    beforeEach(async () => {
      harness = makeHarness();
      members = [];
      inspector = await harness.connect();
    });

    afterEach(async () => {
      // Heal first, so that closing does not wait on a session that cannot reach its server.
      for (const m of members) await harness.heal(m.session).catch(() => undefined);
      await Promise.allSettled(members.map((m) => m.coord.close()));
      await harness.close();
    });

    describe('live nodes', () => {
      it('a started node is live for every coordinator: its cache learns it through a watch (onChange fires) and answers without the store', async () => {
        const client = await member();
        let changes = 0;
        client.coord.onChange(() => changes++);
        expect(client.coord.isLive('n1')).toBe(false);

        const n1 = await member('n1');
        await whenCached(client.coord, 'the client to see n1', () => client.coord.isLive('n1'));
        expect(changes).toBeGreaterThan(0);
        expect(client.coord.liveNodes()).toEqual([nodeInfo('n1')]);
        expect(n1.coord.liveNodes()).toEqual([nodeInfo('n1')]);
        expect(n1.coord.self).toEqual(nodeInfo('n1'));
        expect(client.coord.self).toBeUndefined();

        const calls = client.store.calls;
        for (let i = 0; i < 100; i++) {
          client.coord.isLive('n1');
          client.coord.liveNodes();
          client.coord.collections();
        }
        expect(client.store.calls).toBe(calls);
      });

      it('a node that closes is no longer live', async () => {
        const n1 = await member('n1');
        const n2 = await member('n2');
        await allSee(['n1', 'n2'], n1, n2);
        await n1.coord.close();
        await whenCached(n2.coord, 'n2 to see n1 gone', () => !n2.coord.isLive('n1'));
        expect(names(n2.coord)).toEqual(['n2']);
      });

      it('a node whose session expires is no longer live, and is live again once it has reconnected and registered again', async () => {
        const n1 = await member('n1', { sessionTimeoutMs: SHORT_SESSION_MS });
        const n2 = await member('n2');
        await allSee(['n1', 'n2'], n1, n2);

        await harness.partition(n1.session);
        await harness.expire(n1.session);
        await whenCached(n2.coord, 'n2 to see n1 gone', () => !n2.coord.isLive('n1'));
        expect(await inspector.exists('/live_nodes/n1')).toBe(false);

        await harness.heal(n1.session);
        await whenCached(n2.coord, 'n2 to see n1 live again', () => n2.coord.isLive('n1'));
        await allSee(['n1', 'n2'], n1, n2);
      });

      it('a node restarted under the same name takes over the registration, and a watcher that was briefly cut off sees its new address', async () => {
        const observer = await member();
        const old = await member('n1', { port: 8983 });
        await whenCached(observer.coord, 'the observer to see n1', () => observer.coord.isLive('n1'));
        // kill -9: the old process says nothing more, and its session lives until it times out.
        await harness.partition(old.session);
        // The observer misses the restart as it happens, and hears of it (children_changed) on reconnect.
        await harness.partition(observer.session);
        const restarted = await member('n1', { port: 7000 });
        expect(restarted.coord.liveNodes()).toEqual([nodeInfo('n1', 'data', 7000)]);
        await harness.heal(observer.session);

        await whenCached(observer.coord, 'the observer to see the new address of n1', () => observer.coord.liveNodes()[0]?.http === 'http://n1:7000');
        expect(observer.coord.liveNodes()).toEqual([nodeInfo('n1', 'data', 7000)]);
      });
    });

    describe('collections', () => {
      it('createCollection writes the state: Solr ranges, shards in order, replicas on distinct live data nodes (readers excluded), all active, one preferred leader per node', async () => {
        const [n1, n2, n3] = [await member('n1'), await member('n2'), await member('n3')];
        const reader = await member('r1', { role: 'reader' });
        await allSee(['n1', 'n2', 'n3', 'r1'], n1, n2, n3, reader);

        const state = await n1.coord.createCollection({ ...spec('c', 3, 2), autoCommitMs: 1000, fields: { title: 'text' } });
        expect(state).toEqual({
          name: 'c',
          numShards: 3,
          replicationFactor: 2,
          router: 'compositeId',
          autoCommitMs: 1000,
          fields: { title: 'text' },
          shards: [
            { name: 'shard1', range: '80000000-d554ffff', replicas: ['n1', 'n2'].map((node) => ({ node, state: 'active', type: 'leader-eligible' })), preferredLeader: 'n1' },
            { name: 'shard2', range: 'd5550000-2aa9ffff', replicas: ['n2', 'n3'].map((node) => ({ node, state: 'active', type: 'leader-eligible' })), preferredLeader: 'n2' },
            { name: 'shard3', range: '2aaa0000-7fffffff', replicas: ['n3', 'n1'].map((node) => ({ node, state: 'active', type: 'leader-eligible' })), preferredLeader: 'n3' },
          ],
        });
        for (const m of [n1, n2, n3, reader]) {
          await whenCached(m.coord, `${m.coord.self?.name} to see collection c`, () => m.coord.collection('c') !== undefined);
          expect(m.coord.collection('c')).toEqual(state);
          expect([...m.coord.collections().keys()]).toEqual(['c']);
        }
        expect(await n2.coord.terms('c', 'shard2')).toEqual({ n2: 0, n3: 0 });
      });

      it('requestLeaderRebalance sets preferred leaders among the replicas and counts the request; a node without a replica is refused', async () => {
        const [n1, n2] = [await member('n1'), await member('n2')];
        await allSee(['n1', 'n2'], n1, n2);
        await n1.coord.createCollection(spec('p', 2, 2));
        const next = await n1.coord.requestLeaderRebalance('p', new Map([['shard1', 'n2']]));
        expect(next.shards.map((s) => s.preferredLeader)).toEqual(['n2', 'n2']);
        expect(next.leaderRebalances).toBe(1);
        await whenCached(n2.coord, 'n2 to see the rebalance', () => n2.coord.collection('p')?.leaderRebalances === 1);
        expect(n2.coord.collection('p')!.shards[0]!.preferredLeader).toBe('n2');
        await expect(n1.coord.requestLeaderRebalance('p', new Map([['shard1', 'n9']]))).rejects.toMatchObject({ code: 'SHX_BAD_REQUEST' });
        await expect(n1.coord.requestLeaderRebalance('p', new Map([['shard9', 'n1']]))).rejects.toMatchObject({ code: 'SHX_NOT_FOUND' });
      });

      it('the hash router cuts equal ranges as Solr does', async () => {
        const n1 = await member('n1');
        const three = await n1.coord.createCollection(spec('h3', 3, 1, 'hash'));
        expect(three.shards.map((s) => s.range)).toEqual(['80000000-d5555555', 'd5555556-2aaaaaab', '2aaaaaac-7fffffff']);
        const two = await n1.coord.createCollection(spec('h2', 2, 1, 'hash'));
        expect(two.shards.map((s) => `${s.name} ${s.range}`)).toEqual(['shard1 80000000-ffffffff', 'shard2 0-7fffffff']);
      });

      it('rejects a name that exists with SHX_COLLECTION_EXISTS, from any coordinator, and changes nothing', async () => {
        const n1 = await member('n1');
        const n2 = await member('n2');
        await allSee(['n1', 'n2'], n1, n2);
        const state = await n1.coord.createCollection(spec('c', 2, 2));
        await expectShardexError(n1.coord.createCollection(spec('c', 1, 1)), 'SHX_COLLECTION_EXISTS');
        // n2 may not have it cached yet: the store decides.
        await expectShardexError(n2.coord.createCollection(spec('c', 4, 1)), 'SHX_COLLECTION_EXISTS');
        await whenCached(n2.coord, 'n2 to see c', () => n2.coord.collection('c') !== undefined);
        expect(n2.coord.collection('c')).toEqual(state);
        expect(JSON.parse((await inspector.get('/collections/c/state'))!.data.toString())).toEqual(state);
      });

      it('of two concurrent creates of one name, exactly one succeeds and the other gets SHX_COLLECTION_EXISTS', async () => {
        const n1 = await member('n1');
        const n2 = await member('n2');
        await allSee(['n1', 'n2'], n1, n2);
        const results = await Promise.allSettled([n1.coord.createCollection(spec('c', 2, 1)), n2.coord.createCollection(spec('c', 2, 1))]);
        expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
        const failed = results.find((r) => r.status === 'rejected');
        expect((failed as PromiseRejectedResult).reason).toBeInstanceOf(ShardexError);
        expect(((failed as PromiseRejectedResult).reason as ShardexError).code).toBe('SHX_COLLECTION_EXISTS');
      });

      it('rejects a replicationFactor larger than the live data nodes (readers do not count), writing nothing', async () => {
        const n1 = await member('n1');
        const reader = await member('r1', { role: 'reader' });
        await allSee(['n1', 'r1'], n1, reader);
        const err = await rejection(n1.coord.createCollection(spec('c', 1, 2)));
        expect(err).toBeInstanceOf(ShardexError);
        expect((err as ShardexError).code).toBe('SHX_BAD_REQUEST');
        expect((err as ShardexError).message).toMatch(/replicationFactor 2/);
        expect(await inspector.exists('/collections/c')).toBe(false);
        expect(n1.coord.collection('c')).toBeUndefined();
      });

      it('deleteCollection removes it from every cache (leaders too); the name may be created again; a missing one is SHX_COLLECTION_NOT_FOUND', async () => {
        const n1 = await member('n1');
        const n2 = await member('n2');
        await allSee(['n1', 'n2'], n1, n2);
        await n1.coord.createCollection(spec('c', 2, 2));
        await n1.coord.joinElection('c', 'shard1', new Candidate('n1'));
        await whenCached(n2.coord, 'n2 to see c and its leader', () => n2.coord.leader('c', 'shard1')?.node === 'n1');
        // No read in flight (see the test of a read answered after the delete, below).
        await Promise.all([n1.store.idle(), n2.store.idle()]);

        await n2.coord.deleteCollection('c');
        for (const m of [n1, n2]) {
          await whenCached(m.coord, `${m.coord.self?.name} to forget c`, () => m.coord.collection('c') === undefined);
          expect(m.coord.leader('c', 'shard1')).toBeUndefined();
          expect(m.coord.collections().size).toBe(0);
        }
        expect(await inspector.exists('/collections/c')).toBe(false);
        await expectShardexError(n1.coord.deleteCollection('c'), 'SHX_COLLECTION_NOT_FOUND');

        const again = await n2.coord.createCollection(spec('c', 1, 1));
        await whenCached(n1.coord, 'n1 to see the new c', () => n1.coord.collection('c')?.numShards === 1);
        expect(n1.coord.collection('c')).toEqual(again);
      });
      it('a read of the state answered after the collection was deleted does not bring it back into the cache', async () => {
        const n1 = await member('n1');
        const n2 = await member('n2');
        await allSee(['n1', 'n2'], n1, n2);
        await n1.coord.createCollection(spec('c', 1, 2));
        await whenCached(n2.coord, 'n2 to see c', () => n2.coord.collection('c') !== undefined);
        await n2.store.idle();

        // n2 re-reads the state after a change; its answer is slow to come back.
        const slow = n2.store.hold('get', '/collections/c/state');
        await n1.coord.setReplicaState('c', 'shard1', 'n1', 'down');
        await slow.reached;
        await n1.coord.deleteCollection('c');
        await whenCached(n2.coord, 'n2 to forget c', () => n2.coord.collection('c') === undefined);

        await slow.release();
        expect(n2.coord.collection('c')).toBeUndefined();
        expect(n2.coord.collections().size).toBe(0);
      });

      it('setReplicaState is a compare-and-set: concurrent writers lose no update, and every cache sees the result', async () => {
        const ms = [await member('n1'), await member('n2'), await member('n3')];
        await allSee(['n1', 'n2', 'n3'], ...ms);
        await ms[0]!.coord.createCollection(spec('c', 2, 3));
        const before = (await inspector.get('/collections/c/state'))!.version;
        for (let round = 1; round <= 6; round++) {
          const state = round % 2 === 1 ? 'down' : 'active';
          // Every node writes its own replica of shard1 at the same time.
          await Promise.all(ms.map((m) => m.coord.setReplicaState('c', 'shard1', m.coord.self!.name, state)));
          const stored = JSON.parse((await inspector.get('/collections/c/state'))!.data.toString());
          expect(stored.shards[0].replicas.map((r: { state: string }) => r.state)).toEqual([state, state, state]);
          expect(stored.shards[1].replicas.map((r: { state: string }) => r.state)).toEqual(['active', 'active', 'active']);
        }
        // One stored version per change: no write was lost and no write went through twice.
        expect((await inspector.get('/collections/c/state'))!.version).toBe(before + 18);
        // Setting the state a replica already has writes nothing.
        await ms[1]!.coord.setReplicaState('c', 'shard1', 'n2', 'active');
        expect((await inspector.get('/collections/c/state'))!.version).toBe(before + 18);

        await ms[2]!.coord.setReplicaState('c', 'shard2', 'n1', 'recovering');
        for (const m of ms) {
          await whenCached(m.coord, `${m.coord.self?.name} to see n1 recovering`, () =>
            m.coord.collection('c')?.shards[1]?.replicas.find((r) => r.node === 'n1')?.state === 'recovering',
          );
        }
        await expectShardexError(ms[0]!.coord.setReplicaState('missing', 'shard1', 'n1', 'down'), 'SHX_COLLECTION_NOT_FOUND');
      });

      it("setReplicaState with `from` changes a replica only while it is in that state (a recovery is not made active over a leader's down)", async () => {
        const ms = [await member('n1'), await member('n2')];
        await allSee(['n1', 'n2'], ...ms);
        const [n1, n2] = ms.map((m) => m.coord) as [ClusterCoordinator, ClusterCoordinator];
        await n1.createCollection(spec('c', 1, 2));
        await n2.setReplicaState('c', 'shard1', 'n2', 'recovering');
        await n2.setReplicaState('c', 'shard1', 'n2', 'active', { from: 'recovering' });
        const stateOf = async (): Promise<string> => JSON.parse((await inspector.get('/collections/c/state'))!.data.toString()).shards[0].replicas.find((r: { node: string }) => r.node === 'n2').state;
        expect(await stateOf()).toBe('active');

        // Recovering again; the leader marks it down during the sync: the recovery may not end active.
        await n2.setReplicaState('c', 'shard1', 'n2', 'recovering');
        await n1.setReplicaState('c', 'shard1', 'n2', 'down');
        const version = (await inspector.get('/collections/c/state'))!.version;
        const refused = await rejection(n2.setReplicaState('c', 'shard1', 'n2', 'active', { from: 'recovering' }));
        expect(refused).toMatchObject({ code: 'SHX_RECOVERING' });
        expect((refused as ShardexError).message).toContain('is down, not recovering');
        expect(await stateOf()).toBe('down');
        expect((await inspector.get('/collections/c/state'))!.version).toBe(version);
      });
    });

    describe('elections', () => {
      it('the first candidate leads with epoch 1; the others wait in line', async () => {
        const ms = [await member('n1'), await member('n2'), await member('n3')];
        await allSee(['n1', 'n2', 'n3'], ...ms);
        await ms[0]!.coord.createCollection(spec('c', 1, 3));
        const cands = ms.map((m) => new Candidate(m.coord.self!.name));
        // joinElection resolves once the candidate leads or watches the one ahead of it.
        for (const [i, m] of ms.entries()) await m.coord.joinElection('c', 'shard1', cands[i]!);

        expect(cands.map((c) => c.epochs)).toEqual([[1], [], []]);
        expect(cands[1]!.asked + cands[2]!.asked).toBe(0);
        expect((await queue('c', 'shard1')).map((q) => q.node)).toEqual(['n1', 'n2', 'n3']);
        expect(await leaderZNode('c', 'shard1')).toEqual({ node: 'n1', epoch: 1 });
        for (const m of ms) {
          await whenCached(m.coord, `${m.coord.self?.name} to see n1 lead`, () => m.coord.leader('c', 'shard1')?.node === 'n1');
          expect(m.coord.leader('c', 'shard1')).toEqual({ node: 'n1', epoch: 1 });
        }
        // Joining twice is a no-op.
        await ms[1]!.coord.joinElection('c', 'shard1', cands[1]!);
        expect(await queue('c', 'shard1')).toHaveLength(3);
      });

      it('when the leader closes, the next candidate leads with the next epoch', async () => {
        const ms = [await member('n1'), await member('n2'), await member('n3')];
        await allSee(['n1', 'n2', 'n3'], ...ms);
        await ms[0]!.coord.createCollection(spec('c', 1, 3));
        const cands = ms.map((m) => new Candidate(m.coord.self!.name));
        for (const [i, m] of ms.entries()) await m.coord.joinElection('c', 'shard1', cands[i]!);

        await ms[0]!.coord.close();
        await cands[1]!.until('to lead', () => cands[1]!.epochs.length > 0);
        expect(cands[1]!.epochs).toEqual([2]);
        expect(cands[2]!.epochs).toEqual([]);
        await whenCached(ms[2]!.coord, 'n3 to see n2 lead', () => ms[2]!.coord.leader('c', 'shard1')?.node === 'n2');
        expect(ms[2]!.coord.leader('c', 'shard1')).toEqual({ node: 'n2', epoch: 2 });

        // A leader that leaves the election is told so, and the next one leads.
        await ms[1]!.coord.leaveElection('c', 'shard1');
        expect(cands[1]!.lost).toBe(1);
        await cands[2]!.until('to lead', () => cands[2]!.epochs.length > 0);
        expect(cands[2]!.epochs).toEqual([3]);
      });

      it('a candidacy whose creation a leave overtook is removed, so it never sits ahead of the next one (a deposed leader resigns once per write)', async () => {
        const n1 = await member('n1');
        const n2 = await member('n2');
        await allSee(['n1', 'n2'], n1, n2);
        await n1.coord.createCollection(spec('c', 1, 2));
        const leader = new Candidate('n1');
        await n1.coord.joinElection('c', 'shard1', leader);
        await leader.until('to lead', () => leader.epochs.length > 0);
        const second = new Candidate('n2');
        const dir = '/collections/c/leader_elect/shard1';
        const [head] = await queue('c', 'shard1');
        // Join A lists the queue (answer held), and is left at once.
        const listing = n2.store.hold('children', dir);
        const joinA = n2.coord.joinElection('c', 'shard1', second);
        await listing.reached;
        await n2.coord.leaveElection('c', 'shard1');
        // Join B lists the queue too, and is held before it creates its candidacy...
        const look = n2.store.hold('get', head!.path);
        const joinB = n2.coord.joinElection('c', 'shard1', second);
        await look.reached;
        // ...while A goes on: its candidacy is created ahead of B's, for an election already left.
        await listing.release();
        await joinA;
        await look.release();
        await joinB;
        expect((await queue('c', 'shard1')).map((e) => e.node)).toEqual(['n1', 'n2']);
        await n1.coord.close();
        await second.until('to lead', () => second.epochs.length > 0);
      });

      it('a leader that leaves its election while cut off (its delete unanswered) has its candidacy deleted on reconnect, and the next candidate leads', async () => {
        const n1 = await member('n1');
        const n2 = await member('n2');
        await allSee(['n1', 'n2'], n1, n2);
        await n1.coord.createCollection(spec('c', 1, 2));
        const first = new Candidate('n1');
        const second = new Candidate('n2');
        await n1.coord.joinElection('c', 'shard1', first);
        await n2.coord.joinElection('c', 'shard1', second);
        expect(first.epochs).toEqual([1]);

        await cutOff(n1);
        await n1.coord.leaveElection('c', 'shard1');
        // The session lives on, and so does its candidacy, at the head of the queue.
        expect((await queue('c', 'shard1')).map((e) => e.node)).toEqual(['n1', 'n2']);
        await harness.heal(n1.session);
        await second.until('to lead', () => second.epochs.length > 0);
        expect(second.epochs).toEqual([2]);
        expect((await queue('c', 'shard1')).map((e) => e.node)).toEqual(['n2']);
        expect(n1.coord.inElection('c', 'shard1')).toBe(false);
      });

      it('a candidate that could not go back into the queue while cut off (no session expiry) enters it again on reconnect, and leads', async () => {
        const n1 = await member('n1');
        const n2 = await member('n2');
        await allSee(['n1', 'n2'], n1, n2);
        await n1.coord.createCollection(spec('c', 1, 2));
        await n1.coord.joinElection('c', 'shard1', new Candidate('n1'));
        const second = new Candidate('n2');
        const answer = gate();
        second.may = () => answer.promise;
        await n2.coord.joinElection('c', 'shard1', second);
        // n1 goes: n2 is at the head, and asked whether it may lead.
        await n1.coord.close();
        await second.until('to be asked', () => second.asked === 1);

        // Cut off, it answers no: it must leave the queue and come back later, and neither can happen.
        await cutOff(n2);
        const dir = '/collections/c/leader_elect/shard1';
        answer.open(false);
        await waitFor('n2 to fail to go back into the queue', () => n2.store.failed.includes(`children ${dir}`), (wake) => n2.store.onCall(() => wake()));
        second.may = true;
        await harness.heal(n2.session);
        await second.until('to lead', () => second.epochs.length > 0);
        expect(second.epochs).toEqual([2]);
        expect((await queue('c', 'shard1')).map((e) => e.node)).toEqual(['n2']);
      });

      it('joinElection while cut off resolves; the candidacy is created once coordination answers again', async () => {
        const n1 = await member('n1');
        await n1.coord.createCollection(spec('c', 1, 1));
        await cutOff(n1);
        const cand = new Candidate('n1');
        await n1.coord.joinElection('c', 'shard1', cand);
        expect(n1.coord.inElection('c', 'shard1')).toBe(true);
        expect(cand.epochs).toEqual([]);
        await harness.heal(n1.session);
        await cand.until('to lead', () => cand.epochs.length > 0);
        expect(cand.epochs).toEqual([1]);
        expect((await queue('c', 'shard1')).map((e) => e.node)).toEqual(['n1']);
      });

      it('a join still creating its candidacy when a new session re-enters the elections gets one candidacy, not two (a second would sit ahead of it for good)', async () => {
        const n1 = await member('n1', { sessionTimeoutMs: SHORT_SESSION_MS });
        const n2 = await member('n2');
        await allSee(['n1', 'n2'], n1, n2);
        await n2.coord.createCollection(spec('c', 1, 2));
        const head = new Candidate('n2');
        await n2.coord.joinElection('c', 'shard1', head);
        await whenCached(n1.coord, 'n1 to see c', () => n1.coord.collection('c') !== undefined);
        await harness.partition(n1.session);
        await harness.expire(n1.session);
        // The new session's re-registration waits at its first step...
        const reRegistering = n1.store.hold('exists', '/live_nodes/n1');
        await harness.heal(n1.session);
        await reRegistering.reached;
        // ...while a join starts and waits before it creates its candidacy.
        const dir = '/collections/c/leader_elect/shard1';
        const listing = n1.store.hold('children', dir);
        const cand = new Candidate('n1');
        const joining = n1.coord.joinElection('c', 'shard1', cand);
        await listing.reached;
        await reRegistering.release();
        // Everything the new session does is done; only the join's held listing is in flight.
        await poll('n1 to be done re-registering', () => n1.store.pending === 1);
        await listing.release();
        await joining;
        await n1.store.idle();
        expect((await queue('c', 'shard1')).map((e) => e.node)).toEqual(['n2', 'n1']);
        await n2.coord.close();
        await cand.until('to lead', () => cand.epochs.length > 0);
        expect(cand.epochs).toEqual([2]);
      });

      it('each candidate watches only the one ahead of it: removing a candidate from the middle changes no leader and re-links the queue', async () => {
        const ms: Member[] = [];
        for (let i = 1; i <= 5; i++) ms.push(await member(`n${i}`));
        await allSee(['n1', 'n2', 'n3', 'n4', 'n5'], ...ms);
        await ms[0]!.coord.createCollection(spec('c', 1, 5));
        const cands = ms.map((m) => new Candidate(m.coord.self!.name));
        for (const [i, m] of ms.entries()) await m.coord.joinElection('c', 'shard1', cands[i]!);

        const dir = '/collections/c/leader_elect/shard1/';
        const watched = (m: Member) => m.store.existsWatches.filter((p) => p.startsWith(dir));
        const q = await queue('c', 'shard1');
        expect(q.map((e) => e.node)).toEqual(['n1', 'n2', 'n3', 'n4', 'n5']);
        expect(ms.map(watched)).toEqual([[], [q[0]!.path], [q[1]!.path], [q[2]!.path], [q[3]!.path]]);

        // n3 leaves: only n4 (behind it) looks again, and now watches n2.
        await ms[2]!.coord.leaveElection('c', 'shard1');
        await waitFor('n4 to watch n2', () => watched(ms[3]!).length === 2, (wake) => ms[3]!.store.onCall(() => wake()));
        expect(watched(ms[3]!)).toEqual([q[2]!.path, q[1]!.path]);
        expect([ms[1], ms[4]].map((m) => watched(m!))).toEqual([[q[0]!.path], [q[3]!.path]]);
        expect((await queue('c', 'shard1')).map((e) => e.node)).toEqual(['n1', 'n2', 'n4', 'n5']);
        expect(cands.map((c) => c.epochs)).toEqual([[1], [], [], [], []]);
        expect(await leaderZNode('c', 'shard1')).toEqual({ node: 'n1', epoch: 1 });

        // The head goes: n2 leads. Then n2 goes: n4 leads, through the re-linked watch.
        await ms[0]!.coord.close();
        await cands[1]!.until('to lead', () => cands[1]!.epochs.length > 0);
        await ms[1]!.coord.close();
        await cands[3]!.until('to lead', () => cands[3]!.epochs.length > 0);
        expect(cands.map((c) => c.epochs)).toEqual([[1], [2], [], [3], []]);
        expect(watched(ms[4]!)).toEqual([q[3]!.path]);
        await whenCached(ms[4]!.coord, 'n5 to see n4 lead', () => ms[4]!.coord.leader('c', 'shard1')?.node === 'n4');
        expect(ms[4]!.coord.leader('c', 'shard1')).toEqual({ node: 'n4', epoch: 3 });
      });

      it('a candidate whose canLead() resolves false steps back, another leads, and it waits in line until it may lead', async () => {
        const n1 = await member('n1');
        const n2 = await member('n2');
        await allSee(['n1', 'n2'], n1, n2);
        await n1.coord.createCollection(spec('c', 1, 2));
        const behind = new Candidate('n1');
        behind.may = false;
        const healthy = new Candidate('n2');
        await n1.coord.joinElection('c', 'shard1', behind);
        expect(behind.asked).toBe(1);
        await n2.coord.joinElection('c', 'shard1', healthy);
        await healthy.until('to lead', () => healthy.epochs.length > 0);
        expect(healthy.epochs).toEqual([1]);
        expect(behind.epochs).toEqual([]);

        // n1 comes back into the queue, behind the leader.
        await queueBecomes(n1, ['n2', 'n1']);
        behind.may = true;
        await n2.coord.close();
        await behind.until('to lead', () => behind.epochs.length > 0);
        expect(behind.epochs).toEqual([2]);
        expect(await leaderZNode('c', 'shard1')).toEqual({ node: 'n1', epoch: 2 });
      });

      it('a node restarted under the same name drops its stale candidacy instead of waiting behind it', async () => {
        const old = await member('n1');
        await old.coord.createCollection(spec('c', 1, 1));
        await old.coord.joinElection('c', 'shard1', new Candidate('n1 (old)'));
        expect(await leaderZNode('c', 'shard1')).toEqual({ node: 'n1', epoch: 1 });
        // kill -9: the old session, and its candidacy, live on until the session times out.
        await harness.partition(old.session);

        const restarted = await member('n1');
        const cand = new Candidate('n1 (restarted)');
        await restarted.coord.joinElection('c', 'shard1', cand);
        expect(cand.epochs).toEqual([2]);
        expect((await queue('c', 'shard1')).map((q) => q.node)).toEqual(['n1']);
        expect(await leaderZNode('c', 'shard1')).toEqual({ node: 'n1', epoch: 2 });
      });
      it('a restarted node drops its earlier session\'s candidacies at start: a peer that opens first leads without waiting for it', async () => {
        const a = await member('n1');
        const b = await member('n2');
        await allSee(['n1', 'n2'], a, b);
        await a.coord.createCollection(spec('c', 1, 2));
        await a.coord.joinElection('c', 'shard1', new Candidate('n1 (old)'));
        await b.coord.joinElection('c', 'shard1', new Candidate('n2 (old)'));
        expect((await queue('c', 'shard1')).map((q) => q.node)).toEqual(['n1', 'n2']);
        // kill -9 of both: their sessions, and their candidacies, live on until they time out.
        await harness.partition(a.session);
        await harness.partition(b.session);

        // n1 starts again but has not joined (its replica is still opening); n2 joins.
        await member('n1');
        expect((await queue('c', 'shard1')).map((q) => q.node)).toEqual(['n2']);
        const n2 = await member('n2');
        const cand = new Candidate('n2 (restarted)');
        await n2.coord.joinElection('c', 'shard1', cand);
        expect(cand.epochs).toEqual([2]);
        expect(await leaderZNode('c', 'shard1')).toEqual({ node: 'n2', epoch: 2 });
      });

      it('a joinElection that failed (no such collection) may be retried, and then the candidate leads', async () => {
        const n1 = await member('n1');
        const cand = new Candidate('n1');
        await expect(n1.coord.joinElection('c', 'shard1', cand)).rejects.toThrow();
        expect(cand.epochs).toEqual([]);
        await n1.coord.createCollection(spec('c', 1, 1));
        await n1.coord.joinElection('c', 'shard1', cand);
        expect(cand.epochs).toEqual([1]);
      });

      it('leader() hides a leader whose node is not live', async () => {
        const n1 = await member('n1');
        const n2 = await member('n2');
        await allSee(['n1', 'n2'], n1, n2);
        await n1.coord.createCollection(spec('c', 1, 2));
        await n1.coord.joinElection('c', 'shard1', new Candidate('n1'));
        await whenCached(n2.coord, 'n2 to see n1 lead', () => n2.coord.leader('c', 'shard1')?.node === 'n1');

        // n1 goes and nobody else is in line: the leader znode still names it.
        await n1.coord.close();
        await whenCached(n2.coord, 'n2 to see n1 gone', () => !n2.coord.isLive('n1'));
        expect(n2.coord.leader('c', 'shard1')).toBeUndefined();
        expect(await leaderZNode('c', 'shard1')).toEqual({ node: 'n1', epoch: 1 });
      });
      it('a candidate whose session expires while its canLead() is pending does not take leadership later', async () => {
        const n1 = await member('n1', { sessionTimeoutMs: SHORT_SESSION_MS });
        const n2 = await member('n2');
        await allSee(['n1', 'n2'], n1, n2);
        await n1.coord.createCollection(spec('c', 1, 2));
        const slow = new Candidate('n1');
        const answer = gate();
        slow.may = () => answer.promise;
        const joining = n1.coord.joinElection('c', 'shard1', slow).catch(() => undefined);
        await slow.until('to be asked', () => slow.asked === 1);

        await harness.partition(n1.session);
        await harness.expire(n1.session);
        const other = new Candidate('n2');
        await n2.coord.joinElection('c', 'shard1', other);
        expect(other.epochs).toEqual([1]);
        await harness.heal(n1.session);
        await slow.until('to lose its candidacy', () => slow.lost > 0);
        await whenCached(n2.coord, 'n1 to be live again', () => n2.coord.isLive('n1'));

        // The answer to the dead session's question arrives late: it must not make n1 leader.
        answer.open(true);
        await joining;
        expect(slow.epochs).toEqual([]);
        expect(await leaderZNode('c', 'shard1')).toEqual({ node: 'n2', epoch: 1 });
      });
    });

    describe('terms', () => {
      it('start at 0; raiseTerms puts the healthy above the behind; catchUpTerm brings a replica up to the term given, at most the highest', async () => {
        const ms = [await member('n1'), await member('n2'), await member('n3')];
        await allSee(['n1', 'n2', 'n3'], ...ms);
        const [n1, n2, n3] = ms.map((m) => m.coord) as [ClusterCoordinator, ClusterCoordinator, ClusterCoordinator];
        await n1.createCollection(spec('c', 1, 3));
        expect(await n2.terms('c', 'shard1')).toEqual({ n1: 0, n2: 0, n3: 0 });

        await n1.raiseTerms('c', 'shard1', ['n1', 'n3'], ['n2']);
        expect(await n3.terms('c', 'shard1')).toEqual({ n1: 1, n2: 0, n3: 1 });
        // Already above: nothing changes.
        await n1.raiseTerms('c', 'shard1', ['n1'], ['n2']);
        expect(await n2.terms('c', 'shard1')).toEqual({ n1: 1, n2: 0, n3: 1 });

        await n2.catchUpTerm('c', 'shard1', 'n2', 1);
        expect(await n1.terms('c', 'shard1')).toEqual({ n1: 1, n2: 1, n3: 1 });

        // A recovery that began at term 1: the leader's raise since (n3 missed a write) is not its to take.
        await n1.raiseTerms('c', 'shard1', ['n1'], ['n2', 'n3']);
        expect(await n1.terms('c', 'shard1')).toEqual({ n1: 2, n2: 1, n3: 1 });
        await n3.catchUpTerm('c', 'shard1', 'n3', 1);
        expect(await n1.terms('c', 'shard1')).toEqual({ n1: 2, n2: 1, n3: 1 });
        await n3.catchUpTerm('c', 'shard1', 'n3', 2);
        expect(await n1.terms('c', 'shard1')).toEqual({ n1: 2, n2: 1, n3: 2 });
        // Never above the highest, nor down.
        await n2.catchUpTerm('c', 'shard1', 'n2', 5);
        expect(await n1.terms('c', 'shard1')).toEqual({ n1: 2, n2: 2, n3: 2 });
        await n2.catchUpTerm('c', 'shard1', 'n2', 0);
        expect((await n1.terms('c', 'shard1')).n2).toBe(2);
        expect(await n1.terms('missing', 'shard1')).toEqual({});
      });

      it('concurrent raiseTerms and catchUpTerm lose no update', async () => {
        const ms = [await member('n1'), await member('n2'), await member('n3')];
        await allSee(['n1', 'n2', 'n3'], ...ms);
        await ms[0]!.coord.createCollection(spec('c', 1, 3));
        // Three leaders' views at once, all over n2: a lost write would leave n1 or n3 at 0.
        await Promise.all([
          ms[0]!.coord.raiseTerms('c', 'shard1', ['n1'], ['n2']),
          ms[1]!.coord.raiseTerms('c', 'shard1', ['n3'], ['n2']),
          ms[2]!.coord.raiseTerms('c', 'shard1', ['n1', 'n3'], ['n2']),
        ]);
        expect(await ms[1]!.coord.terms('c', 'shard1')).toEqual({ n1: 1, n2: 0, n3: 1 });

        await Promise.all([
          ms[0]!.coord.raiseTerms('c', 'shard1', ['n1'], ['n3']),
          ms[1]!.coord.catchUpTerm('c', 'shard1', 'n2', 1),
        ]);
        // Either order ends with n1 above n3 and n2 at least at n3's term.
        const t = await ms[2]!.coord.terms('c', 'shard1');
        expect(t.n1).toBe(2);
        expect(t.n3).toBe(1);
        expect([1, 2]).toContain(t.n2);
      });
    });

    describe('config', () => {
      it('setConfig stores a JSON document that every coordinator reads; getConfig of a missing one is undefined', async () => {
        const n1 = await member('n1');
        const client = await member();
        expect(await client.coord.getConfig('read_balance')).toBeUndefined();
        await n1.coord.setConfig('read_balance', { slots: 4 });
        expect(await client.coord.getConfig('read_balance')).toEqual({ slots: 4 });
        await client.coord.setConfig('read_balance', { slots: 8 });
        expect(await n1.coord.getConfig('read_balance')).toEqual({ slots: 8 });
      });

      it('updateConfig is compare-and-set: concurrent read-modify-writes from two coordinators all land', async () => {
        const n1 = await member('n1');
        const n2 = await member('n2');
        const bump = (c: typeof n1) => c.coord.updateConfig('counter', (cur) => ({ n: ((cur as { n?: number } | undefined)?.n ?? 0) + 1 }));
        await Promise.all(Array.from({ length: 12 }, (_, i) => bump(i % 2 === 0 ? n1 : n2)));
        expect(await n1.coord.getConfig('counter')).toEqual({ n: 12 });
        // A change that returns undefined writes nothing.
        expect(await n2.coord.updateConfig('counter', () => undefined)).toBeUndefined();
        expect(await n1.coord.getConfig('counter')).toEqual({ n: 12 });
      });
    });

    describe('the session and leadership', () => {
      it('canActAsLeader() is true while connected, and false after close', async () => {
        const n1 = await member('n1');
        expect(n1.coord.canActAsLeader()).toBe(true);
        await n1.coord.close();
        expect(n1.coord.canActAsLeader()).toBe(false);
      });

      it('canActAsLeader() stays true within leaderGraceMs of a disconnect, turns false after it, and is true again on reconnect', async () => {
        const brief = await member('n1', { leaderGraceMs: 300 });
        const patient = await member('n2', { leaderGraceMs: 10 * 60_000 });
        const seen = (m: Member) => {
          const states: SessionState[] = [];
          // Registered after the coordinator's listener: when it hears, so has the coordinator.
          m.session.onSessionState((s) => states.push(s));
          return states;
        };
        const briefStates = seen(brief);
        const patientStates = seen(patient);

        await harness.partition(patient.session);
        await waitFor('n2 to report disconnected', () => patientStates.includes('disconnected'), (wake) => patient.session.onSessionState(() => wake()));
        expect(patient.coord.canActAsLeader()).toBe(true);

        await harness.partition(brief.session);
        await waitFor('n1 to report disconnected', () => briefStates.includes('disconnected'), (wake) => brief.session.onSessionState(() => wake()));
        await poll('n1 to stop acting as leader once its grace is over', () => !brief.coord.canActAsLeader());

        await harness.heal(brief.session);
        await poll('n1 to act as leader again after it reconnected', () => brief.coord.canActAsLeader());
        expect(briefStates.at(-1)).toBe('connected');
      });

      it('after session expiry: leadership is lost (onLost), the node registers again, its watches are re-armed and it rejoins the election', async () => {
        const a = await member('n1', { sessionTimeoutMs: SHORT_SESSION_MS, leaderGraceMs: 200 });
        const b = await member('n2');
        await allSee(['n1', 'n2'], a, b);
        await b.coord.createCollection(spec('c', 1, 2));
        await whenCached(a.coord, 'n1 to see c', () => a.coord.collection('c') !== undefined);
        const ca = new Candidate('n1');
        const cb = new Candidate('n2');
        await a.coord.joinElection('c', 'shard1', ca);
        await b.coord.joinElection('c', 'shard1', cb);
        expect([ca.epochs, cb.epochs]).toEqual([[1], []]);

        await harness.partition(a.session);
        await harness.expire(a.session);
        // The cluster moves on without n1 ...
        await cb.until('to lead', () => cb.epochs.length > 0);
        expect(cb.epochs).toEqual([2]);
        await whenCached(b.coord, 'n2 to see n1 gone and itself lead', () => !b.coord.isLive('n1') && b.coord.leader('c', 'shard1')?.node === 'n2');
        // ... while n1, cut off, stops acting as leader once its grace is over.
        await poll('n1 to stop acting as leader', () => !a.coord.canActAsLeader());

        await harness.heal(a.session);
        await ca.until('to be told it lost leadership', () => ca.lost > 0);
        expect(ca.epochs).toEqual([1]);
        await whenCached(b.coord, 'n2 to see n1 live again', () => b.coord.isLive('n1'));
        await whenCached(a.coord, 'n1 to see n2 lead', () => a.coord.leader('c', 'shard1')?.node === 'n2');
        expect(a.coord.leader('c', 'shard1')).toEqual({ node: 'n2', epoch: 2 });
        await poll('n1 to be connected again', () => a.coord.canActAsLeader());
        await queueBecomes(a, ['n2', 'n1']);

        // Watches of the new session: a new collection, a replica state and a new leader are all seen.
        await b.coord.createCollection(spec('d', 1, 2));
        await whenCached(a.coord, 'n1 to see collection d', () => a.coord.collection('d') !== undefined);
        await b.coord.setReplicaState('c', 'shard1', 'n2', 'recovering');
        await whenCached(a.coord, 'n1 to see n2 recovering', () => a.coord.collection('c')?.shards[0]?.replicas.find((r) => r.node === 'n2')?.state === 'recovering');
        await b.coord.close();
        await ca.until('to lead again', () => ca.epochs.length > 1);
        expect(ca.epochs).toEqual([1, 3]);
        await whenCached(a.coord, 'n1 to see n2 gone and itself lead', () => !a.coord.isLive('n2') && a.coord.leader('c', 'shard1')?.epoch === 3);
        expect(a.coord.leader('c', 'shard1')).toEqual({ node: 'n1', epoch: 3 });
        expect(a.coord.canActAsLeader()).toBe(true);
      });
      it('after session expiry, a collection deleted meanwhile leaves the cache and one created meanwhile enters it', async () => {
        const a = await member('n1', { sessionTimeoutMs: SHORT_SESSION_MS });
        const b = await member('n2');
        await allSee(['n1', 'n2'], a, b);
        await b.coord.createCollection(spec('gone', 1, 1));
        await whenCached(a.coord, 'n1 to see gone', () => a.coord.collection('gone') !== undefined);

        await harness.partition(a.session);
        await harness.expire(a.session);
        await b.coord.deleteCollection('gone');
        await b.coord.createCollection(spec('new', 1, 1));
        await harness.heal(a.session);

        await whenCached(a.coord, 'n1 to see new', () => a.coord.collection('new') !== undefined);
        await whenCached(a.coord, 'n1 to forget gone', () => a.coord.collection('gone') === undefined, BUG_WAIT_MS);
        expect([...a.coord.collections().keys()]).toEqual(['new']);
      });
    });
  });
}

contract('MemoryZNodeServer', memoryHarness);
contract('MemoryZNodeServer with its tree on disk (openTreeStore)', persistentHarness);
contract('ZooKeeperStore', zooKeeperHarness);
