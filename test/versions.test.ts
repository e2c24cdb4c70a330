// Versions and fencing on one replica: the update processor's TOLEADER and FROMLEADER
// phases over a real ReplicaStore (LevelDB in a temp dir), with a stub coordinator and a
// stub distributor. Also what the store keeps across a reopen, and how it trims its log.
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { CollectionState, Coordinator, LeaderInfo } from '../src/coordination/index.js';
import type { CommandDistributor } from '../src/distrib/distributor.js';
import type { ShardUpdate, ShardUpdateResult, WireOp } from '../src/transport/index.js';
import { ShardReplica } from '../src/distrib/replica.js';
import { EPOCH_UNIT, epochOf } from '../src/distrib/shard-state.js';
import { parseSchema } from '../src/index/index.js';
import { UpdateProcessor } from '../src/distrib/update-processor.js';
import { ShardexError } from '../src/errors.js';
import { silentLogger } from '../src/logger.js';
import { ReplicaStore, type UpdateOp } from '../src/ulog/index.js';
import { tableBytes, useTempStores } from './support/temp-stores.js';

const log = silentLogger();
const tmp = useTempStores('versions');
const stores = tmp.stores;

async function openStore(name = 'r', logRetention?: number): Promise<ReplicaStore> {
  const s = await ReplicaStore.open(join(tmp.dir, name), logRetention === undefined ? {} : { logRetention });
  stores.push(s);
  return s;
}

async function reopen(store: ReplicaStore, name = 'r', logRetention?: number): Promise<ReplicaStore> {
  await store.close();
  stores.splice(stores.indexOf(store), 1);
  return openStore(name, logRetention);
}

/** Makes `replica` the leader of `epoch`, as an election and its announcement do. */
function lead(replica: ShardReplica, epoch: number): void {
  replica.step({ type: 'elected', epoch });
  replica.step({ type: 'ready', epoch });
}

/** One shard `c/shard1` hosted by `self` and, optionally, by replica nodes. */
function collectionState(replicaNodes: string[]): CollectionState {
  return {
    name: 'c',
    numShards: 1,
    replicationFactor: replicaNodes.length,
    router: 'compositeId',
    shards: [{ name: 'shard1', range: '80000000-7fffffff', replicas: replicaNodes.map((node) => ({ node, state: 'active', type: 'leader-eligible' })) }],
  };
}

/** Only what the update processor asks of a coordinator. */
function stubCoordinator(state: CollectionState, leader: () => LeaderInfo | undefined): Coordinator {
  const stub: Partial<Coordinator> = {
    collection: (name) => (name === state.name ? state : undefined),
    collections: () => new Map([[state.name, state]]),
    leader: () => leader(),
    canActAsLeader: () => true,
    isLive: () => true,
    raiseTerms: async () => undefined,
    setReplicaState: async () => undefined,
  };
  return stub as Coordinator;
}

interface Sent {
  readonly dest: string;
  readonly update: ShardUpdate;
}

/** A distributor that records what it is asked to send and answers from `answer`. */
function stubDistributor(answer: (dest: string, u: ShardUpdate) => Promise<ShardUpdateResult> = async () => ({ rf: 1, applied: 1 })): {
  distributor: CommandDistributor;
  sent: Sent[];
} {
  const sent: Sent[] = [];
  const distributor = {
    submit: (dest: string, update: ShardUpdate) => {
      sent.push({ dest, update });
      return answer(dest, update);
    },
  } as unknown as CommandDistributor;
  return { distributor, sent };
}

interface Harness {
  readonly store: ReplicaStore;
  readonly replica: ShardReplica;
  readonly processor: UpdateProcessor;
  readonly sent: Sent[];
}

/** A replica of c/shard1 on node `n1`; as leader (epoch given) or as follower. */
async function harness(opts: { leaderEpoch?: number; replicaNodes?: string[]; answer?: (dest: string, u: ShardUpdate) => Promise<ShardUpdateResult> } = {}): Promise<Harness> {
  const store = await openStore();
  const replica = new ShardReplica('c', 'shard1', store, log);
  const leaderEpoch = opts.leaderEpoch;
  if (leaderEpoch !== undefined) lead(replica, leaderEpoch);
  const state = collectionState(['n1', ...(opts.replicaNodes ?? [])]);
  const coordinator = stubCoordinator(state, () => (leaderEpoch !== undefined ? { node: 'n1', epoch: leaderEpoch } : { node: 'n0', epoch: 1 }));
  const { distributor, sent } = stubDistributor(opts.answer);
  const processor = new UpdateProcessor({
    self: 'n1',
    coordinator,
    replica: (c, s) => (c === 'c' && s === 'shard1' ? replica : undefined),
    schema: () => parseSchema(undefined),
    perform: () => undefined,
    distributor,
    logger: log,
    backoff: () => 0,
  });
  return { store, replica, processor, sent };
}

