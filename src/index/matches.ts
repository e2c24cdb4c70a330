// Sets of matching documents as the executor combines them: sorted lists with scores, merged
// pairwise for conjunctions, exclusions and filters, and dense accumulators for disjunctions.

/** Documents matching a clause, ascending, with their scores (null when not scoring). */
export interface Matches {
  readonly docs: Int32Array;
  readonly scores: Float64Array | null;
  readonly size: number;
}

export const NO_MATCHES: Matches = { docs: new Int32Array(0), scores: new Float64Array(0), size: 0 };

/** Documents in both; scores summed. */
export function intersect(a: Matches, b: Matches, scoring: boolean): Matches {
  const cap = Math.min(a.size, b.size);
  const docs = new Int32Array(cap);
  const scores = scoring ? new Float64Array(cap) : null;
  let i = 0;
  let j = 0;
  let k = 0;
  while (i < a.size && j < b.size) {
    const da = a.docs[i];
    const db = b.docs[j];
    if (da < db) i++;
    else if (db < da) j++;
    else {
      docs[k] = da;
      if (scores !== null) scores[k] = a.scores![i] + b.scores![j];
      k++;
      i++;
      j++;
    }
  }
  return { docs, scores, size: k };
}

/** The documents of a; those also in b get b's score added. */
export function addOptional(a: Matches, b: Matches): Matches {
  if (b.size === 0) return a;
  const scores = new Float64Array(a.size);
  let j = 0;
  for (let i = 0; i < a.size; i++) {
    const d = a.docs[i];
    while (j < b.size && b.docs[j] < d) j++;
    scores[i] = j < b.size && b.docs[j] === d ? a.scores![i] + b.scores![j] : a.scores![i];
  }
  return { docs: a.docs, scores, size: a.size };
}

/** The documents of a that are also in b, with a's scores (a filter). */
export function restrict(a: Matches, b: Matches): Matches {
  const docs = new Int32Array(Math.min(a.size, b.size));
  const scores = a.scores === null ? null : new Float64Array(docs.length);
  let j = 0;
  let k = 0;
  for (let i = 0; i < a.size && j < b.size; i++) {
    const d = a.docs[i];
    while (j < b.size && b.docs[j] < d) j++;
    if (j < b.size && b.docs[j] === d) {
      docs[k] = d;
      if (scores !== null) scores[k] = a.scores![i];
      k++;
    }
  }
  return { docs, scores, size: k };
}

/** The documents of a that are not in b. */
export function subtract(a: Matches, b: Matches): Matches {
  if (b.size === 0) return a;
  const docs = new Int32Array(a.size);
  const scores = a.scores === null ? null : new Float64Array(a.size);
  let j = 0;
  let k = 0;
  for (let i = 0; i < a.size; i++) {
    const d = a.docs[i];
    while (j < b.size && b.docs[j] < d) j++;
    if (j < b.size && b.docs[j] === d) continue;
    docs[k] = d;
    if (scores !== null) scores[k] = a.scores![i];
    k++;
  }
  return { docs, scores, size: k };
}

/** Dense per-document sums for one disjunction; `touched` lists the marked documents. */
export class Accumulator {
  readonly scores: Float64Array;
  readonly marks: Uint8Array;
  readonly touched: Int32Array;
  count = 0;

  constructor(readonly capacity: number) {
    this.scores = new Float64Array(capacity);
    this.marks = new Uint8Array(capacity);
    this.touched = new Int32Array(capacity);
  }

  addAll(m: Matches, scoring: boolean): void {
    const marks = this.marks;
    const sums = this.scores;
    for (let k = 0; k < m.size; k++) {
      const d = m.docs[k];
      if (marks[d] === 0) {
        marks[d] = 1;
        if (scoring) sums[d] = m.scores![k];
        this.touched[this.count++] = d;
      } else if (scoring) {
        sums[d] += m.scores![k];
      }
    }
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
