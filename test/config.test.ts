// The one config schema of `shardex node`, `shardex reader` and `shardex dev` (src/node/config.ts):
// flags, environment variables and a JSON or YAML config file, in that order over the defaults,
// checked at start with messages that name the flag, the variable or the file's key.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMMAND_KEYS, OPTIONS, envOf, flagOf, nodeOptionsOf, readConfigFile, readerOptionsOf, resolveConfig, type CommandName, type ConfigSources } from '../src/node/config.js';
import { DevCluster, collectionRequest, devMember } from '../src/node/dev-cluster.js';
import { checkpointCheckMs } from '../src/node/shardex-node.js';
import { DEFAULT_CHECKPOINT_POLICY } from '../src/distrib/index-persistence.js';
import { ThreadedDevCluster } from '../src/node/dev-threads.js';
import { silentLogger } from '../src/logger.js';
import { LIMITS } from '../src/node/http/limits.js';
import { parseDuration } from '../src/read/duration.js';
import type { ShardexError } from '../src/errors.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'shardex-config-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

let files = 0;
/** Writes `content` to a new file named `*.ext` in the test's dir. */
async function configFile(ext: string, content: string): Promise<string> {
  const path = join(dir, `config${++files}.${ext}`);
  await writeFile(path, content);
  return path;
}

/** The SHX_BAD_CONFIG that resolving gives (fails the test when it resolves). */
async function refusal(command: CommandName, sources: ConfigSources): Promise<ShardexError> {
  const err = (await resolveConfig(command, sources).then(
    () => undefined,
    (e: unknown) => e,
  )) as ShardexError | undefined;
  expect(err, 'expected the options to be refused').toBeDefined();
  expect(err!.code).toBe('SHX_BAD_CONFIG');
  return err!;
}

const ZK = { zk: '127.0.0.1:2181/shardex' };

describe('defaults', () => {
  it('gives every option of a node its default when nothing is set', async () => {
    const c = await resolveConfig('node', { flags: ZK });
    expect(c).toMatchObject({ port: 8983, data: './data', host: '127.0.0.1', zkTimeout: 15_000, maxInFlight: 16, forwardRetries: 25, replicaRetries: 3, retryPause: 500, retryPauseMax: 2000, callTimeout: 30_000, logRetention: 100_000, deleteRetention: 60_000, readQueueSize: 100, readTimeout: 30_000 });
    for (const [k, l] of Object.entries(LIMITS)) expect(c[k as keyof typeof LIMITS]).toBe(l.default);
    expect(c.grpcPort).toBeUndefined();
    expect(c.insecure).toBeUndefined();
  });

  it('gives a reader its own port and data dir, and dev readers a short snapshot expiry', async () => {
    expect(await resolveConfig('reader', { flags: ZK })).toMatchObject({ port: 8990, data: './data/reader', group: 'default', snapshotExpiry: 60_000, maxScans: 8, drainTimeout: 30_000 });
    expect(await resolveConfig('dev', {})).toMatchObject({ nodes: 3, port: 8983, shards: 2, replicas: 2, readers: 0, autoCommit: '15s', snapshotExpiry: 5000, maxInFlight: 16 });
  });

  it('requires --zk of a node and a reader, naming every way to give it', async () => {
    for (const command of ['node', 'reader'] as const) {
      const err = await refusal(command, {});
      expect(err.message).toBe('--zk is required: ZooKeeper connect string host:port[,host:port]/chroot (or SHARDEX_ZK, or key `zk` in the --config file)');
    }
  });
});

