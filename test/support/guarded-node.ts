// Helpers for the authentication, limits and fuzz tests (issue 13): a started in-process node
// with API keys and limits, an extra HTTP app on it for fast injected requests, keys of each
// role, and everything the node stores as one comparable value ("a refused request changes
// nothing").
import type { FastifyInstance } from 'fastify';
import { buildHttp, type HttpOptions } from '../../src/node/http/app.js';
import { keyDigest, type ApiKey, type Role } from '../../src/node/http/auth.js';
import { silentLogger } from '../../src/logger.js';
import type { ShardexNode } from '../../src/node/shardex-node.js';
import { startCluster, type TestCluster } from './cluster.js';

/** A key per role (and one with all three); the plain keys, and the keys file entries. */
export const KEYS = {
  reader: 'reader-key-0123456789abcdef',
  writer: 'writer-key-0123456789abcdef',
  admin: 'admin-key-0123456789abcdef',
  all: 'all-roles-key-0123456789abcdef',
} as const;

export const KEY_ROLES: Record<keyof typeof KEYS, Role[]> = { reader: ['read'], writer: ['write'], admin: ['admin'], all: ['read', 'write', 'admin'] };

export function keyEntries(): ApiKey[] {
  return (Object.keys(KEYS) as Array<keyof typeof KEYS>).map((name) => ({ name, sha256: keyDigest(KEYS[name]).toString('hex'), roles: KEY_ROLES[name] }));
}

export const bearer = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}` });

/** Everything the cluster stores: per replica its live docs and newest version, the collections, the read-balance settings. */
export async function storedState(nodes: readonly ShardexNode[]): Promise<unknown> {
  const replicas: Record<string, unknown> = {};
  for (const node of nodes) {
    for (const [c, state] of node.coordinator.collections()) {
      for (const s of state.shards) {
        const r = node.replica(c, s.name);
        replicas[`${node.name}/${c}/${s.name}`] = r ? { docs: r.store.docCount, maxVersion: r.store.maxVersion } : 'not open';
      }
    }
  }
  const collections = [...nodes[0]!.coordinator.collections().keys()].sort();
  return { replicas, collections, readBalance: await nodes[0]!.readBalanceSettings() };
}

export interface GuardedNode {
  readonly tc: TestCluster;
  readonly node: ShardexNode;
  /** A second HTTP app on the node (same routes, same settings) for `inject`. */
  readonly app: FastifyInstance;
  stored(): Promise<unknown>;
  stop(): Promise<void>;
}

/** Starts a cluster of `nodes` whose HTTP layer runs with `http`, and an injectable app on its first node. */
export async function startGuardedNode(
  http: Partial<Omit<HttpOptions, 'logger'>>,
  opts: { nodes?: number; collection?: string; fields?: Record<string, string>; durability?: 'request' | 'async' } = {},
): Promise<GuardedNode> {
  const collection = opts.collection ?? 'books';
  const tc = await startCluster({
    nodes: opts.nodes ?? 1,
    collection: {
      name: collection,
      numShards: 2,
      replicationFactor: 1,
      router: 'compositeId',
      autoCommitMs: 0,
      ...(opts.fields && { fields: opts.fields }),
      ...(opts.durability && { durability: opts.durability }),
    },
    nodeOptions: { http },
  });
  const node = tc.cluster.nodes[0]!;
  let app: FastifyInstance | undefined;
  try {
    app = await buildHttp(node, { bodyLimit: 100 * 1024 * 1024, ...http, logger: silentLogger() });
    await app.ready();
  } catch (err) {
    await tc.stop();
    throw err;
  }
  const ready = app;
  return {
    tc,
    node,
    app: ready,
    stored: () => storedState(tc.cluster.nodes),
    stop: async () => {
      await ready.close().catch(() => undefined);
      await tc.stop();
    },
  };
}
