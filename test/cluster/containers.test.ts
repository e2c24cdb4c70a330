// Issue 13: the compose deployment, in real containers. The repository's docker-compose.yml
// (unchanged but for its image variables and published ports) runs under podman-compose with
// images built on this machine (test/support/containers.ts): one ZooKeeper, three data nodes,
// two snapshot readers. The compose file's security settings are used for real: the test makes
// an API keys file (a key per role), a cluster secret, a CA and a certificate naming every service,
// and points the file's `secrets:` at them (SHARDEX_SECRETS_DIR); every node then requires keys,
// every node and reader carries the secret and serves HTTPS and mutual-TLS gRPC (a node bound to
// 0.0.0.0 refuses to start without keys or secret, so every healthy node has both). The test
// talks to them only over HTTPS, trusting that CA, through ports published on 127.0.0.1; they
// talk to each other only on the
// compose network of this run. Teardown removes the containers,
// the network, the volumes and the images, also when the test fails.
// If the container engine cannot start, the test fails and says what is missing.
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, chownSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { Agent } from 'node:https';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/node/local-zookeeper.js';
import type { ClusterView } from '../support/cluster.js';
import {
  buildNodeBaseImage,
  buildZooKeeperImage,
  ComposeProject,
  ensureContainerEngine,
  prepareApp,
  productionDependencies,
  projectName,
  removeLeftovers,
  removeProject,
  tail,
  type ContainerEngine,
} from '../support/containers.js';
import { settled, until } from '../support/zk-cluster.js';
import { testPki, type TestPki } from '../support/tls-certs.js';
import { agentFetch } from '../../src/client/transport.js';
import type { FetchLike } from '../../src/client/types.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const NODES = ['shardex1', 'shardex2', 'shardex3'] as const;
const READERS = ['reader1', 'reader2'] as const;
const C = 'books';
const HEALTHY_WITHIN_MS = 60_000;
/** The keys of this run, one per role (the keys file holds their SHA-256 only). */
const KEYS = { reader: randomBytes(24).toString('hex'), writer: randomBytes(24).toString('hex'), admin: randomBytes(24).toString('hex') } as const;
const ROLES = { reader: ['read'], writer: ['write'], admin: ['admin'] } as const;

/** The services' certificate names: each process is reached by its service name, the health checks by 127.0.0.1. */
const SERVICE_NAMES = [...NODES, ...READERS].map((s) => `DNS:${s}`);

/**
 * api-keys.json, cluster.secret, ca.crt, tls.crt and tls.key, as docker-compose.yml's `secrets:`
 * read them, readable by the image's uid 1000 only; returns the CA the test trusts.
 */
async function writeSecrets(dir: string, pki: TestPki): Promise<Buffer> {
  mkdirSync(dir, { recursive: true });
  const keys = (Object.keys(KEYS) as Array<keyof typeof KEYS>).map((name) => ({ name, sha256: createHash('sha256').update(KEYS[name]).digest('hex'), roles: ROLES[name] }));
  writeFileSync(path.join(dir, 'api-keys.json'), JSON.stringify(keys));
  writeFileSync(path.join(dir, 'cluster.secret'), `${randomBytes(32).toString('hex')}\n`);
  const ca = await pki.ca('compose-ca');
  const leaf = await ca.issue('shardex', SERVICE_NAMES);
  writeFileSync(path.join(dir, 'ca.crt'), ca.cert);
  writeFileSync(path.join(dir, 'tls.crt'), leaf.cert);
  writeFileSync(path.join(dir, 'tls.key'), leaf.key);
  for (const file of ['api-keys.json', 'cluster.secret', 'ca.crt', 'tls.crt', 'tls.key']) {
    chownSync(path.join(dir, file), 1000, 1000);
    chmodSync(path.join(dir, file), 0o400);
  }
  return ca.cert;
}

/** The HTTPS client of the run: it trusts the run's CA (set once the secrets are written). */
let httpsFetch: FetchLike = () => Promise.reject(new Error('no request before the secrets are written'));

const startedAt = Date.now();
const timings: Array<[string, number]> = [];

function log(message: string): void {
  process.stderr.write(`[containers +${((Date.now() - startedAt) / 1000).toFixed(1)}s] ${message}\n`);
}

