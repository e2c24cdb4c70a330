// The V8 flags a Shardex process sets for itself (bin/shardex.js), and that node's command line wins.
import { execFileSync, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { INTERRUPT_BUDGET, v8Flags } from '../src/node/v8-tuning.js';

describe('v8Flags', () => {
  it('lowers the interrupt budget to 16,000 by default', () => {
    expect(INTERRUPT_BUDGET).toBe(16_000);
    expect(v8Flags([])).toEqual(['--interrupt-budget=16000']);
    expect(v8Flags(['--max-old-space-size=4096', '--interrupt-budget-for-feedback-allocation=500'])).toEqual(['--interrupt-budget=16000']);
  });

  it("leaves it to node's command line when that gives one, in either spelling", () => {
    expect(v8Flags(['--interrupt-budget=67584'])).toEqual([]);
    expect(v8Flags(['--cpu-prof', '--interrupt_budget=1000'])).toEqual([]);
  });

  it('is what the shardex command sets before it loads the rest, unless node was given a budget', () => {
    const bin = fileURLToPath(new URL('../bin/shardex.js', import.meta.url));
    const probe = fileURLToPath(new URL('./support/v8-flags-probe.mjs', import.meta.url));
    const flagsSet = (nodeArgs: string[]): unknown => {
      const r = spawnSync(process.execPath, [...nodeArgs, '--import', probe, bin, '--help'], { encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(/^V8 FLAGS (.*)$/m.exec(r.stderr)?.[1] ?? 'null');
    };
    expect(flagsSet([])).toEqual(['--interrupt-budget=16000']);
    expect(flagsSet(['--interrupt-budget=67584'])).toEqual([]);
  });

  it('is a flag this V8 knows', () => {
    // An unknown flag would be ignored without a word: node lists the ones it takes.
    expect(execFileSync(process.execPath, ['--v8-options'], { encoding: 'utf8' })).toMatch(/^\s+--interrupt-budget \(/m);
  });
});
