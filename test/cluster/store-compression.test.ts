// The node's --store-compression reaches its replicas' stores (README, "Running a real cluster"):
// the same documents written to a node without it and to one with it leave LevelDB table files
// of very different sizes. The store's own option is tested in test/versions.test.ts.
import { rm } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { http, startCluster, type TestCluster } from '../support/cluster.js';
import { tableBytes } from '../support/temp-stores.js';

const C = 'cmp';
const DOCS = 3000;
let tc: TestCluster | undefined;

afterEach(async () => {
  await tc?.stop();
  tc = undefined;
});

/** Writes DOCS compressible documents to a one-node cluster, stops it, and measures its tables. */
async function writtenTables(storeCompression: boolean | undefined): Promise<number> {
  // A 1 MiB write buffer: most of the ~7 MB written goes to table files while the node runs.
  tc = await startCluster({ nodes: 1, collection: { name: C, numShards: 1, replicationFactor: 1, router: 'compositeId' }, nodeOptions: { writeBufferMb: 1, ...(storeCompression !== undefined && { storeCompression }) } });
  const body = 'the quick brown fox jumps over the lazy dog. '.repeat(25);
  for (let i = 0; i < DOCS; i += 500) {
    const batch = Array.from({ length: 500 }, (_, j) => ({ id: `d${i + j}`, body }));
    const res = await http('POST', `${tc.urls[0]}/api/collections/${C}/docs`, batch);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
  }
  const { dataDir } = tc;
  // Stopped first (its stores closed, their compactions done), measured, then removed.
  await tc.cluster.stop();
  try {
    return await tableBytes(dataDir);
  } finally {
    await rm(dataDir, { recursive: true, force: true });
    tc = undefined;
  }
}

describe('a node with --store-compression', () => {
  it("compresses its replicas' table files, which it does not do by default", async () => {
    const plain = await writtenTables(undefined);
    const compressed = await writtenTables(true);
    // Each document is stored twice (log entry and current version), about 1.1 KB each time.
    expect(plain).toBeGreaterThan(DOCS * 2 * 1100 * 0.6);
    expect(compressed).toBeLessThan(plain / 3);
  });
});