async function timed<T>(what: string, step: () => Promise<T>): Promise<T> {
  const t0 = Date.now();
  log(`${what} ...`);
  try {
    return await step();
  } finally {
    timings.push([what, Date.now() - t0]);
    log(`${what}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }
}

interface Reply<T = any> {
  readonly status: number;
  readonly body: T;
}

/** One HTTP request to a published port on 127.0.0.1 (the only addresses this test contacts), with `key` as its bearer key. */
async function request<T = any>(method: string, url: string, key: string | undefined, body?: unknown): Promise<Reply<T>> {
  if (!url.startsWith('https://127.0.0.1:')) throw new Error(`refusing to contact ${url}: only ports published on 127.0.0.1`);
  const res = await httpsFetch(url, {
    method,
    headers: { ...(body !== undefined && { 'content-type': 'application/json' }), ...(key !== undefined && { authorization: `Bearer ${key}` }) },
    ...(body !== undefined && { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(15_000),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: res.status, body: parsed as T };
}

/** A failure a client retries during a failover: 503 with Retry-After, or the connection refused/reset. */
function retryable(err: unknown): boolean {
  const e = err as { code?: string; name?: string; cause?: { code?: string } };
  return [e.code, e.cause?.code, e.name].some((c) => c !== undefined && ['ECONNREFUSED', 'ECONNRESET', 'UND_ERR_SOCKET', 'TimeoutError', 'AbortError'].includes(c));
}

describe('the compose deployment in containers (podman-compose: ZooKeeper, 3 nodes, 2 readers)', () => {
  let engine: ContainerEngine | undefined;
  let project: ComposeProject | undefined;
  const name = projectName();
  const buildDir = path.join(REPO, '.container-build', name);
  // Written after the image build (never in its context); removed with the build directory.
  const secretsDir = path.join(buildDir, 'secrets');
  const url: Record<string, string> = {};
  let tornDown = false;

  const teardown = async (): Promise<void> => {
    if (tornDown) return;
    tornDown = true;
    rmSync(buildDir, { recursive: true, force: true });
    if (!engine) return;
    await timed('teardown (containers, network, volumes, images)', async () => {
      const errors = await removeProject(engine!, name, REPO, log);
      if (errors.length) log(`teardown could not remove everything:\n${errors.join('\n')}`);
    });
    engine.dispose();
  };

  beforeAll(async () => {
    try {
      engine = await timed('container engine (podman, podman-compose, runc)', () => ensureContainerEngine(log));
      await timed('leftovers of earlier runs', () => removeLeftovers(engine!, REPO, log));
      const ports = await Promise.all([...NODES, ...READERS].map(() => freePort()));
      [...NODES, ...READERS].forEach((service, i) => (url[service] = `https://127.0.0.1:${ports[i]}`));
      const images = { node: `localhost/${name}-node:latest`, zookeeper: `localhost/${name}-zookeeper:latest`, shardex: `localhost/${name}-shardex:latest` };
      project = new ComposeProject(engine, name, path.join(REPO, 'docker-compose.yml'), {
        SHARDEX_IMAGE: images.shardex,
        SHARDEX_NODE_IMAGE: images.node,
        SHARDEX_ZOOKEEPER_IMAGE: images.zookeeper,
        SHARDEX_BUILD_TARGET: 'runtime-prebuilt',
        SHARDEX_PREBUILT_DIR: path.relative(REPO, buildDir),
        SHARDEX_SECRETS_DIR: secretsDir,
        ...Object.fromEntries(NODES.map((n, i) => [`SHARDEX_PORT_${i + 1}`, String(ports[i])])),
        ...Object.fromEntries(READERS.map((r, i) => [`SHARDEX_READER_PORT_${i + 1}`, String(ports[NODES.length + i])])),
      });
      log(`project ${name}; nodes ${NODES.map((n) => url[n]).join(' ')}; readers ${READERS.map((r) => url[r]).join(' ')}`);

      await timed('images', async () => {
        const deps = productionDependencies(REPO);
        await Promise.all([
          timed('app prepared on the host (dist/ + production node_modules -> app.tar)', () => prepareApp(REPO, buildDir, deps, log)),
          timed('ZooKeeper image (local JDK + Debian zookeeper jars)', () => buildZooKeeperImage(engine!, images.zookeeper, log)),
          timed('Node base image (local node + ldd libraries)', () => buildNodeBaseImage(engine!, images.node, deps.nativeModules)),
        ]);
        await timed('Shardex image (podman-compose build, target runtime-prebuilt)', async () => {
          const built = await project!.compose(['build', 'shardex1'], 150_000);
          if (built.code !== 0 || (await engine!.podman(['image', 'exists', images.shardex])).code !== 0) {
            throw new Error(`podman-compose build failed (exit ${built.code}):\n${tail(built.stdout + built.stderr, 30)}`);
          }
        });
      });
      rmSync(path.join(buildDir, 'app.tar'), { force: true });
      const pki = await testPki();
      try {
        const ca = await writeSecrets(secretsDir, pki);
        httpsFetch = agentFetch(new Agent({ ca, keepAlive: true }));
      } finally {
        await pki.remove();
      }

      await timed('compose up -d', async () => {
        const up = await project!.compose(['up', '-d'], 120_000);
        const running = await engine!.podman(['ps', '--filter', `label=io.podman.compose.project=${name}`, '--format', '{{.Names}}']);
        const names = running.stdout.split('\n').filter(Boolean);
        if (up.code !== 0 || names.length !== 1 + NODES.length + READERS.length) {
          throw new Error(`podman-compose up -d (exit ${up.code}) left ${names.length} containers running (${names.join(', ')}):\n${tail(up.stdout + up.stderr, 30)}`);
        }
      });

      // podman-compose does not wait for depends_on health: the nodes retry ZooKeeper (and
      // restart: unless-stopped covers one that gives up); here every process's /health is awaited.
      await timed('every node and reader healthy', () =>
        Promise.all(
          [...NODES, ...READERS].map(async (service) => {
            let last = 'no answer';
            try {
              await until(`${service} /health = 200`, HEALTHY_WITHIN_MS, async () => {
                const r = await request('GET', `${url[service]}/health`, undefined);
                last = `${r.status} ${JSON.stringify(r.body)}`;
                return r.status === 200 ? true : undefined;
              });
            } catch (err) {
              throw new Error(`${(err as Error).message} (last answer: ${last})\nlast lines of ${service}:\n${await project!.logs(service)}\nZooKeeper:\n${await project!.logs('zookeeper', 15)}`);
            }
          }),
        ),
      );
    } catch (err) {
      await teardown();
      throw err;
    }
  }, 240_000);

  afterAll(async () => {
    await teardown();
    const total = Date.now() - startedAt;
    log(`timings: ${timings.map(([what, ms]) => `${what} ${(ms / 1000).toFixed(1)} s`).join('; ')}`);
    log(`total: ${(total / 1000).toFixed(1)} s`);
  }, 90_000);

  it('passes the compose health checks of every container, and answers /health/live', { timeout: 60_000 }, async () => {
    for (const service of ['zookeeper', ...NODES, ...READERS]) {
      // Podman schedules health checks through systemd timers; without systemd they are run here.
      const check = await engine!.podman(['healthcheck', 'run', project!.container(service)], 20_000);
      expect(check.code, `${service}: ${check.stdout}${check.stderr}`).toBe(0);
    }
    for (const node of NODES) expect((await request('GET', `${url[node]}/health/live`, undefined)).status).toBe(200);
    const health = await request('GET', `${url.shardex1}/health`, undefined);
    expect(health.body).toMatchObject({ status: 'ok', node: 'shardex1' });
  });

  it('serves TLS only: plain HTTP gets no answer, and a client that does not trust the CA is refused', { timeout: 60_000 }, async () => {
    for (const service of [...NODES, ...READERS]) {
      const plain = `http://${url[service]!.slice('https://'.length)}/health`;
      await expect(fetch(plain, { signal: AbortSignal.timeout(10_000) }), service).rejects.toThrow();
      // Node's own fetch knows only the system's CAs: the run's private CA is not among them.
      await expect(fetch(`${url[service]}/health`, { signal: AbortSignal.timeout(10_000) }), service).rejects.toThrow();
    }
  });

  it('requires an API key on every node (401 without, 403 without the role) and serves the key with the role', { timeout: 60_000 }, async () => {
    for (const node of NODES) {
      for (const key of [undefined, 'not-a-key']) {
        const refused = await request('GET', `${url[node]}/api/cluster`, key);
        expect(refused.status, `${node} ${JSON.stringify(refused.body)}`).toBe(401);
        expect(refused.body.code).toBe('SHX_UNAUTHORIZED');
      }
      expect((await request('GET', `${url[node]}/api/cluster`, KEYS.writer)).status).toBe(200);
    }
    const noAdmin = await request('POST', `${url.shardex2}/api/collections`, KEYS.writer, { name: 'refused', numShards: 1, replicationFactor: 1 });
    expect(noAdmin.status, JSON.stringify(noAdmin.body)).toBe(403);
    expect(noAdmin.body.code).toBe('SHX_FORBIDDEN');
    expect((await request('POST', `${url.shardex3}/api/collections`, undefined, { name: 'refused', numShards: 1, replicationFactor: 1 })).status).toBe(401);
    expect((await request('GET', `${url.shardex1}/api/collections/refused`, KEYS.reader)).status).toBe(404);
  });

  it('creates a collection, indexes and searches through ports published on 127.0.0.1', { timeout: 60_000 }, async () => {
    const created = await request('POST', `${url.shardex1}/api/collections`, KEYS.admin, { name: C, numShards: 2, replicationFactor: 3, fields: { title: 'text', n: 'number' } });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    await until('every shard led and every replica active', 30_000, async () => (settled((await request<ClusterView>('GET', `${url.shardex3}/api/cluster`, KEYS.reader)).body, C) ? true : undefined));
    const docs = Array.from({ length: 50 }, (_, n) => ({ id: `book-${n}`, title: n === 7 ? 'Dune' : `Book number ${n}`, n }));
    const added = await request('POST', `${url.shardex2}/api/collections/${C}/docs?minRf=3`, KEYS.writer, docs);
    expect(added.status, JSON.stringify(added.body)).toBe(200);
    expect(added.body).toMatchObject({ added: 50, rf: 3 });
    const got = await request('GET', `${url.shardex3}/api/collections/${C}/docs/book-7`, KEYS.reader);
    expect(got.body).toMatchObject({ id: 'book-7', title: 'Dune' });
    // Roles: a write key cannot read, a read key cannot write; nothing the refused write carried is stored.
    expect((await request('GET', `${url.shardex1}/api/collections/${C}/docs/book-7`, KEYS.writer)).status).toBe(403);
    expect((await request('POST', `${url.shardex1}/api/collections/${C}/docs`, KEYS.reader, [{ id: 'refused-1', title: 'x' }])).status).toBe(403);
    expect((await request('GET', `${url.shardex1}/api/collections/${C}/docs/refused-1`, KEYS.reader)).status).toBe(404);
    const found = await request('GET', `${url.shardex1}/api/collections/${C}/search?q=title:dune`, KEYS.reader);
    expect(found.body).toMatchObject({ total: 1, hits: [{ id: 'book-7' }], shards: { total: 2, ok: 2, failed: 0 } });
    expect((await request('GET', `${url.shardex2}/api/collections/${C}/search?q=*&limit=0`, KEYS.reader)).body.total).toBe(50);
  });

  it('serves eventual reads from the snapshot readers', { timeout: 60_000 }, async () => {
    expect((await request('POST', `${url.shardex1}/api/collections/${C}/commit`, KEYS.writer)).status).toBe(200);
    const res = await until('an eventual search served by readers', 30_000, async () => {
      const r = await request('GET', `${url.shardex2}/api/collections/${C}/search?q=*&limit=0&consistency=eventual`, KEYS.reader);
      return r.status === 200 && Object.values(r.body.servedBy ?? {}).every((s: any) => !s.fallback) ? r : undefined;
    });
    expect(res.body.total).toBe(50);
    for (const served of Object.values(res.body.servedBy) as Array<{ node: string }>) expect(READERS).toContain(served.node);
    const readers = await request('GET', `${url.shardex1}/api/readers`, KEYS.reader);
    expect((readers.body.readers as Array<{ name: string }>).map((r) => r.name).sort()).toEqual([...READERS]);
    // The readers take the nodes' keys too: their own API answers 401 without one.
    for (const r of READERS) {
      expect((await request('GET', `${url[r]}/api/reader`, undefined)).status).toBe(401);
      expect((await request('GET', `${url[r]}/api/reader`, KEYS.reader)).status).toBe(200);
    }
  });

  it('fails over when the container leading a shard stops, and a write job finishes', { timeout: 120_000 }, async () => {
    const view = (await request<ClusterView>('GET', `${url.shardex1}/api/cluster`, KEYS.reader)).body;
    const victim = view.collections[C]!.shards.shard1!.leader!;
    expect(NODES).toContain(victim);
    const survivors = NODES.filter((n) => n !== victim).map((n) => url[n]!);

    // The job: 100 batches of 10 documents, through the surviving nodes; a batch that meets a
    // failover (503 with Retry-After, a refused or reset connection) is sent again.
    const BATCHES = 100;
    const acked: number[] = [];
    let retries = 0;
    let stoppedAt = 0;
    let firstAckAfterStop = 0;
    const unexpected: string[] = [];
    const job = (async () => {
      const deadline = Date.now() + 90_000;
      for (let b = 0; b < BATCHES; b++) {
        const docs = Array.from({ length: 10 }, (_, i) => ({ id: `job-${b * 10 + i}`, title: `job document ${b * 10 + i}`, n: b * 10 + i }));
        for (let attempt = 0; ; attempt++) {
          if (Date.now() > deadline) throw new Error(`the write job did not finish in 90 s: batch ${b} of ${BATCHES}; ${retries} retries; ${unexpected.slice(-3).join('; ')}`);
          const sent = Date.now();
          try {
            const res = await request('POST', `${survivors[(b + attempt) % survivors.length]}/api/collections/${C}/docs`, KEYS.writer, docs);
            if (res.status === 200) {
              acked.push(b);
              if (stoppedAt && sent > stoppedAt && !firstAckAfterStop) firstAckAfterStop = Date.now();
              break;
            }
            if (res.status !== 503) unexpected.push(`${res.status} ${JSON.stringify(res.body)}`);
          } catch (err) {
            if (!retryable(err)) throw err;
          }
          retries++;
          await sleep(200);
        }
      }
    })();
    job.catch(() => undefined);

    await until('20 batches acknowledged before the stop', 30_000, async () => (acked.length >= 20 ? true : undefined));
    stoppedAt = Date.now();
    const stop = await timed(`podman stop ${victim} (leader of shard1)`, () => engine!.podman(['stop', '-t', '20', project!.container(victim)], 40_000));
    expect(stop.code, stop.stderr).toBe(0);
    const newView = await until('a new leader of shard1', 60_000, async () => {
      const v = (await request<ClusterView>('GET', `${survivors[0]}/api/cluster`, KEYS.reader)).body;
      const leader = v.collections[C]?.shards.shard1?.leader;
      return leader && leader !== victim && !v.nodes.some((n) => n.name === victim) ? v : undefined;
    });
    log(`shard1: ${victim} stopped; ${newView.collections[C]!.shards.shard1!.leader} leads (${Date.now() - stoppedAt} ms after the stop)`);
    await timed('the write job', () => job);
    log(`write job: ${BATCHES} batches, ${retries} retried; first write sent after the stop acknowledged ${firstAckAfterStop ? firstAckAfterStop - stoppedAt : '?'} ms after it`);
    expect(unexpected).toEqual([]);
    expect(acked).toHaveLength(BATCHES);
    for (const node of survivors) {
      expect((await request('GET', `${node}/api/collections/${C}/search?q=*&limit=0`, KEYS.reader)).body.total).toBe(50 + BATCHES * 10);
    }
    expect((await request('GET', `${survivors[1]}/api/collections/${C}/docs/job-999`, KEYS.reader)).body).toMatchObject({ id: 'job-999', n: 999 });
  });

  it('down -v removes the containers and volumes (and network rm the network podman-compose leaves)', { timeout: 60_000 }, async () => {
    const down = await timed('compose down -v', () => project!.compose(['down', '-v'], 60_000));
    expect(down.code, tail(down.stdout + down.stderr, 20)).toBe(0);
    await engine!.podman(['network', 'rm', '-f', `${name}_default`]);
    const label = `label=io.podman.compose.project=${name}`;
    expect((await engine!.podman(['ps', '-a', '-q', '--filter', label])).stdout.trim()).toBe('');
    expect((await engine!.podman(['volume', 'ls', '-q', '--filter', label])).stdout.trim()).toBe('');
    expect((await engine!.podman(['network', 'exists', `${name}_default`])).code).not.toBe(0);
  });
});
