// Selecting the best k matches of a query in the one hit order of sort.ts (keys in turn, missing
// values last whatever the direction, then id ascending), over sort keys turned into numbers
// once per query: scores, numbers and dates as they are, keyword values as the rank of their
// term in term order. A comparison is then a few array reads, and the bounded heap rejects most
// candidates with one.

import { compareIds } from './sort.js';

export interface SortColumn {
  /** Per match, the key as a number (NaN = missing); null compares the ids. */
  readonly keys: Float64Array | null;
  readonly desc: boolean;
}

/** Indices in 0..n of the best k, best first. */
export function selectTop(n: number, k: number, columns: readonly SortColumn[], idOf: (i: number) => string): Int32Array {
  if (k === 0 || n === 0) return new Int32Array(0);
  const cmp = comparator(columns, idOf);
  if (n <= k) {
    const all = Array.from({ length: n }, (_, i) => i);
    all.sort(cmp);
    return Int32Array.from(all);
  }
  const first = columns.length > 0 ? columns[0].keys : null;
  const firstDesc = columns.length > 0 && columns[0].desc;
  // A bounded max-heap of the k best so far, the worst at the root.
  const heap = new Int32Array(k);
  let size = 0;
  for (let i = 0; i < n; i++) {
    if (size < k) {
      let c = size++;
      heap[c] = i;
      while (c > 0) {
        const parent = (c - 1) >> 1;
        if (cmp(heap[c], heap[parent]) <= 0) break;
        const t = heap[c];
        heap[c] = heap[parent];
        heap[parent] = t;
        c = parent;
      }
      continue;
    }
    if (first !== null) {
      // Strictly worse than the worst kept on the first key: out, without a full comparison.
      const a = first[i];
      const w = first[heap[0]];
      if (w === w && (a !== a || (firstDesc ? a < w : a > w))) continue;
    }
    if (cmp(i, heap[0]) >= 0) continue;
    heap[0] = i;
    let c = 0;
    for (;;) {
      const l = 2 * c + 1;
      if (l >= k) break;
      const r = l + 1;
      const worst = r < k && cmp(heap[r], heap[l]) > 0 ? r : l;
      if (cmp(heap[worst], heap[c]) <= 0) break;
      const t = heap[c];
      heap[c] = heap[worst];
      heap[worst] = t;
      c = worst;
    }
  }
  return Int32Array.from(Array.from(heap).sort(cmp));
}

function comparator(columns: readonly SortColumn[], idOf: (i: number) => string): (i: number, j: number) => number {
  return (i, j) => {
    for (let c = 0; c < columns.length; c++) {
      const col = columns[c];
      const keys = col.keys;
      if (keys === null) {
        const x = compareIds(idOf(i), idOf(j));
        if (x !== 0) return col.desc ? -x : x;
        continue;
      }
      const a = keys[i];
      const b = keys[j];
      if (a === b) continue;
      if (a !== a) {
        if (b !== b) continue;
        return 1;
      }
      if (b !== b) return -1;
      return a < b !== col.desc ? -1 : 1;
    }
    return compareIds(idOf(i), idOf(j));
  };
}
