// vitest globalSetup, first of all: installs the Debian packages the suite runs (ZooKeeper for
// the cluster tests, Chromium for the page test) when they are missing, in one apt-get call
// (one package download and one dpkg run on a fresh CI machine), printing apt's progress.
// With SHARDEX_TEST_ZK set (a ZooKeeper elsewhere, or none for unit tests) nothing is installed
// here: the page test then installs Chromium itself when it runs (test/support/chromium.ts).
import { existsSync } from 'node:fs';
import { ZOOKEEPER_JAR, ensureDebianPackages } from '../../src/node/local-zookeeper.js';
import { CHROMIUM_PACKAGE } from '../support/chromium.js';

export default async function setup(): Promise<void> {
  if (process.env.SHARDEX_TEST_ZK) return;
  await ensureDebianPackages([{ pkg: 'zookeeper', present: () => existsSync(ZOOKEEPER_JAR) }, CHROMIUM_PACKAGE], (m) => process.stderr.write(`[packages] ${m}\n`));
}
