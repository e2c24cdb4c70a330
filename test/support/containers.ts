// Real containers for the deployment test, with no image registry in reach: rootful podman from
// Debian (installed when missing), images assembled from what is on this machine, and the
// repository's docker-compose.yml run by podman-compose under a project name of its own.
// - Node base image: the local `node` binary and the libraries `ldd` lists, `podman import`ed.
// - ZooKeeper image: the local JDK's runtime and the jars of Debian's `zookeeper` package, with a
//   `zkServer.sh` that answers the two commands the compose file uses of the official image's.
// - Shardex image: ./Dockerfile's target runtime-prebuilt, from an archive of the application
//   prepared on the host (npm ci inside a build would need the registry).
// Everything a run creates is named after its project (`<prefix><pid>x<random>`), so that a later
// run can remove what a crashed one left behind (its pid is gone) without touching a live run's.
import { spawn, type SpawnOptions } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  copyFileSync,
  existsSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { inflateRawSync } from 'node:zlib';
import { Mutex } from '../../src/distrib/mutex.js';
import { ensureDebianPackage } from '../../src/node/local-zookeeper.js';
import { processAlive as alive } from '../../src/pid.js';

export type Progress = (message: string) => void;

export interface CommandResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

export interface RunOptions {
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
  readonly timeoutMs: number;
  /** Each line of output, as it comes (long steps show their progress). */
  readonly onLine?: (line: string) => void;
}

/** Runs a command to its end (SIGKILL at the timeout, reported as code -1). Never throws. */
export function run(command: string, args: readonly string[], o: RunOptions): Promise<CommandResult> {
  return new Promise((resolve) => {
    const spawnOptions: SpawnOptions = { stdio: ['ignore', 'pipe', 'pipe'], env: o.env ?? process.env, ...(o.cwd && { cwd: o.cwd }) };
    const child = spawn(command, args, spawnOptions);
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    const lines = (chunk: string) => {
      if (o.onLine) for (const line of chunk.split('\n')) if (line.trim()) o.onLine(line.trimEnd());
    };
    child.stdout!.on('data', (c: Buffer) => {
      stdout += c.toString();
      lines(c.toString());
    });
    child.stderr!.on('data', (c: Buffer) => {
      stderr += c.toString();
      lines(c.toString());
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, o.timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      resolve({ code: -1, stdout, stderr: `${stderr}\n${err.message}` });
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: timedOut ? -1 : (code ?? -1), stdout, stderr: timedOut ? `${stderr}\n(killed after ${o.timeoutMs} ms)` : stderr });
    });
  });
}

/** `run`, throwing with the command's last output when it fails. */
export async function must(command: string, args: readonly string[], o: RunOptions): Promise<CommandResult> {
  const r = await run(command, args, o);
  if (r.code !== 0) throw new Error(`'${command} ${args.join(' ')}' failed (exit ${r.code}):\n${tail(`${r.stdout}\n${r.stderr}`, 25)}`);
  return r;
}

export function tail(text: string, lines: number): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

function onPath(binary: string): boolean {
  return (process.env.PATH ?? '/usr/bin:/bin').split(':').some((dir) => dir && existsSync(path.join(dir, binary)));
}

// --- the engine ---------------------------------------------------------------------------------

export interface ContainerEngine {
  /** The environment podman and podman-compose run with (CONTAINERS_CONF points at the run's settings). */
  readonly env: NodeJS.ProcessEnv;
  podman(args: readonly string[], timeoutMs?: number): Promise<CommandResult>;
  /** Removes the settings file (after everything the run started is gone). */
  dispose(): void;
}

const PACKAGES: ReadonlyArray<readonly [pkg: string, binary: string]> = [
  ['podman', 'podman'],
  ['podman-compose', 'podman-compose'],
  ['runc', 'runc'],
];

/**
 * Installs podman, podman-compose and runc when missing and checks that the engine starts, with
 * the settings this kind of sandbox needs: an nofile limit no higher than this process's hard
 * limit (read now: it differs between machines and processes) and an nproc limit of 32768
 * (crun and runc cannot raise limits without CAP_SYS_RESOURCE), runc (crun refuses hybrid
 * cgroups), cgroupfs and a file events log (no systemd). The settings go to a file of this run
 * (CONTAINERS_CONF, inherited by conmon and its cleanup), not to /etc.
 */