function fromLeader(ops: WireOp[], epoch = 1): ShardUpdate {
  return { collection: 'c', shard: 'shard1', phase: 'FROMLEADER', epoch, ops, minRf: 1, from: 'n0' };
}

function toLeader(ops: WireOp[]): ShardUpdate {
  return { collection: 'c', shard: 'shard1', phase: 'TOLEADER', epoch: 0, ops, minRf: 1, from: 'n2' };
}

async function refusal(p: Promise<unknown>): Promise<ShardexError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(ShardexError);
    return err as ShardexError;
  }
  throw new Error('expected a refusal');
}

/** Everything observable about one id in a store. */
async function snapshot(store: ReplicaStore, id: string): Promise<unknown> {
  return { entry: await store.get(id), version: await store.versionOf(id), docs: store.docCount, max: store.maxVersion };
}

describe('FROMLEADER', () => {
  it('applies an update newer than the stored version', async () => {
    const { store, processor } = await harness();
    await processor.fromLeader(fromLeader([{ id: 'a', v: 100, doc: { id: 'a', n: 1 } }]));
    const res = await processor.fromLeader(fromLeader([{ id: 'a', v: 200, doc: { id: 'a', n: 2 } }]));
    expect(res.applied).toBe(1);
    expect(await store.get('a')).toEqual({ id: 'a', version: 200, doc: { id: 'a', n: 2 } });
  });

  it('drops an update older than the stored version', async () => {
    const { store, processor } = await harness();
    await processor.fromLeader(fromLeader([{ id: 'a', v: 200, doc: { id: 'a', n: 2 } }]));
    const before = await snapshot(store, 'a');
    const res = await processor.fromLeader(fromLeader([{ id: 'a', v: 100, doc: { id: 'a', n: 1 } }]));
    expect(res.applied).toBe(0);
    expect(await snapshot(store, 'a')).toEqual(before);
    expect(await store.get('a')).toEqual({ id: 'a', version: 200, doc: { id: 'a', n: 2 } });
  });

  it('drops an update with the same version as the stored one (a duplicate delivery)', async () => {
    const { store, processor } = await harness();
    await processor.fromLeader(fromLeader([{ id: 'a', v: 200, doc: { id: 'a', n: 2 } }]));
    const res = await processor.fromLeader(fromLeader([{ id: 'a', v: 200, doc: { id: 'a', n: 'other' } }]));
    expect(res.applied).toBe(0);
    expect(await store.get('a')).toEqual({ id: 'a', version: 200, doc: { id: 'a', n: 2 } });
  });

  it('applies the newer ops of a batch and drops the older ones', async () => {
    const { store, processor } = await harness();
    await processor.fromLeader(fromLeader([{ id: 'a', v: 200, doc: { id: 'a' } }, { id: 'b', v: 100, doc: { id: 'b' } }]));
    const res = await processor.fromLeader(
      fromLeader([
        { id: 'a', v: 150, doc: { id: 'a', late: true } },
        { id: 'b', v: 300, doc: { id: 'b', fresh: true } },
        { id: 'c', v: 250, doc: { id: 'c' } },
      ]),
    );
    expect(res.applied).toBe(2);
    expect((await store.get('a'))?.doc).toEqual({ id: 'a' });
    expect((await store.get('b'))?.doc).toEqual({ id: 'b', fresh: true });
    expect(await store.versionOf('c')).toBe(250);
  });

  it('ends in the same state whatever order the updates arrive in', async () => {
    const ops: WireOp[] = [
      { id: 'x', v: 10, doc: { id: 'x', n: 1 } },
      { id: 'x', v: 20, doc: null },
      { id: 'x', v: 30, doc: { id: 'x', n: 3 } },
      { id: 'y', v: 15, doc: { id: 'y', n: 1 } },
      { id: 'y', v: 25, doc: null },
    ];
    const states: unknown[] = [];
    for (const order of [[0, 1, 2, 3, 4], [4, 2, 0, 3, 1], [2, 1, 0, 4, 3]]) {
      const store = await openStore(`order-${order.join('')}`);
      const replica = new ShardReplica('c', 'shard1', store, log);
      for (const i of order) await replica.apply([{ id: ops[i]!.id, version: ops[i]!.v!, doc: ops[i]!.doc }]);
      states.push({ x: await store.get('x'), y: await store.get('y'), docs: store.docCount });
    }
    expect(states[0]).toEqual({ x: { id: 'x', version: 30, doc: { id: 'x', n: 3 } }, y: { id: 'y', version: 25, doc: null }, docs: 1 });
    expect(states[1]).toEqual(states[0]);
    expect(states[2]).toEqual(states[0]);
  });

  it('never forwards an update', async () => {
    const { processor, sent } = await harness({ replicaNodes: ['n2'] });
    await processor.fromLeader(fromLeader([{ id: 'a', v: 1, doc: { id: 'a' } }]));
    expect(sent).toEqual([]);
  });
});

