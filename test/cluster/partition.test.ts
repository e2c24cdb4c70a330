// Issue 10, "Partition tests, as Jepsen runs them": ZooKeeper, three `shardex node` processes and
// a client each in a network namespace of their own (test/support/netns.ts), joined by a bridge;
// partitions by link down and by nftables drops inside a namespace, one-way drops included. The
// client (test/support/partition-client.mjs) writes throughout and records every outcome; after
// the last heal the test checks, from those records and from every replica's id -> version map:
//   - no acknowledged write is missing on any replica;
//   - no write whose answer was a definite refusal is visible anywhere;
//   - every replica's map equals its shard leader's — at the end, and also right after each crash
//     round for that round's burst ids, because a later round can hide a divergence (a restarted
//     node that leads again hands its stray writes to everyone);
//   - a leader cut off from ZooKeeper stopped acknowledging within the session timeout (+ margin).
// Every request to a node comes from inside the client namespace: the test's addresses are never
// contacted from the main namespace. Rounds are random but seeded: SHARDEX_PARTITION_SEED=<n>
// replays a run; SHARDEX_PARTITION_KEEP=1 keeps the records, dumps, node logs and data dirs;
// SHARDEX_PARTITION_CLI=<path to shardex.js> runs another build (e.g. of an earlier commit);
// SHARDEX_PARTITION_EXTRA_ROUNDS=<n> adds n rounds of random kinds to the six (default 0: the
// suite stays within its time, and every kind runs in every run).
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import type { ChildProcess } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { routeId } from '../../src/hashrange/index.js';
import { startLocalZooKeeper, type RunningZooKeeper } from '../../src/node/local-zookeeper.js';
import type { ClusterView } from '../support/cluster.js';
import { NetLab } from '../support/netns.js';
import { leadersOf as leadersIn, NamespacedCluster, type Dump } from '../support/partition-cluster.js';

/**
 * Answers that say the write was NOT applied (anywhere, ever): the test then requires that none
 * of its ids is visible on any replica. Every other answer — a timeout, a lost connection, a 5xx
 * not listed here, SHX_INDETERMINATE — is indeterminate: the write may or may not stand.
 * `status: '4xx'` matches every 4xx; `codes` narrows a rule to those body codes.
 */
export const DEFINITE_REFUSALS: ReadonlyArray<{ readonly status: number | '4xx'; readonly codes?: readonly string[] }> = [
  { status: '4xx' },
  { status: 503, codes: ['SHX_STARTING', 'SHX_NO_LEADER', 'SHX_NOT_LEADER'] },
];

const ZK_TIMEOUT_MS = 4000;
/** How long after the session timeout a cut-off leader may still acknowledge (scheduling, in-flight replies). */
const STOP_ACK_MARGIN_MS = 1000;
const NODES = ['n1', 'n2', 'n3'] as const;
const C = 'partition';
const SHARDS = 2;
const SEED = Number(process.env.SHARDEX_PARTITION_SEED ?? Math.floor(Math.random() * 2 ** 31));
const EXTRA_ROUNDS = Number(process.env.SHARDEX_PARTITION_EXTRA_ROUNDS ?? 0);
if (!Number.isInteger(EXTRA_ROUNDS) || EXTRA_ROUNDS < 0) throw new Error(`SHARDEX_PARTITION_EXTRA_ROUNDS must be a whole number of rounds (0 or more), not '${process.env.SHARDEX_PARTITION_EXTRA_ROUNDS}'`);

const progress = (m: string): void => void process.stderr.write(`[partition] ${m}\n`);

/** mulberry32: small, seedable, good enough to pick faults. */
function prng(seed: number): { next(): number; int(lo: number, hi: number): number; pick<T>(xs: readonly T[]): T } {
  let a = seed >>> 0;
  const next = (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { next, int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)), pick: (xs) => xs[Math.floor(next() * xs.length)]! };
}

// --- the client's records ------------------------------------------------------------------------

interface Outcome {
  ids: string[];
  node: string;
  start: number;
  end: number;
  status?: number;
  code?: string;
  message?: string;
  error?: string;
  versions?: Record<string, number>;
}

