#!/usr/bin/env node
// npm run bench -- <name> [flags]: runs one benchmark (or all) and prints its figures, each
// beside a baseline measured in the same run.
const benches = {
  ingest: () => import('./ingest.mjs'),
  search: () => import('./search.mjs'),
  eventual: () => import('./eventual.mjs'),
  import: () => import('./import.mjs'),
  restart: () => import('./restart.mjs'),
  balance: () => import('./balance.mjs'),
  'reader-copy': () => import('./reader-copy.mjs'),
};
const [name = 'all', ...rest] = process.argv.slice(2);
const names = name === 'all' ? Object.keys(benches) : [name];
for (const n of names) {
  if (!benches[n]) {
    process.stderr.write(`unknown benchmark '${n}'; choose one of: ${Object.keys(benches).join(', ')}, all\n`);
    process.exit(2);
  }
}
for (const n of names) {
  process.stdout.write(`\n== ${n} ==\n`);
  const mod = await benches[n]();
  await mod.run(rest);
}