describe('FROMLEADER deletes', () => {
  it('keeps a tombstone with its version', async () => {
    const { store, processor } = await harness();
    await processor.fromLeader(fromLeader([{ id: 'a', v: 100, doc: { id: 'a' } }]));
    await processor.fromLeader(fromLeader([{ id: 'a', v: 200, doc: null }]));
    expect(await store.get('a')).toEqual({ id: 'a', version: 200, doc: null });
    expect(store.docCount).toBe(0);
  });

  it('is not undone by a late older add', async () => {
    const { store, processor } = await harness();
    await processor.fromLeader(fromLeader([{ id: 'a', v: 100, doc: { id: 'a', n: 1 } }]));
    await processor.fromLeader(fromLeader([{ id: 'a', v: 300, doc: null }]));
    const res = await processor.fromLeader(fromLeader([{ id: 'a', v: 200, doc: { id: 'a', n: 2 } }]));
    expect(res.applied).toBe(0);
    expect(await store.get('a')).toEqual({ id: 'a', version: 300, doc: null });
    expect(store.docCount).toBe(0);
  });

  it('is not undone by a late older add for an id this replica never saw added', async () => {
    const { store, processor } = await harness();
    await processor.fromLeader(fromLeader([{ id: 'a', v: 300, doc: null }]));
    await processor.fromLeader(fromLeader([{ id: 'a', v: 200, doc: { id: 'a' } }]));
    expect(await store.get('a')).toEqual({ id: 'a', version: 300, doc: null });
    expect(store.docCount).toBe(0);
  });

  it('is not undone by a late older add after the store is reopened', async () => {
    const { store, processor } = await harness();
    await processor.fromLeader(fromLeader([{ id: 'a', v: 100, doc: { id: 'a' } }, { id: 'a', v: 300, doc: null }]));
    const again = await reopen(store);
    const replica = new ShardReplica('c', 'shard1', again, log);
    expect(await replica.apply([{ id: 'a', version: 200, doc: { id: 'a' } }])).toEqual([]);
    expect(await again.get('a')).toEqual({ id: 'a', version: 300, doc: null });
  });

  it('is overridden by a newer add', async () => {
    const { store, processor } = await harness();
    await processor.fromLeader(fromLeader([{ id: 'a', v: 300, doc: null }]));
    await processor.fromLeader(fromLeader([{ id: 'a', v: 400, doc: { id: 'a', back: true } }]));
    expect(await store.get('a')).toEqual({ id: 'a', version: 400, doc: { id: 'a', back: true } });
    expect(store.docCount).toBe(1);
  });
});

describe('FROMLEADER fencing', () => {
  it('refuses an update from an older leadership epoch than seen, and changes nothing', async () => {
    const { store, replica, processor } = await harness();
    await processor.fromLeader(fromLeader([{ id: 'a', v: 100, doc: { id: 'a', n: 1 } }], 5));
    const before = await snapshot(store, 'a');
    const e = await refusal(processor.fromLeader(fromLeader([{ id: 'a', v: 900, doc: { id: 'a', n: 'deposed' } }, { id: 'b', v: 901, doc: { id: 'b' } }], 4)));
    expect(e.code).toBe('SHX_STALE_EPOCH');
    expect(e.message).toContain('epoch 4');
    expect(e.message).toContain('5');
    expect(await snapshot(store, 'a')).toEqual(before);
    expect(await store.get('b')).toBeUndefined();
    expect(replica.fence).toBe(5);
  });

  it('accepts updates from the newest epoch seen and from newer ones', async () => {
    const { store, replica, processor } = await harness();
    await processor.fromLeader(fromLeader([{ id: 'a', v: 100, doc: { id: 'a' } }], 5));
    await processor.fromLeader(fromLeader([{ id: 'b', v: 101, doc: { id: 'b' } }], 5));
    await processor.fromLeader(fromLeader([{ id: 'c', v: 102, doc: { id: 'c' } }], 6));
    expect(store.docCount).toBe(3);
    expect(replica.fence).toBe(6);
  });

  it('makes a leader that hears from a newer epoch step down', async () => {
    const { replica, processor } = await harness({ leaderEpoch: 3 });
    await processor.fromLeader(fromLeader([{ id: 'a', v: 100, doc: { id: 'a' } }], 4));
    expect(replica.role).toBe('follower');
  });

  it('refuses an update whose op has no version, and writes none of its ops', async () => {
    const { store, processor } = await harness();
    const e = await refusal(processor.fromLeader(fromLeader([{ id: 'a', v: 100, doc: { id: 'a' } }, { id: 'b', doc: { id: 'b' } }])));
    expect(e.code).toBe('SHX_BAD_REQUEST');
    expect(e.message).toContain("'b'");
    expect(e.message).toContain('no version');
    expect(await store.get('a')).toBeUndefined();
    expect(store.docCount).toBe(0);
    expect(store.maxVersion).toBe(0);
  });

  it('refuses a malformed update without taking its epoch as seen', async () => {
    const { replica, processor } = await harness();
    await processor.fromLeader(fromLeader([{ id: 'a', v: 100, doc: { id: 'a' } }], 2));
    await refusal(processor.fromLeader(fromLeader([{ id: 'b', doc: { id: 'b' } }], 9)));
    expect(replica.fence).toBe(2);
    await expect(processor.fromLeader(fromLeader([{ id: 'c', v: 101, doc: { id: 'c' } }], 2))).resolves.toMatchObject({ applied: 1 });
  });

  it('refuses an update for a shard this node does not host', async () => {
    const { processor } = await harness();
    const e = await refusal(processor.fromLeader({ ...fromLeader([{ id: 'a', v: 1, doc: { id: 'a' } }]), shard: 'shard9' }));
    expect(e.code).toBe('SHX_NOT_FOUND');
  });
});