type Verdict = 'ack' | 'definite' | 'indeterminate';

function verdict(o: Outcome): Verdict {
  if (o.status === 200) return 'ack';
  const s = o.status;
  if (s !== undefined && DEFINITE_REFUSALS.some((r) => (r.status === '4xx' ? s >= 400 && s < 500 : s === r.status) && (!r.codes || r.codes.includes(o.code ?? '')))) return 'definite';
  return 'indeterminate';
}

const describeOutcome = (o: Outcome): string => (o.status !== undefined ? `${o.status} ${o.code ?? ''}`.trim() : o.error ?? '?');

async function readOutcomes(files: readonly string[]): Promise<Outcome[]> {
  const out: Outcome[] = [];
  for (const f of files) {
    const text = await readFile(f, 'utf8').catch(() => '');
    // A writer still running may be halfway through its last line: only whole lines count.
    const lines = text.split('\n');
    lines.pop();
    for (const line of lines) if (line.trim()) out.push(JSON.parse(line) as Outcome);
  }
  return out;
}

const leadersOf = (v: ClusterView): Record<string, string | null> => leadersIn(v, C);

// --- rounds ---------------------------------------------------------------------------------------

type Kind = 'leader-cut' | 'minority' | 'one-way-in' | 'one-way-out' | 'kill-cut-leader';

interface Round {
  readonly n: number;
  readonly kind: Kind;
  what: string;
  /** When the round began (its burst included), when the fault began, ended, and the cluster was whole again. */
  beganAt: number;
  faultAt: number;
  healAt: number;
  settledAt: number;
  /** For rounds that cut a leader off from ZooKeeper: that node, and how long it kept acknowledging. */
  cutLeader?: string;
  lastAckAfterCutMs?: number;
  newLeaderAfterMs?: number;
  /** For crash rounds: where the replicas disagreed on the round's burst ids once it settled. */
  divergence?: string[];
}

interface RoundContext {
  readonly cluster: NamespacedCluster;
  readonly lab: NetLab;
  readonly root: string;
  /** The client's record files: a burst adds its own. */
  readonly logs: string[];
  readonly writers: ChildProcess[];
  readonly rnd: ReturnType<typeof prng>;
}

