// Network namespaces for one partition test run, as Jepsen gives each host its own network:
// - one bridge namespace holding a Linux bridge, and one namespace per host, joined to the
//   bridge by a veth pair (`eth0` inside the host), all in one /24 chosen here;
// - partitions: a host's link down/up, and nftables drops inside a host's namespace (to/from a
//   peer, or one way only); `heal` flushes them;
// - every process the test runs in a namespace goes through `spawn`/`run` here, so teardown
//   can kill it by pid, then kill whatever else is left in its namespaces (`ip netns pids`),
//   then delete the namespaces by their recorded names — also when the test failed, and, at
//   the next run, for a run that crashed before its teardown.
// The addresses exist only inside these namespaces (they have no route out). They must never
// be contacted from the main namespace: a packet to them from there would leave the machine
// by the default route.
import { execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ensureDebianPackage } from '../../src/node/local-zookeeper.js';
import { processAlive as alive } from '../../src/pid.js';

/** Where each run records which namespaces it owns, so that a later run can clean up after a crash. */
const OWNERS_DIR = '/run/shardex-netns';
const TABLE = 'shardex_partition';

export type Progress = (message: string) => void;

export interface NetHost {
  readonly name: string;
  readonly ns: string;
  readonly addr: string;
}

export interface RunResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

interface OwnerRecord {
  readonly pid: number;
  readonly namespaces: string[];
}

