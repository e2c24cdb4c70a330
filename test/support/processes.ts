// Node processes for cluster tests on ZooKeeper: `shardex node` started from the built CLI,
// each its own OS process on free loopback ports, stopped (by pid) in teardown.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../../bin/shardex.js', import.meta.url));

export interface NodeProcess {
  readonly name: string;
  readonly dataDir: string;
  http: string;
  grpc: string;
  child: ChildProcess | undefined;
  /** Last lines the process printed (for failure messages). */
  readonly output: string[];
}

export class NodeProcesses {
  readonly nodes = new Map<string, NodeProcess>();
  private root = '';

  constructor(
    private readonly zk: string,
    private readonly opts: { zkTimeoutMs: number; env?: Record<string, string>; args?: string[] },
  ) {}

  /** Starts (or restarts, keeping its data) the node `name`; resolves when it serves. */
  start(name: string): Promise<NodeProcess> {
    return this.launch(name, 'node', this.opts.args ?? []);
  }

  /** Starts a snapshot reader process (`shardex reader`) named `name`. */
  startReader(name: string, args: string[] = []): Promise<NodeProcess> {
    return this.launch(name, 'reader', args);
  }

  private async launch(name: string, command: 'node' | 'reader', args: string[]): Promise<NodeProcess> {
    if (!this.root) this.root = await mkdtemp(join(tmpdir(), 'shardex-procs-'));
    const existing = this.nodes.get(name);
    const node: NodeProcess = existing ?? { name, dataDir: join(this.root, name), http: '', grpc: '', child: undefined, output: [] };
    this.nodes.set(name, node);
    const child = spawn(
      process.execPath,
      [CLI, command, '--zk', this.zk, '--port', '0', '--grpc-port', '0', '--name', name, '--data', node.dataDir, '--zk-timeout', String(this.opts.zkTimeoutMs), ...args],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, SHARDEX_LOG_LEVEL: 'warn', ...this.opts.env } },
    );
    node.child = child;
    const keep = (chunk: Buffer): void => {
      for (const line of chunk.toString('utf8').split('\n')) if (line.trim()) node.output.push(line.slice(0, 500));
      if (node.output.length > 200) node.output.splice(0, node.output.length - 200);
    };
    child.stderr!.on('data', keep);
    await new Promise<void>((resolve, reject) => {
      let buf = '';
      const timer = setTimeout(() => reject(new Error(`node ${name} did not start in 30 s:\n${node.output.slice(-20).join('\n')}`)), 30_000);
      child.stdout!.on('data', (chunk: Buffer) => {
        keep(chunk);
        buf += chunk.toString('utf8');
        const line = buf.split('\n').find((l) => l.includes('"ready":true'));
        if (line) {
          const info = JSON.parse(line) as { http: string; grpc: string };
          node.http = info.http;
          node.grpc = info.grpc;
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`node ${name} exited (${code ?? signal}) before it was ready:\n${node.output.slice(-20).join('\n')}`));
      });
    });
    return node;
  }

  /** kill -9: no shutdown, no goodbye to ZooKeeper. */
  async kill(name: string): Promise<void> {
    await this.signal(name, 'SIGKILL');
  }

  /** Graceful stop (SIGTERM), SIGKILL after 10 s. */
  async stop(name: string): Promise<void> {
    await this.signal(name, 'SIGTERM', 10_000);
  }

  pause(name: string): void {
    this.nodes.get(name)?.child?.kill('SIGSTOP');
  }

  resume(name: string): void {
    this.nodes.get(name)?.child?.kill('SIGCONT');
  }

  private async signal(name: string, sig: NodeJS.Signals, graceMs = 0): Promise<void> {
    const node = this.nodes.get(name);
    const child = node?.child;
    if (!node || !child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill(sig);
    if (graceMs > 0) {
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    } else await exited;
    node.child = undefined;
  }

  /** Writes each node's recent log lines about leadership and recovery to stderr (on a test failure). */
  dumpLogs(headline: string): void {
    process.stderr.write(`${headline}\n`);
    for (const n of this.nodes.values()) {
      const lines = n.output.filter((l) => /recover|leader|replica|down|sync|warn|error|retry/i.test(l)).slice(-40);
      process.stderr.write(`--- ${n.name}\n${lines.join('\n')}\n`);
    }
  }

  /** Stops every process this object started and removes their data. */
  async stopAll(): Promise<void> {
    for (const node of this.nodes.values()) {
      if (node.child) node.child.kill('SIGCONT');
      await this.signal(node.name, 'SIGKILL');
    }
    if (this.root) await rm(this.root, { recursive: true, force: true });
  }
}