/** One round on a settled cluster: the fault, the heal, and the wait until the cluster is whole again. */
async function runRound(ctx: RoundContext, r: Round): Promise<void> {
  const { cluster, lab: l, root, logs, writers, rnd } = ctx;
  const { kind } = r;
  const addr = (h: string): string => l.host(h).addr;
  const peersOf = (n: string): string[] => NODES.filter((p) => p !== n);
  const leaders = leadersOf(await cluster.waitSettled());
  const shard = rnd.pick(Object.keys(leaders).sort());
  const leader = leaders[shard]!;
  r.beganAt = Date.now();
  if (kind === 'leader-cut') {
    // The client still reaches it; ZooKeeper and its peers do not.
    const ms = ZK_TIMEOUT_MS + rnd.int(1500, 3000);
    r.what = `${leader} (leader of ${shard}) cut from zk and peers, client allowed, ${ms} ms`;
    r.cutLeader = leader;
    r.faultAt = Date.now();
    l.dropBoth(leader, ['zk', ...peersOf(leader)].map(addr));
    // When do the others see a new leader of the shard?
    while (Date.now() < r.faultAt + ms) {
      if (r.newLeaderAfterMs === undefined) {
        const views = await cluster.views(peersOf(leader));
        if (Object.values(views).some((v) => 'nodes' in v && v.collections[C]?.shards[shard]?.leader && v.collections[C]!.shards[shard]!.leader !== leader)) {
          r.newLeaderAfterMs = Date.now() - r.faultAt;
        }
      }
      await sleep(250);
    }
  } else if (kind === 'minority') {
    const victim = rnd.pick(NODES);
    const ms = rnd.int(4000, 7000);
    r.what = `${victim}${Object.values(leaders).includes(victim) ? ' (a leader)' : ''} isolated (link down), ${ms} ms`;
    r.faultAt = Date.now();
    l.linkDown(victim);
    await sleep(ms);
  } else if (kind === 'one-way-in' || kind === 'one-way-out') {
    const peer = rnd.pick(peersOf(leader));
    const ms = rnd.int(4000, 6000);
    r.faultAt = Date.now();
    if (kind === 'one-way-in') {
      r.what = `${leader} (leader of ${shard}) receives nothing from ${peer} but sends, ${ms} ms`;
      l.dropInputFrom(leader, [addr(peer)]);
    } else {
      r.what = `${leader} (leader of ${shard}) sends nothing to ${peer} but receives, ${ms} ms`;
      l.dropOutputTo(leader, [addr(peer)]);
    }
    await sleep(ms);
  } else {
    // A burst of writes to the leader, the leader cut off from zk and peers, kill -9 1-2 s later.
    const burstLog = join(root, `burst-${r.n}.ndjson`);
    const burstStop = join(root, `burst-${r.n}.stop`);
    logs.push(burstLog);
    // Room for ~100 requests a second to go on arriving at the leader after the cut: those are
    // the writes it may apply while none of its replicas can hear of them.
    const burst = cluster.writer({ nodes: cluster.urls([leader]), out: burstLog, stopFile: burstStop, prefix: `d${r.n}-`, intervalMs: 10, maxInFlight: 300, maxMs: 15_000 });
    writers.push(burst);
    await sleep(rnd.int(300, 700));
    const killAfter = rnd.int(1000, 2000);
    r.what = `burst to ${leader} (leader of ${shard}), cut from zk and peers, kill -9 (and its sockets) after ${killAfter} ms, heal, restart`;
    r.cutLeader = leader;
    r.faultAt = Date.now();
    l.dropBoth(leader, ['zk', ...peersOf(leader)].map(addr));
    await sleep(killAfter);
    await cluster.kill(leader);
    // A host crash, not only a process crash: what its kernel still had queued for the peers
    // (the replication in flight) must not arrive after the heal.
    const left = l.destroySockets(leader);
    if (left) progress(`round ${r.n}: sockets left in ${leader}'s namespace after ss -K: ${left}`);
    await writeFile(burstStop, '');
    await new Promise((res) => (burst.exitCode !== null ? res(undefined) : burst.once('exit', res)));
  }
  r.healAt = Date.now();
  l.heal();
  if (kind === 'kill-cut-leader') {
    // Restart only once the others lead: its session must expire first.
    const victim = r.cutLeader!;
    await cluster.waitLeaders(45_000);
    await cluster.start(victim);
  }
  const view = await cluster.waitSettled();
  r.settledAt = Date.now();
  if (kind === 'kill-cut-leader') {
    // Nobody writes the burst's ids any more: every replica must agree on them now.
    const prefix = `d${r.n}-`;
    const dump = await stableDump(cluster, join(root, `round-${r.n}`), (id) => id.startsWith(prefix));
    r.divergence = divergence(dump, view, await readOutcomes(logs), [r], (id) => id.startsWith(prefix));
    for (const line of r.divergence) progress(`round ${r.n}: replicas disagree on the burst's ids: ${line}`);
  }
}

/**
 * Dumps every replica until two dumps in a row agree on the ids passing `only` (a node's own retry
 * may still land), at most 4 times.
 */
async function stableDump(cluster: NamespacedCluster, prefix: string, only: (id: string) => boolean = () => true): Promise<Dump> {
  const seen = (d: Dump): string =>
    JSON.stringify(Object.entries(d).map(([n, e]) => [n, Object.entries(e.shards).map(([s, m]) => [s, Object.entries(m).filter(([id]) => only(id))])]));
  let dump = await cluster.dump(`${prefix}-dump-0.json`);
  for (let k = 1; k <= 3; k++) {
    await sleep(1500);
    const again = await cluster.dump(`${prefix}-dump-${k}.json`);
    const same = seen(again) === seen(dump);
    dump = again;
    if (same) return dump;
  }
  progress(`${prefix}: the replica dumps still changed after 4 tries; using the last`);
  return dump;
}

