// V8 settings a Shardex process starts with (bin/shardex.js applies them before loading the rest).
//
// V8 optimizes a function once it has run its interrupt budget of bytecode (66 KB by default). A
// node's request path is hundreds of small functions, each run once or twice per request, so at
// the default a started node answered searches 10-40% slower over its first 5,000-10,000
// requests (bench/RESULTS.md, "How soon a node's code is optimized"); with a budget of 16,000 it
// gets there in about a third of the requests. The price: more is compiled while a process
// starts (on 2 cores, three node processes took 0.2-0.3 s longer to come up).

/** The interrupt budget Shardex processes run with, unless node's command line gives one. */
export const INTERRUPT_BUDGET = 16_000;

/**
 * The V8 flags to set for a process started with `execArgv` (node's own command-line options):
 * a flag given there wins over ours.
 */
export function v8Flags(execArgv: readonly string[]): string[] {
  // V8 reads `_` and `-` alike in a flag's name; --interrupt-budget-for-feedback-allocation is another flag.
  const given = execArgv.some((a) => /^--interrupt[-_]budget(=|$)/.test(a));
  return given ? [] : [`--interrupt-budget=${INTERRUPT_BUDGET}`];
}
