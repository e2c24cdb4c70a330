// One config schema for the processes `shardex node`, `shardex reader` and `shardex dev`: every
// option is a key of one zod object, a flag (`--` and the key in kebab-case), an environment
// variable (SHARDEX_ and the key in SNAKE_CASE, unless named otherwise) and a key of an optional
// config file (`--config FILE`, JSON or YAML). A value is taken from the first of: flag, env,
// config file, default, as Elasticsearch and most twelve-factor tools order them. Everything is
// checked at start, before anything listens, and a problem names where the value came from.
import { readFile } from 'node:fs/promises';
import { extname } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { ShardexError } from '../errors.js';
import { DEFAULT_MERGE_POLICY, parseSchema } from '../index/index.js';
import { PriorityName, TargetName } from '../read/balance-settings.js';
import { parseDuration } from '../read/duration.js';
import { DEFAULT_MAX_IN_FLIGHT } from '../distrib/distributor.js';
import { DEFAULT_CHECKPOINT_POLICY } from '../distrib/index-persistence.js';
import { DEFAULT_RETRY_PAUSE_MAX_MS, DEFAULT_RETRY_PAUSE_MS, nodeRetryBackoff } from '../distrib/retry.js';
import { DEFAULT_FORWARD_RETRIES, DEFAULT_REPLICA_RETRIES } from '../distrib/update-processor.js';
import { DEFAULT_READ_TIMEOUT_MS } from '../read/read-deadline.js';
import { DEFAULT_DRAIN_TIMEOUT_MS, type SnapshotReaderOptions } from '../read/snapshot-reader.js';
import { DEFAULT_CALL_TIMEOUT_MS } from '../transport/grpc.js';
import { DEFAULT_DELETE_RETENTION_MS, DEFAULT_LOG_RETENTION } from '../ulog/replica-store.js';
import { DEFAULT_DOC_CACHE_SIZE } from '../ulog/doc-cache.js';
import { LIMITS } from './http/limits.js';
import type { ShardexNodeOptions } from './shardex-node.js';

/** One option: its value's schema, what it must be (for messages), its default and help. */
interface Spec<T = unknown> {
  readonly schema: z.ZodType<T>;
  /** Completes "must be ...": `an integer from 0 to 65535`. */
  readonly expect: string;
  /** A flag's or variable's text as the value, when it reads as one; else the text, for the schema to refuse. */
  readonly fromText?: (text: string) => unknown;
  readonly help: string;
  /** `<ms>` after the flag; absent: a switch (`--insecure`). */
  readonly arg?: string;
  readonly default?: T;
  /** Overrides SHARDEX_<KEY>: the names the processes took before this schema. */
  readonly env?: string;
  /** Only a flag: never taken from the environment or a config file (`--reset`). */
  readonly flagOnly?: boolean;
  readonly required?: boolean;
}

const int = <const E extends Partial<Spec<number>> = {}>(min: number, max: number, help: string, arg: string, extra?: E): Spec<number> & E => ({
  schema: z.number().int().min(min).max(max),
  expect: `an integer from ${min} to ${max}`,
  fromText: (t) => (/^[+-]?\d+$/.test(t.trim()) ? Number(t) : t),
  help,
  arg,
  ...extra,
}) as Spec<number> & E;
const text = <const E extends Partial<Spec<string>> = {}>(help: string, arg: string, extra?: E): Spec<string> & E => ({ schema: z.string(), expect: 'a string', help, arg, ...extra }) as Spec<string> & E;
/** A file path; an empty one is passed on, for its reader to say so (`SHARDEX_API_KEYS_FILE=` from compose). */
const file = (help: string, env: string): Spec<string> => ({ schema: z.string(), expect: 'the path of a file', help, arg: '<file>', env });
const flag = <const E extends Partial<Spec<boolean>> = {}>(help: string, extra?: E): Spec<boolean> & E => ({ schema: z.boolean(), expect: 'true or false', fromText: boolFromText, help, ...extra }) as Spec<boolean> & E;
function boolFromText(t: string): unknown {
  const b = t.trim().toLowerCase();
  return ['true', '1', 'yes'].includes(b) ? true : ['false', '0', 'no'].includes(b) ? false : t;
}
/** `title:text,price:number` as a mapping. */
function fieldsFromText(t: string): unknown {
  const pairs = t.split(',').map((p) => p.trim().split(':'));
  return pairs.every((p) => p.length === 2 && p[0] !== '' && p[1] !== '') ? Object.fromEntries(pairs) : t;
}