describe('partitions, as Jepsen runs them (3 nodes + ZooKeeper + client, each in its own network namespace)', () => {
  let lab: NetLab | undefined;
  let zk: RunningZooKeeper | undefined;
  let cluster: NamespacedCluster;
  let root = '';
  const writers: ChildProcess[] = [];

  beforeAll(async () => {
    progress(`seed ${SEED} (replay with SHARDEX_PARTITION_SEED=${SEED})`);
    root = await mkdtemp(join(tmpdir(), 'shardex-partition-'));
    lab = await NetLab.create(['zk', ...NODES, 'client'], progress);
    zk = await startLocalZooKeeper(progress, { host: lab.host('zk').addr, port: 2181, commandPrefix: lab.prefixFor('zk') });
    cluster = new NamespacedCluster({ lab, zk: `${lab.host('zk').addr}:2181`, root, nodes: NODES, collection: C, shards: SHARDS, zkTimeoutMs: ZK_TIMEOUT_MS, progress });
    await Promise.all(NODES.map((n) => cluster.start(n)));
    const created = JSON.parse(
      await cluster.client('request', { method: 'POST', url: `${cluster.nodes.get('n1')!.url}/api/collections`, body: { name: C, numShards: SHARDS, replicationFactor: 3 } }),
    ) as { status: number; body: unknown };
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    await cluster.waitSettled();
  }, 120_000);

  afterAll(async () => {
    for (const w of writers) w.kill('SIGKILL');
    for (const n of NODES) await cluster?.kill(n).catch(() => undefined);
    await zk?.stop().catch(() => undefined);
    await lab?.destroy();
    if (root && !process.env.SHARDEX_PARTITION_KEEP) await rm(root, { recursive: true, force: true });
    else if (root) progress(`kept the client's records, dumps and data dirs in ${root} (SHARDEX_PARTITION_KEEP)`);
  });

  it(`keeps every acknowledged write, shows no refused one, and converges, over ${6 + EXTRA_ROUNDS} seeded rounds of partitions`, { timeout: 240_000 + EXTRA_ROUNDS * 30_000 }, async () => {
    const rnd = prng(SEED);
    const stopFile = join(root, 'stop');
    const logs = [join(root, 'writes.ndjson')];
    writers.push(cluster.writer({ nodes: cluster.urls(), out: logs[0]!, stopFile, prefix: 'w', maxMs: 220_000 + EXTRA_ROUNDS * 30_000 }));

    const kinds: Kind[] = ['leader-cut', 'minority', 'one-way-in', 'one-way-out', 'kill-cut-leader'];
    // Each kind once, the crash of a cut-off leader twice (it is the one that finds stray writes), EXTRA_ROUNDS more at random.
    const plan = [...kinds, 'kill-cut-leader' as const, ...Array.from({ length: EXTRA_ROUNDS }, () => rnd.pick(kinds))];
    for (let i = plan.length - 1; i > 0; i--) {
      const j = rnd.int(0, i);
      [plan[i], plan[j]] = [plan[j]!, plan[i]!];
    }
    const rounds: Round[] = [];
    await sleep(1500); // some acknowledged writes before the first fault

    const ctx: RoundContext = { cluster, lab: lab!, root, logs, writers, rnd };
    try {
      for (const [i, kind] of plan.entries()) {
        const r: Round = { n: i + 1, kind, what: '', beganAt: 0, faultAt: 0, healAt: 0, settledAt: 0 };
        rounds.push(r);
        await runRound(ctx, r);
        progress(`round ${r.n} ${kind}: ${r.what}; settled ${r.settledAt - r.healAt} ms after the heal`);
      }
    } catch (err) {
      // A cluster that does not heal is a finding too: give the figures up to it.
      reportFigures(rounds, await readOutcomes(logs));
      throw err;
    }

    // Quiet end: writers stop, then dumps until two in a row agree (a node's own retry may still land).
    await writeFile(stopFile, '');
    await Promise.all(writers.map((w) => new Promise((res) => (w.exitCode !== null ? res(undefined) : w.once('exit', res)))));
    const finalView = await cluster.waitSettled();
    const dump = await stableDump(cluster, join(root, 'final'));

    const outcomes = await readOutcomes(logs);
    reportFigures(rounds, outcomes);
    const failures = checkAll(outcomes, rounds, dump, finalView);
    if (Object.values(failures).some((p) => p.length > 0)) progress(`node logs:\n${cluster.logs()}`);
    for (const [check, problems] of Object.entries(failures)) {
      expect.soft(problems.slice(0, 15), `${check}: ${problems.length} problem(s)`).toEqual([]);
    }
    // Not a throughput check: that the checks above had acknowledged writes to look at. How many a
    // run gets depends on how each round's faults land (387 to 616 in two runs of the same code: a
    // cut leader's shard waits for its ZooKeeper session to expire, or not).
    expect(outcomes.filter((o) => verdict(o) === 'ack').length, 'acknowledged writes over the whole run').toBeGreaterThan(200);
  });
});

