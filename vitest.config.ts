import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/setup/debian-packages.ts', 'test/setup/zookeeper.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Cluster tests start real processes; on 2 cores they must not run side by side.
    fileParallelism: false,
    reporters: ['default'],
  },
});