/** A collection's autoCommit as `shardex dev` takes it, a duration such as `15s` or `off`, in ms (0: off). */
export const autoCommitMs = (v: string): number => (v === 'off' ? 0 : parseDuration(v, 'autoCommit'));

const AUTO_COMMIT = z.string().refine((v) => {
  try {
    autoCommitMs(v);
    return true;
  } catch {
    return false;
  }
});

/** Field name -> type, checked as a collection's `fields` are. */
const FIELDS = z.record(z.string(), z.string()).superRefine((v, ctx) => {
  try {
    parseSchema(v);
  } catch (err) {
    // Its own words: which field, which type.
    ctx.addIssue({ code: 'custom', message: (err as Error).message, params: { explains: true } });
  }
});

const LIMIT_SPECS = Object.fromEntries(Object.entries(LIMITS).map(([k, l]) => [k, int(l.min, l.max, `limit: ${l.unit}`, '<n>', { default: l.default })])) as { [K in keyof typeof LIMITS]: Spec<number> };

/** Every option of every process. A key is the flag in camelCase (commander's name for it). */
export const OPTIONS = {
  config: { ...text('JSON or YAML file of options (keys: the flags in camelCase); flags and env variables override it', '<file>'), env: 'SHARDEX_CONFIG' },
  zk: { ...text('ZooKeeper connect string host:port[,host:port]/chroot', '<connect>', { required: true }), schema: z.string().min(1), expect: 'a ZooKeeper connect string host:port[,host:port]/chroot' },
  port: int(0, 65535, 'HTTP port', '<port>', { default: 8983 }),
  grpcPort: int(0, 65535, 'gRPC port (default: HTTP port + 1000)', '<port>'),
  data: text('data directory', '<dir>', { default: './data' }),
  name: text('name in the cluster (default: host_port)', '<name>'),
  host: text('address to bind (0.0.0.0 = every interface)', '<host>', { default: '127.0.0.1' }),
  advertiseHost: text('address other nodes and clients reach this process at (default: --host)', '<host>'),
  zkTimeout: int(1000, 600_000, 'ZooKeeper session timeout, ms', '<ms>', { default: 15_000 }),
  clusterSecretFile: file('file with the secret every gRPC call between nodes and readers carries (the same file everywhere)', 'SHARDEX_CLUSTER_SECRET_FILE'),
  tlsCert: file('PEM certificate (chain) of the HTTP and gRPC servers, valid for --advertise-host: they then serve TLS only (with --tls-key)', 'SHARDEX_TLS_CERT_FILE'),
  tlsKey: file('PEM private key of --tls-cert', 'SHARDEX_TLS_KEY_FILE'),
  tlsCa: file('PEM CA: gRPC between nodes and readers is then mutual TLS, every peer verified against it', 'SHARDEX_TLS_CA_FILE'),
  zkDigestFile: file('file of one line user:password: ZooKeeper digest auth, and every znode created writable by that user only', 'SHARDEX_ZK_DIGEST_FILE'),
  insecure: flag('serve without --api-keys / --cluster-secret-file on a --host other machines can reach (refused otherwise)'),
  apiKeys: file('JSON file of API keys [{"name","sha256","roles"}]: every endpoint but /health then needs "Authorization: Bearer KEY"', 'SHARDEX_API_KEYS_FILE'),
  ...LIMIT_SPECS,
  readPriority: { ...text('read-balancer priority of reads that name none (default: none; such reads run unbalanced)', '<name>'), schema: PriorityName, expect: 'a name of 1 to 64 characters from A-Z a-z 0-9 _ . and -' },
  readQueueSize: int(0, 1_000_000, "reads that may wait in each priority's queue", '<n>', { default: 100 }),
  readTimeout: int(1, 600_000, 'deadline of a read that gives no timeoutMs, ms (its time in the read queue counts)', '<ms>', { default: DEFAULT_READ_TIMEOUT_MS }),
  // The command distributor and the update processor: Solr's maxRetriesOnForward (25) and
  // maxRetriesToFollowers (3), and its pause between retries, min(500 ms x attempt, 2 s).
  maxInFlight: int(1, 10_000, 'update requests in flight at once from this node to its peers (the distributor)', '<n>', { default: DEFAULT_MAX_IN_FLIGHT }),
  forwardRetries: int(0, 1000, "retries of an update forwarded to a shard's leader (Solr's maxRetriesOnForward)", '<n>', { default: DEFAULT_FORWARD_RETRIES }),
  replicaRetries: int(0, 1000, "retries of a leader's update to a replica before it marks the replica down (Solr's maxRetriesToFollowers)", '<n>', { default: DEFAULT_REPLICA_RETRIES }),
  retryPause: int(1, 600_000, 'pause after the first failed try, ms; it grows by as much per try (jittered)', '<ms>', { default: DEFAULT_RETRY_PAUSE_MS }),
  retryPauseMax: int(1, 600_000, 'longest pause between tries, ms', '<ms>', { default: DEFAULT_RETRY_PAUSE_MAX_MS }),
  callTimeout: int(100, 3_600_000, 'timeout of a gRPC call to a peer, ms', '<ms>', { default: DEFAULT_CALL_TIMEOUT_MS }),
  logRetention: int(100, 100_000_000, 'update-log entries kept per shard for peer sync', '<n>', { default: DEFAULT_LOG_RETENTION }),
  deleteRetention: int(0, 86_400_000, "how long a delete's tombstone is kept, ms (Elasticsearch's index.gc_deletes)", '<ms>', { default: DEFAULT_DELETE_RETENTION_MS }),
  writeBufferMb: int(1, 256, "LevelDB write buffer per replica in MiB (default LevelDB's 4; larger: less compaction per write, and up to twice that much memory per replica)", '<mib>'),
  mergeSegmentsPerTier: int(2, 1000, "segments of one size tier that start a merge of the smallest into one (Lucene's TieredMergePolicy segmentsPerTier; fewer: fewer segments to search, more merging per document)", '<n>', { default: DEFAULT_MERGE_POLICY.segmentsPerTier }),
  checkpointInterval: int(50, 3_600_000, "ms after a replica's last index checkpoint at which its changes since are written as a segment (as Solr's autoCommit maxTime): shorter, less journal to re-read after a crash, more segments to write and merge while indexing", '<ms>', { default: DEFAULT_CHECKPOINT_POLICY.maxAgeMs }),
  docCacheSize: int(0, 1_000_000, "parsed documents each replica keeps for pages of hits (Solr's documentCache), least recently used out; 0 turns it off", '<n>', { default: DEFAULT_DOC_CACHE_SIZE }),
  storeCompression: flag("LevelDB's block compression (Snappy) in the replicas' stores: about 0.6 times the disk, and about an eighth more CPU per document in the ingest benchmark (default off)"),
  group: { ...text('reader group', '<name>', { default: 'default' }), schema: TargetName, expect: 'a name of 1 to 64 characters from A-Z a-z 0-9 _ . and -' },
  snapshotExpiry: int(0, 86_400_000, 'refresh a cached shard once its snapshot is this old, ms', '<ms>', { default: 60_000 }),
  diskBudget: int(1, Number.MAX_SAFE_INTEGER, 'evict least recently used shards past this size, bytes', '<bytes>'),
  maxScans: int(1, 1024, 'concurrent scans', '<n>', { default: 8 }),
  drainTimeout: int(0, 3_600_000, 'on stop, how long started scans may finish, ms', '<ms>', { default: DEFAULT_DRAIN_TIMEOUT_MS }),
  copyDocuments: flag("copy a shard's documents and index them on the reader, not the leader's segment files of the commit point (slower; to compare, or to rule the segment copy out)"),
  nodes: int(1, 32, 'number of nodes', '<n>', { default: 3 }),
  reset: flag('wipe the data directory first: every collection and document in it is gone', { flagOnly: true }),
  shards: int(1, 256, 'shards of the "docs" collection, when it is created (at the first start)', '<n>', { default: 2 }),
  replicas: int(1, 32, 'replication factor of "docs", when it is created', '<n>', { default: 2 }),
  readers: int(0, 32, 'snapshot readers to start (default group)', '<n>', { default: 0 }),
  fields: { schema: FIELDS, fromText: fieldsFromText, expect: 'field:type pairs (title:text,price:number; in a config file, a mapping)', help: 'field types of "docs", when it is created (title:text,price:number)', arg: '<name:type,...>' },
  autoCommit: { schema: AUTO_COMMIT, expect: 'a duration such as 15s, 500ms or 2m, or off', help: 'autoCommit of "docs", when it is created (15s, 500ms, off)', arg: '<duration>', default: '15s' as string },
  // `any`: each option has its own value type.
} satisfies Record<string, Spec<any>>;

