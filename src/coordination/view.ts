// The cluster as GET /api/cluster shows it (and as clients read it): live nodes, and per
// collection its shards with range, live leader and replica states (a replica on a node that
// is not live shows as down).
import type { CollectionState, Coordinator } from './types.js';

/** The cluster as GET /api/cluster shows it. */
export function clusterView(coord: Coordinator): unknown {
  // fromEntries defines own properties: a collection named "__proto__" is listed, not assigned as a prototype.
  const collections = Object.fromEntries([...coord.collections()].map(([name, state]) => [name, collectionView(coord, state)]));
  return {
    nodes: coord.liveNodes().map((n) => ({ name: n.name, http: n.http, grpc: n.grpc, role: n.role, ...(n.group && { group: n.group }) })),
    collections,
  };
}

function collectionView(coord: Coordinator, state: CollectionState): unknown {
  const shards: Record<string, unknown> = {};
  for (const s of state.shards) {
    shards[s.name] = {
      range: s.range,
      leader: coord.leader(state.name, s.name)?.node ?? null,
      replicas: s.replicas.map((r) => ({ node: r.node, state: coord.isLive(r.node) ? r.state : 'down' })),
    };
  }
  return { router: state.router, numShards: state.numShards, replicationFactor: state.replicationFactor, ...(state.fields && { fields: state.fields }), shards };
}