describe('versions assigned by the leader', () => {
  it('are epoch-major: the first version of a leadership is above every version of an older one', async () => {
    const { processor } = await harness({ leaderEpoch: 3 });
    const res = await processor.toLeader(toLeader([{ id: 'a', doc: { id: 'a' } }]));
    expect(epochOf(res.versions!.a!)).toBe(3);
    expect(res.versions!.a).toBe(3 * EPOCH_UNIT + 1);
  });

  it('strictly increase over many concurrent TOLEADER requests, in the order they were written', async () => {
    const { store, processor } = await harness({ leaderEpoch: 1 });
    const requests = Array.from({ length: 40 }, (_, r) =>
      processor.toLeader(toLeader(Array.from({ length: 5 }, (_, i) => ({ id: `r${r}-${i}`, doc: { id: `r${r}-${i}` } })))),
    );
    const results = await Promise.all(requests);
    const all: number[] = [];
    for (const res of results) {
      const vs = Object.values(res.versions ?? {});
      expect(vs).toHaveLength(5);
      for (let i = 1; i < vs.length; i++) expect(vs[i]!).toBeGreaterThan(vs[i - 1]!);
      all.push(...vs);
    }
    expect(new Set(all).size).toBe(200);
    // The update log, read in version order, holds each request's ops contiguously.
    const log = await store.updatesAfter(0, 1000);
    expect(log.map((e) => e.version)).toEqual([...all].sort((a, b) => a - b));
    expect(store.maxVersion).toBe(Math.max(...all));
  });

  it('gives two writes of the same id in one request increasing versions; the last one wins', async () => {
    const { store, processor } = await harness({ leaderEpoch: 1 });
    await processor.toLeader(toLeader([{ id: 'a', doc: { id: 'a', n: 1 } }, { id: 'a', doc: { id: 'a', n: 2 } }]));
    expect((await store.get('a'))?.doc).toEqual({ id: 'a', n: 2 });
  });

  it('stay above the newest stored version, even one ahead of the clock (a reopened store)', async () => {
    const store = await openStore();
    const ahead = 2 * EPOCH_UNIT + 1_000_000;
    await store.apply([{ id: 'old', version: ahead, doc: { id: 'old' } }]);
    const again = await reopen(store);
    const replica = new ShardReplica('c', 'shard1', again, log);
    lead(replica, 2);
    const effects = replica.step({ type: 'update', count: 1 });
    const v = effects.find((e) => e.type === 'accept')?.versions?.[0];
    expect(v).toBe(ahead + 1);
  });

  it('are sent to every replica as FROMLEADER with the leader epoch and the assigned versions', async () => {
    const { processor, sent } = await harness({ leaderEpoch: 7, replicaNodes: ['n2', 'n3'] });
    const res = await processor.toLeader(toLeader([{ id: 'a', doc: { id: 'a' } }]));
    expect(res.rf).toBe(3);
    expect(sent.map((s) => s.dest).sort()).toEqual(['n2', 'n3']);
    for (const s of sent) {
      expect(s.update.phase).toBe('FROMLEADER');
      expect(s.update.epoch).toBe(7);
      // With the document's JSON text, made once at the leader and reused for every replica.
      expect(s.update.ops).toEqual([{ id: 'a', v: res.versions!.a, doc: { id: 'a' }, text: '{"id":"a"}' }]);
    }
  });

  it('a leader whose replica reports a newer epoch steps down, answers indeterminate and must recover', async () => {
    const { replica, processor } = await harness({
      leaderEpoch: 2,
      replicaNodes: ['n2'],
      answer: async () => {
        throw new ShardexError('SHX_STALE_EPOCH', 'update carries leadership epoch 2, older than 3');
      },
    });
    const e = await refusal(processor.toLeader(toLeader([{ id: 'a', doc: { id: 'a' } }])));
    expect(e.code).toBe('SHX_INDETERMINATE');
    expect(replica.role).toBe('follower');
    expect(replica.health).toBe('dirty');
  });

  it('a follower refuses TOLEADER and writes nothing', async () => {
    const { store, processor } = await harness();
    const e = await refusal(processor.toLeader(toLeader([{ id: 'a', doc: { id: 'a' } }])));
    expect(e.code).toBe('SHX_NOT_LEADER');
    expect(store.maxVersion).toBe(0);
  });
});

