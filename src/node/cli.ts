// `shardex`: one CLI for running nodes, the local dev cluster, and routing look-ups.
// Exit codes: 0 ok, 1 failure, 2 usage.
import { resolve } from 'node:path';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { formatRange, parseRouterName, partitionRange, routeId } from '../hashrange/index.js';
import { ShardexError } from '../errors.js';
import { wipeDataDir } from './dev-data.js';
import { ThreadedDevCluster } from './dev-threads.js';
import { createLogger, flushLoggerSync } from '../logger.js';
import { registerClientCommands } from './cli-client.js';
import { COMMAND_KEYS, autoCommitMs, NODE_TUNABLE_KEYS, READER_TUNABLE_KEYS, declarationOf, helpOf, pick, resolveConfig, type CommandName } from './config.js';
import { httpSettings, runNode, runReader } from './run-node.js';

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

/** A process command's options, every one from the config schema (config.ts): flag, env variable, config-file key. */
function configOptions(cmd: Command, command: CommandName): Command {
  for (const key of COMMAND_KEYS[command]) cmd.addOption(new Option(declarationOf(key), helpOf(command, key)));
  return cmd;
}

/** The command's options resolved (flag > env > config file > default) and checked; SHX_BAD_CONFIG (exit 2) naming the flag or key. */
const configOf = <C extends CommandName>(command: C, flags: Record<string, unknown>) => resolveConfig(command, { flags, env: process.env });

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

configOptions(program.command('dev'), 'dev')
  .description('start a local cluster: several nodes on loopback with embedded coordination, kept in the data dir')
  .action(async (flags: Record<string, unknown>) => {
    const o = await configOf('dev', flags);
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
      node: pick(o, NODE_TUNABLE_KEYS),
      reader: pick(o, READER_TUNABLE_KEYS),
      http,
      collection: {
        name: 'docs',
        numShards: o.shards,
        replicationFactor: replicas,
        router: 'compositeId',
        autoCommitMs: autoCommitMs(o.autoCommit),
        ...(o.fields && { fields: o.fields }),
      },
    });
    const shutdown = async (): Promise<void> => {
      out('stopping ...');
      await cluster.stop();
      flushLoggerSync(logger);
      process.exit(0);
    };
    process.once('SIGINT', () => void shutdown());
    process.once('SIGTERM', () => void shutdown());
    try {
      await cluster.start();
    } catch (err) {
      await cluster.stop();
      flushLoggerSync(logger);
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
      out(`  ("docs" is kept as it was created; --shards, --replicas, --fields and --auto-commit apply when it is created)`);
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

configOptions(program.command('node'), 'node')
  .description('start one node of a cluster coordinated by ZooKeeper')
  .action(async (flags: Record<string, unknown>) => {
    await runNode(await configOf('node', flags));
  });

configOptions(program.command('reader'), 'reader')
  .description('start a snapshot reader: serves eventual reads from commit-point snapshots')
  .action(async (flags: Record<string, unknown>) => {
    await runReader(await configOf('reader', flags));
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
