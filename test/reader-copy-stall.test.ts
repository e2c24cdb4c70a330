// A reader's shard copy that the leader stops sending is given up (SHX_TIMEOUT) instead of
// holding the requests that wait for it, and a finished copy stream is closed.
import { describe, expect, it } from 'vitest';
import { untilStalled } from '../src/read/snapshot-reader.js';

describe('untilStalled', () => {
  it('passes every item of a stream that keeps sending, and closes it', async () => {
    let closed = false;
    async function* source(): AsyncGenerator<number> {
      try {
        for (let i = 0; i < 3; i++) yield i;
      } finally {
        closed = true;
      }
    }
    const seen: number[] = [];
    for await (const x of untilStalled(source(), 1000, 'copying c/shard1')) seen.push(x);
    expect(seen).toEqual([0, 1, 2]);
    expect(closed).toBe(true);
  });

  it('fails with SHX_TIMEOUT when the next item does not come', async () => {
    async function* source(): AsyncGenerator<number> {
      yield 1;
      await new Promise(() => undefined);
    }
    const seen: number[] = [];
    const err = await (async () => {
      for await (const x of untilStalled(source(), 30, 'copying c/shard1 from node1')) seen.push(x);
    })().catch((e) => e);
    expect(seen).toEqual([1]);
    expect(err).toMatchObject({ code: 'SHX_TIMEOUT', message: expect.stringMatching(/copying c\/shard1 from node1: nothing received for 30 ms/) });
  });
});
