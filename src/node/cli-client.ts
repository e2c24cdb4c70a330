// Client subcommands of `shardex`: import, export, get, search, delete, commit, cluster, rebalance-leaders,
// read-balance set|get|erase, read-slots. Each
// talks to a running cluster through the smart client, connecting with --url (any node) or
// --zk (ZooKeeper). Results go to stdout, progress and problems to stderr.
// Exit codes (set here, or by cli.ts for thrown errors and usage): 0 ok, 1 failures, 2 usage.
import { once } from 'node:events';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { InvalidArgumentError, Option, type Command } from 'commander';
import sjson from 'secure-json-parse';
import { ShardexClient, type ClusterSnapshot, type LeaderRebalance, type NodeReadSlots, type ReadOptions, type WriteBatch } from '../client/index.js';
import { isShardexError } from '../errors.js';
import { loadClientTls } from '../transport/index.js';

const DEFAULT_URL = 'http://127.0.0.1:8983';
/** Bad lines reported one by one; past this many only the count grows. */
const MAX_REPORTED_LINES = 1000;

interface ConnectOptions {
  url: string;
  zk?: string;
  timeout?: number;
  apiKey?: string;
  ca?: string;
  cert?: string;
  key?: string;
}

const CLIENT_TLS_FLAGS = { ca: '--ca', cert: '--cert', key: '--key' } as const;

const out = (text: string): boolean => process.stdout.write(text + '\n');
const err = (text: string): boolean => process.stderr.write(text + '\n');

function intArg(name: string, min: number) {
  return (v: string): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new InvalidArgumentError(`${name} must be an integer >= ${min}`);
    return n;
  };
}