describe('flags', () => {
  it('reads numbers and switches from their text', async () => {
    const c = await resolveConfig('node', { flags: { ...ZK, port: '9001', maxInFlight: '4', insecure: true } });
    expect(c).toMatchObject({ port: 9001, maxInFlight: 4, insecure: true });
  });

  it.each([
    ['port', 'abc', "--port must be an integer from 0 to 65535, got 'abc'"],
    ['port', '70000', '--port must be an integer from 0 to 65535, got 70000'],
    ['maxInFlight', '0', '--max-in-flight must be an integer from 1 to 10000, got 0'],
    ['forwardRetries', '2.5', "--forward-retries must be an integer from 0 to 1000, got '2.5'"],
    ['zkTimeout', '', "--zk-timeout must be an integer from 1000 to 600000, got ''"],
    ['readPriority', 'no spaces', "--read-priority must be a name of 1 to 64 characters from A-Z a-z 0-9 _ . and -, got 'no spaces'"],
    ['maxBodyBytes', '10', '--max-body-bytes must be an integer from 1024 to 524288000, got 10'],
  ])('refuses --%s %j, naming the flag', async (key, value, message) => {
    expect((await refusal('node', { flags: { ...ZK, [key]: value } })).message).toBe(message);
  });

  it("bounds dev's base port so that its gRPC ports (+1000) exist", async () => {
    expect((await refusal('dev', { flags: { port: '64500' } })).message).toBe('--port must be an integer from 0 to 64000, got 64500');
    expect((await resolveConfig('node', { flags: { ...ZK, port: '64500' } })).port).toBe(64500);
  });

  it('lists every problem at once', async () => {
    const err = await refusal('node', { flags: { port: 'x', callTimeout: '5' } });
    expect(err.message).toContain('3 problems with the options of `shardex node`');
    expect(err.message).toContain('--zk is required');
    expect(err.message).toContain("--port must be an integer from 0 to 65535, got 'x'");
    expect(err.message).toContain('--call-timeout must be an integer from 100 to 3600000, got 5');
  });

  it('refuses a longest retry pause below the first, naming both', async () => {
    const err = await refusal('node', { flags: { ...ZK, retryPause: '1000' }, env: { SHARDEX_RETRY_PAUSE_MAX: '200' } });
    expect(err.message).toBe('SHARDEX_RETRY_PAUSE_MAX (200) is below --retry-pause (1000): the longest pause cannot be shorter than the first');
  });
});

describe('environment variables', () => {
  it('names each SHARDEX_ and the key in SNAKE_CASE, keeping the file variables the processes had', () => {
    expect(envOf('maxInFlight')).toBe('SHARDEX_MAX_IN_FLIGHT');
    expect(envOf('port')).toBe('SHARDEX_PORT');
    expect(envOf('apiKeys')).toBe('SHARDEX_API_KEYS_FILE');
    expect(envOf('tlsCert')).toBe('SHARDEX_TLS_CERT_FILE');
    expect(envOf('clusterSecretFile')).toBe('SHARDEX_CLUSTER_SECRET_FILE');
  });

  it('reads values from the environment', async () => {
    const c = await resolveConfig('node', { env: { SHARDEX_ZK: 'zk1:2181', SHARDEX_REPLICA_RETRIES: '7', SHARDEX_API_KEYS_FILE: '/etc/keys.json', SHARDEX_INSECURE: 'true' } });
    expect(c).toMatchObject({ zk: 'zk1:2181', replicaRetries: 7, apiKeys: '/etc/keys.json', insecure: true });
  });

  it('refuses a bad value naming the variable', async () => {
    expect((await refusal('node', { flags: ZK, env: { SHARDEX_PORT: 'abc' } })).message).toBe("SHARDEX_PORT must be an integer from 0 to 65535, got 'abc'");
    expect((await refusal('node', { flags: ZK, env: { SHARDEX_INSECURE: 'maybe' } })).message).toBe("SHARDEX_INSECURE must be true or false, got 'maybe'");
  });

  it('passes an empty file variable on, for its reader to say it is empty (compose ${X:-})', async () => {
    expect((await resolveConfig('node', { flags: ZK, env: { SHARDEX_API_KEYS_FILE: '' } })).apiKeys).toBe('');
  });

  it('never takes --reset from the environment', async () => {
    expect((await resolveConfig('dev', { env: { SHARDEX_RESET: 'true' } })).reset).toBeUndefined();
  });
});

