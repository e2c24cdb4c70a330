// Preloaded (node --import) by test/v8-tuning.test.ts: records the V8 flags the process sets for
// itself through node:v8's setFlagsFromString, and prints them at exit as `V8 FLAGS [...]`.
import { createRequire, syncBuiltinESMExports } from 'node:module';

const v8 = createRequire(import.meta.url)('node:v8');
const set = v8.setFlagsFromString;
const seen = [];
v8.setFlagsFromString = (flag) => {
  seen.push(flag);
  set(flag);
};
// ESM imports of node:v8 (bin/shardex.js's) see the wrapper too.
syncBuiltinESMExports();
process.on('exit', () => process.stderr.write(`V8 FLAGS ${JSON.stringify(seen)}\n`));
