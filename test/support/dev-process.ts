// `shardex dev` (what `npm start` runs) as a child process, as a user starts it from the built CLI:
// started, signalled and waited for by pid; every process started here is tracked so that teardown
// can kill it even when a test failed half-way.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../../bin/shardex.js', import.meta.url));
const START_TIMEOUT_MS = 90_000;
const STOP_GRACE_MS = 20_000;

export interface DevProcess {
  readonly child: ChildProcess;
  /** Everything it printed so far, stdout and stderr. */
  readonly out: string[];
  /** The HTTP URL of each node, in order (node1 first), as it printed them. */
  readonly urls: string[];
}

const started = new Set<ChildProcess>();

function launch(args: string[]): { child: ChildProcess; out: string[] } {
  const child = spawn(process.execPath, [CLI, 'dev', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  started.add(child);
  child.once('exit', () => started.delete(child));
  const out: string[] = [];
  child.stdout!.on('data', (d: Buffer) => out.push(d.toString()));
  child.stderr!.on('data', (d: Buffer) => out.push(d.toString()));
  return { child, out };
}

/** Starts `shardex dev ARGS`; resolves once it says it is up. */
export async function startDev(args: string[]): Promise<DevProcess> {
  const { child, out } = launch(args);
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`dev cluster did not start within ${START_TIMEOUT_MS / 1000} s:\n${out.join('')}`)), START_TIMEOUT_MS);
    const onData = (): void => {
      if (!out.join('').includes('press Ctrl-C')) return;
      clearTimeout(timer);
      child.off('exit', onExit);
      resolve();
    };
    const onExit = (code: number | null, signal: NodeJS.Signals | null): void => {
      clearTimeout(timer);
      reject(new Error(`dev cluster exited with ${code ?? signal}:\n${out.join('')}`));
    };
    child.stdout!.on('data', onData);
    child.once('exit', onExit);
  });
  const urls = [...out.join('').matchAll(/^ {2}node\d+ {2}(http:\/\/\S+)/gm)].map((m) => m[1]!);
  return { child, out, urls };
}

/** Runs `shardex dev ARGS` expecting it to give up on its own; resolves with its exit code and output. */
export async function runDevUntilExit(args: string[]): Promise<{ code: number | null; output: string }> {
  const { child, out } = launch(args);
  const timer = setTimeout(() => child.kill('SIGKILL'), START_TIMEOUT_MS);
  const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  clearTimeout(timer);
  return { code, output: out.join('') };
}

/** Ctrl-C (or another signal); SIGKILL if it has not exited after a grace period. Resolves with the exit code. */
export function stopDev(dev: DevProcess, signal: NodeJS.Signals = 'SIGINT'): Promise<number | null> {
  return new Promise((resolve) => {
    if (dev.child.exitCode !== null || dev.child.signalCode !== null) return resolve(dev.child.exitCode);
    const timer = setTimeout(() => dev.child.kill('SIGKILL'), STOP_GRACE_MS);
    dev.child.once('exit', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
    dev.child.kill(signal);
  });
}

/** kill -9: no shutdown at all. */
export async function killDev(dev: DevProcess): Promise<void> {
  await stopDev(dev, 'SIGKILL');
}

/** Kills (by pid) every dev process started here that is still running. */
export async function killAllDev(): Promise<void> {
  await Promise.all(
    [...started].map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once('exit', () => resolve());
          child.kill('SIGKILL');
        }),
    ),
  );
}

/** The dev cluster's log in `dataDir` (appended by every run). */
const devLog = (dataDir: string): string => join(dataDir, 'shardex.log');

/** How long the dev cluster's log is now (0 before it exists): where the lines of what follows begin. */
export async function devLogLength(dataDir: string): Promise<number> {
  return (await readFile(devLog(dataDir)).catch(() => Buffer.alloc(0))).length;
}

/** The lines with message `msg` about a replica of `collection`, logged after byte `from` of the dev cluster's log. */
export async function devLogLines(dataDir: string, msg: string, collection: string, from = 0): Promise<Array<Record<string, unknown>>> {
  const text = (await readFile(devLog(dataDir)).catch(() => Buffer.alloc(0))).subarray(from).toString('utf8');
  return text
    .split('\n')
    .filter((l) => l.includes(`"msg":"${msg}"`) && l.includes(`"replica":"${collection}/`))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}
