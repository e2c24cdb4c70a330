// `shardex node` and `shardex reader`: one process of a ZooKeeper-coordinated cluster each.
import { isIP } from 'node:net';
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import type { Logger } from 'pino';
import { ClusterCoordinator } from '../coordination/cluster.js';
import { ZooKeeperStore, checkDigest } from '../coordination/zookeeper-store.js';
import { ShardexError } from '../errors.js';
import { SnapshotReader } from '../read/snapshot-reader.js';
import { createLogger, flushLoggerSync } from '../logger.js';
import { SERVER_TLS_FLAGS, checkCertificateHost, loadTls, type TlsMaterial } from '../transport/index.js';
import { ShardexNode, type ShardexNodeOptions } from './shardex-node.js';
import { nodeOptionsOf, readerOptionsOf, type NodeConfig, type NodeTunables, type ReaderConfig } from './config.js';
import { loadApiKeys, type ApiKey } from './http/auth.js';
import { LIMITS, resolveLimits, type LimitName } from './http/limits.js';

/** What every cluster process is told (config.ts): where ZooKeeper is, where it listens, its secrets. */
export type ProcessOptions = Pick<NodeConfig, 'zk' | 'port' | 'grpcPort' | 'data' | 'name' | 'host' | 'advertiseHost' | 'zkTimeout' | 'clusterSecretFile' | 'tlsCert' | 'tlsKey' | 'tlsCa' | 'zkDigestFile' | 'insecure'>;

/** The text of the `what` file `file` given with `flag`, surrounding whitespace dropped; SHX_BAD_CONFIG naming the flag when it cannot be read. */
async function readTrimmed(file: string, what: string, flag: string): Promise<string> {
  try {
    return (await readFile(file, 'utf8')).trim();
  } catch (err) {
    throw new ShardexError('SHX_BAD_CONFIG', `cannot read the ${what} file ${file} (${flag}): ${(err as Error).message}`);
  }
}

/** The ZooKeeper digest credentials in `file` (one line `user:password`); SHX_BAD_CONFIG when unusable, never showing the password. */
export async function readZkDigest(file: string): Promise<string> {
  if (file === '') throw new ShardexError('SHX_BAD_CONFIG', '--zk-digest-file (or SHARDEX_ZK_DIGEST_FILE) is empty: give the path of a file holding user:password, or leave it unset');
  const digest = await readTrimmed(file, 'ZooKeeper digest', '--zk-digest-file');
  try {
    checkDigest(digest);
  } catch {
    throw new ShardexError('SHX_BAD_CONFIG', `the ZooKeeper digest file ${file} (--zk-digest-file) must hold one line user:password, neither part empty (e.g. \`printf 'shardex:%s' "$(openssl rand -hex 24)" > ${file}\`); give every node and reader the same file`);
  }
  return digest;
}

/** The TLS of a process from its flags, checked against the address it advertises (SHX_BAD_CONFIG naming the flag). */
export async function processTls(o: Pick<ProcessOptions, 'tlsCert' | 'tlsKey' | 'tlsCa'>, advertiseHost: string): Promise<TlsMaterial | undefined> {
  const tls = await loadTls({ ...(o.tlsCert !== undefined && { cert: o.tlsCert }), ...(o.tlsKey !== undefined && { key: o.tlsKey }), ...(o.tlsCa !== undefined && { ca: o.tlsCa }) }, SERVER_TLS_FLAGS);
  if (tls) checkCertificateHost(tls, advertiseHost, `--tls-cert ${o.tlsCert}`, '--advertise-host (default: --host)');
  return tls;
}

/** Shortest cluster secret accepted. */
export const MIN_SECRET_LENGTH = 16;

