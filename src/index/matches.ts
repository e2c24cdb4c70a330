// Sets of matching documents as the executor materializes them: sorted lists with scores, and
// dense accumulators for unions of terms.

/** Documents matching a clause, ascending, with their scores (null when not scoring). */
export interface Matches {
  readonly docs: Int32Array;
  readonly scores: Float64Array | null;
  readonly size: number;
}

export const NO_MATCHES: Matches = { docs: new Int32Array(0), scores: new Float64Array(0), size: 0 };

/** Dense per-document sums for one disjunction; `touched` lists the marked documents. */
export class Accumulator {
  readonly scores: Float64Array;
  readonly marks: Uint8Array;
  readonly touched: Int32Array;
  count = 0;
  /** Scratch for one window of documents (top-union.ts), made on first use. */
  private window: Int32Array | null = null;

  constructor(readonly capacity: number) {
    this.scores = new Float64Array(capacity);
    this.marks = new Uint8Array(capacity);
    this.touched = new Int32Array(capacity);
  }

  /** The accumulated documents in increasing order, with their sums; leaves the accumulator empty. */
  drain(maxDoc: number, scoring: boolean): Matches {
    const n = this.count;
    const docs = new Int32Array(n);
    const scores = scoring ? new Float64Array(n) : null;
    const marks = this.marks;
    if (n * 8 < maxDoc) {
      const sorted = this.touched.subarray(0, n).sort();
      for (let k = 0; k < n; k++) {
        const d = sorted[k];
        docs[k] = d;
        if (scores !== null) scores[k] = this.scores[d];
        marks[d] = 0;
      }
    } else {
      let k = 0;
      for (let d = 0; d < maxDoc; d++) {
        if (marks[d] === 0) continue;
        docs[k] = d;
        if (scores !== null) scores[k] = this.scores[d];
        marks[d] = 0;
        k++;
      }
    }
    this.count = 0;
    return { docs, scores, size: n };
  }

  /** An array of at least `size` ints, the same one each time it is big enough. */
  windowScratch(size: number): Int32Array {
    if (this.window === null || this.window.length < size) this.window = new Int32Array(size);
    return this.window;
  }

  reset(): void {
    for (let k = 0; k < this.count; k++) this.marks[this.touched[k]] = 0;
    this.count = 0;
  }
}

/** Accumulators of one index, reused by its queries (one per nesting level of disjunctions). */
export class AccumulatorPool {
  private readonly free: Accumulator[] = [];

  acquire(maxDoc: number): Accumulator {
    let acc = this.free.pop();
    while (acc !== undefined && acc.capacity < maxDoc) acc = this.free.pop();
    return acc ?? new Accumulator(Math.max(1024, Math.ceil(maxDoc * 1.25)));
  }

  release(acc: Accumulator): void {
    acc.reset();
    this.free.push(acc);
  }
}