function trackTotalHitsArg(v: string): boolean | number {
  if (v === 'true' || v === 'false') return v === 'true';
  const n = Number(v);
  if (v.trim() === '' || !Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError('must be true, false or an integer >= 0');
  return n;
}

function consistencyArg(v: string): 'immediate' | 'eventual' {
  if (v !== 'immediate' && v !== 'eventual') throw new InvalidArgumentError('must be "immediate" or "eventual"');
  return v;
}

/** Adds --url / --zk / --timeout / --api-key and the TLS files to a subcommand. */
function connected(cmd: Command): Command {
  return cmd
    .option('--url <url>', 'a node of the cluster (comma-separated for several)', DEFAULT_URL)
    .option('--zk <connect>', 'ZooKeeper connect string host:port[,host:port]/chroot (instead of --url)')
    .option('--timeout <ms>', 'timeout of one HTTP request', intArg('--timeout', 1))
    .addOption(new Option('--api-key <key>', 'API key for nodes that run with --api-keys (better: the environment variable, which ps does not show)').env('SHARDEX_API_KEY'))
    .addOption(new Option('--ca <file>', 'PEM CA to trust for https:// nodes and gRPC to readers (nodes with --tls-cert from a private CA)').env('SHARDEX_CA_FILE'))
    .addOption(new Option('--cert <file>', 'PEM certificate to present to readers whose gRPC is mutual TLS (--tls-ca), for eventual reads (with --key)').env('SHARDEX_CERT_FILE'))
    .addOption(new Option('--key <file>', 'PEM private key of --cert').env('SHARDEX_KEY_FILE'));
}

async function makeClient(cmd: Command, o: ConnectOptions): Promise<ShardexClient> {
  if (o.zk !== undefined && cmd.getOptionValueSource('url') === 'cli') {
    cmd.error('error: give either --url or --zk, not both', { exitCode: 2, code: 'shardex.usage' });
  }
  if (o.apiKey === '') cmd.error('error: --api-key (or SHARDEX_API_KEY) is empty; give the key, or leave it unset for nodes without --api-keys', { exitCode: 2, code: 'shardex.usage' });
  const tls = await loadClientTls({ ...(o.ca !== undefined && { ca: o.ca }), ...(o.cert !== undefined && { cert: o.cert }), ...(o.key !== undefined && { key: o.key }) }, CLIENT_TLS_FLAGS);
  const common = { refreshIntervalMs: 0, ...(o.timeout !== undefined && { requestTimeoutMs: o.timeout }), ...(o.apiKey !== undefined && { apiKey: o.apiKey }), ...(tls && { tls }) };
  return o.zk !== undefined ? new ShardexClient({ zk: o.zk, ...common }) : new ShardexClient({ urls: o.url, ...common });
}

/** Runs `fn` with a client and closes the client afterwards, whatever happens. */
async function withClient(cmd: Command, o: ConnectOptions, fn: (client: ShardexClient) => Promise<void>): Promise<void> {
  const client = await makeClient(cmd, o);
  try {
    await fn(client);
  } finally {
    await client.close();
  }
}

function readOptions(o: { consistency?: 'immediate' | 'eventual'; scanType?: string; minVersion?: string; priority?: string }): ReadOptions {
  return {
    ...(o.consistency && { consistency: o.consistency }),
    ...(o.scanType !== undefined && { scanType: o.scanType }),
    ...(o.minVersion !== undefined && { minVersion: o.minVersion }),
    ...(o.priority !== undefined && { priority: o.priority }),
  };
}

function readable(cmd: Command): Command {
  return cmd
    .option('--consistency <level>', 'immediate (shard leader) or eventual (snapshot reader)', consistencyArg)
    .option('--scan-type <type>', 'scan type, picking a reader selector profile')
    .option('--min-version <v>', 'an eventual read needs a snapshot at least this new: a version, or shard1:v1,shard2:v2')
    .option('--priority <p>', 'read-balancer priority');
}

// ---- import -------------------------------------------------------------------------------

const num = (n: number): string => Math.round(n).toLocaleString('en-US');

function duration(ms: number): string {
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** Line numbers as "3, 7, 12" (at most 10, then "and N more"). */
function lineList(lines: readonly number[]): string {
  const shown = lines.slice(0, 10).join(', ');
  return lines.length > 10 ? `${shown} and ${lines.length - 10} more` : shown;
}

interface ImportOptions extends ConnectOptions {
  batchSize: number;
  concurrency: number;
  minRf?: number;
  progressInterval: number;
  flushInterval: number;
}

async function importFile(client: ShardexClient, collection: string, file: string, o: ImportOptions): Promise<void> {
  const input: Readable = file === '-' ? process.stdin : createReadStream(file);
  const totalBytes = file === '-' ? undefined : (await stat(file)).size;
  // Partial batches go out after flushInterval, so that a slow stream (stdin) is written as it comes.
  const job = client.writeBatcher({
    collection,
    batchSize: o.batchSize,
    concurrency: o.concurrency,
    flushIntervalMs: o.flushInterval,
    ...(o.minRf !== undefined && { minRf: o.minRf }),
  });
  const lineOf = new WeakMap<object, number>();
  let badLines = 0;
  let failedDocs = 0;
  let bytesRead = 0;
  let lineNo = 0;
  const started = Date.now();
  const problem = (text: string): void => {
    if (badLines + failedDocs <= MAX_REPORTED_LINES) err(text);
  };
  job.onBatchFailure((e: { batch: WriteBatch; error: unknown; retrying?: boolean }) => {
    // Every failed attempt is reported; only the last one of a batch means its documents failed.
    if (e.retrying) return;
    failedDocs += e.batch.docs.length;
    const lines = e.batch.docs.map((d) => lineOf.get(d)).filter((n): n is number => n !== undefined);
    problem(`lines ${lineList(lines)}: not written: ${(e.error as Error)?.message ?? String(e.error)}`);
  });

  const progressLine = (final: boolean): string => {
    const p = job.progress;
    const elapsed = Date.now() - started;
    const rate = elapsed > 0 ? (p.written * 1000) / elapsed : 0;
    const parts = [`${final ? 'done: ' : ''}${num(p.written)} docs written`, `${num(rate)} docs/s`];
    if (totalBytes !== undefined && totalBytes > 0 && bytesRead > 0 && !final) {
      // Lines in the file, estimated from those read so far; done = written, bad or failed.
      const lines = Math.max(lineNo, (lineNo * totalBytes) / bytesRead);
      const fraction = Math.min(1, (p.written + badLines + failedDocs) / lines);
      parts.push(`${Math.floor(fraction * 100)}%`);
      if (fraction > 0 && elapsed > 0) parts.push(`ETA ${duration((elapsed * (1 - fraction)) / fraction)}`);
    }
    parts.push(`${num(badLines)} bad line(s)`, `${num(failedDocs)} failed`);
    if (final) parts.push(`in ${duration(elapsed)}`);
    return parts.join(' | ');
  };
  const tty = process.stderr.isTTY === true;
  const ticker = setInterval(() => {
    if (tty) process.stderr.write(`\r${progressLine(false)}\x1b[K`);
    else err(progressLine(false));
  }, o.progressInterval);

  let stopped: unknown;
  try {
    const lines = createInterface({ input, crlfDelay: Infinity });
    for await (const line of lines) {
      lineNo++;
      bytesRead += Buffer.byteLength(line) + 1;
      if (line.trim().length === 0) continue;
      let doc: unknown;
      try {
        doc = sjson.parse(line, undefined, { protoAction: 'error', constructorAction: 'error' });
      } catch (e) {
        badLines++;
        problem(`line ${lineNo}: not valid JSON (${(e as Error).message})`);
        continue;
      }
      if (typeof doc === 'object' && doc !== null) lineOf.set(doc, lineNo);
      try {
        await job.add(doc);
      } catch (e) {
        if (!(isShardexError(e) && e.code === 'SHX_BAD_DOCUMENT')) {
          stopped = e;
          break;
        }
        badLines++;
        problem(`line ${lineNo}: ${e.message}`);
      }
    }
    input.destroy();
    await job.awaitCompletion().catch((e: unknown) => {
      stopped ??= e;
    });
  } finally {
    clearInterval(ticker);
    if (tty) process.stderr.write('\r\x1b[K');
  }
  if (badLines + failedDocs > MAX_REPORTED_LINES) err(`... ${num(badLines + failedDocs - MAX_REPORTED_LINES)} more problem(s) not listed`);
  err(progressLine(true));
  if (stopped !== undefined) {
    const p = job.report();
    err(`import stopped: ${(stopped as Error)?.message ?? String(stopped)}`);
    err(`${num(p.written)} written, ${num(p.failed)} failed, ${num(p.notSent)} not sent; the file was read up to line ${lineNo}`);
  }
  if (stopped !== undefined || badLines > 0 || failedDocs > 0) process.exitCode = 1;
}

// ---- export -------------------------------------------------------------------------------

async function exportCollection(client: ShardexClient, collection: string, o: { query: string; fields?: string; batchSize: number; priority?: string }): Promise<void> {
  const job = client.queryBatcher(collection, o.query, {
    batchSize: o.batchSize,
    ...(o.fields && { fields: o.fields.split(',').map((f) => f.trim()).filter(Boolean) }),
    ...(o.priority !== undefined && { priority: o.priority }),
  });
  let broken = false;
  process.stdout.on('error', () => {
    // The reader went away (e.g. `| head`): stop quietly.
    broken = true;
    job.stop();
  });
  job.onBatch(async (b) => {
    if (broken) return;
    const chunk = b.docs.map((d) => JSON.stringify(d)).join('\n') + '\n';
    if (!process.stdout.write(chunk)) await once(process.stdout, 'drain');
  });
  const report = await job.awaitCompletion();
  if (broken) return;
  for (const f of report.shardsFailed) err(`${f.shard}: export ended after id ${JSON.stringify(f.after ?? null)}: ${(f.error as Error)?.message ?? String(f.error)}`);
  err(`exported ${num(report.ids)} document(s) from ${report.shardsDone.length} shard(s)`);
  if (report.shardsFailed.length > 0 || report.listenerFailures > 0) process.exitCode = 1;
}

// ---- cluster ------------------------------------------------------------------------------

/** The cluster as a person reads it: nodes, readers, and per collection its shards. */
export function clusterSummary(s: ClusterSnapshot, source: string): string[] {
  const lines: string[] = [];
  const data = s.nodes.filter((n) => n.role === 'data');
  const readers = s.nodes.filter((n) => n.role === 'reader');
  lines.push(`cluster at ${source}: ${data.length} live data node(s), ${readers.length} reader(s)`);
  const width = Math.max(4, ...s.nodes.map((n) => n.name.length));
  for (const n of data) lines.push(`  ${n.name.padEnd(width)}  ${n.http}`);
  if (readers.length === 0) lines.push('readers: none');
  else {
    const groups = new Map<string, string[]>();
    for (const r of readers) {
      const g = r.group ?? 'default';
      groups.set(g, [...(groups.get(g) ?? []), `${r.name} (${r.http})`]);
    }
    lines.push('readers:');
    for (const [g, members] of groups) lines.push(`  group ${g}: ${members.join(', ')}`);
  }
  if (s.collections.size === 0) lines.push('collections: none');
  for (const c of s.collections.values()) {
    lines.push(`collection ${c.name}: router ${c.router}, ${c.numShards} shard(s) x ${c.replicationFactor} replica(s)`);
    const rw = Math.max(...c.shards.map((sh) => sh.range.length));
    const sw = Math.max(...c.shards.map((sh) => sh.name.length));
    for (const sh of c.shards) {
      const replicas = sh.replicas.map((r) => `${r.node} (${r.state})`).join(', ');
      lines.push(`  ${sh.name.padEnd(sw)}  ${sh.range.padEnd(rw)}  leader ${(sh.leader ?? 'NONE').padEnd(width)}  replicas ${replicas || 'none'}`);
    }
  }
  return lines;
}

/** A leader rebalance's outcome, one shard a line, then the count per node and whether it settled. */
export function rebalanceLines(r: LeaderRebalance): string[] {
  const sw = Math.max(5, ...r.shards.map((s) => s.shard.length));
  const lines = r.shards.map((s) => `${s.shard.padEnd(sw)}  leader ${s.leader ?? 'NONE'}  target ${s.target ?? 'none fit'}  preferred ${s.preferredLeader ?? 'none'}`);
  const per = Object.entries(r.leadersPerNode).map(([n, k]) => `${n} ${k}`).join(', ');
  lines.push(`leaders per node: ${per || 'none'} (at most ${r.bound} each when balanced)`);
  lines.push(r.settled ? `${r.collection}: balanced, ${r.message}` : `${r.collection}: not settled: ${r.message}`);
  return lines;
}

// ---- read balancing -----------------------------------------------------------------------

/** Slot counters as a person reads them: one line per node, priority and target. */
export function readSlotLines(nodes: readonly NodeReadSlots[]): string[] {
  const lines: string[] = [];
  const rows = nodes.flatMap((n) => n.slots.map((r) => ({ node: n.node, ...r })));
  const w = (pick: (r: (typeof rows)[number]) => string, min: number): number => Math.max(min, ...rows.map((r) => pick(r).length));
  const [nw, pw, tw] = [w((r) => r.node, 4), w((r) => r.priority, 8), w((r) => r.target, 6)];
  for (const n of nodes) {
    if (n.error !== undefined) continue;
    if (n.slots.length === 0) lines.push(`${n.node.padEnd(nw)}  no read-balance settings`);
    for (const r of n.slots) {
      lines.push(
        `${n.node.padEnd(nw)}  ${r.priority.padEnd(pw)}  ${r.target.padEnd(tw)}  weight ${r.weight}  ${r.up ? 'up  ' : 'down'}  limit ${r.limit}  taken ${r.taken}  free ${r.free}  queued ${r.queued}`,
      );
    }
  }
  return lines;
}

function registerReadBalanceCommands(program: Command): void {
  const balance = program.command('read-balance').description('read-balance settings: (priority, target, weight, slots), stored in coordination, applied live by every node');
  connected(
    balance
      .command('set')
      .description('add or update the setting of a priority on a target (a reader group, or "primary" for the shard leaders)')
      .argument('<priority>', 'read priority, e.g. interactive')
      .argument('<target>', 'reader group name, or primary')
      .requiredOption('--weight <n>', 'higher is preferred among the targets of the priority', intArg('--weight', 0))
      .requiredOption('--slots <n>', 'concurrent reads of the priority on the target, per node', intArg('--slots', 0)),
  ).action(async function (this: Command, priority: string, target: string, o: ConnectOptions & { weight: number; slots: number }) {
    await withClient(this, o, async (client) => {
      out(JSON.stringify({ setting: await client.readBalance.set(priority, target, { weight: o.weight, slots: o.slots }) }));
    });
  });
  connected(
    balance
      .command('get')
      .description('print the settings (all, or of one priority and/or target) as JSON')
      .option('--priority <p>', 'only this priority')
      .option('--target <t>', 'only this target'),
  ).action(async function (this: Command, o: ConnectOptions & { priority?: string; target?: string }) {
    await withClient(this, o, async (client) => {
      const filter = { ...(o.priority !== undefined && { priority: o.priority }), ...(o.target !== undefined && { target: o.target }) };
      out(JSON.stringify({ settings: await client.readBalance.get(filter) }));
    });
  });
  connected(
    balance
      .command('erase')
      .description('remove the setting of a priority on a target, or every setting of the priority (exit 1 when none matched)')
      .argument('<priority>', 'read priority')
      .argument('[target]', 'target; all of the priority when absent'),
  ).action(async function (this: Command, priority: string, target: string | undefined, o: ConnectOptions) {
    await withClient(this, o, async (client) => {
      out(JSON.stringify({ removed: await client.readBalance.erase(priority, target) }));
    });
  });

  connected(
    program
      .command('read-slots')
      .description("print each data node's read slots: limit, taken, free and queued per priority and target")
      .option('--reset', 'zero the counters first (running reads keep running)')
      .option('--node <name>', 'only this data node')
      .option('--json', 'print JSON instead of lines'),
  ).action(async function (this: Command, o: ConnectOptions & { reset?: boolean; node?: string; json?: boolean }) {
    await withClient(this, o, async (client) => {
      const opts = o.node !== undefined ? { node: o.node } : {};
      const nodes = o.reset ? await client.readBalance.reset(opts) : await client.readSlots(opts);
      if (o.json) out(JSON.stringify({ nodes }));
      else for (const line of readSlotLines(nodes)) out(line);
      for (const n of nodes) if (n.error !== undefined) err(`${n.node}: ${n.error}`);
      if (nodes.some((n) => n.error !== undefined)) process.exitCode = 1;
    });
  });
}

// ---- registration -------------------------------------------------------------------------

export function registerClientCommands(program: Command): void {
  connected(
    program
      .command('import')
      .description('load an NDJSON file (or - for stdin) into a collection, showing progress on stderr')
      .argument('<collection>', 'collection name')
      .argument('<file>', 'NDJSON file, one document per line; - reads stdin')
      .option('--batch-size <n>', 'documents per batch', intArg('--batch-size', 1), 500)
      .option('--concurrency <n>', 'batches in flight', intArg('--concurrency', 1), 4)
      .option('--min-rf <n>', 'minimum replication factor to ask for', intArg('--min-rf', 1))
      .option('--progress-interval <ms>', 'how often to print progress', intArg('--progress-interval', 10), 1000)
      .option('--flush-interval <ms>', 'send a partial batch after this long', intArg('--flush-interval', 10), 1000),
  ).action(async function (this: Command, collection: string, file: string, o: ImportOptions) {
    await withClient(this, o, (client) => importFile(client, collection, file, o));
  });

  connected(
    program
      .command('export')
      .description('write every matching document of a collection as NDJSON to stdout')
      .argument('<collection>', 'collection name')
      .option('--query <q>', 'query selecting the documents', '*')
      .option('--fields <list>', 'comma-separated fields to return')
      .option('--batch-size <n>', 'documents per page and shard', intArg('--batch-size', 1), 1000)
      .option('--priority <p>', 'read-balancer priority of every page'),
  ).action(async function (this: Command, collection: string, o: ConnectOptions & { query: string; fields?: string; batchSize: number; priority?: string }) {
    await withClient(this, o, (client) => exportCollection(client, collection, o));
  });

  connected(
    readable(
      program
        .command('get')
        .description('print one document by id (exit 1 when it does not exist)')
        .argument('<collection>', 'collection name')
        .argument('<id>', 'document id'),
    ),
  ).action(async function (this: Command, collection: string, id: string, o: ConnectOptions & Parameters<typeof readOptions>[0]) {
    await withClient(this, o, async (client) => {
      const doc = await client.get(collection, id, readOptions(o));
      if (doc === undefined) {
        err(`document ${JSON.stringify(id)} not found in ${collection}`);
        process.exitCode = 1;
      } else out(JSON.stringify(doc));
    });
  });

  connected(
    readable(
      program
        .command('search')
        .description('search a collection and print the result as JSON')
        .argument('<collection>', 'collection name')
        .argument('<query>', 'query, e.g. title:dune')
        .option('--filter <f>', 'filter query')
        .option('--sort <s>', 'sort, e.g. "price desc"')
        .option('--offset <n>', 'hits to skip', intArg('--offset', 0))
        .option('--limit <n>', 'hits to return', intArg('--limit', 0))
        .option('--fields <list>', 'comma-separated fields to return')
        .option('--track-total-hits <n>', 'count the total exactly (true, the default), at least up to n, or not (false)', trackTotalHitsArg),
    ),
  ).action(async function (
    this: Command,
    collection: string,
    query: string,
    o: ConnectOptions & Parameters<typeof readOptions>[0] & { filter?: string; sort?: string; offset?: number; limit?: number; fields?: string; trackTotalHits?: boolean | number },
  ) {
    await withClient(this, o, async (client) => {
      const res = await client.search(collection, query, {
        ...readOptions(o),
        ...(o.filter !== undefined && { filter: o.filter }),
        ...(o.sort !== undefined && { sort: o.sort }),
        ...(o.offset !== undefined && { offset: o.offset }),
        ...(o.limit !== undefined && { limit: o.limit }),
        ...(o.fields !== undefined && { fields: o.fields.split(',') }),
        ...(o.trackTotalHits !== undefined && { trackTotalHits: o.trackTotalHits }),
      });
      out(JSON.stringify(res));
    });
  });

  connected(
    program
      .command('delete')
      .description('delete documents by id')
      .argument('<collection>', 'collection name')
      .argument('<ids...>', 'document ids')
      .option('--min-rf <n>', 'minimum replication factor to ask for', intArg('--min-rf', 1)),
  ).action(async function (this: Command, collection: string, ids: string[], o: ConnectOptions & { minRf?: number }) {
    await withClient(this, o, async (client) => {
      out(JSON.stringify(await client.delete(collection, ids, o.minRf !== undefined ? { minRf: o.minRf } : {})));
    });
  });

  connected(program.command('commit').description('record a commit point on every shard').argument('<collection>', 'collection name')).action(async function (
    this: Command,
    collection: string,
    o: ConnectOptions,
  ) {
    await withClient(this, o, async (client) => {
      out(JSON.stringify({ commit: await client.commit(collection) }));
    });
  });

  connected(
    program
      .command('rebalance-leaders')
      .description("spread the collection's leaders over its nodes (Solr's REBALANCELEADERS) and wait for the handovers")
      .argument('<collection>', 'collection name')
      .option('--wait <ms>', 'how long to wait for the handovers', intArg('--wait', 0), 30_000),
  ).action(async function (this: Command, collection: string, o: ConnectOptions & { wait: number }) {
    await withClient(this, o, async (client) => {
      const r = await client.rebalanceLeaders(collection, { waitMs: o.wait, ...(o.timeout === undefined && { timeoutMs: o.wait + 10_000 }) });
      for (const line of rebalanceLines(r)) out(line);
      if (!r.settled) process.exitCode = 1;
    });
  });

  connected(program.command('cluster').description('print the nodes, readers, shards, ranges, leaders and replica states')).action(async function (
    this: Command,
    o: ConnectOptions,
  ) {
    await withClient(this, o, async (client) => {
      const s = await client.connect();
      for (const line of clusterSummary(s, o.zk !== undefined ? `zk ${o.zk}` : o.url)) out(line);
    });
  });

  registerReadBalanceCommands(program);
}