type Options = typeof OPTIONS;
export type OptionKey = keyof Options;
type ValueOf<S> = S extends Spec<infer T> ? T : never;
type Given<S> = S extends { default: unknown } ? true : S extends { required: true } ? true : false;

/** What a command's options resolve to: keys with a default (or required) always hold a value. */
export type Config<K extends OptionKey> = { readonly [P in K as Given<Options[P]> extends true ? P : never]: ValueOf<Options[P]> } & {
  readonly [P in K as Given<Options[P]> extends true ? never : P]?: ValueOf<Options[P]>;
};

const PROCESS_KEYS = ['zk', 'port', 'grpcPort', 'data', 'name', 'host', 'advertiseHost', 'zkTimeout', 'clusterSecretFile', 'tlsCert', 'tlsKey', 'tlsCa', 'zkDigestFile', 'insecure'] as const;
const LIMIT_KEYS = Object.keys(LIMITS) as Array<keyof typeof LIMITS>;
/** A node's tunables: `shardex node` and `shardex dev` take them alike. */
const NODE_TUNABLE_KEYS = ['apiKeys', ...LIMIT_KEYS, 'readPriority', 'readQueueSize', 'readTimeout', 'maxInFlight', 'forwardRetries', 'replicaRetries', 'retryPause', 'retryPauseMax', 'callTimeout', 'logRetention', 'deleteRetention', 'writeBufferMb', 'storeCompression', 'docCacheSize', 'mergeSegmentsPerTier', 'checkpointInterval'] as const;
/** A reader's tunables: `shardex reader` and `shardex dev` take them alike. */
const READER_TUNABLE_KEYS = ['snapshotExpiry', 'diskBudget', 'maxScans', 'drainTimeout', 'copyDocuments'] as const;