describe('ReplicaStore across a reopen', () => {
  const ops: UpdateOp[] = [
    { id: 'a', version: 10, doc: { id: 'a', n: 1 } },
    { id: 'b', version: 11, doc: { id: 'b', nested: { x: [1, 2] } } },
    { id: 'c', version: 12, doc: { id: 'c' } },
    { id: 'c', version: 13, doc: null },
    { id: 'é-ü', version: 14, doc: { id: 'é-ü' } },
    { id: '😀emoji', version: 15, doc: { id: '😀emoji' } },
    { id: '\uffff-last-bmp', version: 16, doc: { id: '\uffff-last-bmp' } },
    { id: 'd', version: 17, doc: null },
  ];

  it('keeps documents, versions, tombstones, the live count and the newest version', async () => {
    const store = await openStore();
    await store.apply(ops);
    const again = await reopen(store);
    expect(again.docCount).toBe(5);
    expect(again.maxVersion).toBe(17);
    expect(await again.get('a')).toEqual({ id: 'a', version: 10, doc: { id: 'a', n: 1 } });
    expect(await again.get('b')).toEqual({ id: 'b', version: 11, doc: { id: 'b', nested: { x: [1, 2] } } });
    expect(await again.get('c')).toEqual({ id: 'c', version: 13, doc: null });
    expect(await again.get('d')).toEqual({ id: 'd', version: 17, doc: null });
    for (const id of ['a', 'b', 'c', 'd', 'é-ü', '😀emoji', '\uffff-last-bmp']) expect(await again.versionOf(id), id).toBe(await store.versionOf(id));
  });

  it('keeps ids beginning with any character, including those outside the BMP', async () => {
    const store = await openStore();
    await store.apply(ops);
    const again = await reopen(store);
    expect(await again.get('😀emoji')).toEqual({ id: '😀emoji', version: 15, doc: { id: '😀emoji' } });
    expect(await again.get('\uffff-last-bmp')).toEqual({ id: '\uffff-last-bmp', version: 16, doc: { id: '\uffff-last-bmp' } });
    const listed: string[] = [];
    for await (const e of again.entries()) listed.push(e.id);
    expect(listed.sort()).toEqual(['a', 'b', 'c', 'd', 'é-ü', '😀emoji', '\uffff-last-bmp'].sort());
  });

  it('still drops older versions after a reopen', async () => {
    const store = await openStore();
    await store.apply(ops);
    const again = await reopen(store);
    const applied = await again.apply([
      { id: 'a', version: 5, doc: { id: 'a', late: true } },
      { id: 'c', version: 12, doc: { id: 'c', late: true } },
      { id: '😀emoji', version: 1, doc: { id: '😀emoji', late: true } },
    ]);
    expect(applied).toEqual([]);
    expect(again.docCount).toBe(5);
  });

  it('commits what is on disk when it opens, at the version of the last commit or newer', async () => {
    const store = await openStore();
    await store.apply(ops);
    const point = await store.commit();
    expect(point.version).toBe(17);
    const again = await reopen(store);
    expect(again.lastCommit?.version).toBe(point.version);
    let live = 0;
    for await (const e of again.openCommit()!.entries()) if (e.doc !== null) live++;
    expect(live).toBe(again.docCount);
  });

  it('serves a commit point as a snapshot: later writes are not in it', async () => {
    const store = await openStore();
    await store.apply([{ id: 'x', version: 100, doc: { id: 'x', n: 1 } }]);
    const point = await store.commit();
    await store.apply([{ id: 'x', version: 200, doc: { id: 'x', n: 2 } }, { id: 'y', version: 201, doc: { id: 'y' } }]);
    const seen: Array<{ id: string; version: number }> = [];
    for await (const e of store.openCommit()!.entries()) seen.push({ id: e.id, version: e.version });
    expect(point.version).toBe(100);
    expect(seen).toEqual([{ id: 'x', version: 100 }]);
    expect((await store.updatesAfter(100, 10, 200)).map((e) => e.version)).toEqual([200]);
    await store.close();
  });

  it('keeps the update log', async () => {
    const store = await openStore();
    await store.apply(ops);
    const again = await reopen(store);
    expect(await again.recentVersions(3)).toEqual([17, 16, 15]);
    expect((await again.updatesAfter(0, 100)).map((e) => e.version)).toEqual([10, 11, 12, 13, 14, 15, 16, 17]);
  });
});

