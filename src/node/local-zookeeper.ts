// A throwaway standalone ZooKeeper on a free 127.0.0.1 port, for tests and benchmarks:
// - installs ZooKeeper from Debian's packages when it is missing (this needs root);
// - starts it with a temp data dir, tickTime=500 so that sessions may be as short as 1 s
//   (minSessionTimeout; maxSessionTimeout is 60 s), and no fsync (throwaway data);
// - stops it by pid (SIGTERM, then SIGKILL) and removes the temp dir.
// Long steps report through `progress`, one line each.
// Partition tests run it inside a network namespace: `host`, `port` and `commandPrefix`
// (e.g. ['ip', 'netns', 'exec', NS]) bind it there, and the readiness probe then runs through
// the same prefix, because such an address must never be contacted from the main namespace.

import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const ZOOKEEPER_JAR = '/usr/share/java/zookeeper.jar';
const CLASSPATH = ['/etc/zookeeper/conf', ZOOKEEPER_JAR, '/usr/share/java/slf4j-simple.jar'].join(':');
const INSTALL_HINT = 'apt-get update && apt-get install -y zookeeper';
const READY_TIMEOUT_MS = 30_000;
const PROBE_TIMEOUT_MS = 1_000;
const STOP_GRACE_MS = 5_000;
const APT_LOCK_RETRY_MS = 3_000;
const APT_LOCK_WAIT_MS = 180_000;

export type Progress = (message: string) => void;

export interface LocalZooKeeperOptions {
  /** Address to bind (default 127.0.0.1). */
  readonly host?: string;
  /** Port to bind (default: a free port on 127.0.0.1; give one when `host` is not local to this namespace). */
  readonly port?: number;
  /** Runs java and the readiness probe through this command, e.g. ['ip', 'netns', 'exec', 'ns1']. */
  readonly commandPrefix?: readonly string[];
}

let progress: Progress = () => undefined;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Installs (if missing) and starts a local ZooKeeper; `stop()` ends it and removes its data. */
export async function startLocalZooKeeper(report: Progress = () => undefined, options: LocalZooKeeperOptions = {}): Promise<RunningZooKeeper> {
  progress = report;
  await ensureDebianPackage('zookeeper', () => existsSync(ZOOKEEPER_JAR), report);
  return startZooKeeper(options);
}

// --- installing -------------------------------------------------------------------------------

/**
 * Installs a Debian package with apt-get unless `present()` says it is there (this needs root):
 * install first, and only when that fails `apt-get update` and install again; waits out another
 * apt holding the lock. Every line apt prints goes to `report`.
 */
export async function ensureDebianPackage(pkg: string, present: () => boolean, report: Progress): Promise<void> {
  await ensureDebianPackages([{ pkg, present }], report);
}

/** As ensureDebianPackage, for several packages: those missing are installed in one apt-get call. */
export async function ensureDebianPackages(wanted: ReadonlyArray<{ readonly pkg: string; readonly present: () => boolean }>, report: Progress): Promise<void> {
  const missing = wanted.filter((w) => !w.present());
  if (missing.length === 0) return;
  const pkgs = missing.map((w) => w.pkg);
  const names = pkgs.join(' ');
  const hint = `apt-get update && apt-get install -y ${names}`;
  if (process.getuid?.() !== 0) {
    throw new Error(`${names} ${pkgs.length > 1 ? 'are' : 'is'} not installed and the tests do not run as root to install ${pkgs.length > 1 ? 'them' : 'it'}. Run: sudo sh -c '${hint}'`);
  }
  const previous = progress;
  progress = report;
  try {
    const started = Date.now();
    progress(`${names} ${pkgs.length > 1 ? 'are' : 'is'} not installed; installing from Debian (${hint}) ...`);
    try {
      await aptGet(['install', '-y', ...pkgs], hint);
    } catch {
      // Typically a package list that is missing or stale: refresh it once.
      await aptGet(['update'], hint);
      await aptGet(['install', '-y', ...pkgs], hint);
    }
    const still = missing.filter((w) => !w.present()).map((w) => w.pkg);
    if (still.length > 0) throw new Error(`apt-get installed ${still.join(' ')} but it is still missing. Run: ${hint}`);
    progress(`${names} installed in ${Math.round((Date.now() - started) / 1000)} s`);
  } finally {
    progress = previous;
  }
}

