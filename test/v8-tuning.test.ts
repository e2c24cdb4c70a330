// The V8 flags a Shardex process sets for itself (bin/shardex.js), and that node's command line wins.
import { execFileSync } from 'node:child_process';
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

  it('is a flag this V8 knows', () => {
    // An unknown flag would be ignored without a word: node lists the ones it takes.
    expect(execFileSync(process.execPath, ['--v8-options'], { encoding: 'utf8' })).toMatch(/^\s+--interrupt-budget \(/m);
  });
});
