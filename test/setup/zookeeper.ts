// vitest globalSetup: one standalone ZooKeeper for the whole run (src/node/local-zookeeper.ts).
// - Gives tests the connect string: inject('zkConnect') (see test/support/zookeeper.ts) and, for
//   the processes tests start, process.env.SHARDEX_TEST_ZK ('127.0.0.1:PORT').
// - Stops it by pid after the run, failed or not.
// With SHARDEX_TEST_ZK already set, that server is used instead and nothing is started or stopped.

import type { TestProject } from 'vitest/node';
import { startLocalZooKeeper } from '../../src/node/local-zookeeper.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** 'host:port' of the test ZooKeeper, without a chroot. */
    zkConnect: string;
  }
}

function progress(message: string): void {
  process.stderr.write(`[zookeeper] ${message}\n`);
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const external = process.env.SHARDEX_TEST_ZK;
  if (external) {
    progress(`using the ZooKeeper at ${external} (SHARDEX_TEST_ZK)`);
    project.provide('zkConnect', external);
    return async () => {};
  }
  const zk = await startLocalZooKeeper(progress);
  const connect = `127.0.0.1:${zk.port}`;
  project.provide('zkConnect', connect);
  process.env.SHARDEX_TEST_ZK = connect;
  return async () => {
    delete process.env.SHARDEX_TEST_ZK;
    await zk.stop();
  };
}