/** The options of each process command; the order is the order of `--help`. */
export const COMMAND_KEYS = {
  node: ['config', ...PROCESS_KEYS, ...NODE_TUNABLE_KEYS],
  reader: ['config', ...PROCESS_KEYS, 'group', 'apiKeys', ...READER_TUNABLE_KEYS],
  dev: ['config', 'nodes', 'port', 'data', 'reset', 'shards', 'replicas', 'fields', 'autoCommit', 'readers', ...NODE_TUNABLE_KEYS, ...READER_TUNABLE_KEYS],
} as const;
export type CommandName = keyof typeof COMMAND_KEYS;

/** Options that differ by command: a reader beside a node on one machine, a dev cluster's ports from a base, dev readers that refresh often. */
const COMMAND_SPECS: { readonly [C in CommandName]?: Partial<Record<OptionKey, Spec>> } = {
  reader: { port: { ...OPTIONS.port, default: 8990 }, data: { ...OPTIONS.data, default: './data/reader' } },
  dev: {
    port: int(0, 64_000, 'HTTP port of the first node (the others follow; gRPC at +1000, readers at +100; 0 = any free ports)', '<port>', { default: 8983 }),
    snapshotExpiry: { ...OPTIONS.snapshotExpiry, default: 5000 },
  },
};

export type NodeConfig = Config<(typeof COMMAND_KEYS.node)[number]>;
export type ReaderConfig = Config<(typeof COMMAND_KEYS.reader)[number]>;
export type DevConfig = Config<(typeof COMMAND_KEYS.dev)[number]>;
export type NodeTunables = Config<(typeof NODE_TUNABLE_KEYS)[number]>;
export type ReaderTunables = Config<(typeof READER_TUNABLE_KEYS)[number]>;
type ConfigOf<C extends CommandName> = C extends 'node' ? NodeConfig : C extends 'reader' ? ReaderConfig : DevConfig;

