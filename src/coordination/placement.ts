// Replica placement at collection creation: pure. Replicas of one shard go to distinct
// nodes, and consecutive shards start on consecutive nodes, so that leaders (the first
// candidate of each shard usually wins) spread over the cluster.
export function placeReplicas(nodes: readonly string[], numShards: number, replicationFactor: number): string[][] {
  if (replicationFactor > nodes.length) {
    throw new RangeError(`replicationFactor ${replicationFactor} exceeds ${nodes.length} nodes`);
  }
  const out: string[][] = [];
  for (let s = 0; s < numShards; s++) {
    const replicas: string[] = [];
    for (let r = 0; r < replicationFactor; r++) replicas.push(nodes[(s + r) % nodes.length]!);
    out.push(replicas);
  }
  return out;
}
