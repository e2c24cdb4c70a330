// Issue 14, reader item 4: a draining scan pool answers new and queued scans BUSY at once and
// resolves once the scans it started have finished.
import { describe, expect, it } from 'vitest';
import { ScanPool } from '../src/read/scan-pool.js';

function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}

describe('ScanPool.drain', () => {
  it('refuses queued and new scans as BUSY, lets the running one finish, then resolves', async () => {
    const pool = new ScanPool(1);
    const g = gate();
    const running = pool.run(0, async () => {
      await g.promise;
      return 'finished';
    });
    const queued = pool.run(0, async () => 'never');
    let drained = false;
    const drain = pool.drain('reader r1 is stopping').then(() => (drained = true));
    await expect(queued).rejects.toMatchObject({ code: 'SHX_BUSY', message: expect.stringMatching(/r1 is stopping/) });
    await expect(pool.run(1000, async () => 'never')).rejects.toMatchObject({ code: 'SHX_BUSY' });
    expect(pool.draining).toBe(true);
    expect(drained).toBe(false);
    g.open();
    expect(await running).toBe('finished');
    await drain;
    expect(drained).toBe(true);
    expect(pool.busy).toBe(2);
  });

  it('resolves at once when nothing runs', async () => {
    const pool = new ScanPool(2);
    await pool.drain('stopping');
    expect(pool.running).toBe(0);
  });
});
