import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    globalSetup: ['test/setup/debian-packages.ts', 'test/setup/zookeeper.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    reporters: ['default'],
    projects: [
      {
        // Unit tests first, two files at a time (one per core).
        extends: true,
        test: { name: 'unit', include: ['test/**/*.test.ts'], exclude: ['test/cluster/**'], sequence: { groupOrder: 0 }, fileParallelism: true, maxWorkers: 2 },
      },
      {
        // Then the tests that start real processes: on 2 cores they must not run side by side.
        extends: true,
        test: { name: 'cluster', include: ['test/cluster/**/*.test.ts'], sequence: { groupOrder: 1 }, fileParallelism: false },
      },
    ],
  },
});
