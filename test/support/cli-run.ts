// The built CLI (`bin/shardex.js`, which runs dist/: `npm run build` first) as a child process
// that is expected to exit: its exit code and output. Killed if it runs past a bound.
import { spawn } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const CLI = join(ROOT, 'bin/shardex.js');

export interface CliRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `shardex ARGS` with the test's environment plus `env` (the Shardex key variables only when given). */
export function runCli(args: string[], env: Record<string, string> = {}, killAfterMs = 60_000): Promise<CliRun> {
  const { SHARDEX_API_KEY: _key, SHARDEX_API_KEYS_FILE: _file, ...inherited } = process.env;
  const child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...inherited, ...env } });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
  const timer = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Throws, saying to build, when dist/ is missing `src/<rel>`'s output or is older than it. */
export async function assertBuilt(rel: string): Promise<void> {
  const [built, source] = await Promise.all([stat(join(ROOT, 'dist', rel.replace(/\.ts$/, '.js'))).catch(() => undefined), stat(join(ROOT, 'src', rel))]);
  if (!built || built.mtimeMs < source.mtimeMs) throw new Error(`dist/ is older than src/${rel}: run \`npm run build\` before this test`);
}