export async function ensureContainerEngine(progress: Progress): Promise<ContainerEngine> {
  for (const [pkg, binary] of PACKAGES) await ensureDebianPackage(pkg, () => onPath(binary), progress);
  const limit = (await must('sh', ['-c', 'ulimit -Hn'], { timeoutMs: 5_000 })).stdout.trim();
  const nofile = /^\d+$/.test(limit) ? Number(limit) : 1_048_576;
  const dir = mkdtempSync(path.join(os.tmpdir(), 'shardex-containers-conf-'));
  const file = path.join(dir, 'containers.conf');
  writeFileSync(
    file,
    [
      '[containers]',
      `default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=32768:32768"]`,
      '[engine]',
      'runtime = "runc"',
      'cgroup_manager = "cgroupfs"',
      'events_logger = "file"',
      '',
    ].join('\n'),
  );
  const env = { ...process.env, CONTAINERS_CONF: file, BUILDAH_LAYERS: 'false' };
  const engine: ContainerEngine = {
    env,
    podman: (args, timeoutMs = 60_000) => run('podman', args, { env, timeoutMs }),
    dispose: () => rmSync(dir, { recursive: true, force: true }),
  };
  const info = await engine.podman(['info', '--format', '{{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}} {{.Host.NetworkBackend}}'], 30_000);
  if (info.code !== 0) {
    engine.dispose();
    throw new Error(
      `The container engine cannot start: 'podman info' failed (exit ${info.code}). Needed: rootful podman with runc, ` +
        `overlay storage and netavark (apt-get install -y podman podman-compose runc, run as root).\n${tail(info.stderr, 15)}`,
    );
  }
  progress(`podman ready (runtime, cgroup manager, network: ${info.stdout.trim()}; nofile ${nofile})`);
  return engine;
}

// --- assembling image roots from host files -------------------------------------------------------

function lexists(p: string): boolean {
  try {
    lstatSync(p);
    return true;
  } catch {
    return false;
  }
}

/**
 * Puts a host file at `dest`: a hard link when the two are on one file system (image roots are
 * read by tar, never written to, so the host's file cannot change), else a copy.
 */
function placeHostFile(src: string, dest: string, mode: number): void {
  try {
    linkSync(src, dest);
  } catch {
    copyFileSync(src, dest);
    chmodSync(dest, mode & 0o7777);
  }
}

/**
 * Copies a host file into `root` at the same path, recreating symlinked directories on the way
 * (Debian's merged /usr: /bin -> usr/bin, /lib -> usr/lib) and following a symlinked file to
 * its target, so that both the name and the target exist in the image.
 */
function mirrorHostFile(root: string, hostPath: string, depth = 0): void {
  if (depth > 20) throw new Error(`too many symlinks resolving ${hostPath}`);
  const parts = hostPath.split('/').filter(Boolean);
  let current = '/';
  for (const [i, part] of parts.entries()) {
    const next = path.join(current, part);
    const dest = path.join(root, next);
    const st = lstatSync(next);
    if (st.isSymbolicLink()) {
      const target = readlinkSync(next);
      mkdirSync(path.dirname(dest), { recursive: true });
      if (!lexists(dest)) symlinkSync(target, dest);
      mirrorHostFile(root, path.join(path.resolve(path.dirname(next), target), ...parts.slice(i + 1)), depth + 1);
      return;
    }
    if (i === parts.length - 1) {
      if (st.isDirectory()) mkdirSync(dest, { recursive: true });
      else if (!lexists(dest)) placeHostFile(next, dest, st.mode);
    } else if (!lexists(dest)) mkdirSync(dest, { mode: st.mode & 0o7777 });
    current = next;
  }
}

/**
 * The shared libraries an ELF file needs, as `ldd` resolves them on this machine. `lenient`
 * passes over unresolved ones (the JDK finds its own libraries through its layout, not ld.so).
 */
