#!/usr/bin/env node
// V8's flags first (src/node/v8-tuning.ts): they apply to the code loaded after them.
import { setFlagsFromString } from 'node:v8';
import { v8Flags } from '../dist/node/v8-tuning.js';

for (const flag of v8Flags(process.execArgv)) setFlagsFromString(flag);
await import('../dist/node/cli.js');
