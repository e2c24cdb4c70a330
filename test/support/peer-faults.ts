// Faults injected into a node's calls to its peers, for tests that hold a recovery: the calls fail
// as a peer that refuses connections would make them fail.
import type { ShardexNode } from '../../src/node/shardex-node.js';

interface PeerCalls {
  call(node: string, method: string, body: unknown, timeoutMs?: number): Promise<unknown>;
}

/** Fails `node`'s `versions` calls (a recovery's first step) while `failing()` holds; counts the failed ones. */
export function failVersions(node: ShardexNode, failing: () => boolean): { tries: () => number } {
  const peers = (node as unknown as { peers: PeerCalls }).peers;
  const real = peers.call.bind(peers);
  let tries = 0;
  peers.call = (target, method, body, timeoutMs) => {
    if (method !== 'versions' || !failing()) return real(target, method, body, timeoutMs);
    tries++;
    return Promise.reject(Object.assign(new Error(`connect ECONNREFUSED (test: ${target} refused)`), { code: 'ECONNREFUSED' }));
  };
  return { tries: () => tries };
}