async function sharedLibraries(file: string, lenient = false): Promise<string[]> {
  const { stdout } = await must('ldd', [file], { timeoutMs: 10_000 });
  const libs: string[] = [];
  for (const line of stdout.split('\n')) {
    if (/not found/.test(line)) {
      if (lenient) continue;
      throw new Error(`ldd ${file}: ${line.trim()}`);
    }
    const m = /=>\s*(\/\S+)/.exec(line) ?? /^\s*(\/\S+)/.exec(line);
    if (m) libs.push(m[1]!);
  }
  return libs;
}

/** Copies ELF files (by host path) and every library they need into `root`. */
async function addElfFiles(root: string, files: readonly string[]): Promise<void> {
  await addLibrariesOf(root, files);
  for (const f of files) mirrorHostFile(root, f);
}

/** Copies the libraries the given ELF files need (not the files) into `root`. */
async function addLibrariesOf(root: string, files: readonly string[], accept: (lib: string) => boolean = () => true, lenient = false): Promise<void> {
  const libs = new Set<string>();
  for (const f of files) for (const lib of await sharedLibraries(f, lenient)) if (accept(lib)) libs.add(lib);
  for (const lib of libs) mirrorHostFile(root, lib);
}

interface Account {
  readonly name: string;
  readonly uid: number;
}

function writeEtc(root: string, accounts: readonly Account[]): void {
  mkdirSync(path.join(root, 'etc'), { recursive: true });
  const all = [{ name: 'root', uid: 0 }, ...accounts];
  writeFileSync(path.join(root, 'etc/passwd'), all.map((a) => `${a.name}:x:${a.uid}:${a.uid}::${a.uid === 0 ? '/root' : '/tmp'}:/usr/sbin/nologin\n`).join(''));
  writeFileSync(path.join(root, 'etc/group'), all.map((a) => `${a.name}:x:${a.uid}:\n`).join(''));
  writeFileSync(path.join(root, 'etc/nsswitch.conf'), 'passwd: files\ngroup: files\nhosts: files dns\n');
  mkdirSync(path.join(root, 'tmp'), { recursive: true });
  chmodSync(path.join(root, 'tmp'), 0o1777);
}

/**
 * An image's root file system is made of hard links to the host's files (placeHostFile). Linking
 * or unlinking one changes its inode's ctime, and tar fails ("file changed as we read it") when
 * that happens to a file it is reading: two images built side by side share /usr/bin/dash and
 * libc. So one image root at a time is filled, imported and removed.
 */
const imageRoots = new Mutex();