describe('config file', () => {
  const yaml = 'zk: zk1:2181/shardex\nport: 9100\nmaxInFlight: 8\ninsecure: true\nretryPause: 100\n';
  const json = JSON.stringify({ zk: 'zk1:2181/shardex', port: 9100, maxInFlight: 8, insecure: true, retryPause: 100 });

  it('takes YAML (.yaml, .yml) and JSON alike', async () => {
    const expected = { zk: 'zk1:2181/shardex', port: 9100, maxInFlight: 8, insecure: true, retryPause: 100 };
    for (const [ext, content] of [['yaml', yaml], ['yml', yaml], ['json', json]] as const) {
      expect(await resolveConfig('node', { flags: { config: await configFile(ext, content) } })).toMatchObject(expected);
    }
  });

  it('is found through SHARDEX_CONFIG too', async () => {
    const path = await configFile('yaml', yaml);
    expect((await resolveConfig('node', { env: { SHARDEX_CONFIG: path } })).port).toBe(9100);
  });

  it('gives dev the collection fields as a mapping', async () => {
    const path = await configFile('yaml', 'fields:\n  title: text\n  price: number\nautoCommit: "off"\nreaders: 1\n');
    expect(await resolveConfig('dev', { flags: { config: path } })).toMatchObject({ fields: { title: 'text', price: 'number' }, autoCommit: 'off', readers: 1 });
  });

  it('refuses a bad value naming the file and the key', async () => {
    const path = await configFile('yaml', 'zk: z\nport: "8983"\n');
    expect((await refusal('node', { flags: { config: path } })).message).toBe(`config file ${path}: key \`port\` must be an integer from 0 to 65535, got '8983'`);
  });

  it('refuses an unknown key, naming it and the key meant', async () => {
    const path = await configFile('yaml', 'zk: z\nhttpPort: 8983\n');
    expect((await refusal('node', { flags: { config: path } })).message).toBe(
      `config file ${path}: key \`httpPort\` is not an option of \`shardex node\` (did you mean \`port\`?); the keys are the flags of \`shardex node --help\` in camelCase`,
    );
  });

  it.each([
    ['max-in-flight', 'maxInFlight'],
    ['MAX_IN_FLIGHT', 'maxInFlight'],
    ['maxInFlite', 'maxInFlight'],
    ['callTimeoutMs', 'callTimeout'],
  ])('suggests the key for %s', async (written, meant) => {
    const path = await configFile('json', JSON.stringify({ zk: 'z', [written]: 1 }));
    expect((await refusal('node', { flags: { config: path } })).message).toContain(`key \`${written}\` is not an option of \`shardex node\` (did you mean \`${meant}\`?)`);
  });

  it('refuses a key of another command', async () => {
    const path = await configFile('yaml', 'zk: z\nmaxScans: 4\n');
    expect((await refusal('node', { flags: { config: path } })).message).toContain('key `maxScans` is not an option of `shardex node`');
  });

  it('refuses flags that are only flags: --reset, --config', async () => {
    const path = await configFile('yaml', 'reset: true\nconfig: other.yaml\n');
    const err = await refusal('dev', { flags: { config: path } });
    expect(err.message).toContain(`config file ${path}: key \`reset\` is not taken from a config file (give --reset as a flag)`);
    expect(err.message).toContain(`config file ${path}: key \`config\` is not taken from a config file (give --config as a flag)`);
  });

  it('takes an empty file as no options', async () => {
    expect((await resolveConfig('dev', { flags: { config: await configFile('yaml', '') } })).port).toBe(8983);
  });

  it('refuses a file that cannot be read', async () => {
    const path = join(dir, 'missing.yaml');
    expect((await refusal('dev', { flags: { config: path } })).message).toMatch(new RegExp(`^cannot read the config file ${path} \\(--config\\): ENOENT`));
  });

  it('refuses a name that says neither JSON nor YAML', async () => {
    const path = await configFile('toml', 'port = 1');
    expect((await refusal('dev', { flags: { config: path } })).message).toBe(`config file ${path}: its name must end in .json, .yaml or .yml (that says how to read it)`);
  });

  it('refuses JSON and YAML that do not parse, saying where', async () => {
    const badJson = await configFile('json', '{"port": 1,');
    expect((await refusal('dev', { flags: { config: badJson } })).message).toMatch(new RegExp(`^config file ${badJson} is not valid JSON: `));
    const badYaml = await configFile('yaml', 'port: [1\n');
    expect((await refusal('dev', { flags: { config: badYaml } })).message).toMatch(new RegExp(`^config file ${badYaml} is not valid YAML: .*line 2`));
    const twice = await configFile('yaml', 'port: 1\nport: 2\n');
    expect((await refusal('dev', { flags: { config: twice } })).message).toMatch(/is not valid YAML: .*unique/i);
  });

  it('refuses a file that is not a mapping', async () => {
    const list = await configFile('yaml', '- port\n- 8983\n');
    expect((await refusal('dev', { flags: { config: list } })).message).toBe(`config file ${list} must hold a mapping of option keys to values (e.g. \`port: 8983\`), got a list`);
    const scalar = await configFile('json', '8983');
    expect((await refusal('dev', { flags: { config: scalar } })).message).toContain('got 8983');
  });

  it('reads the file once, as a mapping', async () => {
    expect(await readConfigFile(await configFile('yml', 'a: 1\n'))).toEqual({ a: 1 });
  });
});

