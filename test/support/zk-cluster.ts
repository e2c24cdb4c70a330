// Shared pieces of the ZooKeeper cluster tests: waiting for conditions, the settled cluster,
// and the acknowledged-writes check.
import pLimit from 'p-limit';
import { clusterView, http, type ClusterView } from './cluster.js';
import type { NodeProcesses } from './processes.js';
import { pollUntil } from './poll.js';

export function until<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  return pollUntil(what, probe, { ms, retryErrors: true });
}

export function liveUrls(procs: NodeProcesses): string[] {
  return [...procs.nodes.values()].filter((n) => n.child).map((n) => n.http);
}

/** The view once every shard has a live leader and every replica is active. */
export function settled(view: ClusterView, collection: string): boolean {
  const live = new Set(view.nodes.map((n) => n.name));
  return Object.values(view.collections[collection]?.shards ?? {}).every(
    (s) => s.leader !== null && live.has(s.leader) && s.replicas.every((r) => r.state === 'active'),
  );
}

export async function waitSettled(procs: NodeProcesses, collection: string, ms = 60_000): Promise<ClusterView> {
  return until(`cluster ${collection} to settle`, ms, async () => {
    const v = await clusterView(liveUrls(procs)[0]!);
    return v.nodes.length === liveUrls(procs).length && settled(v, collection) ? v : undefined;
  });
}

/**
 * The leaders (shard -> node) once the cluster has settled and every shard is led by its preferred
 * leader, as every live node sees it: leader balance moves no leader after that (a leader that
 * is not its shard's preferred one may still hand over, so a settled view alone can go stale).
 */
export async function waitLeadersPreferred(procs: NodeProcesses, collection: string, ms = 60_000): Promise<Record<string, string>> {
  return until(`every shard of ${collection} led by its preferred leader`, ms, async () => {
    const seen = new Set<string>();
    let leaders: Record<string, string> | undefined;
    for (const url of liveUrls(procs)) {
      const v = await clusterView(url);
      if (v.nodes.length !== liveUrls(procs).length || !settled(v, collection)) return undefined;
      const state = (await http<{ shards: Array<{ name: string; preferredLeader?: string }> }>('GET', `${url}/api/collections/${collection}`)).body;
      const here = Object.fromEntries(Object.entries(v.collections[collection]!.shards).map(([s, x]) => [s, x.leader!]).sort(([a], [b]) => (a < b ? -1 : 1)));
      if (!state.shards.every((s) => s.preferredLeader === here[s.name])) return undefined;
      seen.add(JSON.stringify(here));
      leaders = here;
    }
    return seen.size === 1 ? leaders : undefined;
  });
}

/** For every acked id: present on every replica with the acked version or a newer one. */
export async function verifyAcked(procs: NodeProcesses, collection: string, acked: Map<string, number>): Promise<string[]> {
  const limit = pLimit(16);
  const problems: string[] = [];
  const nodes = [...procs.nodes.values()];
  await Promise.all(
    [...acked].map(([id, version]) =>
      limit(async () => {
        for (const n of nodes) {
          const res = await http('GET', `${n.http}/api/collections/${collection}/docs/${encodeURIComponent(id)}?distrib=false`);
          if (res.status !== 200) problems.push(`${id} missing on ${n.name} (${res.status})`);
          else if (res.body._version_ < version) problems.push(`${id} on ${n.name} has version ${res.body._version_} < acked ${version}`);
        }
      }),
    ),
  );
  return problems;
}


/** id -> version of every document a node's replica of `shard` holds (export with distrib=false). */
export async function replicaVersions(url: string, collection: string, shard: string): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  let after: string | null | undefined;
  for (;;) {
    const q = new URLSearchParams({ shard, limit: '10000', distrib: 'false', ...(after ? { after } : {}) });
    const res = await http(`GET`, `${url}/api/collections/${collection}/export?${q}`);
    if (res.status !== 200) throw new Error(`export from ${url} failed: ${res.status} ${JSON.stringify(res.body)}`);
    for (const d of res.body.docs as Array<{ id: string; _version_: number }>) out.set(d.id, d._version_);
    after = res.body.next;
    if (!after) return out;
  }
}

/** A node's counter value from /metrics (sum over the label set given). */
export async function metric(url: string, name: string, labels = ''): Promise<number> {
  const text = (await http('GET', `${url}/metrics`)).body as string;
  let sum = 0;
  for (const line of text.split('\n')) if (line.startsWith(name) && line.includes(labels)) sum += Number(line.split(' ').pop());
  return sum;
}
