// The local dev cluster's data dir: `<dataDir>/coordinator/` holds the embedded coordinator's tree
// (tree-store.ts), `<dataDir>/node<i>/` and `reader<i>/` each member's data. The tree is what makes
// the data findable: without it the replicas under node<i>/ belong to no collection, so a data dir
// with member data but no tree (written by a Shardex that kept the tree in memory only) is refused
// rather than started empty beside orphaned data.
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { MemoryZNodeServer } from '../coordination/memory-store.js';
import type { StoreLogger } from '../coordination/store.js';
import { openTreeStore } from '../coordination/tree-store.js';
import { ShardexError } from '../errors.js';

export const COORDINATOR_DIR = 'coordinator';
/** The chroot the dev cluster's members use on the embedded coordinator. */
export const DEV_CHROOT = '/shardex';

const MEMBER_DIR = /^(node|reader)\d+$/;

async function entries(dir: string): Promise<Array<{ name: string; dir: boolean }> | undefined> {
  try {
    return (await readdir(dir, { withFileTypes: true })).map((e) => ({ name: e.name, dir: e.isDirectory() }));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new ShardexError('SHX_BAD_CONFIG', `data dir ${dir} cannot be read (${(err as Error).message}); check --data`);
  }
}

export interface DevCoordinator {
  readonly server: MemoryZNodeServer;
  /** Collections found in the data dir (empty on a first start). */
  readonly restored: string[];
}

/** Opens the dev cluster's coordinator under `<dataDir>/coordinator`, with every collection a previous run left. */
export async function openDevCoordinator(dataDir: string, logger: StoreLogger): Promise<DevCoordinator> {
  const remedy = `start with --reset to wipe ${dataDir} (every collection and document in it), or restore it from a backup`;
  const found = (await entries(dataDir)) ?? [];
  if (!found.some((e) => e.name === COORDINATOR_DIR) && found.some((e) => e.dir && MEMBER_DIR.test(e.name))) {
    throw new ShardexError(
      'SHX_BAD_CONFIG',
      `data dir ${dataDir} holds node data but no ${COORDINATOR_DIR}/ (it was written by a Shardex that kept the cluster state in memory only, so its collections cannot be found again); ${remedy}`,
    );
  }
  const server = await openTreeStore({ dir: join(dataDir, COORDINATOR_DIR), logger, remedy });
  const prefix = `${DEV_CHROOT}/collections/`;
  const restored = server
    .persistentNodes()
    .map((n) => n.path)
    .filter((p) => p.startsWith(prefix) && !p.slice(prefix.length).includes('/'))
    .map((p) => p.slice(prefix.length));
  return { server, restored };
}

/**
 * `shardex dev --reset`: removes the data dir. Refuses a non-empty directory that does not look
 * like a dev cluster's (no coordinator/, node<i>/, reader<i>/ or shardex.log in it), so that a
 * mistyped --data cannot wipe something else. Returns whether there was anything to wipe.
 */
export async function wipeDataDir(dataDir: string): Promise<boolean> {
  const found = await entries(dataDir);
  if (found === undefined) return false;
  const ours = found.some((e) => e.name === COORDINATOR_DIR || e.name === 'shardex.log' || (e.dir && MEMBER_DIR.test(e.name)));
  if (found.length > 0 && !ours) {
    throw new ShardexError(
      'SHX_BAD_CONFIG',
      `--reset: ${dataDir} does not look like a Shardex data dir (no ${COORDINATOR_DIR}/, node<i>/ or shardex.log in it), so it is not wiped; check --data`,
    );
  }
  await rm(dataDir, { recursive: true, force: true });
  return true;
}