/** Runs apt-get, echoing its output as progress, and waits out another apt holding the lock. */
async function aptGet(args: string[], hint: string): Promise<void> {
  const deadline = Date.now() + APT_LOCK_WAIT_MS;
  for (;;) {
    const { code, output } = await run('apt-get', args);
    if (code === 0) return;
    const locked = /Could not get lock|Unable to acquire the dpkg frontend lock|Unable to lock|is another process using it/i.test(output);
    if (locked && Date.now() < deadline) {
      progress(`apt is busy (another apt or dpkg holds its lock); retrying 'apt-get ${args.join(' ')}' in ${APT_LOCK_RETRY_MS / 1000} s`);
      await sleep(APT_LOCK_RETRY_MS);
      continue;
    }
    throw new Error(
      `'apt-get ${args.join(' ')}' failed (exit ${code}) while installing a package for the tests. Install it by hand: ${hint}\n${tail(output, 15)}`,
    );
  }
}

function run(command: string, args: string[]): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    });
    let output = '';
    let partial = '';
    const onData = (chunk: Buffer) => {
      const text = chunk.toString();
      output += text;
      const lines = (partial + text).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) if (line.trim()) progress(`${command}: ${line.trimEnd()}`);
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('error', (err) => resolve({ code: -1, output: `${output}\n${err.message}` }));
    child.on('close', (code) => {
      if (partial.trim()) progress(`${command}: ${partial.trimEnd()}`);
      resolve({ code: code ?? -1, output });
    });
  });
}

// --- running ----------------------------------------------------------------------------------

export interface RunningZooKeeper {
  readonly host: string;
  readonly port: number;
  /** The JVM's pid (`ip netns exec` execs its command, so a prefix does not change it). */
  readonly pid: number | undefined;
  stop(): Promise<void>;
}

async function startZooKeeper(options: LocalZooKeeperOptions): Promise<RunningZooKeeper> {
  const where = { host: options.host ?? '127.0.0.1', prefix: options.commandPrefix ?? [] };
  if (options.port !== undefined) return startOn(where, options.port);
  // The free port may be taken between our probe and the JVM's bind: then try another one.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOn(where, await freePort());
    } catch (err) {
      if (!(err instanceof PortTaken) || attempt >= 3) throw err;
      progress(`port ${err.port} was taken before ZooKeeper could bind it; trying another`);
    }
  }
}

class PortTaken extends Error {
  constructor(readonly port: number) {
    super(`port ${port} is in use`);
  }
}

