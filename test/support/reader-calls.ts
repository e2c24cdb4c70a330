// Calls the reader tests make on a one-shard collection: an eventual get asked of a reader
// itself (over the peer protocol, as a node asks it), and writes and commits through a node.
import { expect } from 'vitest';
import type { ReaderAnswer } from '../../src/read/snapshot-reader.js';
import type { PeerClients } from '../../src/transport/index.js';
import type { StoredEntry } from '../../src/ulog/index.js';
import { http } from './cluster.js';

export interface ReaderCalls {
  /** An eventual get of `id` asked of the reader itself. */
  readerGet(id: string): Promise<ReaderAnswer<Array<StoredEntry | null>>>;
  /** Adds a document `id` through the node (200 expected). */
  add(id: string): Promise<void>;
  /** Records a commit point through the node; returns shard1's version. */
  commit(): Promise<number>;
}

/** `at()`: the node's URL and the peer clients reaching the reader, once the test's setup made them. */
export function readerCalls(collection: string, at: () => { url: string; peers: PeerClients }, reader = 'reader1'): ReaderCalls {
  return {
    readerGet: (id) => at().peers.call(reader, 'get', { collection, shard: 'shard1', ids: [id], eventual: { busyTimeoutMs: 1000 } }),
    add: async (id) => {
      expect((await http('POST', `${at().url}/api/collections/${collection}/docs`, [{ id, title: id }])).status).toBe(200);
    },
    commit: async () => {
      const res = await http('POST', `${at().url}/api/collections/${collection}/commit`);
      expect(res.status).toBe(200);
      return res.body.commit.shard1.version as number;
    },
  };
}