/** Runs `fill` on a fresh temporary directory, alone among image roots, and removes the directory after. */
function inImageRoot(prefix: string, fill: (root: string) => Promise<void>): Promise<void> {
  return imageRoots.run(async () => {
    const root = mkdtempSync(path.join(os.tmpdir(), prefix));
    try {
      await fill(root);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
}

/** `tar -C root -c . | podman import --change ... - tag` */
async function importRoot(engine: ContainerEngine, root: string, tag: string, changes: readonly string[]): Promise<void> {
  const args = ['import', ...changes.flatMap((c) => ['--change', c]), '-', tag];
  await new Promise<void>((resolve, reject) => {
    const tar = spawn('tar', ['-C', root, '--numeric-owner', '-c', '.'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const imp = spawn('podman', args, { stdio: ['pipe', 'pipe', 'pipe'], env: engine.env });
    let errors = '';
    tar.stderr.on('data', (c: Buffer) => (errors += c.toString()));
    imp.stderr.on('data', (c: Buffer) => (errors += c.toString()));
    imp.stdout.resume();
    tar.stdout.pipe(imp.stdin);
    const timer = setTimeout(() => {
      tar.kill('SIGKILL');
      imp.kill('SIGKILL');
    }, 120_000);
    let tarCode: number | null = null;
    tar.on('close', (code) => (tarCode = code));
    imp.on('error', reject);
    imp.on('close', (code) => {
      clearTimeout(timer);
      if (code === 0 && tarCode === 0) resolve();
      else reject(new Error(`importing ${tag} failed (tar exit ${tarCode}, podman import exit ${code}):\n${tail(errors, 15)}`));
    });
  });
}

/**
 * A Node.js base image from the local `node`: the binary, its libraries (and those of the native
 * modules given), /bin/sh (podman-compose wraps health checks in it), a `node` user (uid 1000,
 * as in the official image).
 */
export async function buildNodeBaseImage(engine: ContainerEngine, tag: string, nativeModules: readonly string[]): Promise<void> {
  await inImageRoot('shardex-node-root-', async (root) => {
    const node = realpathSync(process.execPath);
    await addElfFiles(root, [node, realpathSync('/bin/sh')]);
    await addLibrariesOf(root, nativeModules);
    // The image promises /usr/bin/node (and podman-compose's health checks run /bin/sh -c).
    if (node !== '/usr/bin/node') {
      mkdirSync(path.join(root, 'usr/bin'), { recursive: true });
      placeHostFile(node, path.join(root, 'usr/bin/node'), 0o755);
    }
    mirrorHostFile(root, '/bin/sh');
    writeEtc(root, [{ name: 'node', uid: 1000 }]);
    await importRoot(engine, root, tag, ['ENV PATH=/usr/local/bin:/usr/bin:/bin', 'CMD ["node"]']);
  });
}

// --- the ZooKeeper image ------------------------------------------------------------------------

const ZOOKEEPER_JAR = '/usr/share/java/zookeeper.jar';
const SLF4J_SIMPLE_JAR = '/usr/share/java/slf4j-simple.jar';
const JAVA_HOME_IN_IMAGE = '/opt/java/openjdk';
// Libraries of the JDK that only desktop Java needs (X11, sound, fonts, smart cards): left out,
// with what they would pull in.
const DESKTOP_LIBRARY = /^lib(atk-wrapper|awt_xawt|fontmanager|j2pcsc|javajpeg|jawt|jsound|lcms|splashscreen)\.so$/;

/** The Class-Path of a jar's manifest (read from the zip's central directory), as absolute paths. */
export function jarClassPath(jar: string): string[] {
  const zip = readFileSync(jar);
  let eocd = -1;
  for (let i = zip.length - 22; i >= Math.max(0, zip.length - 65_557); i--) {
    if (zip.readUInt32LE(i) === 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw new Error(`${jar} is not a zip file`);
  const entries = zip.readUInt16LE(eocd + 10);
  let at = zip.readUInt32LE(eocd + 16);
  for (let n = 0; n < entries; n++) {
    if (zip.readUInt32LE(at) !== 0x02014b50) throw new Error(`${jar}: bad central directory`);
    const method = zip.readUInt16LE(at + 10);
    const size = zip.readUInt32LE(at + 20);
    const nameLength = zip.readUInt16LE(at + 28);
    const skip = nameLength + zip.readUInt16LE(at + 30) + zip.readUInt16LE(at + 32);
    const name = zip.toString('utf8', at + 46, at + 46 + nameLength);
    if (name === 'META-INF/MANIFEST.MF') {
      const local = zip.readUInt32LE(at + 42);
      const start = local + 30 + zip.readUInt16LE(local + 26) + zip.readUInt16LE(local + 28);
      const raw = zip.subarray(start, start + size);
      const text = (method === 8 ? inflateRawSync(raw) : raw).toString('utf8');
      // Manifest lines are wrapped at 72 bytes; a continuation starts with one space.
      const unwrapped = text.replace(/\r?\n /g, '');
      const classPath = /^Class-Path:\s*(.*)$/m.exec(unwrapped)?.[1] ?? '';
      return classPath
        .split(/\s+/)
        .filter(Boolean)
        .map((p) => path.resolve(path.dirname(jar), p.replace(/^file:/, '')));
    }
    at += 46 + skip;
  }
  return [];
}

/** The jars a ZooKeeper server needs: zookeeper.jar, slf4j-simple.jar and their Class-Path, transitively. */
function zooKeeperJars(): string[] {
  const seen = new Set<string>();
  const visit = (jar: string) => {
    if (seen.has(jar) || !existsSync(jar)) return; // as the JVM does, a missing Class-Path entry is skipped
    seen.add(jar);
    for (const dep of jarClassPath(jar)) visit(dep);
  };
  visit(ZOOKEEPER_JAR);
  visit(SLF4J_SIMPLE_JAR);
  return [...seen];
}

/** Copies a directory tree following symlinks; dangling links and `skip`ped names are left out. */
function copyDereferenced(from: string, to: string, skip: (name: string, dir: string) => boolean): void {
  mkdirSync(to, { recursive: true });
  for (const name of readdirSync(from)) {
    if (skip(name, from)) continue;
    const src = path.join(from, name);
    let st;
    try {
      st = statSync(src);
    } catch {
      continue;
    }
    const dest = path.join(to, name);
    if (st.isDirectory()) copyDereferenced(src, dest, skip);
    else placeHostFile(realpathSync(src), dest, st.mode);
  }
}

// The two commands docker-compose.yml uses of the official image's zkServer.sh.
const ZKSERVER_SH = `#!/bin/bash
# zkServer.sh of a ZooKeeper image assembled from Debian's packages (test/support/containers.ts):
# start-foreground runs the server; status succeeds when it answers 'srvr' with its mode.
case "$1" in
  start-foreground)
    exec java $JVMFLAGS -cp "$ZOOCLASSPATH" org.apache.zookeeper.server.quorum.QuorumPeerMain /conf/zoo.cfg ;;
  status)
    exec 3<>/dev/tcp/127.0.0.1/2181 || exit 1
    printf srvr >&3
    while IFS= read -r -t 3 line <&3; do
      if [[ $line == Mode:* ]]; then echo "$line"; exit 0; fi
    done
    exit 1 ;;
  *)
    echo "usage: zkServer.sh start-foreground|status" >&2; exit 2 ;;
esac
`;

const ZOO_CFG = [
  'tickTime=2000',
  'initLimit=5',
  'syncLimit=2',
  'dataDir=/data',
  'dataLogDir=/datalog',
  'clientPort=2181',
  'maxClientCnxns=0',
  'admin.enableServer=false',
  '4lw.commands.whitelist=srvr,ruok',
  'autopurge.snapRetainCount=3',
  'autopurge.purgeInterval=1',
  '',
].join('\n');

/**
 * A ZooKeeper image that behaves like the official one as far as docker-compose.yml is concerned
 * (`zkServer.sh start-foreground` as its command, `zkServer.sh status` as health probe, data in
 * /data and /datalog, a non-root user), from the local JDK and Debian's `zookeeper` package.
 */
export async function buildZooKeeperImage(engine: ContainerEngine, tag: string, progress: Progress): Promise<void> {
  await ensureDebianPackage('zookeeper', () => existsSync(ZOOKEEPER_JAR), progress);
  const javaHome = path.dirname(path.dirname(realpathSync((await must('sh', ['-c', 'command -v java'], { timeoutMs: 5_000 })).stdout.trim())));
  await inImageRoot('shardex-zk-root-', async (root) => {
    const jre = path.join(root, JAVA_HOME_IN_IMAGE);
    mkdirSync(path.join(jre, 'bin'), { recursive: true });
    placeHostFile(realpathSync(path.join(javaHome, 'bin/java')), path.join(jre, 'bin/java'), 0o755);
    placeHostFile(realpathSync(path.join(javaHome, 'release')), path.join(jre, 'release'), 0o644);
    copyDereferenced(path.join(javaHome, 'conf'), path.join(jre, 'conf'), () => false);
    copyDereferenced(path.join(javaHome, 'lib'), path.join(jre, 'lib'), (name) => DESKTOP_LIBRARY.test(name) || name === 'ct.sym' || name === 'src.zip');
    // The system libraries the runtime needs; the JDK's own are found through its layout.
    const elves = [path.join(javaHome, 'bin/java')];
    const collectSo = (dir: string) => {
      for (const name of readdirSync(dir)) {
        const p = path.join(dir, name);
        const st = statSync(p, { throwIfNoEntry: false });
        if (st?.isDirectory()) collectSo(p);
        else if (st && name.endsWith('.so') && !DESKTOP_LIBRARY.test(name)) elves.push(p);
      }
    };
    collectSo(path.join(javaHome, 'lib'));
    await addLibrariesOf(root, elves, (lib) => !lib.startsWith(`${javaHome}/`) && !lib.startsWith('/usr/lib/jvm/'), true);
    await addElfFiles(root, [realpathSync('/bin/bash'), realpathSync('/bin/sh')]);
    mirrorHostFile(root, '/bin/bash');
    mirrorHostFile(root, '/bin/sh');
    const jars = zooKeeperJars();
    for (const jar of jars) {
      const dest = path.join(root, jar);
      mkdirSync(path.dirname(dest), { recursive: true });
      placeHostFile(realpathSync(jar), dest, 0o644);
    }
    mkdirSync(path.join(root, 'usr/local/bin'), { recursive: true });
    writeFileSync(path.join(root, 'usr/local/bin/zkServer.sh'), ZKSERVER_SH, { mode: 0o755 });
    mkdirSync(path.join(root, 'conf'), { recursive: true });
    writeFileSync(path.join(root, 'conf/zoo.cfg'), ZOO_CFG);
    for (const dir of ['data', 'datalog']) {
      mkdirSync(path.join(root, dir));
      chownSync(path.join(root, dir), 1000, 1000);
    }
    writeEtc(root, [{ name: 'zookeeper', uid: 1000 }]);
    await importRoot(engine, root, tag, [
      `ENV PATH=/usr/local/bin:${JAVA_HOME_IN_IMAGE}/bin:/usr/bin:/bin`,
      `ENV JAVA_HOME=${JAVA_HOME_IN_IMAGE}`,
      `ENV ZOOCLASSPATH=${[ZOOKEEPER_JAR, SLF4J_SIMPLE_JAR].join(':')}`,
      'ENV JVMFLAGS=-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1',
      'USER 1000:1000',
      'WORKDIR /',
      'CMD ["zkServer.sh", "start-foreground"]',
    ]);
  });
}

// --- the application, prepared on the host --------------------------------------------------------

/** The production dependencies in the host's node_modules (package-lock.json's non-dev entries). */
export interface ProductionDependencies {
  /** Top-level package directories, relative to the repository (node_modules/x, node_modules/@s/x). */
  readonly packages: string[];
  /** Dev-only packages nested in those, relative to the repository: left out. */
  readonly excluded: string[];
  /** Native modules for this platform (their libraries belong in the base image). */
  readonly nativeModules: string[];
}

export function productionDependencies(repo: string): ProductionDependencies {
  const lock = JSON.parse(readFileSync(path.join(repo, 'package-lock.json'), 'utf8')) as { packages: Record<string, { dev?: boolean }> };
  const packages: string[] = [];
  const excluded: string[] = [];
  for (const [key, p] of Object.entries(lock.packages)) {
    if (!key) continue;
    const topLevel = /^node_modules\/(@[^/]+\/)?[^/]+$/.test(key);
    if (p.dev) {
      if (!topLevel) excluded.push(key);
      continue;
    }
    if (!topLevel) continue;
    if (!existsSync(path.join(repo, key))) throw new Error(`${key} is in package-lock.json but not installed: run npm ci`);
    packages.push(key);
  }
  const platform = `${process.platform}-${process.arch}`;
  const nativeModules: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(p);
      else if (entry.isFile() && entry.name.endsWith('.node') && isNativeModuleFor(p, platform)) nativeModules.push(p);
    }
  };
  for (const pkg of packages) walk(path.join(repo, pkg));
  return { packages, excluded: excluded.filter((e) => packages.some((p) => e.startsWith(`${p}/`))), nativeModules };
}

/** A prebuilt addon for this platform (prebuilds/linux-x64/x.node, glibc) or one built here (build/Release). */
function isNativeModuleFor(file: string, platform: string): boolean {
  if (file.includes(`${path.sep}build${path.sep}Release${path.sep}`)) return true;
  return file.includes(`${path.sep}prebuilds${path.sep}${platform}${path.sep}`) && !/musl/.test(path.basename(file));
}

/** True when dist/ holds a .js at least as new as every .ts in src/ (the last `npm run build` is current). */
function distIsCurrent(repo: string): boolean {
  const check = (dir: string): boolean =>
    readdirSync(path.join(repo, 'src', dir), { withFileTypes: true }).every((e) => {
      const rel = path.join(dir, e.name);
      if (e.isDirectory()) return check(rel);
      if (!e.name.endsWith('.ts') || e.name.endsWith('.d.ts')) return true;
      const js = statSync(path.join(repo, 'dist', rel.replace(/\.ts$/, '.js')), { throwIfNoEntry: false });
      return js !== undefined && js.mtimeMs >= statSync(path.join(repo, 'src', rel)).mtimeMs;
    });
  return existsSync(path.join(repo, 'dist')) && check('.');
}

/**
 * Writes `dir`/app.tar as the Dockerfile's runtime-prebuilt target expects: app/ with package.json,
 * bin/, proto/, dist/ and the production node_modules/, and an empty data/. dist/ is the
 * repository's when it is current (`npm run build` ran after the last change to src/), else
 * compiled now by tsc into a directory of its own (the shared dist/ is left alone).
 */
export async function prepareApp(repo: string, dir: string, deps: ProductionDependencies, progress: Progress): Promise<void> {
  mkdirSync(dir, { recursive: true });
  const scratch = mkdtempSync(path.join(os.tmpdir(), 'shardex-app-'));
  try {
    let distParent = repo;
    if (distIsCurrent(repo)) progress('dist/ is current with src/: using it');
    else {
      progress('dist/ is older than src/ (or missing): compiling src/ with tsc');
      distParent = scratch;
      const tsc = path.join(repo, 'node_modules/typescript/bin/tsc');
      const compiled = await run(process.execPath, [tsc, '-p', 'tsconfig.build.json', '--outDir', path.join(scratch, 'dist'), '--declaration', 'false', '--sourceMap', 'false'], {
        cwd: repo,
        timeoutMs: 150_000,
      });
      if (compiled.code !== 0 && !existsSync(path.join(scratch, 'dist/node/cli.js'))) {
        throw new Error(`tsc failed and emitted no dist/node/cli.js:\n${tail(compiled.stdout + compiled.stderr, 20)}`);
      }
      // A type error is `npm run typecheck`'s to report; the JavaScript tsc emitted still runs.
      if (compiled.code !== 0) progress(`tsc reported type errors (the image uses the JavaScript it emitted):\n${tail(compiled.stdout, 6)}`);
    }
    mkdirSync(path.join(scratch, 'data'));
    await must(
      'tar',
      [
        '-c',
        '-f',
        path.join(dir, 'app.tar'),
        '--owner=0',
        '--group=0',
        '--numeric-owner',
        // Everything but data/ goes under app/; symlink targets stay as they are.
        '--transform',
        's,^\\(package\\.json\\|bin\\|proto\\|node_modules\\|dist\\)\\(/\\|$\\),app/\\1\\2,S',
        ...deps.excluded.map((e) => `--exclude=${e}`),
        // Not needed at run time: type declarations, source maps, documentation.
        ...['*.d.ts', '*.d.mts', '*.d.cts', '*.map', '*.md'].map((pattern) => `--exclude=${pattern}`),
        '-C',
        repo,
        'package.json',
        'bin',
        'proto',
        ...deps.packages,
        '-C',
        distParent,
        'dist',
        '-C',
        scratch,
        'data',
      ],
      { timeoutMs: 60_000 },
    );
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

// --- compose projects -------------------------------------------------------------------------

export const PROJECT_PREFIX = 'shxct';

/** A project name of this run: the prefix, this process's pid and a random tag. */
export function projectName(): string {
  return `${PROJECT_PREFIX}${process.pid}x${randomBytes(3).toString('hex')}`;
}

function pidOf(project: string): number | undefined {
  const m = new RegExp(`^${PROJECT_PREFIX}(\\d+)x[0-9a-f]+`).exec(project);
  return m ? Number(m[1]) : undefined;
}

export class ComposeProject {
  constructor(
    readonly engine: ContainerEngine,
    readonly name: string,
    readonly file: string,
    readonly variables: Readonly<Record<string, string>>,
  ) {}

  /** podman-compose -p NAME -f FILE ARGS, with the project's variables in its environment. */
  compose(args: readonly string[], timeoutMs: number, onLine?: (line: string) => void): Promise<CommandResult> {
    return run('podman-compose', ['-p', this.name, '-f', this.file, ...args], {
      env: { ...this.engine.env, ...this.variables },
      cwd: path.dirname(this.file),
      timeoutMs,
      ...(onLine && { onLine }),
    });
  }

  /** The container podman-compose 1.0.3 names for a service. */
  container(service: string): string {
    return `${this.name}_${service}_1`;
  }

  async logs(service: string, lines = 30): Promise<string> {
    const r = await this.engine.podman(['logs', '--tail', String(lines), this.container(service)], 15_000);
    return tail(`${r.stdout}\n${r.stderr}`, lines);
  }
}

/**
 * Removes what a project created: containers, volumes (both by podman-compose's project label),
 * the network podman-compose leaves behind, images named after the project, the prepared build
 * directory. Reports what it removed; keeps going past errors and returns them.
 */
export async function removeProject(engine: ContainerEngine, project: string, repo: string, progress: Progress): Promise<string[]> {
  const errors: string[] = [];
  const label = `label=io.podman.compose.project=${project}`;
  const step = async (what: string, args: string[], timeoutMs = 60_000) => {
    const r = await engine.podman(args, timeoutMs);
    if (r.code !== 0 && !/no such|not found|does not exist/i.test(r.stderr)) errors.push(`${what}: ${tail(r.stderr, 3)}`);
    return r;
  };
  const containers = (await step('listing containers', ['ps', '-a', '-q', '--filter', label])).stdout.split('\n').filter(Boolean);
  if (containers.length) await step('removing containers', ['rm', '-f', '-t', '2', ...containers]);
  const volumes = (await step('listing volumes', ['volume', 'ls', '-q', '--filter', label])).stdout.split('\n').filter(Boolean);
  if (volumes.length) await step('removing volumes', ['volume', 'rm', '-f', ...volumes]);
  const networks = (await step('listing networks', ['network', 'ls', '--format', '{{.Name}}'])).stdout.split('\n').filter((n) => n.startsWith(`${project}_`));
  for (const network of networks) await step(`removing network ${network}`, ['network', 'rm', '-f', network]);
  const images = (await step('listing images', ['images', '--format', '{{.Repository}}:{{.Tag}}'])).stdout
    .split('\n')
    .filter((i) => i.startsWith(`localhost/${project}-`));
  // The Shardex image is built on the node base image: remove it first.
  images.sort((a, b) => Number(b.includes('-shardex')) - Number(a.includes('-shardex')));
  for (const image of images) await step(`removing image ${image}`, ['rmi', '-f', image]);
  rmSync(path.join(repo, '.container-build', project), { recursive: true, force: true });
  removeIfEmpty(path.join(repo, '.container-build'));
  const what = [containers.length && `${containers.length} containers`, volumes.length && `${volumes.length} volumes`, networks.length && `${networks.length} networks`, images.length && `${images.length} images`].filter(Boolean);
  if (what.length) progress(`removed project ${project}: ${what.join(', ')}`);
  return errors;
}

/** Removes the projects of earlier runs that died before their teardown (their pid is gone). */
export async function removeLeftovers(engine: ContainerEngine, repo: string, progress: Progress): Promise<void> {
  const found = new Set<string>();
  const ps = await engine.podman(['ps', '-a', '--format', '{{.Names}}'], 30_000);
  const vols = await engine.podman(['volume', 'ls', '--format', '{{.Name}}'], 30_000);
  const nets = await engine.podman(['network', 'ls', '--format', '{{.Name}}'], 30_000);
  const imgs = await engine.podman(['images', '--format', '{{.Repository}}'], 30_000);
  const names = [ps.stdout, vols.stdout, nets.stdout, imgs.stdout.replace(/^localhost\//gm, '')].join('\n').split('\n');
  const builds = path.join(repo, '.container-build');
  if (existsSync(builds)) names.push(...readdirSync(builds));
  for (const name of names) {
    const m = new RegExp(`^(${PROJECT_PREFIX}\\d+x[0-9a-f]+)`).exec(name);
    if (m) found.add(m[1]!);
  }
  for (const project of found) {
    const pid = pidOf(project);
    if (pid === undefined || pid === process.pid || alive(pid)) continue;
    progress(`removing leftovers of an earlier run: ${project}`);
    await removeProject(engine, project, repo, progress);
  }
  removeIfEmpty(builds);
}

function removeIfEmpty(dir: string): void {
  if (existsSync(dir) && readdirSync(dir).length === 0) rmSync(dir, { recursive: true, force: true });
}
