#!/usr/bin/env node
// node bench/cpuprofile-top.mjs FILE.cpuprofile [N]: the N functions (default 30) with the most
// self time in a V8 CPU profile (`node --cpu-prof`), with their share of all samples, and the
// same grouped by source file. `--last S` counts only the samples of the profile's last S seconds
// (e.g. a benchmark's query phase after its ingest), `--first S` only those of its first S
// seconds (e.g. a node's start, up to searchable).
import { readFileSync } from 'node:fs';

const args = process.argv.slice(2);
const lastAt = args.indexOf('--last');
const lastS = lastAt >= 0 ? Number(args.splice(lastAt, 2)[1]) : Infinity;
const firstAt = args.indexOf('--first');
const firstS = firstAt >= 0 ? Number(args.splice(firstAt, 2)[1]) : Infinity;
const [file, nArg = '30'] = args;
if (!file || !(lastS > 0) || !(firstS > 0)) {
  process.stderr.write('usage: node bench/cpuprofile-top.mjs FILE.cpuprofile [N] [--last SECONDS | --first SECONDS]\n');
  process.exit(2);
}
const n = Number(nArg);
const profile = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const selfUs = new Map();
const from = profile.endTime - lastS * 1e6;
const until = profile.startTime + firstS * 1e6;
for (let i = 0, at = profile.startTime; i < profile.samples.length; i++) {
  at += profile.timeDeltas[i] ?? 0;
  if (at < from || at > until) continue;
  const id = profile.samples[i];
  selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
}
const total = [...selfUs.values()].reduce((x, y) => x + y, 0);
// Waiting for I/O is '(idle)': shares of busy time leave it out.
let idle = 0;
for (const [id, us] of selfUs) if (byId.get(id).callFrame.functionName === '(idle)') idle += us;
const busy = total - idle;
const shortUrl = (url) => url.replace(/^file:\/\//, '').replace(/^.*\/node_modules\//, 'node_modules/').replace(/^.*\/(dist|src)\//, '$1/');
const byFunction = new Map();
const byFile = new Map();
for (const [id, us] of selfUs) {
  const { functionName, url, lineNumber } = byId.get(id).callFrame;
  const where = url ? `${shortUrl(url)}:${lineNumber + 1}` : '';
  const key = `${functionName || '(anonymous)'} ${where}`.trim();
  byFunction.set(key, (byFunction.get(key) ?? 0) + us);
  const f = url ? shortUrl(url) : `(${functionName || 'native'})`;
  byFile.set(f, (byFile.get(f) ?? 0) + us);
}
const print = (title, map) => {
  process.stdout.write(`\n${title} (${(total / 1e6).toFixed(1)} s sampled, ${(busy / 1e6).toFixed(1)} s busy)\n| self ms | share of busy | where |\n|---|---|---|\n`);
  for (const [k, us] of [...map].sort((x, y) => y[1] - x[1]).slice(0, n)) {
    if (k.startsWith('(idle)') || k === '((idle))') continue;
    process.stdout.write(`| ${(us / 1000).toFixed(0)} | ${((100 * us) / busy).toFixed(1)}% | ${k} |\n`);
  }
};
print('Top functions by self time', byFunction);
print('By file', byFile);