describe('ReplicaStore completeness', () => {
  it('says whether an open created it, and keeps the incomplete mark across reopens until a recovery completes', async () => {
    const store = await openStore('c');
    expect(store.created).toBe(true);
    expect(store.incomplete).toBe(false);
    await store.markIncomplete();
    const again = await reopen(store, 'c');
    expect(again.created).toBe(false);
    expect(again.incomplete).toBe(true);
    await again.markComplete();
    const third = await reopen(again, 'c');
    expect(third.incomplete).toBe(false);
  });

  it('is incomplete from a clear (a full copy starting) until marked complete, also after a crash', async () => {
    const store = await openStore('d');
    await store.apply([{ id: 'a', version: 1, doc: { id: 'a' } }]);
    await store.clear();
    expect(store.incomplete).toBe(true);
    await store.apply([{ id: 'a', version: 1, doc: { id: 'a' } }]);
    // Killed before the copy completed: still incomplete at the next open.
    const again = await reopen(store, 'd');
    expect(again.incomplete).toBe(true);
    await again.markComplete();
    expect(again.incomplete).toBe(false);
  });
});

describe('ReplicaStore log trimming', () => {
  it('keeps the newest logRetention entries', async () => {
    const store = await openStore('r', 10);
    for (let v = 1; v <= 60; v++) await store.apply([{ id: `id${v % 7}`, version: v, doc: { id: `id${v % 7}`, v } }]);
    const log = await store.updatesAfter(0, 1000);
    const versions = log.map((e) => e.version);
    // The newest ten are there, in order; at most 10% more is kept between trims.
    expect(versions.slice(-10)).toEqual([51, 52, 53, 54, 55, 56, 57, 58, 59, 60]);
    expect(versions.length).toBeGreaterThanOrEqual(10);
    expect(versions.length).toBeLessThanOrEqual(11);
    expect(versions).toEqual(Array.from({ length: versions.length }, (_, i) => 61 - versions.length + i));
  });

  it('keeps the newest logRetention entries when many batches are applied at once', async () => {
    const store = await openStore('r', 10);
    await Promise.all(Array.from({ length: 60 }, (_, i) => store.apply([{ id: `id${i}`, version: i + 1, doc: { id: `id${i}` } }])));
    // A later write trims what concurrent writes left.
    await store.apply([{ id: 'last', version: 61, doc: { id: 'last' } }]);
    const versions = (await store.updatesAfter(0, 1000)).map((e) => e.version);
    expect(versions.slice(-10)).toEqual([52, 53, 54, 55, 56, 57, 58, 59, 60, 61]);
    expect(versions.length).toBeLessThanOrEqual(11);
  });

  it('does not trim documents: every id keeps its newest state', async () => {
    const store = await openStore('r', 10);
    for (let v = 1; v <= 60; v++) await store.apply([{ id: `id${v}`, version: v, doc: v % 5 === 0 ? null : { id: `id${v}` } }]);
    expect(store.docCount).toBe(48);
    expect(await store.get('id1')).toEqual({ id: 'id1', version: 1, doc: { id: 'id1' } });
    expect(await store.get('id5')).toEqual({ id: 'id5', version: 5, doc: null });
  });

  it('keeps the newest logRetention entries across a reopen', async () => {
    const store = await openStore('r', 10);
    for (let v = 1; v <= 30; v++) await store.apply([{ id: `id${v}`, version: v, doc: { id: `id${v}` } }]);
    const again = await reopen(store, 'r', 10);
    for (let v = 31; v <= 60; v++) await again.apply([{ id: `id${v}`, version: v, doc: { id: `id${v}` } }]);
    const versions = (await again.updatesAfter(0, 1000)).map((e) => e.version);
    expect(versions.slice(-10)).toEqual([51, 52, 53, 54, 55, 56, 57, 58, 59, 60]);
    expect(versions.length).toBeLessThanOrEqual(11);
    expect(again.maxVersion).toBe(60);
  });
  it('knows its log size after a reopen, a trim and a clear, and counts again a count its sums disagree with', async () => {
    const store = await openStore('r', 10);
    for (let v = 1; v <= 30; v++) await store.apply([{ id: `id${v}`, version: v, doc: { id: `id${v}` } }]);
    const size = store.logSize;
    expect(size).toBeLessThanOrEqual(11);
    const again = await reopen(store, 'r', 10);
    expect(again.logSize).toBe(size);
    expect(again.logSize).toBe((await again.updatesAfter(0, 1000)).length);
    expect(again.maxVersion).toBe(30);
    // The open reads the stored count and checks it against the log's bucket sums: a count that
    // disagrees (written by another version) is counted again from the log.
    const db = (again as unknown as { db: { put(k: string, v: string): Promise<void> } }).db;
    await db.put('m:logcount', '7');
    const counted = await reopen(again, 'r', 10);
    expect(counted.logSize).toBe(size);
    await counted.clear();
    const cleared = await reopen(counted, 'r', 10);
    expect(cleared.logSize).toBe(0);
    expect(cleared.maxVersion).toBe(0);
  });
});