/** An option as `command` takes it (without one: as every command takes it). */
const spec = (key: OptionKey, command?: CommandName): Spec => (command && COMMAND_SPECS[command]?.[key]) ?? (OPTIONS[key] as Spec);
export const flagOf = (key: string): string => `--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
export const envOf = (key: OptionKey): string => spec(key).env ?? `SHARDEX_${key.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()}`;
export const defaultOf = (command: CommandName, key: OptionKey): unknown => spec(key, command).default;

function show(v: unknown): string {
  if (typeof v === 'string') return `'${v}'`;
  if (v === undefined) return 'nothing';
  return JSON.stringify(v) ?? String(v);
}

const fromText = (s: Spec, t: string): unknown => (s.fromText ? s.fromText(t) : t);

/** A config file's content: a mapping of keys to values (JSON, or YAML by its extension). */
export async function readConfigFile(path: string): Promise<Record<string, unknown>> {
  const ext = extname(path).toLowerCase();
  if (!['.json', '.yaml', '.yml'].includes(ext)) throw new ShardexError('SHX_BAD_CONFIG', `config file ${path}: its name must end in .json, .yaml or .yml (that says how to read it)`);
  let content: string;
  try {
    content = await readFile(path, 'utf8');
  } catch (err) {
    throw new ShardexError('SHX_BAD_CONFIG', `cannot read the config file ${path} (--config): ${(err as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = ext === '.json' ? JSON.parse(content) : parseYaml(content);
  } catch (err) {
    const what = ext === '.json' ? 'JSON' : 'YAML';
    throw new ShardexError('SHX_BAD_CONFIG', `config file ${path} is not valid ${what}: ${(err as Error).message.split('\n')[0]!.replace(/:$/, '')}`);
  }
  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new ShardexError('SHX_BAD_CONFIG', `config file ${path} must hold a mapping of option keys to values (e.g. \`port: 8983\`), got ${Array.isArray(parsed) ? 'a list' : show(parsed)}`);
  }
  return parsed as Record<string, unknown>;
}

/** Edit distance, for "did you mean": config keys are short. */
function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cur = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = cur;
    }
  }
  return row[b.length]!;
}

/** Names of a node's or reader's own options (ShardexNodeOptions) that users write for the keys. */
const ALIASES: Readonly<Record<string, string>> = { httpPort: 'port', dataDir: 'data', zkConnect: 'zk', connectString: 'zk', bodyLimit: 'maxBodyBytes', backoff: 'retryPause' };

function unknownKey(command: CommandName, path: string, key: string): string {
  const own = COMMAND_KEYS[command] as readonly string[];
  const keys = own.filter((k) => !spec(k as OptionKey).flagOnly && k !== 'config');
  // `http-port` and `HTTP_PORT` are the same key written as a flag or a variable; `callTimeoutMs` as the option it sets.
  const camel = key.toLowerCase().replace(/^-+/, '').replace(/[-_]+(.)/g, (_, c: string) => c.toUpperCase());
  const bare = key.replace(/(Ms|Bytes)$/, '');
  const near =
    [ALIASES[key], bare].find((k) => k !== undefined && keys.includes(k)) ??
    keys.find((k) => k.toLowerCase() === camel.toLowerCase()) ??
    keys.map((k) => [k, distance(k, key)] as const).sort((x, y) => x[1] - y[1]).find(([, d]) => d <= Math.max(2, Math.floor(key.length / 3)))?.[0];
  const why = own.includes(key) ? `is not taken from a config file (give ${flagOf(key)} as a flag)` : `is not an option of \`shardex ${command}\``;
  return `config file ${path}: key \`${key}\` ${why}${near !== undefined && near !== key ? ` (did you mean \`${near}\`?)` : ''}; the keys are the flags of \`shardex ${command} --help\` in camelCase`;
}

/** Where a value came from, as messages name it. */
type Source = { readonly kind: 'flag' | 'env' | 'file' | 'default'; readonly label: string };

export interface ConfigSources {
  /** What commander parsed: raw strings, `true` for switches; only the flags given. */
  readonly flags?: Readonly<Record<string, unknown>>;
  readonly env?: Readonly<Record<string, string | undefined>>;
}

