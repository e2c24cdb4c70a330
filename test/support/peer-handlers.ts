// Peer handlers that only record which call reached them (and answer something valid): for tests
// of what the gRPC layer lets through (the cluster secret, TLS).
import type { PeerHandlers } from '../../src/transport/index.js';
import type { StoredEntry } from '../../src/ulog/index.js';

/** Handlers pushing each call's name to `calls`; `get` answers `got`. */
export function recordingHandlers(calls: string[], got: unknown[] = []): PeerHandlers {
  return {
    update: async (u) => {
      calls.push('update');
      return { applied: u.ops.length, version: 1, rf: 1 } as never;
    },
    get: async () => {
      calls.push('get');
      return got as never;
    },
    search: async () => {
      calls.push('search');
      return {};
    },
    commit: async () => {
      calls.push('commit');
      return { version: 0, at: 0 };
    },
    versions: async () => {
      calls.push('versions');
      return { maxVersion: 7, trimmedThrough: 0 };
    },
    updatesAfter: async () => {
      calls.push('updatesAfter');
      return [];
    },
    copyShard: async function* () {
      calls.push('copyShard');
      yield [] as StoredEntry[];
    },
  };
}