/** Makes every LevelDB batch of `store` fail as a full disk would, at its write; returns the undo. */
function failWrites(store: ReplicaStore): () => void {
  type Chained = { write: (...args: unknown[]) => Promise<void>; close: () => Promise<void> };
  const db = (store as unknown as { db: { batch: () => Chained } }).db;
  const batch = db.batch.bind(db);
  db.batch = () => {
    const chained = batch();
    chained.write = async () => {
      await chained.close();
      throw new Error('disk full');
    };
    return chained;
  };
  return () => {
    db.batch = batch;
  };
}

describe('ReplicaStore write failures', () => {
  it('a batch that could not be written leaves no trace: the same update applies when sent again', async () => {
    const store = await openStore();
    await store.apply([{ id: 'a', version: 1, doc: { id: 'a' } }]);
    const restore = failWrites(store);
    await expect(store.apply([{ id: 'a', version: 2, doc: { id: 'a', n: 2 } }, { id: 'b', version: 3, doc: { id: 'b' } }])).rejects.toThrow('disk full');
    restore();
    expect(await store.versionOf('a')).toBe(1);
    expect(await store.versionOf('b')).toBeUndefined();
    expect(store.docCount).toBe(1);
    expect(store.maxVersion).toBe(1);
    const applied = await store.apply([{ id: 'a', version: 2, doc: { id: 'a', n: 2 } }, { id: 'b', version: 3, doc: { id: 'b' } }]);
    expect(applied).toHaveLength(2);
    expect(await store.get('a')).toEqual({ id: 'a', version: 2, doc: { id: 'a', n: 2 } });
    expect(store.docCount).toBe(2);
  });
});

describe('ReplicaStore write failures of recovery', () => {
  it('a reconcile or a removal of stale log entries that could not be written leaves no trace', async () => {
    const store = await openStore();
    await store.apply([{ id: 'a', version: 1, doc: { id: 'a' } }]);
    await store.apply([{ id: 'a', version: 2, doc: { id: 'a', n: 2 } }]);
    await store.apply([{ id: 'a', version: 3, doc: { id: 'a', n: 3 } }, { id: 'b', version: 4, doc: { id: 'b' } }]);
    const before = { log: await store.logVersionsAfter(0, 10), size: store.logSize, docs: store.docCount, digest: await store.logDigest(0, 4) };
    const restore = failWrites(store);
    await expect(store.reconcile([{ id: 'a', leader: { id: 'a', version: 1, doc: { id: 'a' } } }, { id: 'b', leader: undefined }], () => false)).rejects.toThrow('disk full');
    await expect(store.dropStaleLog([1, 2, 2])).rejects.toThrow('disk full');
    restore();
    expect({ log: await store.logVersionsAfter(0, 10), size: store.logSize, docs: store.docCount, digest: await store.logDigest(0, 4) }).toEqual(before);
    expect(await store.versionOf('a')).toBe(3);
    expect(await store.versionOf('b')).toBe(4);
    // Done again once the disk takes writes: a version named twice is removed once.
    expect(await store.dropStaleLog([1, 2, 2])).toBe(2);
    expect(await store.logVersionsAfter(0, 10)).toEqual([3, 4]);
    expect(store.logSize).toBe(2);
    expect(await store.reconcile([{ id: 'b', leader: undefined }], () => false)).toHaveLength(1);
    expect(store.docCount).toBe(1);
    expect(await store.logVersionsAfter(0, 10)).toEqual([3]);
  });
});