/**
 * Resolves a command's options from its flags, environment and config file (`--config` or
 * SHARDEX_CONFIG), in that order of precedence, then its defaults; validates them all with one
 * schema. SHX_BAD_CONFIG lists every problem, each naming the flag, variable or file key.
 */
export async function resolveConfig<C extends CommandName>(command: C, sources: ConfigSources = {}): Promise<ConfigOf<C>> {
  const flags = sources.flags ?? {};
  const env = sources.env ?? {};
  const keys = COMMAND_KEYS[command] as readonly OptionKey[];
  const configPath = (flags.config as string | undefined) ?? env[envOf('config')];
  const fileValues = configPath === undefined || configPath === '' ? {} : await readConfigFile(configPath);
  const problems: string[] = [];
  for (const key of Object.keys(fileValues)) if (!keys.includes(key as OptionKey) || spec(key as OptionKey).flagOnly || key === 'config') problems.push(unknownKey(command, configPath!, key));

  const values: Record<string, unknown> = {};
  const from: Record<string, Source> = {};
  for (const key of keys) {
    const s = spec(key, command);
    if (flags[key] !== undefined) {
      values[key] = typeof flags[key] === 'string' ? fromText(s, flags[key]) : flags[key];
      from[key] = { kind: 'flag', label: flagOf(key) };
    } else if (!s.flagOnly && env[envOf(key)] !== undefined) {
      values[key] = fromText(s, env[envOf(key)]!);
      from[key] = { kind: 'env', label: envOf(key) };
    } else if (!s.flagOnly && key !== 'config' && key in fileValues) {
      values[key] = fileValues[key];
      from[key] = { kind: 'file', label: `config file ${configPath}: key \`${key}\`` };
    } else if (defaultOf(command, key) !== undefined) {
      values[key] = defaultOf(command, key);
      from[key] = { kind: 'default', label: `the default of ${flagOf(key)}` };
    } else if (s.required) {
      problems.push(`${flagOf(key)} is required: ${s.help} (or ${envOf(key)}, or key \`${key}\` in the --config file)`);
    }
  }

  problems.push(...problemsOf(command, keys, values, (key) => from[key]!.label));
  if (problems.length === 1) throw new ShardexError('SHX_BAD_CONFIG', problems[0]!);
  if (problems.length > 1) throw new ShardexError('SHX_BAD_CONFIG', `${problems.length} problems with the options of \`shardex ${command}\`:\n  ${problems.join('\n  ')}`);
  return values as ConfigOf<C>;
}

/** What the schema of `keys` finds wrong with `values`, each problem named by `labelOf` its key. */
function problemsOf(command: CommandName, keys: readonly OptionKey[], values: Readonly<Record<string, unknown>>, labelOf: (key: string) => string): string[] {
  const problems: string[] = [];
  const schema = z.strictObject(Object.fromEntries(keys.map((k) => [k, spec(k, command).schema.optional()])));
  const parsed = schema.safeParse(values);
  if (!parsed.success) {
    const seen = new Set<string>();
    for (const issue of parsed.error.issues) {
      if (issue.code === 'unrecognized_keys') {
        for (const key of issue.keys) problems.push(`${labelOf(key)} is not an option`);
        continue;
      }
      const key = String(issue.path[0]);
      if (seen.has(key)) continue;
      seen.add(key);
      const explains = issue.code === 'custom' && (issue.params as { explains?: boolean } | undefined)?.explains === true;
      // The house style of every flag check: "--shards must be an integer from 1 to 256, got 0".
      problems.push(explains ? `${labelOf(key)}: ${issue.message}` : `${labelOf(key)} must be ${spec(key as OptionKey, command).expect}, got ${show(values[key])}`);
    }
  }
  if (problems.length === 0 && typeof values.retryPause === 'number' && typeof values.retryPauseMax === 'number' && values.retryPauseMax < values.retryPause) {
    problems.push(`${labelOf('retryPauseMax')} (${values.retryPauseMax}) is below ${labelOf('retryPause')} (${values.retryPause}): the longest pause cannot be shorter than the first`);
  }
  return problems;
}