describe('precedence: flag > env > config file > default', () => {
  let path: string;
  beforeAll(async () => {
    path = await configFile('yaml', 'zk: from-file\nport: 7001\nmaxInFlight: 5\nforwardRetries: 9\n');
  });

  it('takes each value from the first source that has it', async () => {
    const c = await resolveConfig('node', { flags: { config: path, port: '7003' }, env: { SHARDEX_PORT: '7002', SHARDEX_MAX_IN_FLIGHT: '6' } });
    expect(c.port).toBe(7003); // flag over env and file
    expect(c.maxInFlight).toBe(6); // env over file
    expect(c.forwardRetries).toBe(9); // file over default
    expect(c.replicaRetries).toBe(3); // default
    expect(c.zk).toBe('from-file');
  });

  it("takes a node's limits from the environment, which a reader sharing it (compose's x-shardex block) ignores", async () => {
    const env = { SHARDEX_MAX_BATCH_DOCS: '5000', SHARDEX_MAX_RESULT_WINDOW: '5000' };
    expect(await resolveConfig('node', { flags: { zk: 'z' }, env })).toMatchObject({ maxBatchDocs: 5000, maxResultWindow: 5000 });
    expect(await resolveConfig('reader', { flags: { zk: 'z' }, env })).not.toHaveProperty('maxBatchDocs');
    expect((await refusal('node', { flags: { zk: 'z' }, env: { SHARDEX_MAX_BATCH_DOCS: '0' } })).message).toBe('SHARDEX_MAX_BATCH_DOCS must be an integer from 1 to 1000000, got 0');
  });

  it('does not check a value that a higher source replaced', async () => {
    const bad = await configFile('yaml', 'zk: z\nport: not-a-port\n');
    expect((await resolveConfig('node', { flags: { config: bad, port: '7004' } })).port).toBe(7004);
  });

  it('names the source a refused value came from', async () => {
    const err = await refusal('node', { flags: { config: path }, env: { SHARDEX_FORWARD_RETRIES: '-1' } });
    expect(err.message).toBe('SHARDEX_FORWARD_RETRIES must be an integer from 0 to 1000, got -1');
  });
});

