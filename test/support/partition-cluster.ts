// The partition test's cluster: `shardex node` processes, each in its own network namespace of a
// NetLab (test/support/netns.ts), and the client script (partition-client.mjs) run in the lab's
// `client` namespace — the only process that talks to the nodes, so that no address of the lab is
// ever contacted from the main namespace. Each node's output goes to <root>/<name>.log.
import type { ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { ClusterView } from './cluster.js';
import type { NetLab } from './netns.js';

const CLIENT = fileURLToPath(new URL('./partition-client.mjs', import.meta.url));
// The built CLI (dist/); SHARDEX_PARTITION_CLI runs another build, e.g. one of an earlier commit.
const CLI = process.env.SHARDEX_PARTITION_CLI ?? fileURLToPath(new URL('../../bin/shardex.js', import.meta.url));

export interface NodeProc {
  readonly name: string;
  readonly url: string;
  readonly dataDir: string;
  child: ChildProcess | undefined;
  readonly output: string[];
}

/** Per node: its cluster view and, per shard it holds, that replica's id -> version map. */
export type Dump = Record<string, { view?: ClusterView; shards: Record<string, Record<string, number>>; errors: string[] }>;

export interface ClusterSpec {
  readonly lab: NetLab;
  /** ZooKeeper's 'host:port' (inside the lab). */
  readonly zk: string;
  /** Data dirs, node logs and the client's files go here. */
  readonly root: string;
  readonly nodes: readonly string[];
  readonly collection: string;
  readonly shards: number;
  readonly zkTimeoutMs: number;
  readonly progress: (message: string) => void;
}

export class NamespacedCluster {
  readonly nodes = new Map<string, NodeProc>();
  readonly lab: NetLab;
  private readonly root: string;
  private readonly zk: string;

  constructor(private readonly spec: ClusterSpec) {
    const { lab, root } = spec;
    this.lab = lab;
    this.root = root;
    this.zk = spec.zk;
    for (const name of spec.nodes) {
      this.nodes.set(name, { name, url: `http://${lab.host(name).addr}:8983`, dataDir: join(root, name), child: undefined, output: [] });
    }
  }

  urls(only?: readonly string[]): Record<string, string> {
    return Object.fromEntries([...this.nodes.values()].filter((n) => !only || only.includes(n.name)).map((n) => [n.name, n.url]));
  }

  /** Starts (or restarts on its data dir) node `name` in its namespace; resolves when it serves. */
  async start(name: string): Promise<void> {
    const node = this.nodes.get(name)!;
    const { addr } = this.lab.host(name);
    const args = ['node', '--zk', `${this.zk}/shardex`, '--host', addr, '--port', '8983', '--grpc-port', '9983', '--name', name, '--data', node.dataDir, '--zk-timeout', String(this.spec.zkTimeoutMs), '--insecure'];
    const child = this.lab.spawn(name, [process.execPath, CLI, ...args], { env: { ...process.env, SHARDEX_LOG_LEVEL: 'info' } });
    node.child = child;
    // Everything it prints goes to <root>/<name>.log (kept with SHARDEX_PARTITION_KEEP); the last lines also stay in memory.
    const file = createWriteStream(join(this.root, `${name}.log`), { flags: 'a' });
    child.once('close', () => file.end());
    const keep = (chunk: Buffer): void => {
      file.write(chunk);
      for (const line of chunk.toString('utf8').split('\n')) if (line.trim()) node.output.push(`${new Date().toISOString().slice(11, 23)} ${line.slice(0, 400)}`);
      if (node.output.length > 600) node.output.splice(0, node.output.length - 600);
    };
    child.stderr!.on('data', keep);
    child.once('exit', (code, signal) => node.output.push(`-- exited (${signal ?? code})`));
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${name} did not start in 30 s:\n${node.output.slice(-20).join('\n')}`)), 30_000);
      child.stdout!.on('data', (chunk: Buffer) => {
        keep(chunk);
        if (chunk.toString().includes('"ready":true')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', () => {
        clearTimeout(timer);
        reject(new Error(`${name} exited before it was ready:\n${node.output.slice(-20).join('\n')}`));
      });
    });
  }

  /** kill -9, and wait for the process to be gone. */
  async kill(name: string): Promise<void> {
    const child = this.nodes.get(name)!.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await gone;
    this.nodes.get(name)!.child = undefined;
  }

  running(): string[] {
    return [...this.nodes.values()].filter((n) => n.child).map((n) => n.name);
  }

  /** Runs the client script in the client namespace with `mode` and `opts`; returns its stdout. */
  async client(mode: string, opts: object, timeoutMs = 30_000): Promise<string> {
    const res = await this.lab.run('client', [process.execPath, CLIENT, mode, JSON.stringify(opts)], timeoutMs);
    if (res.code !== 0) throw new Error(`client ${mode} failed (${res.code}): ${res.stderr.slice(-1000)}`);
    return res.stdout;
  }

  /** Starts a writer in the client namespace; it appends outcomes to `out` until `stopFile` exists. */
  writer(opts: { nodes: Record<string, string>; out: string; stopFile: string; prefix: string; intervalMs?: number; maxInFlight?: number; maxMs?: number }): ChildProcess {
    const child = this.lab.spawn('client', [process.execPath, CLIENT, 'write', JSON.stringify({ collection: this.spec.collection, timeoutMs: 3000, ...opts })]);
    child.stderr!.on('data', (c: Buffer) => this.spec.progress(`writer ${opts.prefix}: ${c.toString().trimEnd()}`));
    return child;
  }

  async views(only?: readonly string[]): Promise<Record<string, ClusterView | { error: string }>> {
    return JSON.parse(await this.client('view', { nodes: this.urls(only) })) as Record<string, ClusterView | { error: string }>;
  }

  /** Every running node's view: all running nodes live, every shard led by one of them, every replica active, leaders agreed. */
  async waitSettled(ms = 45_000): Promise<ClusterView> {
    const deadline = Date.now() + ms;
    let last = '';
    while (Date.now() < deadline) {
      const running = this.running();
      const views = await this.views(running);
      const ok = Object.values(views).every((v) => 'nodes' in v && settledView(v, running, this.spec.collection, this.spec.shards));
      const leaders = new Set(Object.values(views).map((v) => ('nodes' in v ? JSON.stringify(leadersOf(v, this.spec.collection)) : 'none')));
      if (ok && leaders.size === 1) return Object.values(views)[0] as ClusterView;
      last = JSON.stringify(views).slice(0, 1500);
      await sleep(300);
    }
    throw new Error(`the cluster did not settle within ${ms} ms; last views: ${last}\n${this.logs()}`);
  }

  /** Every running node sees every shard led by a running node (the others may still be down). */
  async waitLeaders(ms: number): Promise<void> {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline) {
      const running = this.running();
      const views = await this.views(running);
      const led = (v: ClusterView): boolean => Object.values(v.collections[this.spec.collection]?.shards ?? {}).every((s) => s.leader !== null && running.includes(s.leader));
      if (Object.values(views).every((v) => 'nodes' in v && led(v))) return;
      await sleep(300);
    }
    throw new Error(`no leader among ${this.running().join(', ')} for every shard within ${ms} ms\n${this.logs()}`);
  }

  async dump(out: string): Promise<Dump> {
    await this.client('dump', { nodes: this.urls(), collection: this.spec.collection, out }, 60_000);
    return JSON.parse(await readFile(out, 'utf8')) as Dump;
  }

  /** Each node's recent lines about leadership, sessions and recovery, then its very last lines: for failure messages. */
  logs(): string {
    return [...this.nodes.values()]
      .map((n) => {
        const about = n.output.filter((l) => /leader|elect|session|expire|recover|sync|down|warn|error|exited/i.test(l)).slice(-30);
        return `--- ${n.name}\n${about.join('\n')}\n--- ${n.name}, last lines\n${n.output.slice(-8).join('\n')}`;
      })
      .join('\n');
  }
}

/** All running nodes live, `shards` shards each led by a live node, every replica active. */
export function settledView(v: ClusterView, running: readonly string[], collection: string, shards: number): boolean {
  const live = new Set(v.nodes.map((n) => n.name));
  if (!running.every((n) => live.has(n))) return false;
  const all = Object.values(v.collections[collection]?.shards ?? {});
  return all.length === shards && all.every((s) => s.leader !== null && live.has(s.leader) && s.replicas.every((r) => r.state === 'active'));
}

export function leadersOf(v: ClusterView, collection: string): Record<string, string | null> {
  return Object.fromEntries(Object.entries(v.collections[collection]?.shards ?? {}).map(([s, x]) => [s, x.leader]));
}