function ip(args: string[]): string {
  return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function listNamespaces(): string[] {
  return ip(['netns', 'list'])
    .split('\n')
    .map((l) => l.split(' ')[0]!)
    .filter(Boolean);
}

/** Kills every process inside `ns` and deletes it; quiet when it is already gone. */
function destroyNamespace(ns: string): void {
  for (let attempt = 0; attempt < 20; attempt++) {
    let pids: number[] = [];
    try {
      pids = ip(['netns', 'pids', ns]).split('\n').filter(Boolean).map(Number);
    } catch {
      return; // no such namespace
    }
    if (pids.length === 0) break;
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
    execFileSync('sleep', ['0.05']);
  }
  try {
    ip(['netns', 'del', ns]);
  } catch {
    /* already gone */
  }
}

/** Removes what earlier runs of this harness left behind: namespaces whose owning process is dead. */
function cleanStale(report: Progress): void {
  if (!existsSync(OWNERS_DIR)) return;
  const present = new Set(listNamespaces());
  for (const file of readdirSync(OWNERS_DIR)) {
    const path = join(OWNERS_DIR, file);
    let record: OwnerRecord;
    try {
      record = JSON.parse(readFileSync(path, 'utf8')) as OwnerRecord;
    } catch {
      rmSync(path, { force: true });
      continue;
    }
    if (alive(record.pid)) continue;
    const left = record.namespaces.filter((ns) => present.has(ns));
    if (left.length > 0) report(`removing namespaces left by a crashed run (pid ${record.pid}): ${left.join(', ')}`);
    for (const ns of left) destroyNamespace(ns);
    rmSync(path, { force: true });
  }
}

/** A prefix no live run holds: shx<pid % 1000>, moved on while a live owner holds it. */
function choosePrefix(): { prefix: string; n: number } {
  for (let k = 0; k < 1000; k++) {
    const n = (process.pid + k) % 1000;
    const prefix = `shx${n}`;
    const owner = join(OWNERS_DIR, `${prefix}.json`);
    if (existsSync(owner)) continue; // cleanStale ran first: the owner is alive
    // A namespace of this prefix without an owner record: from a crash before the record was written.
    for (const ns of listNamespaces()) if (ns.startsWith(`${prefix}-`)) destroyNamespace(ns);
    return { prefix, n };
  }
  throw new Error(`every netns prefix is held by a live run (see ${OWNERS_DIR})`);
}

export class NetLab {
  private readonly hosts = new Map<string, NetHost>();
  private readonly namespaces: string[] = [];
  private readonly children = new Set<ChildProcess>();
  private readonly ownerFile: string;
  private readonly onExit = (): void => this.destroySync();
  private destroyed = false;

  private constructor(
    readonly prefix: string,
    /** The /24, e.g. '10.213.7' (hosts are .2, .3, ...). */
    readonly subnet: string,
    private readonly report: Progress,
  ) {
    this.ownerFile = join(OWNERS_DIR, `${prefix}.json`);
  }

  /** Creates the bridge and one namespace per name (in order: .2, .3, ...), nftables ready in each. */
  static async create(names: readonly string[], report: Progress): Promise<NetLab> {
    await ensureDebianPackage('nftables', () => existsSync('/usr/sbin/nft'), report);
    mkdirSync(OWNERS_DIR, { recursive: true });
    cleanStale(report);
    const { prefix, n } = choosePrefix();
    const lab = new NetLab(prefix, `10.213.${n % 250}`, report);
    process.once('exit', lab.onExit);
    try {
      lab.build(names);
    } catch (err) {
      lab.destroySync();
      throw err;
    }
    return lab;
  }

  private addNamespace(ns: string): void {
    // Recorded before it exists: a crash in between leaves nothing unrecorded.
    this.namespaces.push(ns);
    writeFileSync(this.ownerFile, JSON.stringify({ pid: process.pid, namespaces: this.namespaces } satisfies OwnerRecord));
    ip(['netns', 'add', ns]);
    ip(['-n', ns, 'link', 'set', 'lo', 'up']);
  }

  private build(names: readonly string[]): void {
    const bridge = `${this.prefix}-br`;
    this.addNamespace(bridge);
    ip(['-n', bridge, 'link', 'add', 'br0', 'type', 'bridge']);
    ip(['-n', bridge, 'link', 'set', 'br0', 'up']);
    names.forEach((name, i) => {
      const ns = `${this.prefix}-${name}`;
      const addr = `${this.subnet}.${i + 2}`;
      this.addNamespace(ns);
      // Both ends are created inside namespaces: no interface name ever appears in the main one.
      const port = `v-${name}`.slice(0, 15);
      ip(['-n', bridge, 'link', 'add', port, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
      ip(['-n', bridge, 'link', 'set', port, 'master', 'br0', 'up']);
      ip(['-n', ns, 'addr', 'add', `${addr}/24`, 'dev', 'eth0']);
      ip(['-n', ns, 'link', 'set', 'eth0', 'up']);
      this.nft(ns, ['add', 'table', 'inet', TABLE]);
      this.nft(ns, ['add', 'chain', 'inet', TABLE, 'input', '{ type filter hook input priority 0; policy accept; }']);
      this.nft(ns, ['add', 'chain', 'inet', TABLE, 'output', '{ type filter hook output priority 0; policy accept; }']);
      this.hosts.set(name, { name, ns, addr });
    });
    this.report(`namespaces ${this.namespaces.join(', ')} on ${this.subnet}.0/24`);
  }

  host(name: string): NetHost {
    const h = this.hosts.get(name);
    if (!h) throw new Error(`no host ${name} in this lab`);
    return h;
  }

  /** The command prefix that runs a command inside `host`'s namespace. */
  prefixFor(host: string): string[] {
    return ['ip', 'netns', 'exec', this.host(host).ns];
  }

  /** Starts `argv` inside `host` (`ip netns exec` execs it: the child's pid is the command's own). */
  spawn(host: string, argv: readonly string[], options: SpawnOptions = {}): ChildProcess {
    const child = spawn('ip', ['netns', 'exec', this.host(host).ns, ...argv], { stdio: ['ignore', 'pipe', 'pipe'], ...options });
    this.children.add(child);
    child.once('exit', () => this.children.delete(child));
    child.once('error', () => this.children.delete(child));
    return child;
  }

  /** Runs `argv` inside `host` to its end (killed after `timeoutMs`). */
  run(host: string, argv: readonly string[], timeoutMs = 30_000): Promise<RunResult> {
    const child = this.spawn(host, argv);
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    return new Promise((resolve) => {
      child.once('error', (err) => {
        clearTimeout(timer);
        resolve({ code: -1, stdout, stderr: `${stderr}\n${err.message}` });
      });
      child.once('close', (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });
  }

  // --- partitions --------------------------------------------------------------------------------

  /** Pulls `host`'s cable: nothing in or out, and its peers see no carrier either. */
  linkDown(host: string): void {
    ip(['-n', this.host(host).ns, 'link', 'set', 'eth0', 'down']);
  }

  linkUp(host: string): void {
    ip(['-n', this.host(host).ns, 'link', 'set', 'eth0', 'up']);
  }

  /** `host` drops every packet from and to `peers` (addresses); others still reach it. */
  dropBoth(host: string, peers: readonly string[]): void {
    this.dropInputFrom(host, peers);
    this.dropOutputTo(host, peers);
  }

  /** `host` no longer receives from `peers`, but still sends to them. */
  dropInputFrom(host: string, peers: readonly string[]): void {
    for (const p of peers) this.nft(this.host(host).ns, ['add', 'rule', 'inet', TABLE, 'input', 'ip', 'saddr', p, 'drop']);
  }

  /** `host` no longer sends to `peers`, but still receives from them. */
  dropOutputTo(host: string, peers: readonly string[]): void {
    for (const p of peers) this.nft(this.host(host).ns, ['add', 'rule', 'inet', TABLE, 'output', 'ip', 'daddr', p, 'drop']);
  }

  /**
   * Destroys every TCP socket left in `host`'s namespace (`ss -K`). After kill -9 the kernel still
   * holds the dead process's sockets (FIN-WAIT-1, unsent data queued) and delivers that data once
   * a partition heals; destroying them makes the kill a host crash, whose network stack dies too.
   * Returns what `ss` still lists afterwards ('' when nothing is left).
   */
  destroySockets(host: string): string {
    const { ns } = this.host(host);
    try {
      execFileSync('ip', ['netns', 'exec', ns, 'ss', '-K', '-t', '-a'], { stdio: ['ignore', 'ignore', 'ignore'] });
    } catch {
      // ss reports an error for sockets it cannot destroy (e.g. listeners); what is left is checked below.
    }
    return execFileSync('ip', ['netns', 'exec', ns, 'ss', '-t', '-a', '-n', '-H'], { encoding: 'utf8' }).trim();
  }

  /** Ends every partition: every link up, every drop rule gone (the chains stay, empty). */
  heal(): void {
    for (const h of this.hosts.values()) {
      this.linkUp(h.name);
      this.nft(h.ns, ['flush', 'table', 'inet', TABLE]);
    }
  }

  /** The rules in force, for failure messages. */
  rules(host: string): string {
    return this.nft(this.host(host).ns, ['list', 'table', 'inet', TABLE]);
  }

  private nft(ns: string, args: string[]): string {
    return execFileSync('ip', ['netns', 'exec', ns, 'nft', ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  }

  // --- teardown ----------------------------------------------------------------------------------

  /** Kills every process started here and everything left in our namespaces, then deletes them. */
  async destroy(): Promise<void> {
    this.destroySync();
  }

  private destroySync(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    process.removeListener('exit', this.onExit);
    for (const child of this.children) {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
    // Hosts first, the bridge last; each one's remaining processes by `ip netns pids`.
    for (const ns of [...this.namespaces].reverse()) destroyNamespace(ns);
    rmSync(this.ownerFile, { force: true });
    this.report(`deleted namespaces ${this.namespaces.join(', ')}`);
  }
}