describe('replica store write buffer', () => {
  it('takes a LevelDB write buffer size, flushing to table files that much sooner, and loses nothing', async () => {
    const path = join(tmp.dir, 'small-buffer');
    // LevelDB's smallest write buffer (64 KiB); 2,000 documents of ~1 KiB go far past it, so
    // memtables are written to table files while the store is open (the default 4 MiB would not).
    const store = await ReplicaStore.open(path, { writeBufferSize: 64 * 1024 });
    stores.push(store);
    const body = 'x'.repeat(1000);
    for (let b = 0; b < 20; b++) {
      await store.apply(Array.from({ length: 100 }, (_, i) => ({ id: `d${b * 100 + i}`, version: 1 + b * 100 + i, doc: { id: `d${b * 100 + i}`, body } })));
    }
    let tables: string[] = [];
    for (let i = 0; i < 100 && tables.length === 0; i++) {
      tables = (await readdir(path)).filter((f) => f.endsWith('.ldb') || f.endsWith('.sst'));
      if (tables.length === 0) await new Promise((r) => setTimeout(r, 50));
    }
    expect(tables.length).toBeGreaterThan(0);
    await store.close();
    stores.splice(stores.indexOf(store), 1);
    const again = await ReplicaStore.open(path, {});
    stores.push(again);
    expect(again.docCount).toBe(2000);
    expect(again.maxVersion).toBe(2000);
    expect((await again.get('d1234'))?.doc).toEqual({ id: 'd1234', body });
  });
});

describe('replica store compression', () => {
  /** Bytes of a store's table files after 2,000 documents of `body`, closed (and reopened once, so that its log is in tables too). */
  async function writtenTables(name: string, compression: boolean | undefined, body: string): Promise<number> {
    const path = join(tmp.dir, name);
    const store = await ReplicaStore.open(path, { writeBufferSize: 64 * 1024, ...(compression !== undefined && { compression }) });
    for (let b = 0; b < 20; b++) {
      await store.apply(Array.from({ length: 100 }, (_, i) => ({ id: `d${b * 100 + i}`, version: 1 + b * 100 + i, doc: { id: `d${b * 100 + i}`, body } })));
    }
    await store.close();
    // Opening recovers LevelDB's log into a table; closing waits for its compactions.
    await (await ReplicaStore.open(path, compression === undefined ? {} : { compression })).close();
    return tableBytes(path);
  }

  it('writes tables without block compression by default, and compresses them when asked', async () => {
    const body = 'the quick brown fox jumps over the lazy dog. '.repeat(25);
    const plain = await writtenTables('plain', undefined, body);
    const off = await writtenTables('off', false, body);
    const compressed = await writtenTables('compressed', true, body);
    // 2,000 documents of about 1.1 KB, each twice (log entry and current version).
    expect(plain).toBeGreaterThan(2000 * 2 * 1100);
    expect(off).toBeGreaterThan(2000 * 2 * 1100);
    expect(compressed).toBeLessThan(plain / 3);
  });

  it('reads a store written with compression when opened without it, and the other way round', async () => {
    const body = 'y'.repeat(1000);
    await writtenTables('switched', true, body);
    const path = join(tmp.dir, 'switched');
    const store = await ReplicaStore.open(path, { compression: false });
    stores.push(store);
    await store.apply([{ id: 'late', version: 5000, doc: { id: 'late', body } }]);
    await store.close();
    stores.splice(stores.indexOf(store), 1);
    const again = await ReplicaStore.open(path, { compression: true });
    stores.push(again);
    expect(again.docCount).toBe(2001);
    expect((await again.get('d1999'))?.doc).toEqual({ id: 'd1999', body });
    expect((await again.get('late'))?.doc).toEqual({ id: 'late', body });
  });
});

describe('replica store reads', () => {
  it('reads back every id of a page and of a larger batch, whatever its UTF-8 length, with missing ids as undefined', async () => {
    const store = await openStore('reads');
    // Ids of 1 to 4 UTF-8 bytes per character, read after a short one: a page reads ids one by
    // one on this thread, and a key must never be cut inside a character (classic-level 3's
    // string keys were: the 512-byte emoji id came back as missing).
    const ids = ['a', 'é'.repeat(256), '😀'.repeat(128), 'x😀', 'a'.repeat(512), '中'.repeat(170)];
    await store.apply(ids.map((id, i) => ({ id, version: i + 1, doc: { id, n: i } })));
    for (const id of ids) expect((await store.getMany(['a', id]))[1]?.doc, id.slice(0, 8)).toEqual({ id, n: ids.indexOf(id) });
    const page = await store.getMany([...ids, 'missing']);
    expect(page.map((e) => e?.version)).toEqual([1, 2, 3, 4, 5, 6, undefined]);
    const many = Array.from({ length: 30 }, (_, i) => (i < ids.length ? ids[i]! : `none-${i}`));
    expect((await store.getMany(many)).map((e) => e?.version)).toEqual([1, 2, 3, 4, 5, 6, ...Array(24).fill(undefined)]);
  });
});