/**
 * Checks tunables given in code (the dev clusters' `node` and `reader` options, as tests give
 * them) with the same schema; SHX_BAD_CONFIG naming `what` and the key.
 */
export function checkTunables(what: string, keys: readonly OptionKey[], values: Readonly<Record<string, unknown>>): void {
  const problems = problemsOf('dev', keys, values, (key) => `${what} option \`${key}\``);
  if (problems.length > 0) throw new ShardexError('SHX_BAD_CONFIG', problems.join('; '));
}

/** The help line of an option: its default and its variable. */
export function helpOf(command: CommandName, key: OptionKey): string {
  const s = spec(key, command);
  const d = defaultOf(command, key);
  const notes = [...(d !== undefined && !s.flagOnly && d !== false ? [`default ${typeof d === 'string' ? d : JSON.stringify(d)}`] : []), ...(s.flagOnly ? [] : [`env ${envOf(key)}`])];
  return notes.length > 0 ? `${s.help} (${notes.join('; ')})` : s.help;
}

/** `--flag <arg>` of an option, as commander declares it. */
export function declarationOf(key: OptionKey): string {
  const s = spec(key);
  return s.arg === undefined ? flagOf(key) : `${flagOf(key)} ${s.arg}`;
}

/** A node's options from its tunables (plain data: the dev cluster hands them to its worker threads as they are). */
export function nodeOptionsOf(t: Partial<NodeTunables>): Partial<ShardexNodeOptions> {
  const readBalance = {
    ...(t.readPriority !== undefined && { defaultPriority: t.readPriority }),
    ...(t.readQueueSize !== undefined && { queueSize: t.readQueueSize }),
    ...(t.readTimeout !== undefined && { timeoutMs: t.readTimeout }),
  };
  return {
    readBalance,
    ...(t.maxInFlight !== undefined && { maxInFlight: t.maxInFlight }),
    ...(t.forwardRetries !== undefined && { forwardRetries: t.forwardRetries }),
    ...(t.replicaRetries !== undefined && { replicaRetries: t.replicaRetries }),
    ...(t.retryPause !== undefined && { backoff: nodeRetryBackoff(t.retryPause, t.retryPauseMax ?? Math.max(t.retryPause, OPTIONS.retryPauseMax.default)) }),
    ...(t.callTimeout !== undefined && { callTimeoutMs: t.callTimeout }),
    ...(t.logRetention !== undefined && { logRetention: t.logRetention }),
    ...(t.deleteRetention !== undefined && { deleteRetentionMs: t.deleteRetention }),
    ...(t.writeBufferMb !== undefined && { writeBufferMb: t.writeBufferMb }),
    ...(t.storeCompression !== undefined && { storeCompression: t.storeCompression }),
    ...(t.docCacheSize !== undefined && { docCacheSize: t.docCacheSize }),
    ...((t.mergeSegmentsPerTier !== undefined || t.checkpointInterval !== undefined) && {
      checkpointPolicy: {
        ...(t.mergeSegmentsPerTier !== undefined && { segmentsPerTier: t.mergeSegmentsPerTier }),
        ...(t.checkpointInterval !== undefined && { maxAgeMs: t.checkpointInterval }),
      },
    }),
  };
}

/** A reader's options from its tunables. */
export function readerOptionsOf(t: Partial<ReaderTunables>): Partial<SnapshotReaderOptions> {
  return {
    ...(t.snapshotExpiry !== undefined && { snapshotExpiryMs: t.snapshotExpiry }),
    ...(t.diskBudget !== undefined && { diskBudgetBytes: t.diskBudget }),
    ...(t.maxScans !== undefined && { maxScans: t.maxScans }),
    ...(t.drainTimeout !== undefined && { drainTimeoutMs: t.drainTimeout }),
    ...(t.copyDocuments !== undefined && { copyDocuments: t.copyDocuments }),
  };
}

/** Only the keys of `keys` (a command's config holds more than one process takes). */
export function pick<T extends object, K extends keyof T>(o: T, keys: readonly K[]): Pick<T, K> {
  return Object.fromEntries(keys.filter((k) => o[k] !== undefined).map((k) => [k, o[k]])) as Pick<T, K>;
}
export { NODE_TUNABLE_KEYS, READER_TUNABLE_KEYS };
