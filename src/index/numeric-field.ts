// Doc values of a number or date field (dates as epoch ms): one float64 column indexed by
// document number, NaN where a document has no value. A document with several values keeps the
// least in the column (what an ascending sort uses, as Elasticsearch's default sort mode) and all
// of them, sorted, in a side table (ranges match if any value does; descending sorts use the
// greatest).

export class NumericField {
  readonly kind = 'number' as const;
  values = new Float64Array(0);
  multi: Map<number, Float64Array> | null = null;
  /** Live documents with at least one value. */
  docCount = 0;
  /**
   * Documents with a value by value (ascending, ties by document) and those values: made on
   * first use, dropped when documents are added or renumbered. A deleted document stays in it
   * with the value it had (its cursor skips it).
   */
  private byValue: { readonly docs: Int32Array; readonly values: Float64Array } | null = null;

  constructor(
    readonly key: string,
    readonly slot: number,
  ) {}

  /** Sets the values of a new document from `scratch[0 .. n)`; no-op when n is 0. */
  set(doc: number, scratch: Float64Array, n: number): void {
    if (n === 0) return;
    this.byValue = null;
    if (doc >= this.values.length) {
      const cap = Math.max(doc + 1, this.values.length * 2, 1024);
      const next = new Float64Array(cap);
      next.set(this.values);
      next.fill(NaN, this.values.length);
      this.values = next;
    }
    this.docCount++;
    if (n === 1) {
      this.values[doc] = scratch[0];
      return;
    }
    const all = scratch.slice(0, n).sort();
    this.values[doc] = all[0];
    (this.multi ??= new Map()).set(doc, all);
  }

  remove(doc: number): void {
    if (doc >= this.values.length || Number.isNaN(this.values[doc])) return;
    this.values[doc] = NaN;
    this.docCount--;
    this.multi?.delete(doc);
  }

  /** The value a sort in `order` uses (NaN = none). */
  sortValue(doc: number, order: 'asc' | 'desc'): number {
    if (doc >= this.values.length) return NaN;
    if (order === 'desc' && this.multi !== null) {
      const all = this.multi.get(doc);
      if (all !== undefined) return all[all.length - 1];
    }
    return this.values[doc];
  }

  /**
   * The documents after `after` (below `maxDoc`) whose value is at least `bound` (`desc`) or at
   * most it (asc), in increasing order: those a sort on this single-valued column could still
   * take into its page once its last hit has `bound`. Null when more than `most` would be.
   */
  competing(bound: number, desc: boolean, after: number, maxDoc: number, most: number): Int32Array | null {
    const n = Math.min(maxDoc, this.values.length);
    const { docs, values: sorted } = this.sortedByValue(maxDoc);
    // The first document (in value order) at or past the bound.
    let lo = 0;
    let hi = docs.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (desc ? sorted[mid] < bound : sorted[mid] <= bound) lo = mid + 1;
      else hi = mid;
    }
    const from = desc ? lo : 0;
    const to = desc ? docs.length : lo;
    if (to - from > most) return null;
    const out = new Int32Array(to - from);
    let k = 0;
    for (let i = from; i < to; i++) if (docs[i] > after && docs[i] < n) out[k++] = docs[i];
    return out.subarray(0, k).sort();
  }

  /**
   * Whether a document below `maxDoc` has a value at least `bound` (`desc`) or at most it (asc),
   * deleted documents included: whether a sort on this single-valued column could take one into
   * a page whose last hit has `bound`.
   */
  reaches(bound: number, desc: boolean, maxDoc: number): boolean {
    const { values } = this.sortedByValue(maxDoc);
    if (values.length === 0) return false;
    return desc ? values[values.length - 1] >= bound : values[0] <= bound;
  }

  private sortedByValue(maxDoc: number): { readonly docs: Int32Array; readonly values: Float64Array } {
    if (this.byValue === null) {
      const values = this.values;
      const n = Math.min(maxDoc, values.length);
      let count = 0;
      for (let d = 0; d < n; d++) if (values[d] === values[d]) count++;
      const docs = new Int32Array(count);
      count = 0;
      for (let d = 0; d < n; d++) if (values[d] === values[d]) docs[count++] = d;
      docs.sort((a, b) => values[a] - values[b] || a - b);
      this.byValue = { docs, values: Float64Array.from(docs, (d) => values[d]) };
    }
    return this.byValue;
  }

  /** Everything a restore needs: the column (maxDoc entries) and the multi-valued documents' values. */
  exportState(maxDoc: number): NumericState {
    const values = new Float64Array(maxDoc).fill(NaN);
    values.set(this.values.subarray(0, Math.min(maxDoc, this.values.length)));
    const entries = this.multi === null ? [] : [...this.multi].sort((a, b) => a[0] - b[0]);
    const multiDocs = new Int32Array(entries.length);
    const multiStarts = new Int32Array(entries.length + 1);
    entries.forEach(([d, all], i) => {
      multiDocs[i] = d;
      multiStarts[i + 1] = multiStarts[i] + all.length;
    });
    const multiValues = new Float64Array(multiStarts[entries.length]);
    entries.forEach(([, all], i) => multiValues.set(all, multiStarts[i]));
    return { values, multiDocs, multiStarts, multiValues, docCount: this.docCount };
  }

  /** A field holding `state` (its column is used as it is: a view into a segment file's buffer). */
  static restore(key: string, slot: number, state: NumericState): NumericField {
    const f = new NumericField(key, slot);
    f.values = state.values;
    f.docCount = state.docCount;
    if (state.multiDocs.length > 0) {
      f.multi = new Map();
      for (let i = 0; i < state.multiDocs.length; i++) f.multi.set(state.multiDocs[i], state.multiValues.subarray(state.multiStarts[i], state.multiStarts[i + 1]));
    }
    return f;
  }

  /** Moves values to new document numbers (`newDoc[old]`, increasing; -1 = deleted), in place. */
  renumber(newDoc: Int32Array, newMaxDoc: number): void {
    this.byValue = null;
    const values = this.values;
    for (let d = 0; d < newDoc.length; d++) {
      const nd = newDoc[d];
      // A document past the column has no value; its new number may be inside it.
      if (nd >= 0 && nd < values.length) values[nd] = d < values.length ? values[d] : NaN;
    }
    values.fill(NaN, Math.min(newMaxDoc, values.length));
    if (this.multi !== null) {
      const multi = new Map<number, Float64Array>();
      for (const [d, all] of this.multi) if (newDoc[d] >= 0) multi.set(newDoc[d], all);
      this.multi = multi.size > 0 ? multi : null;
    }
  }
}

/** The persisted state of a NumericField. */
export interface NumericState {
  readonly values: Float64Array<ArrayBuffer>;
  /** Documents with several values, increasing; document multiDocs[i] holds multiValues[multiStarts[i], multiStarts[i + 1]). */
  readonly multiDocs: Int32Array<ArrayBuffer>;
  readonly multiStarts: Int32Array<ArrayBuffer>;
  readonly multiValues: Float64Array<ArrayBuffer>;
  readonly docCount: number;
}