/** The cluster secret in `file` (one line; surrounding whitespace dropped); SHX_BAD_CONFIG when unusable. */
export async function readClusterSecret(file: string): Promise<string> {
  const secret = await readTrimmed(file, 'cluster secret', '--cluster-secret-file');
  if (secret.length < MIN_SECRET_LENGTH || /[\r\n]/.test(secret)) {
    throw new ShardexError(
      'SHX_BAD_CONFIG',
      `the cluster secret in ${file} must be one line of at least ${MIN_SECRET_LENGTH} characters (e.g. \`openssl rand -hex 32 > ${file}\`); give every node and reader the same file`,
    );
  }
  return secret;
}

/**
 * A process reachable from other machines without a cluster secret lets anyone who reaches its
 * gRPC port replicate into its shards or copy them. That takes --insecure, said on purpose.
 */
export function checkClusterSecret(host: string, secret: string | undefined, insecure: boolean | undefined): void {
  if (secret !== undefined || insecure || isLoopback(host)) return;
  throw new ShardexError(
    'SHX_BAD_CONFIG',
    `--host ${host} is reachable from other machines and no --cluster-secret-file is given: anyone who reaches the gRPC port could replicate into this process's shards or copy them. Give every node and reader the same --cluster-secret-file (or SHARDEX_CLUSTER_SECRET_FILE), bind a loopback --host, or pass --insecure to run without it on purpose`,
  );
}

/** `--api-keys` and the limit flags (`--max-...`), taken by `shardex node` and `shardex dev`. */
export type HttpFlags = Pick<NodeTunables, 'apiKeys' | LimitName>;

export type HttpSettings = NonNullable<ShardexNodeOptions['http']>;

/** The node's HTTP settings from its flags: keys file read and checked, limits resolved (SHX_BAD_CONFIG naming the flag). */
export async function httpSettings(o: HttpFlags): Promise<HttpSettings> {
  const given: Partial<Record<LimitName, number>> = {};
  for (const name of Object.keys(LIMITS) as LimitName[]) if (o[name] !== undefined) given[name] = o[name];
  const { maxBodyBytes, ...limits } = resolveLimits(given);
  const apiKeys = await apiKeysOf(o.apiKeys);
  return { bodyLimit: maxBodyBytes, limits, ...(apiKeys && { apiKeys }) };
}

/** `--api-keys FILE` read and checked (nodes and readers alike); undefined: run without keys. */
export async function apiKeysOf(file: string | undefined): Promise<ApiKey[] | undefined> {
  // An empty variable (compose's `${KEYS:-}`) is a mistake to say, not a reason to run open.
  if (file === '') throw new ShardexError('SHX_BAD_CONFIG', '--api-keys (or SHARDEX_API_KEYS_FILE) is empty: give the path of the keys file, or leave it unset to run without keys');
  return file === undefined ? undefined : loadApiKeys(file);
}

/** 127.0.0.0/8, ::1 (also IPv4-mapped) and localhost: only this machine can connect. */
export function isLoopback(host: string): boolean {
  const h = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) !== 6) return false;
  // The URL parser writes an IPv6 address in its one short form (::ffff:127.0.0.1 as ::ffff:7f00:1).
  const short = new URL(`http://[${h}]`).hostname;
  return short === '[::1]' || short.startsWith('[::ffff:7f');
}

/**
 * A node open to the network serves anyone who reaches it: every collection read, written,
 * deleted. That takes --insecure, said on purpose.
 */
export function checkOpenBinding(host: string, http: HttpSettings, insecure: boolean | undefined): void {
  if (http.apiKeys !== undefined || insecure || isLoopback(host)) return;
  throw new ShardexError(
    'SHX_BAD_CONFIG',
    `--host ${host} is reachable from other machines and no --api-keys are given: anyone who reaches the port could read, write and delete every collection. Give --api-keys FILE (or SHARDEX_API_KEYS_FILE), bind a loopback --host, or pass --insecure to run open on purpose`,
  );
}

interface Server {
  start(): Promise<void>;
  stop(): Promise<void>;
  readonly httpUrl: string;
  readonly grpcAddress: string;
}