describe('dev collection options', () => {
  it('reads --fields as field:type pairs and checks the types', async () => {
    expect((await resolveConfig('dev', { flags: { fields: 'title:text, price:number' } })).fields).toEqual({ title: 'text', price: 'number' });
    expect((await refusal('dev', { flags: { fields: 'title:txt' } })).message).toMatch(/^--fields: .*field 'title': unknown type 'txt'/);
    expect((await refusal('dev', { flags: { fields: 'title' } })).message).toBe("--fields must be field:type pairs (title:text,price:number; in a config file, a mapping), got 'title'");
  });

  it('takes autoCommit as a duration or off', async () => {
    expect((await resolveConfig('dev', { flags: { autoCommit: '500ms' } })).autoCommit).toBe('500ms');
    expect((await refusal('dev', { flags: { autoCommit: '5x' } })).message).toBe("--auto-commit must be a duration such as 15s, 500ms or 2m, or off, got '5x'");
  });
});

describe('what the options configure', () => {
  it('gives a node its distributor, retries, timeouts and read balancer', async () => {
    const c = await resolveConfig('node', { flags: { ...ZK, maxInFlight: '3', forwardRetries: '4', replicaRetries: '5', retryPause: '100', retryPauseMax: '250', callTimeout: '1000', deleteRetention: '2000', logRetention: '500', writeBufferMb: '8', storeCompression: true, docCacheSize: '0', mergeSegmentsPerTier: '4', checkpointInterval: '300', readPriority: 'report', readQueueSize: '7', readTimeout: '900' } });
    const o = nodeOptionsOf(c);
    expect(o).toMatchObject({ maxInFlight: 3, forwardRetries: 4, replicaRetries: 5, callTimeoutMs: 1000, deleteRetentionMs: 2000, logRetention: 500, writeBufferMb: 8, storeCompression: true, docCacheSize: 0, checkpointPolicy: { segmentsPerTier: 4, maxAgeMs: 300 }, readBalance: { defaultPriority: 'report', queueSize: 7, timeoutMs: 900 } });
    // Linear from 100 to at most 250, each pause jittered (up to 20% shorter).
    const pauses = Array.from({ length: 50 }, () => [1, 2, 3, 4].map((n) => o.backoff!(n)));
    const bounds = [100, 200, 250, 250];
    for (const p of pauses) {
      for (const [i, max] of bounds.entries()) {
        expect(p[i]).toBeGreaterThanOrEqual(max * 0.8);
        expect(p[i]).toBeLessThanOrEqual(max);
      }
    }
    expect(new Set(pauses.map((p) => p[1])).size).toBeGreaterThan(1);
  });

  it('takes a checkpoint interval of 50 ms or more, and defaults to the index policy\'s 0.3 s', async () => {
    expect((await refusal('node', { flags: { ...ZK, checkpointInterval: '20' } })).message).toMatch(/^--checkpoint-interval must be/);
    expect(nodeOptionsOf(await resolveConfig('node', { flags: { ...ZK, checkpointInterval: '2000' } })).checkpointPolicy).toEqual({ segmentsPerTier: 10, maxAgeMs: 2000 });
    expect(nodeOptionsOf(await resolveConfig('node', { flags: { ...ZK } })).checkpointPolicy).toEqual({ segmentsPerTier: 10, maxAgeMs: 300 });
    expect(DEFAULT_CHECKPOINT_POLICY.maxAgeMs).toBe(300);
  });

  it('checks the checkpoint policy at least twice per interval, and at most every 250 ms', () => {
    expect(checkpointCheckMs(500)).toBe(250);
    expect(checkpointCheckMs(60_000)).toBe(250);
    expect(checkpointCheckMs(300)).toBe(150);
    expect(checkpointCheckMs(50)).toBe(25);
  });

  it('refuses a merge tier of fewer than two segments, and defaults to ten', async () => {
    expect((await refusal('node', { flags: { ...ZK, mergeSegmentsPerTier: '1' } })).message).toMatch(/^--merge-segments-per-tier must be/);
    expect(nodeOptionsOf(await resolveConfig('node', { flags: { ...ZK } })).checkpointPolicy).toMatchObject({ segmentsPerTier: 10 });
  });

  it("keeps 512 parsed documents per replica by default (Solr's documentCache), and refuses a negative size", async () => {
    expect(nodeOptionsOf(await resolveConfig('node', { flags: { ...ZK } })).docCacheSize).toBe(512);
    expect((await refusal('node', { flags: { ...ZK, docCacheSize: '-1' } })).message).toMatch(/^--doc-cache-size must be/);
  });

  it('gives a reader its cache and scan settings', async () => {
    const c = await resolveConfig('reader', { flags: { ...ZK, snapshotExpiry: '0', diskBudget: '1000', maxScans: '2', drainTimeout: '10' } });
    expect(readerOptionsOf(c)).toEqual({ snapshotExpiryMs: 0, diskBudgetBytes: 1000, maxScans: 2, drainTimeoutMs: 10 });
  });

  it('declares a flag for every key, the key in kebab-case', () => {
    for (const keys of Object.values(COMMAND_KEYS)) for (const k of keys) expect(flagOf(k)).toMatch(/^--[a-z]+(-[a-z]+)*$/);
    expect(flagOf('maxInFlight')).toBe('--max-in-flight');
    expect(Object.keys(OPTIONS)).toContain('maxInFlight');
  });
});

