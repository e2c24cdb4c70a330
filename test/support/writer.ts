// A steady writer for failover tests: posts small batches through the live nodes, records
// every acknowledged id and version, and classifies every failure. Bounded in time by stop().
import { setTimeout as sleep } from 'node:timers/promises';

export interface WriterFailure {
  readonly status: number | string;
  readonly message: string;
}

export class SteadyWriter {
  readonly acked = new Map<string, number>();
  /** Failures that are allowed during failover: 503 (with Retry-After) and refused connections. */
  readonly retryable: WriterFailure[] = [];
  /** Anything else: a defect. */
  readonly unexpected: WriterFailure[] = [];
  /** When each acknowledged write was sent and acknowledged (ms since epoch). */
  readonly acks: Array<{ sent: number; acked: number }> = [];
  private running = false;
  private loops: Promise<void>[] = [];
  private seq = 0;

  constructor(
    private readonly collection: string,
    private readonly urls: () => string[],
    /** `lanes` loops write side by side, lane k through the k-th node: a frozen node stalls only its lane. */
    private readonly opts: { batch: number; pauseMs: number; prefix: string; lanes?: number },
  ) {}

  start(): void {
    this.running = true;
    const lanes = this.opts.lanes ?? 1;
    for (let lane = 0; lane < lanes; lane++) this.loops.push(this.run(lane, lanes));
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
  }

  private async run(lane: number, lanes: number): Promise<void> {
    let i = lane;
    while (this.running) {
      const urls = this.urls();
      const url = urls[i % urls.length]!;
      i += lanes === 1 ? 1 : 0;
      const docs = Array.from({ length: this.opts.batch }, () => {
        const n = this.seq++;
        // Every fifth write overwrites an earlier id, so versions of one id move on.
        const id = n % 5 === 4 ? `${this.opts.prefix}${n - 4}` : `${this.opts.prefix}${n}`;
        return { id, n, text: `write ${n}` };
      });
      const sent = Date.now();
      try {
        const res = await fetch(`${url}/api/collections/${this.collection}/docs`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(docs),
          signal: AbortSignal.timeout(60_000),
        });
        const body = (await res.json()) as { versions?: Record<string, number>; error?: string };
        if (res.status === 200 && body.versions) {
          for (const [id, v] of Object.entries(body.versions)) this.acked.set(id, Math.max(v, this.acked.get(id) ?? 0));
          this.acks.push({ sent, acked: Date.now() });
        } else if (res.status === 503 && res.headers.get('retry-after')) {
          this.retryable.push({ status: 503, message: body.error ?? '' });
        } else this.unexpected.push({ status: res.status, message: body.error ?? JSON.stringify(body) });
      } catch (err) {
        const code = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).name;
        if (code === 'ECONNREFUSED' || code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') this.retryable.push({ status: code, message: (err as Error).message });
        else this.unexpected.push({ status: code, message: (err as Error).message });
      }
      await sleep(this.opts.pauseMs);
    }
  }
}
