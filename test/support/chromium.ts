// Headless Chromium for the page tests: Debian's `chromium`, driven by playwright-core (which
// never downloads a browser here: it is given the executable). The suite's setup installs it
// with ZooKeeper in one apt-get call (test/setup/debian-packages.ts); a test run that skipped
// that (SHARDEX_TEST_ZK set) installs it on first use.
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { ensureDebianPackage, type Progress } from '../../src/node/local-zookeeper.js';

export const CHROMIUM = '/usr/bin/chromium';

/** The Debian package and how to tell it is installed (for ensureDebianPackages). */
export const CHROMIUM_PACKAGE = { pkg: 'chromium', present: (): boolean => existsSync(CHROMIUM) } as const;

const progress: Progress = (message) => process.stderr.write(`[chromium] ${message}\n`);

/** Installs Chromium when missing, then starts it headless; close it with `browser.close()`. */
export async function launchChromium(): Promise<Browser> {
  await ensureDebianPackage(CHROMIUM_PACKAGE.pkg, CHROMIUM_PACKAGE.present, progress);
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    // No sandbox (the tests run as root), no GPU, nothing fetched from outside.
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run', '--disable-dev-shm-usage'],
    timeout: 60_000,
  });
}