async function startOn(where: { host: string; prefix: readonly string[] }, port: number): Promise<RunningZooKeeper> {
  const { host, prefix } = where;
  const dir = mkdtempSync(path.join(os.tmpdir(), 'shardex-zk-'));
  const logFile = path.join(dir, 'zk.log');
  const config = path.join(dir, 'zoo.cfg');
  writeFileSync(
    config,
    [
      'tickTime=500',
      'minSessionTimeout=1000',
      'maxSessionTimeout=60000',
      `dataDir=${path.join(dir, 'data')}`,
      `clientPort=${port}`,
      `clientPortAddress=${host}`,
      'maxClientCnxns=0',
      'admin.enableServer=false',
      '4lw.commands.whitelist=ruok,srvr,stat,mntr',
      'forceSync=no',
      '',
    ].join('\n'),
  );
  const log = openSync(logFile, 'a');
  let child: ChildProcess;
  try {
    const java = ['java', '-Xmx256m', '-XX:+UseSerialGC', '-cp', CLASSPATH, 'org.apache.zookeeper.server.quorum.QuorumPeerMain', config];
    const [command, ...args] = [...prefix, ...java];
    child = spawn(command!, args, { stdio: ['ignore', log, log] });
  } finally {
    closeSync(log);
  }
  const exited = new Promise<string>((resolve) => {
    child.once('error', (err) => resolve(err.message));
    child.once('exit', (code, signal) => resolve(signal ? `signal ${signal}` : `exit code ${code}`));
  });
  let stopping = false;
  // If vitest itself dies, do not leave the JVM behind.
  const killOnExit = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  process.once('exit', killOnExit);
  const cleanup = () => {
    process.removeListener('exit', killOnExit);
    rmSync(dir, { recursive: true, force: true });
  };

  const stop = async (): Promise<void> => {
    stopping = true;
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const gone = await Promise.race([exited.then(() => true), sleep(STOP_GRACE_MS).then(() => false)]);
      if (!gone) {
        progress(`ZooKeeper (pid ${child.pid}) did not stop on SIGTERM within ${STOP_GRACE_MS} ms; killing it`);
        child.kill('SIGKILL');
        await Promise.race([exited, sleep(STOP_GRACE_MS)]);
      }
    }
    cleanup();
  };

  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    const death = await Promise.race([exited, sleep(0).then(() => undefined)]);
    if (death !== undefined) {
      stopping = true;
      const text = readLog(logFile);
      cleanup();
      if (/Address already in use/i.test(text)) throw new PortTaken(port);
      if (/ENOENT|spawn java/i.test(death)) throw new Error(`Cannot start ZooKeeper: 'java' was not found (${death}). Run: ${INSTALL_HINT}`);
      throw new Error(`ZooKeeper exited while starting (${death}); last lines of its log:\n${tail(text, 30)}`);
    }
    if ((await probe(where, port, 'srvr')).includes('Mode:')) break;
    if (Date.now() > deadline) {
      const text = readLog(logFile);
      await stop();
      throw new Error(`ZooKeeper did not become ready on ${host}:${port} within ${READY_TIMEOUT_MS / 1000} s; last lines of its log:\n${tail(text, 30)}`);
    }
    await sleep(100);
  }
  progress(`ZooKeeper ready on ${host}:${port} (pid ${child.pid}, data in ${dir})`);
  void exited.then((how) => {
    if (!stopping) progress(`the test ZooKeeper (pid ${child.pid}) died unexpectedly (${how}); last lines of ${logFile}:\n${tail(readLog(logFile), 30)}`);
  });
  return { host, port, pid: child.pid, stop };
}

// The probe as a script for a node process started through the command prefix (argv: host port command).
const PROBE_SCRIPT = `const s = require('net').connect({ host: process.argv[1], port: Number(process.argv[2]) });
let r = ''; const done = () => { process.stdout.write(r); process.exit(0); };
setTimeout(done, ${PROBE_TIMEOUT_MS}); s.on('connect', () => s.write(process.argv[3]));
s.on('data', (c) => { r += c; }); s.on('end', done); s.on('error', done);`;

/** Sends a four-letter command and returns the reply ('' on any error or after the timeout). */
function probe(where: { host: string; prefix: readonly string[] }, port: number, command: string): Promise<string> {
  if (where.prefix.length > 0) return probeThrough(where, port, command);
  return new Promise((resolve) => {
    let reply = '';
    const socket = net.connect({ host: where.host, port });
    const finish = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(reply);
    };
    const timer = setTimeout(finish, PROBE_TIMEOUT_MS);
    socket.on('connect', () => socket.write(command));
    socket.on('data', (chunk) => {
      reply += chunk.toString();
    });
    socket.on('end', finish);
    socket.on('error', finish);
  });
}

/** The probe run by a node process through the command prefix (inside the namespace that can reach `host`). */
function probeThrough(where: { host: string; prefix: readonly string[] }, port: number, command: string): Promise<string> {
  return new Promise((resolve) => {
    const [cmd, ...args] = [...where.prefix, process.execPath, '-e', PROBE_SCRIPT, where.host, String(port), command];
    const child = spawn(cmd!, args, { stdio: ['ignore', 'pipe', 'ignore'] });
    let reply = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), PROBE_TIMEOUT_MS * 3);
    child.stdout.on('data', (chunk: Buffer) => {
      reply += chunk.toString();
    });
    child.on('error', () => undefined);
    child.on('close', () => {
      clearTimeout(timer);
      resolve(reply);
    });
  });
}

/** A port on 127.0.0.1 that nothing listens on right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

function readLog(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

function tail(text: string, lines: number): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}
