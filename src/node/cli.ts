// `shardex`: one CLI for running nodes, the local dev cluster, and routing look-ups.
// Exit codes: 0 ok, 1 failure, 2 usage.
import { resolve } from 'node:path';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { formatRange, parseRouterName, partitionRange, routeId } from '../hashrange/index.js';
import { ShardexError } from '../errors.js';
import { wipeDataDir } from './dev-data.js';
import { ThreadedDevCluster } from './dev-threads.js';
import { createLogger } from '../logger.js';
import { registerClientCommands } from './cli-client.js';
import { LIMITS } from './http/limits.js';
import { httpSettings, readBalanceOptions, runNode, runReader, type HttpFlags, type ReadBalanceFlags, type RunNodeOptions, type RunReaderOptions } from './run-node.js';

const out = (line: string): void => void process.stdout.write(line + '\n');

function intArg(name: string, min: number, max: number) {
  return (v: string): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min || n > max) throw new InvalidArgumentError(`${name} must be an integer from ${min} to ${max}`);
    return n;
  };
}

function routerArg(v: string): 'compositeId' | 'hash' {
  try {
    return parseRouterName(v);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
}

/** LevelDB's write buffer per replica: `shardex node` and `shardex dev` take it alike. */
const WRITE_BUFFER_FLAG = '--write-buffer-mb <mib>';
const WRITE_BUFFER_HELP = "LevelDB write buffer per replica in MiB (default LevelDB's 4; larger: less compaction per write, and up to twice that much memory per replica)";
const writeBufferArg = intArg('--write-buffer-mb', 1, 256);

/** The read balancer's per-node flags: `shardex node` and `shardex dev` take them alike. */
function readBalanceFlags(cmd: Command): Command {
  return cmd
    .option('--read-priority <name>', 'read-balancer priority of reads that name none (default: none; such reads run unbalanced)')
    .option('--read-queue-size <n>', "reads that may wait in each priority's queue (default 100)", intArg('--read-queue-size', 0, 1_000_000));
}

/** `--api-keys` and every limit (http/limits.ts): `shardex node` and `shardex dev` take them alike. */
function httpFlags(cmd: Command): Command {
  cmd.addOption(
    new Option('--api-keys <file>', 'JSON file of API keys [{"name","sha256","roles"}]: every endpoint but /health then needs "Authorization: Bearer KEY"').env('SHARDEX_API_KEYS_FILE'),
  );
  for (const l of Object.values(LIMITS)) cmd.option(`${l.flag} <n>`, `limit: ${l.unit} (default ${l.default})`, intArg(l.flag, l.min, l.max));
  return cmd;
}

const program = new Command('shardex')
  .description('Shardex: a sharded, replicated document index')
  .exitOverride()
  .configureOutput({ writeErr: (s) => process.stderr.write(s) });

program
  .command('route')
  .description('print the hash and shard of each id, one JSON line per id')
  .requiredOption('--shards <n>', 'number of shards', intArg('--shards', 1, 256))
  .option('--router <name>', 'compositeId (default) or hash', routerArg, 'compositeId')
  .argument('<ids...>', 'document ids')
  .action((ids: string[], o: { shards: number; router: 'compositeId' | 'hash' }) => {
    for (const id of ids) {
      const r = routeId(id, o.shards, o.router);
      out(JSON.stringify({ id, hash: r.hash, shard: r.shard }));
    }
  });

program
  .command('ranges')
  .description('print the shard ranges of a collection layout, one per line')
  .requiredOption('--shards <n>', 'number of shards', intArg('--shards', 1, 256))
  .option('--router <name>', 'compositeId (default) or hash', routerArg, 'compositeId')
  .action((o: { shards: number; router: 'compositeId' | 'hash' }) => {
    for (const r of partitionRange(o.shards, o.router)) out(`${r.name} ${formatRange(r)}`);
  });

httpFlags(readBalanceFlags(program.command('dev')))
  .description('start a local cluster: several nodes on loopback with embedded coordination, kept in the data dir')
  .option('--nodes <n>', 'number of nodes', intArg('--nodes', 1, 32), 3)
  .option('--port <port>', 'HTTP port of the first node (the others follow; 0 = any free ports)', intArg('--port', 0, 65000), 8983)
  .option('--data <dir>', 'data directory', './data')
  .option('--reset', 'wipe the data directory first: every collection and document in it is gone')
  .option('--shards <n>', 'shards of the "docs" collection, when it is created (at the first start)', intArg('--shards', 1, 256), 2)
  .option('--replicas <n>', 'replication factor of "docs", when it is created', intArg('--replicas', 1, 32), 2)
  .option('--readers <n>', 'snapshot readers to start (default group)', intArg('--readers', 0, 32), 0)
  .option(WRITE_BUFFER_FLAG, WRITE_BUFFER_HELP, writeBufferArg)
  .action(async (o: { nodes: number; port: number; data: string; reset?: boolean; shards: number; replicas: number; readers: number; writeBufferMb?: number } & ReadBalanceFlags & HttpFlags) => {
    const readBalance = readBalanceOptions(o);
    const http = await httpSettings(o);
    const dataDir = resolve(o.data);
    // Before the logger: its file is in the data dir.
    if (o.reset) out((await wipeDataDir(dataDir)) ? `--reset: wiped ${dataDir} (every collection and document that was in it)` : `--reset: ${dataDir} did not exist, nothing to wipe`);
    const logFile = resolve(dataDir, 'shardex.log');
    const logger = createLogger({ file: logFile });
    out(`starting ${o.nodes} nodes, each in its own thread (data in ${dataDir}, logs in ${logFile}) ...`);
    const replicas = Math.min(o.replicas, o.nodes);
    const cluster = new ThreadedDevCluster({
      nodes: o.nodes,
      readers: o.readers,
      port: o.port,
      dataDir,
      logFile,
      logger,
      snapshotExpiryMs: 5000,
      ...(o.writeBufferMb !== undefined && { writeBufferMb: o.writeBufferMb }),
      readBalance,
      http,
      collection: { name: 'docs', numShards: o.shards, replicationFactor: replicas, router: 'compositeId', autoCommitMs: 15_000 },
    });
    const shutdown = async (): Promise<void> => {
      out('stopping ...');
      await cluster.stop();
      logger.flush();
      process.exit(0);
    };
    process.once('SIGINT', () => void shutdown());
    process.once('SIGTERM', () => void shutdown());
    try {
      await cluster.start();
    } catch (err) {
      await cluster.stop();
      logger.flush();
      throw err;
    }
    const first = cluster.nodes[0]!.http;
    out('Shardex local cluster is up:');
    for (const n of cluster.nodes) out(`  ${n.name}  ${n.http}  (gRPC ${n.grpc})`);
    for (const r of cluster.readers) out(`  ${r.name}  ${r.http}  snapshot reader, group default`);
    if (cluster.restored.length > 0) out(`found ${cluster.restored.length} collection(s) in ${dataDir} (start with --reset to begin empty)`);
    for (const [name, c] of cluster.collections) out(`collection "${name}": ${c.shards} shards x ${c.replicas} replicas`);
    const docs = cluster.collections.get('docs');
    if (cluster.restored.includes('docs') && docs && (docs.shards !== o.shards || docs.replicas !== replicas)) {
      out(`  ("docs" is kept as it was created; --shards and --replicas apply when it is created)`);
    }
    const auth = http.apiKeys === undefined ? '' : ` -H "authorization: Bearer $SHARDEX_API_KEY"`;
    if (http.apiKeys === undefined) out('authentication: OFF, the cluster is open (anyone who can reach these ports may read, write and delete); give --api-keys FILE to require keys');
    else out(`authentication: ON, ${http.apiKeys.length} API key(s) from ${o.apiKeys}; send "Authorization: Bearer KEY" (the CLI: --api-key or SHARDEX_API_KEY)`);
    out('try:');
    out(`  curl -s -XPOST '${first}/api/collections/docs/docs'${auth} -H 'content-type: application/json' -d '[{"id":"1","title":"hello shardex"}]'`);
    out(`  curl -s '${first}/api/collections/docs/docs/1'${auth}`);
    out(`  curl -s '${first}/api/cluster'${auth}`);
    out('press Ctrl-C to stop');
  });

/** The flags every cluster process takes (ProcessOptions in run-node.ts): ZooKeeper, ports, data, addresses. */
function clusterProcess(name: string, description: string, what: string, defaults: { port: number; data: string }): Command {
  return program
    .command(name)
    .description(description)
    .requiredOption('--zk <connect>', 'ZooKeeper connect string host:port[,host:port]/chroot')
    .option('--port <port>', 'HTTP port', intArg('--port', 0, 65535), defaults.port)
    .option('--grpc-port <port>', 'gRPC port (default: HTTP port + 1000)', intArg('--grpc-port', 0, 65535))
    .option('--data <dir>', 'data directory', defaults.data)
    .option('--name <name>', `${what} name (default: host_port)`)
    .option('--host <host>', 'address to bind (0.0.0.0 = every interface)', '127.0.0.1')
    .option('--advertise-host <host>', `address other nodes and clients reach this ${what} at (default: --host)`)
    .option('--zk-timeout <ms>', 'ZooKeeper session timeout', intArg('--zk-timeout', 1000, 600_000), 15_000)
    .addOption(new Option('--cluster-secret-file <file>', 'file with the secret every gRPC call between nodes and readers carries (the same file everywhere)').env('SHARDEX_CLUSTER_SECRET_FILE'))
    .addOption(new Option('--tls-cert <file>', 'PEM certificate (chain) of the HTTP and gRPC servers, valid for --advertise-host: they then serve TLS only (with --tls-key)').env('SHARDEX_TLS_CERT_FILE'))
    .addOption(new Option('--tls-key <file>', 'PEM private key of --tls-cert').env('SHARDEX_TLS_KEY_FILE'))
    .addOption(new Option('--tls-ca <file>', 'PEM CA: gRPC between nodes and readers is then mutual TLS, every peer verified against it').env('SHARDEX_TLS_CA_FILE'))
    .addOption(new Option('--zk-digest-file <file>', 'file of one line user:password: ZooKeeper digest auth, and every znode created writable by that user only').env('SHARDEX_ZK_DIGEST_FILE'))
    .option('--insecure', 'serve without --api-keys / --cluster-secret-file on a --host other machines can reach (refused otherwise)');
}

httpFlags(readBalanceFlags(clusterProcess('node', 'start one node of a cluster coordinated by ZooKeeper', 'node', { port: 8983, data: './data' })))
  .option('--log-retention <n>', 'update-log entries kept per shard for peer sync', intArg('--log-retention', 100, 100_000_000), 100_000)
  .option(WRITE_BUFFER_FLAG, WRITE_BUFFER_HELP, writeBufferArg)
  .action(async (o: RunNodeOptions) => {
    await runNode(o);
  });

clusterProcess('reader', 'start a snapshot reader: serves eventual reads from commit-point snapshots', 'reader', { port: 8990, data: './data/reader' })
  .option('--group <name>', 'reader group', 'default')
  .option('--snapshot-expiry <ms>', 'refresh a cached shard once its snapshot is this old', intArg('--snapshot-expiry', 0, 86_400_000), 60_000)
  .option('--disk-budget <bytes>', 'evict least recently used shards past this size', intArg('--disk-budget', 1, Number.MAX_SAFE_INTEGER))
  .option('--max-scans <n>', 'concurrent scans', intArg('--max-scans', 1, 1024), 8)
  .action(async (o: RunReaderOptions) => {
    await runReader(o);
  });

registerClientCommands(program);

async function main(): Promise<void> {
  try {
    await program.parseAsync(process.argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      process.exitCode = err.exitCode === 0 ? 0 : 2;
      return;
    }
    process.stderr.write(`shardex: ${err instanceof ShardexError ? err.message : (err as Error).stack ?? String(err)}\n`);
    // A bad combination of flags is a usage error, like an unknown flag.
    process.exitCode = err instanceof ShardexError && err.code === 'SHX_BAD_CONFIG' ? 2 : 1;
  }
}

void main();