interface ProcessContext {
  readonly logger: Logger;
  readonly name: string;
  readonly coordinator: ClusterCoordinator;
  readonly grpcPort: number;
  readonly dataDir: string;
  readonly host: string;
  readonly advertiseHost: string;
  readonly clusterSecret?: string;
  readonly tls?: TlsMaterial;
}

/**
 * Connects to ZooKeeper, builds the server, stops it gracefully on SIGINT/SIGTERM, starts it,
 * and prints one JSON line `{"ready":true,...}` that scripts and tests wait for.
 */
async function runProcess<S extends Server>(o: ProcessOptions, build: (ctx: ProcessContext) => S, ready: (s: S) => object = () => ({})): Promise<S> {
  const advertiseHost = o.advertiseHost ?? o.host;
  if (['0.0.0.0', '::', '[::]'].includes(advertiseHost)) {
    throw new ShardexError('SHX_BAD_CONFIG', `--host ${o.host} binds every interface, which nobody can connect to: give --advertise-host with the name or address others reach this process at`);
  }
  const clusterSecret = o.clusterSecretFile === undefined ? undefined : await readClusterSecret(o.clusterSecretFile);
  checkClusterSecret(o.host, clusterSecret, o.insecure);
  const tls = await processTls(o, advertiseHost);
  const digest = o.zkDigestFile === undefined ? undefined : await readZkDigest(o.zkDigestFile);
  const logger = createLogger();
  const name = o.name ?? `${advertiseHost}_${o.port}`;
  const store = await ZooKeeperStore.connect({ connectString: o.zk, sessionTimeoutMs: o.zkTimeout, logger, ...(digest !== undefined && { digest }) });
  // Stop acting as leader after a third of the session timeout without ZooKeeper: by then
  // the session may have expired and another replica may lead.
  const coordinator = new ClusterCoordinator({ store, logger: logger.child({ node: name }), leaderGraceMs: Math.floor(o.zkTimeout / 3) });
  const server = build({
    logger,
    name,
    coordinator,
    grpcPort: o.grpcPort ?? (o.port === 0 ? 0 : o.port + 1000),
    dataDir: resolve(o.data),
    host: o.host,
    advertiseHost,
    ...(clusterSecret !== undefined && { clusterSecret }),
    ...(tls !== undefined && { tls }),
  });
  const stop = async (signal: string): Promise<void> => {
    logger.info({ signal }, 'stopping');
    await server.stop();
    flushLoggerSync(logger);
    process.exit(0);
  };
  process.once('SIGINT', () => void stop('SIGINT'));
  process.once('SIGTERM', () => void stop('SIGTERM'));
  try {
    await server.start();
  } catch (err) {
    // What did start (ports, the ZooKeeper session) would keep the process running, failed.
    await server.stop().catch((e: unknown) => logger.warn({ err: e }, 'could not stop after a failed start'));
    flushLoggerSync(logger);
    throw err;
  }
  process.stdout.write(JSON.stringify({ ready: true, name, http: server.httpUrl, grpc: server.grpcAddress, ...ready(server) }) + '\n');
  return server;
}

export async function runNode(o: NodeConfig): Promise<ShardexNode> {
  // Before connecting anywhere: a bad flag is a usage error.
  const http = await httpSettings(o);
  checkOpenBinding(o.host, http, o.insecure);
  return runProcess(o, (ctx) => {
    if (http.apiKeys === undefined) ctx.logger.warn({ host: o.host, insecure: o.insecure === true }, 'no --api-keys: the HTTP API is open to anyone who can reach it');
    return new ShardexNode({ ...ctx, ...nodeOptionsOf(o), httpPort: o.port, http });
  });
}

export async function runReader(o: ReaderConfig): Promise<SnapshotReader> {
  const apiKeys = await apiKeysOf(o.apiKeys);
  return runProcess(o, (ctx) => new SnapshotReader({ ...ctx, ...readerOptionsOf(o), group: o.group, httpPort: o.port, ...(apiKeys && { apiKeys }) }), (r) => ({ group: r.group }));
}