describe('the dev clusters (threads and in-process) share one layout and one collection request', () => {
  it('lays members out from the base port', () => {
    expect(devMember('node', 1, { port: 8983, dataDir: '/d' })).toEqual({ name: 'node2', host: '127.0.0.1', httpPort: 8984, grpcPort: 9984, dataDir: '/d/node2' });
    expect(devMember('reader', 0, { port: 8983, dataDir: '/d' })).toEqual({ name: 'reader1', host: '127.0.0.1', httpPort: 9083, grpcPort: 10083, dataDir: '/d/reader1' });
    expect(devMember('node', 2, { port: 0, dataDir: '/d' })).toMatchObject({ httpPort: 0, grpcPort: 0 });
  });

  it('asks for the collection with its fields, autoCommit and durability', () => {
    const body = collectionRequest({ name: 'docs', numShards: 2, replicationFactor: 2, router: 'hash', fields: { title: 'text' }, autoCommitMs: 2500, durability: 'async', syncIntervalMs: 300 });
    expect(body).toEqual({ name: 'docs', numShards: 2, replicationFactor: 2, router: 'hash', fields: { title: 'text' }, autoCommit: '2500ms', durability: 'async', syncInterval: '300ms' });
    expect(parseDuration(body.autoCommit as string, 'autoCommit')).toBe(2500);
    expect(collectionRequest({ name: 'docs', numShards: 1, replicationFactor: 1, router: 'compositeId', autoCommitMs: 0 }).autoCommit).toBe('off');
    // A spec says no autoCommit by leaving it out (the node reads it as 0): not the HTTP API's 15 s.
    expect(collectionRequest({ name: 'docs', numShards: 1, replicationFactor: 1, router: 'compositeId' }).autoCommit).toBe('off');
  });
});

describe('tunables given in code (the dev clusters the tests start)', () => {
  const base = { nodes: 1, port: 0, dataDir: '/nonexistent', logger: silentLogger() };

  it('are checked by the same schema, naming the key', () => {
    expect(() => new DevCluster({ ...base, node: { maxInFlight: 0 } })).toThrow(expect.objectContaining({ code: 'SHX_BAD_CONFIG', message: 'node option `maxInFlight` must be an integer from 1 to 10000, got 0' }));
    expect(() => new DevCluster({ ...base, reader: { snapshotExpiry: -1 } })).toThrow('reader option `snapshotExpiry` must be an integer from 0 to 86400000, got -1');
    expect(() => new ThreadedDevCluster({ ...base, readers: 0, logFile: '/nonexistent/log', node: { retryPause: 900, retryPauseMax: 100 } })).toThrow(
      'node option `retryPauseMax` (100) is below node option `retryPause` (900): the longest pause cannot be shorter than the first',
    );
  });

  it('refuse a key that is not a tunable', () => {
    expect(() => new DevCluster({ ...base, node: { retries: 3 } as never })).toThrow('node option `retries` is not an option');
  });
});
