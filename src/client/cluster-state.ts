// What the client knows about the cluster: one immutable snapshot of GET /api/cluster (or of
// a watched coordinator, rendered the same way), with the look-ups routing needs. Pure: a new
// state is a new snapshot. Routers are built with the nodes' own code (ShardRouter over the
// ranges in the state), so that the client and the nodes always agree on a document's shard.
import { ShardexError } from '../errors.js';
import { ShardRouter, parseRange, parseRouterName } from '../hashrange/index.js';
import { parseSchema, type CollectionSchema } from '../index/index.js';

export interface NodeView {
  readonly name: string;
  /** Base URL of the node's HTTP API: the client's name for a host. */
  readonly http: string;
  readonly grpc: string;
  readonly role: 'data' | 'reader';
  readonly group?: string;
}

export interface ReplicaView {
  readonly node: string;
  readonly state: string;
}

export interface ShardView {
  readonly name: string;
  /** Solr's Range.toString(): unsigned hex lo-hi. */
  readonly range: string;
  readonly leader: string | null;
  readonly replicas: readonly ReplicaView[];
}

export interface CollectionView {
  readonly name: string;
  readonly router: string;
  readonly numShards: number;
  readonly replicationFactor: number;
  /** Field types of the search schema, as given at creation. */
  readonly fields?: Record<string, string>;
  /** In ascending range order (shard1, shard2, ...; never string-sorted). */
  readonly shards: readonly ShardView[];
}

/** The JSON of GET /api/cluster. */
export interface ClusterViewJson {
  readonly nodes: ReadonlyArray<{ name: string; http: string; grpc: string; role: string; group?: string }>;
  readonly collections: Readonly<
    Record<
      string,
      {
        router: string;
        numShards: number;
        replicationFactor: number;
        fields?: Record<string, string>;
        shards: Readonly<Record<string, { range: string; leader: string | null; replicas: ReadonlyArray<{ node: string; state: string }> }>>;
      }
    >
  >;
}

function malformed(what: string): ShardexError {
  return new ShardexError('SHX_INTERNAL', `the cluster state a node sent is malformed: ${what}`);
}

export class ClusterSnapshot {
  readonly nodes: readonly NodeView[];
  readonly collections: ReadonlyMap<string, CollectionView>;
  private readonly httpByName: ReadonlyMap<string, string>;
  private readonly routers = new Map<string, ShardRouter>();
  private readonly schemas = new Map<string, CollectionSchema>();

  constructor(nodes: readonly NodeView[], collections: ReadonlyMap<string, CollectionView>) {
    this.nodes = nodes;
    this.collections = collections;
    this.httpByName = new Map(nodes.map((n) => [n.name, n.http]));
  }

  static empty(): ClusterSnapshot {
    return new ClusterSnapshot([], new Map());
  }

  /** Validates and indexes the JSON of GET /api/cluster. */
  static fromView(json: unknown): ClusterSnapshot {
    const view = json as ClusterViewJson;
    if (typeof view !== 'object' || view === null || !Array.isArray(view.nodes) || typeof view.collections !== 'object' || view.collections === null) {
      throw malformed('expected {nodes: [...], collections: {...}}');
    }
    const nodes: NodeView[] = view.nodes.map((n) => {
      if (typeof n?.name !== 'string' || typeof n.http !== 'string') throw malformed('a node without name or http');
      return { name: n.name, http: n.http.replace(/\/+$/, ''), grpc: n.grpc, role: n.role === 'reader' ? 'reader' : 'data', ...(n.group !== undefined && { group: n.group }) };
    });
    const collections = new Map<string, CollectionView>();
    for (const [name, c] of Object.entries(view.collections)) {
      if (typeof c?.shards !== 'object' || c.shards === null) throw malformed(`collection ${name} has no shards`);
      const shards = Object.entries(c.shards)
        .map(([shard, s]) => ({ name: shard, range: s.range, leader: s.leader ?? null, replicas: s.replicas ?? [], min: parseRange(s.range).min }))
        .sort((a, b) => a.min - b.min)
        .map(({ min: _min, ...s }) => s);
      collections.set(name, { name, router: c.router, numShards: c.numShards, replicationFactor: c.replicationFactor, ...(c.fields && { fields: c.fields }), shards });
    }
    return new ClusterSnapshot(nodes, collections);
  }

  collection(name: string): CollectionView | undefined {
    return this.collections.get(name);
  }

  /** The collection's router, built from the ranges in this state. */
  router(collection: string): ShardRouter {
    let r = this.routers.get(collection);
    if (!r) {
      const c = this.collections.get(collection);
      if (!c) throw new ShardexError('SHX_COLLECTION_NOT_FOUND', `collection '${collection}' does not exist in the cluster state`);
      r = new ShardRouter(
        c.shards.map((s) => parseRange(s.range, s.name)),
        parseRouterName(c.router),
      );
      this.routers.set(collection, r);
    }
    return r;
  }

  /** The collection's declared fields as the nodes parse them: the client admits documents as they do. */
  schema(collection: string): CollectionSchema {
    let schema = this.schemas.get(collection);
    if (!schema) {
      const c = this.collections.get(collection);
      if (!c) throw new ShardexError('SHX_COLLECTION_NOT_FOUND', `collection '${collection}' does not exist in the cluster state`);
      schema = parseSchema(c.fields);
      this.schemas.set(collection, schema);
    }
    return schema;
  }

  /** HTTP URL of a node, if it is live. */
  httpOf(node: string): string | undefined {
    return this.httpByName.get(node);
  }

  /** HTTP URL of the shard's leader, if it has a live one. */
  leaderHost(collection: string, shard: string): string | undefined {
    const leader = this.collections.get(collection)?.shards.find((s) => s.name === shard)?.leader;
    return leader ? this.httpOf(leader) : undefined;
  }

  /** HTTP URLs of the live data nodes: the hosts that take writes and forward. */
  dataHosts(): string[] {
    return this.nodes.filter((n) => n.role === 'data').map((n) => n.http);
  }

  /** Every listed host (data nodes and readers). */
  allHosts(): string[] {
    return this.nodes.map((n) => n.http);
  }
}