// --- figures and checks ---------------------------------------------------------------------------

function counts(outcomes: readonly Outcome[]): { ack: number; definite: number; indeterminate: number; kinds: string } {
  const byKind = new Map<string, number>();
  const c = { ack: 0, definite: 0, indeterminate: 0 };
  for (const o of outcomes) {
    const v = verdict(o);
    c[v]++;
    if (v === 'ack') continue;
    const key = `${v === 'definite' ? 'refused' : '?'} ${describeOutcome(o)}`;
    byKind.set(key, (byKind.get(key) ?? 0) + 1);
  }
  const kinds = [...byKind].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k}: ${n}`).join(', ');
  return { ...c, kinds };
}

/** Per round (requests started between the fault and the settled cluster) and in total. */
function reportFigures(rounds: Round[], outcomes: readonly Outcome[]): void {
  for (const r of rounds) {
    // A round that never healed or settled (the run failed there) counts up to the end of the records.
    const healAt = r.healAt || Infinity;
    const settledAt = r.settledAt || Infinity;
    if (r.cutLeader && r.faultAt > 0) {
      const acks = outcomes.filter((o) => o.node === r.cutLeader && o.status === 200 && o.end >= r.faultAt && o.end <= healAt);
      r.lastAckAfterCutMs = acks.length === 0 ? 0 : Math.max(...acks.map((o) => o.end)) - r.faultAt;
    }
    const c = counts(outcomes.filter((o) => o.start >= r.beganAt && o.start < settledAt));
    progress(
      `round ${r.n} [${r.kind}] ${r.what}: ${c.ack} acked, ${c.definite} definite refusals, ${c.indeterminate} indeterminate` +
        `${c.kinds ? ` (${c.kinds})` : ''}; ${r.settledAt ? `heal->settled ${r.settledAt - r.healAt} ms` : 'NOT SETTLED'}` +
        `${r.lastAckAfterCutMs !== undefined ? `; last ack from ${r.cutLeader} ${r.lastAckAfterCutMs} ms after the cut` : ''}` +
        `${r.newLeaderAfterMs !== undefined ? `; new leader seen ${r.newLeaderAfterMs} ms after the cut` : ''}`,
    );
  }
  const t = counts(outcomes);
  const docs = outcomes.filter((o) => o.status === 200).reduce((s, o) => s + o.ids.length, 0);
  progress(`summary: ${rounds.length} rounds, seed ${SEED}; ${outcomes.length} requests: ${t.ack} acked (${docs} documents), ${t.definite} definite refusals, ${t.indeterminate} indeterminate (${t.kinds})`);
}

/**
 * Where a replica's id -> version map differs from its shard leader's (only ids passing `only`):
 * one line per replica, with a few ids each, told by what the client saw of them and who holds them.
 */
function divergence(dump: Dump, view: ClusterView, outcomes: readonly Outcome[], rounds: readonly Round[], only: (id: string) => boolean = () => true): string[] {
  const shards = view.collections[C]!.shards;
  const byId = new Map<string, Outcome>();
  for (const o of outcomes) for (const id of o.ids) byId.set(id, o);
  const holders = (shard: string): string[] => shards[shard]!.replicas.map((r) => r.node);
  const mapOf = (node: string, shard: string): Record<string, number> => dump[node]?.shards[shard] ?? {};
  const roundOf = (t: number): string => rounds.find((r) => t >= r.beganAt && t < (r.settledAt || Infinity))?.n.toString() ?? 'between rounds';
  const explain = (id: string, shard: string): string => {
    const o = byId.get(id);
    const on = holders(shard).filter((n) => mapOf(n, shard)[id] !== undefined);
    const what = o ? `${describeOutcome(o)} via ${o.node} after ${o.end - o.start} ms, round ${roundOf(o.start)}` : 'never written by the client';
    return `${id} (${what}; held by ${on.join('+') || 'none'})`;
  };
  const lines: string[] = [];
  for (const [shard, s] of Object.entries(shards)) {
    const leaderMap = mapOf(s.leader!, shard);
    for (const node of holders(shard).filter((n) => n !== s.leader)) {
      const m = mapOf(node, shard);
      const extra = Object.keys(m).filter((id) => only(id) && leaderMap[id] === undefined);
      const missing = Object.keys(leaderMap).filter((id) => only(id) && m[id] === undefined);
      const differ = Object.keys(m).filter((id) => only(id) && leaderMap[id] !== undefined && leaderMap[id] !== m[id]);
      if (extra.length + missing.length + differ.length === 0) continue;
      lines.push(
        `${shard}: ${node} vs leader ${s.leader}: ${extra.length} only on ${node} [${extra.slice(0, 4).map((id) => explain(id, shard)).join(', ')}], ` +
          `${missing.length} only on the leader [${missing.slice(0, 4).map((id) => explain(id, shard)).join(', ')}], ${differ.length} with another version [${differ.slice(0, 3).join(', ')}]`,
      );
    }
  }
  return lines;
}

function checkAll(outcomes: readonly Outcome[], rounds: readonly Round[], dump: Dump, view: ClusterView): Record<string, string[]> {
  const shards = view.collections[C]!.shards;
  const holders = (shard: string): string[] => shards[shard]!.replicas.map((r) => r.node);
  const mapOf = (node: string, shard: string): Record<string, number> | undefined => dump[node]?.shards[shard];
  const dumpErrors = Object.entries(dump).flatMap(([n, d]) => d.errors.map((e) => `${n}: ${e}`));

  const lost: string[] = [];
  for (const o of outcomes.filter((x) => verdict(x) === 'ack')) {
    for (const id of o.ids) {
      const { shard } = routeId(id, SHARDS);
      for (const node of holders(shard)) {
        const v = mapOf(node, shard)?.[id];
        const acked = o.versions?.[id] ?? 0;
        if (v === undefined) lost.push(`${id} (acked by ${o.node} at ${o.end}) missing on ${node}/${shard}`);
        else if (v < acked) lost.push(`${id} on ${node}/${shard} has version ${v} < acked ${acked}`);
      }
    }
  }

  const visible: string[] = [];
  for (const o of outcomes.filter((x) => verdict(x) === 'definite')) {
    for (const id of o.ids) {
      for (const [node, d] of Object.entries(dump)) {
        for (const [shard, m] of Object.entries(d.shards)) if (m[id] !== undefined) visible.push(`${id} refused (${describeOutcome(o)} from ${o.node}: ${o.message ?? ''}) but on ${node}/${shard}`);
      }
    }
  }

  const diverged = divergence(dump, view, outcomes, rounds);

  // Later rounds can hide a divergence (a restarted node that leads again hands its stray writes
  // to everyone), so the crash rounds are also checked right after they settled.
  const divergedAfterRound = rounds.flatMap((r) => (r.divergence ?? []).map((line) => `after round ${r.n}: ${line}`));

  const limit = ZK_TIMEOUT_MS + STOP_ACK_MARGIN_MS;
  const lateAcks = rounds
    .filter((r) => r.lastAckAfterCutMs !== undefined && r.lastAckAfterCutMs > limit)
    .map((r) => `round ${r.n}: ${r.cutLeader} acknowledged ${r.lastAckAfterCutMs} ms after it was cut off from ZooKeeper (limit ${limit} ms)`);

  return {
    'replica dumps complete': dumpErrors,
    'no acknowledged write lost': lost,
    'no definitely refused write visible': visible,
    'every replica equals its leader (at the end)': diverged,
    "every replica equals its leader on a crash round's ids (right after the round)": divergedAfterRound,
    'a cut-off leader stops acknowledging within the session timeout': lateAcks,
  };
}
