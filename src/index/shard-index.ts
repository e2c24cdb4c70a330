// The search index of one replica of one shard: pure in-memory, fed by the replica on every
// applied add and delete (and, at open, with every stored document), queried in the two phases
// of a distributed search: search() for the top ids with their sort values, fetch() for stored
// fields. collectStats()/search(..., globalStats) give dfs_query_then_fetch scoring.
//
// Documents get increasing internal numbers; replacing one deletes the old number and adds a new
// one. A deleted number is dead at once (live[] is checked on every read, statistics count live
// documents only) and its postings are dropped lazily; when dead numbers outnumber live ones the
// whole index is renumbered (compact()).

import { ShardexError } from '../errors.js';
import { Analyzer } from './analyzer.js';
import { checkDocument, parseFieldList, projectFields, type StoredDoc } from './document.js';
import { NO_MORE_DOCS } from './cursors.js';
import { QueryExecutor, type IndexView } from './execute.js';
import { FilterCache } from './filter-cache.js';
import { IdTable } from './id-table.js';
import { AccumulatorPool, type Matches } from './matches.js';
import { grow, InvertedField, type ForwardSink, type InvertedState, type PackedInvertedState } from './inverted-field.js';
import { NumericField, type NumericState } from './numeric-field.js';
import { MATCH_ALL, type Query } from './query.js';
import { parseQuery } from './query-parser.js';
import { KEYWORD_SUFFIX, RESERVED_DOC_KEYS, type CollectionSchema } from './schema.js';
import { compareIds, parseSort, type SortKey, type SortSpec, type SortValue } from './sort.js';
import { selectTop, type SortColumn } from './top-hits.js';
import { StatsLookup, type FieldStats, type IndexStats, type SortFieldStats, type TermStats } from './stats.js';
import { detectDate, toDate, toNumber } from './values.js';

/** Position gap between the values of a multi-valued text field (Solr's positionIncrementGap). */
export const POSITION_GAP = 100;
export const DEFAULT_LIMIT = 10;
/** offset + limit may not exceed this (Elasticsearch's index.max_result_window). */
export const MAX_RESULT_WINDOW = 10_000;
/**
 * Longest string of an undeclared field that is also indexed as an exact value (`f.keyword`):
 * Elasticsearch's `ignore_above: 256` of its dynamic keyword sub-field. Longer strings (bodies,
 * descriptions) are only searchable as text, so a schema-less collection does not keep every
 * long text a second time as a term.
 */
export const DYNAMIC_KEYWORD_MAX_LENGTH = 256;
/** Dead document numbers tolerated before compact() runs by itself (and only if they outnumber live ones). */
const MIN_DEAD_TO_COMPACT = 1024;

/** Reads a stored document for fetch() (the replica's document store, typically). */
export type DocLookup = (id: string) => StoredDoc | null | undefined | Promise<StoredDoc | null | undefined>;

export interface ShardIndexOptions {
  /** Where fetch() reads stored fields; without it, serve them from the document store directly. */
  readonly lookup?: DocLookup;
}

export interface SearchRequest {
  /** Query string (see query-parser.ts) or a parsed query; default `*`. */
  readonly q?: string | Query;
  /** Filter queries: restrict the matches without scoring. */
  readonly filters?: readonly (string | Query)[];
  /** Solr syntax (`price desc,ts asc`) or a parsed spec; default `score desc`. */
  readonly sort?: string | SortSpec;
  readonly offset?: number;
  /** Default 10. */
  readonly limit?: number;
  /** Per-field score multipliers (by field key), over the schema's boosts. */
  readonly boosts?: Readonly<Record<string, number>>;
  /** Operator between clauses written side by side; default 'OR'. */
  readonly defaultOperator?: 'OR' | 'AND';
  /** Stored fields wanted (`id,title`): not used by search(), which returns ids; give it to fetch(). */
  readonly fields?: string | readonly string[] | null;
  /**
   * How far `total` is counted exactly (Elasticsearch's track_total_hits): true (the default)
   * always; a number n: at least up to n, past which the result may say `totalRelation: 'gte'`
   * and a page sorted by score or by a number reads only what can still make it; false: as 0.
   */
  readonly trackTotalHits?: boolean | number;
}

export interface SearchHit {
  readonly id: string;
  readonly score: number;
  /** One value per sort key (null = missing); dates as epoch ms. */
  readonly sortValues: SortValue[];
}

export interface ShardSearchResult {
  /** Every match of q and the filters; with `totalRelation: 'gte'`, a lower bound. */
  readonly total: number;
  /** Present when `total` is a lower bound (the count stopped at trackTotalHits). */
  readonly totalRelation?: 'gte';
  /** The top offset + limit hits, best first (phase 1: the coordinator applies the offset). */
  readonly hits: SearchHit[];
}

type FieldPlan =
  | { readonly kind: 'text' | 'keyword'; readonly field: InvertedField }
  | { readonly kind: 'number' | 'date'; readonly field: NumericField }
  | { readonly kind: 'dynamic'; readonly name: string; text: InvertedField | null; keyword: InvertedField | null; number: NumericField | null };

const EMPTY_FORWARD = new Int32Array(0);
/** Int32 entries per shared forward-index chunk (256 KiB). */
const FORWARD_CHUNK = 1 << 16;

export class ShardIndex implements IndexView, ForwardSink {
  readonly schema: CollectionSchema;
  private readonly analyzer: Analyzer;
  private readonly lookup: DocLookup | undefined;

  /** Ids of the documents added to this index (a restored index's are in restoredIds). */
  private readonly idToDoc = new Map<string, number>();
  /** Id by document: set when added, or when a restored document's id is first read. */
  private ids: (string | undefined)[] = [];
  /** A restored index's ids and their lookup table, read in place from its segment file until compact() renumbers. */
  private restoredIds: IdTable | null = null;
  live = new Uint8Array(1024);
  /**
   * Per document added here: [slot, count, termId x count, ...] of every field it touched. A
   * restored document has none (segment files keep no forward index): it is removed late (see
   * InvertedField.removeLateDoc).
   */
  private forward: (Int32Array | undefined)[] = [];
  maxDoc = 0;
  private liveCount = 0;
  private deadDocs = 0;

  private readonly plans = new Map<string, FieldPlan>();
  private readonly slots: (InvertedField | NumericField)[] = [];
  private readonly invertedByKey = new Map<string, InvertedField>();
  private readonly numericByKey = new Map<string, NumericField>();
  private defaultFields: InvertedField[] | null = null;
  readonly accumulators = new AccumulatorPool();
  readonly filterCache = new FilterCache();

  // write-path scratch
  private fwd = new Int32Array(256);
  private fwdLen = 0;
  /** Where keepForward() puts documents' forward entries (grows from 1 Ki to FORWARD_CHUNK entries). */
  private chunk = EMPTY_FORWARD;
  private chunkUsed = 0;
  /** Some field may hold pending postings. */
  private unflushed = false;
  private numbers = new Float64Array(16);

  constructor(schema: CollectionSchema, options: ShardIndexOptions = {}) {
    this.schema = schema;
    this.analyzer = schema.analyzer;
    this.lookup = options.lookup;
    for (const def of schema.fields.values()) {
      if (def.type === 'text' || def.type === 'keyword') {
        this.plans.set(def.name, { kind: def.type, field: this.newInverted(def.name, def.type === 'text') });
      } else {
        this.plans.set(def.name, { kind: def.type, field: this.newNumeric(def.name) });
      }
    }
  }

  /** Live documents. */
  get size(): number {
    return this.liveCount;
  }

  has(id: string): boolean {
    return this.docOf(id) >= 0;
  }

  /** The ids of the live documents, in document order (a copy: the index may change while the caller walks it). */
  liveIds(): string[] {
    const out: string[] = [];
    for (let d = 0; d < this.maxDoc; d++) if (this.live[d] === 1) out.push(this.idAt(d) as string);
    return out;
  }

  /** Live document d's id (undefined for a deleted one); a restored one's is decoded once, when first read. */
  private idAt(d: number): string | undefined {
    const id = this.ids[d];
    if (id !== undefined) return id;
    const t = this.restoredIds;
    if (t === null || d >= t.count || this.live[d] !== 1) return undefined;
    return (this.ids[d] = t.idOf(d));
  }

  // ---- write path ----

  /**
   * Adds (doc) and deletes (doc null) in order, as add() and delete() one by one would (the
   * replica's path: one call per applied request). A bad document throws, leaving the ones
   * before it indexed.
   */
  apply(ops: Iterable<{ readonly id: string; readonly doc: StoredDoc | null }>): void {
    for (const op of ops) {
      if (op.doc === null) this.delete(op.id);
      else this.add(op.id, op.doc);
    }
  }

  /** Indexes `doc` under `id`, replacing any earlier version; a bad document changes nothing. */
  add(id: string, doc: StoredDoc): void {
    if (typeof id !== 'string' || id.length === 0) throw new ShardexError('SHX_BAD_ID', 'a document id must be a non-empty string');
    checkDocument(this.schema, doc);
    const old = this.docOf(id);
    if (old >= 0) this.removeDoc(old);
    const d = this.maxDoc++;
    if (d >= this.live.length) {
      const live = new Uint8Array(this.live.length * 2);
      live.set(this.live);
      this.live = live;
    }
    this.fwdLen = 0;
    for (const key in doc) {
      if (!Object.hasOwn(doc, key) || RESERVED_DOC_KEYS.has(key)) continue;
      const v = doc[key];
      if (v === null || v === undefined) continue;
      this.indexValue(d, key, v);
    }
    this.forward[d] = this.keepForward(this.fwd, this.fwdLen);
    this.unflushed = true;
    this.ids[d] = id;
    this.live[d] = 1;
    this.idToDoc.set(id, d);
    this.liveCount++;
    this.maybeCompact();
  }

  /** Removes the document; false when there was none. */
  delete(id: string): boolean {
    const d = this.docOf(id);
    if (d < 0) return false;
    this.removeDoc(d);
    this.maybeCompact();
    return true;
  }

  /**
   * Appends every field's pending postings (see InvertedField). inverted() and defaultTextFields(),
   * the only ways a reader reaches a field, call it first, so a search sees every document added
   * before it; between reads, postings are appended in batches as large as a field's pending
   * buffer, however small the write requests.
   */
  private flush(): void {
    if (!this.unflushed) return;
    for (const f of this.slots) if (f.kind === 'inverted') f.flush();
    this.unflushed = false;
  }

  /**
   * A copy of fwd[0, n) for the forward index: a view into a shared chunk, so that a document
   * costs no buffer of its own (one per document per replica was a measurable share of ingest).
   * compact() re-packs the live documents' entries into fresh chunks.
   */
  private keepForward(fwd: Int32Array, n: number): Int32Array {
    if (n === 0) return EMPTY_FORWARD;
    if (n > FORWARD_CHUNK >> 4) return fwd.slice(0, n);
    if (this.chunkUsed + n > this.chunk.length) {
      // A full chunk stays alive through its documents' views; the next one is twice as large.
      this.chunk = new Int32Array(Math.min(FORWARD_CHUNK, Math.max(1024, this.chunk.length * 2)));
      this.chunkUsed = 0;
    }
    const chunk = this.chunk;
    const at = this.chunkUsed;
    for (let i = 0; i < n; i++) chunk[at + i] = fwd[i];
    this.chunkUsed = at + n;
    return chunk.subarray(at, at + n);
  }

  /** Renumbers the live documents densely and drops every dead posting and unused term (in place). */
  compact(): void {
    // Terms without documents only appear through deletes, so nothing dead means nothing to do.
    if (this.deadDocs === 0) return;
    const oldMax = this.maxDoc;
    const newDoc = new Int32Array(oldMax).fill(-1);
    let n = 0;
    for (let d = 0; d < oldMax; d++) if (this.live[d] === 1) newDoc[d] = n++;
    const termMaps: (Int32Array | null)[] = [];
    for (const f of this.slots) {
      if (f.kind === 'inverted') termMaps.push(f.renumber(newDoc, n));
      else {
        f.renumber(newDoc, n);
        termMaps.push(null);
      }
    }
    for (let d = 0; d < oldMax; d++) {
      const nd = newDoc[d];
      if (nd < 0) continue;
      const id = this.idAt(d) as string;
      const fwd = this.forward[d];
      if (fwd !== undefined) {
        for (let i = 0; i < fwd.length; i += 2 + fwd[i + 1]) {
          const map = termMaps[fwd[i]];
          if (map === null) continue;
          for (let k = i + 2; k < i + 2 + fwd[i + 1]; k++) fwd[k] = map[fwd[k]];
        }
      }
      this.ids[nd] = id;
      this.forward[nd] = fwd;
      this.idToDoc.set(id, nd);
    }
    // Re-pack, so that chunks holding mostly deleted documents' entries can be collected.
    this.chunk = EMPTY_FORWARD;
    this.chunkUsed = 0;
    for (let d = 0; d < n; d++) {
      const fwd = this.forward[d];
      if (fwd !== undefined) this.forward[d] = this.keepForward(fwd, fwd.length);
    }
    this.restoredIds = null;
    this.ids.length = n;
    this.forward.length = n;
    this.live.fill(1, 0, n);
    this.live.fill(0, n);
    this.maxDoc = n;
    this.deadDocs = 0;
    // Numbers now name other documents.
    this.filterCache.clear();
  }

  /**
   * Gives back the spare capacity postings keep for growth (about a fifth of the index after a
   * bulk load): worth calling once after rebuilding the index from the store at open.
   */
  trim(): void {
    for (const f of this.slots) if (f.kind === 'inverted') f.trim();
  }

  private maybeCompact(): void {
    if (this.deadDocs >= MIN_DEAD_TO_COMPACT && this.deadDocs > this.liveCount) this.compact();
  }

  private removeDoc(d: number): void {
    const fwd = this.forward[d];
    this.live[d] = 0;
    if (fwd === undefined) {
      for (const f of this.slots) {
        if (f.kind === 'inverted') f.removeLateDoc(d);
        else f.remove(d);
      }
    } else {
      for (let i = 0; i < fwd.length; i += 2 + fwd[i + 1]) {
        const f = this.slots[fwd[i]];
        if (f.kind === 'inverted') f.removeDoc(d, fwd, i + 2, fwd[i + 1], this.live);
        else f.remove(d);
      }
    }
    const id = this.ids[d];
    if (id !== undefined) this.idToDoc.delete(id);
    this.forward[d] = undefined;
    this.ids[d] = undefined;
    this.liveCount--;
    this.deadDocs++;
  }

  private indexValue(d: number, key: string, v: unknown): void {
    const plan = this.plans.get(key) ?? this.newDynamicPlan(key);
    switch (plan.kind) {
      case 'text':
        plan.field.beginDoc();
        this.analyzeInto(plan.field, v);
        plan.field.endDoc(d, this);
        return;
      case 'keyword': {
        const f = plan.field;
        f.beginDoc();
        if (Array.isArray(v)) {
          for (const item of v) if (item !== null && item !== undefined) f.value(stringOf(item));
        } else {
          f.value(stringOf(v));
        }
        f.endDoc(d, this);
        return;
      }
      case 'number':
      case 'date': {
        const toValue = plan.kind === 'number' ? toNumber : toDate;
        let n = 0;
        if (Array.isArray(v)) {
          for (const item of v) if (item !== null && item !== undefined) n = this.pushNumber(n, toValue(item));
        } else {
          n = this.pushNumber(n, toValue(v));
        }
        this.setNumbers(plan.field, d, n);
        return;
      }
      case 'dynamic':
        this.indexDynamic(plan, d, v);
        return;
    }
  }

  /**
   * An undeclared field: numbers, and strings that are ISO 8601 dates (as epoch ms: detectDate,
   * Elasticsearch's date detection), to number `f`; other strings (and booleans) to text `f` and,
   * up to DYNAMIC_KEYWORD_MAX_LENGTH characters, to keyword `f.keyword`.
   */
  private indexDynamic(plan: FieldPlan & { kind: 'dynamic' }, d: number, v: unknown): void {
    if (!Array.isArray(v)) {
      const n = dynamicNumber(v);
      if (!Number.isNaN(n)) {
        plan.number ??= this.newNumeric(plan.name);
        this.setNumbers(plan.number, d, this.pushNumber(0, n));
        return;
      }
      const s = stringOf(v);
      const text = (plan.text ??= this.newInverted(plan.name, true));
      text.beginDoc();
      this.analyzer.analyze(s, 0, text);
      text.endDoc(d, this);
      if (s.length <= DYNAMIC_KEYWORD_MAX_LENGTH) {
        const kw = (plan.keyword ??= this.newInverted(plan.name + KEYWORD_SUFFIX, false));
        kw.beginDoc();
        kw.value(s);
        kw.endDoc(d, this);
      }
      return;
    }
    const strings: string[] = [];
    let short = 0;
    let n = 0;
    for (const item of v) {
      if (item === null || item === undefined) continue;
      const num = dynamicNumber(item);
      if (!Number.isNaN(num)) n = this.pushNumber(n, num);
      else {
        const s = stringOf(item);
        strings.push(s);
        if (s.length <= DYNAMIC_KEYWORD_MAX_LENGTH) short++;
      }
    }
    if (strings.length > 0) {
      const text = (plan.text ??= this.newInverted(plan.name, true));
      const kw = short > 0 ? (plan.keyword ??= this.newInverted(plan.name + KEYWORD_SUFFIX, false)) : null;
      text.beginDoc();
      kw?.beginDoc();
      let pos = 0;
      for (const s of strings) {
        pos = this.analyzer.analyze(s, pos, text) + POSITION_GAP;
        if (kw !== null && s.length <= DYNAMIC_KEYWORD_MAX_LENGTH) kw.value(s);
      }
      text.endDoc(d, this);
      kw?.endDoc(d, this);
    }
    if (n > 0) {
      plan.number ??= this.newNumeric(plan.name);
      this.setNumbers(plan.number, d, n);
    }
  }

  private analyzeInto(f: InvertedField, v: unknown): void {
    if (!Array.isArray(v)) {
      this.analyzer.analyze(stringOf(v), 0, f);
      return;
    }
    let pos = 0;
    for (const item of v) {
      if (item !== null && item !== undefined) pos = this.analyzer.analyze(stringOf(item), pos, f) + POSITION_GAP;
    }
  }

  private pushNumber(n: number, value: number): number {
    if (n === this.numbers.length) {
      const next = new Float64Array(n * 2);
      next.set(this.numbers);
      this.numbers = next;
    }
    this.numbers[n] = value;
    return n + 1;
  }

  private setNumbers(f: NumericField, d: number, n: number): void {
    if (n === 0) return;
    f.set(d, this.numbers, n);
    this.beginField(f.slot, 0);
  }

  /** ForwardSink: fields record the terms of the document being added. */
  beginField(slot: number, termCount: number): void {
    this.ensureForward(2 + termCount);
    this.fwd[this.fwdLen++] = slot;
    this.fwd[this.fwdLen++] = termCount;
  }

  termId(id: number): void {
    this.fwd[this.fwdLen++] = id;
  }

  private ensureForward(extra: number): void {
    if (this.fwdLen + extra > this.fwd.length) this.fwd = grow(this.fwd, Math.max(this.fwd.length * 2, this.fwdLen + extra));
  }

  private newInverted(key: string, text: boolean): InvertedField {
    const f = new InvertedField(key, this.slots.length, text);
    this.slots.push(f);
    this.invertedByKey.set(key, f);
    if (text) this.defaultFields = null;
    return f;
  }

  private newNumeric(key: string): NumericField {
    const f = new NumericField(key, this.slots.length);
    this.slots.push(f);
    this.numericByKey.set(key, f);
    return f;
  }

  private newDynamicPlan(key: string): FieldPlan {
    const plan: FieldPlan = { kind: 'dynamic', name: key, text: null, keyword: null, number: null };
    this.plans.set(key, plan);
    return plan;
  }

  // ---- persistence (segment-file.ts) ----

  /**
   * The whole index as typed arrays and strings, deleted documents and their postings included,
   * so that restore() gives back this very index. Synchronous: it is the index at one instant.
   */
  exportState(): ShardIndexState {
    this.flush();
    const maxDoc = this.maxDoc;
    const slotOf = (f: InvertedField | NumericField | null): number => (f === null ? -1 : f.slot);
    const dynamic: DynamicPlanState[] = [];
    for (const plan of this.plans.values()) {
      if (plan.kind === 'dynamic') dynamic.push({ name: plan.name, text: slotOf(plan.text), keyword: slotOf(plan.keyword), number: slotOf(plan.number) });
    }
    return {
      maxDoc,
      liveCount: this.liveCount,
      deadDocs: this.deadDocs,
      ids: Array.from({ length: maxDoc }, (_, d) => this.idAt(d) ?? ''),
      live: this.live.slice(0, maxDoc),
      slots: this.slots.map((f): SlotState =>
        f.kind === 'inverted' ? { kind: 'inverted', key: f.key, withPositions: f.withPositions, state: f.exportState(maxDoc, this.live) } : { kind: 'number', key: f.key, state: f.exportState(maxDoc) },
      ),
      dynamic,
    };
  }

  /**
   * The index `state` describes, for `schema`. Throws SHX_BAD_CONFIG when the state was written for
   * other declared fields (the caller rebuilds from the documents then).
   */
  static restore(schema: CollectionSchema, state: RestorableState, options: ShardIndexOptions = {}): ShardIndex {
    const index = new ShardIndex(schema, options);
    index.load(state);
    return index;
  }

  private load(state: RestorableState): void {
    const declared = this.slots.length;
    if (state.slots.length < declared) throw stateMismatch('it has fewer fields than the schema declares');
    this.slots.length = 0;
    this.invertedByKey.clear();
    this.numericByKey.clear();
    state.slots.forEach((s, slot) => {
      const f = s.kind === 'inverted' ? InvertedField.restore(s.key, slot, s.withPositions, s.state) : NumericField.restore(s.key, slot, s.state);
      this.slots.push(f);
      if (f.kind === 'inverted') this.invertedByKey.set(f.key, f);
      else this.numericByKey.set(f.key, f);
    });
    for (const def of this.schema.fields.values()) {
      const inverted = def.type === 'text' || def.type === 'keyword';
      const f = inverted ? this.invertedByKey.get(def.name) : this.numericByKey.get(def.name);
      if (f === undefined || f.slot >= declared || (f.kind === 'inverted' && f.withPositions !== (def.type === 'text'))) {
        throw stateMismatch(`its field '${def.name}' is not the schema's ${def.type} field`);
      }
      this.plans.set(def.name, f.kind === 'inverted' ? { kind: def.type as 'text' | 'keyword', field: f } : { kind: def.type as 'number' | 'date', field: f });
    }
    const bySlot = (slot: number, kind: 'inverted' | 'number'): InvertedField | NumericField | null => {
      if (slot < 0) return null;
      const f = this.slots[slot];
      if (f === undefined || f.kind !== kind) throw stateMismatch(`a dynamic field refers to slot ${slot}, which is not a ${kind} field`);
      return f;
    };
    for (const p of state.dynamic) {
      this.plans.set(p.name, {
        kind: 'dynamic',
        name: p.name,
        text: bySlot(p.text, 'inverted') as InvertedField | null,
        keyword: bySlot(p.keyword, 'inverted') as InvertedField | null,
        number: bySlot(p.number, 'number') as NumericField | null,
      });
    }
    this.defaultFields = null;
    const maxDoc = state.maxDoc;
    this.maxDoc = maxDoc;
    this.live = new Uint8Array(Math.max(1024, maxDoc));
    this.live.set(state.live.subarray(0, maxDoc));
    this.ids = new Array<string | undefined>(maxDoc);
    // No forward entries (nor room for them): a restored document is removed late.
    this.forward = [];
    let live = 0;
    if (state.ids instanceof IdTable) {
      // Looked up and decoded in place (see IdTable): nothing per document at open.
      if (state.ids.count !== maxDoc) throw stateMismatch(`its id table holds ${state.ids.count} documents, not ${maxDoc}`);
      this.restoredIds = state.ids;
      for (let d = 0; d < maxDoc; d++) live += this.live[d]!;
    } else {
      for (let d = 0; d < maxDoc; d++) {
        if (this.live[d] !== 1) continue;
        const id = state.ids[d]!;
        this.ids[d] = id;
        this.idToDoc.set(id, d);
      }
      live = this.idToDoc.size;
    }
    this.liveCount = state.liveCount;
    this.deadDocs = state.deadDocs;
    if (live !== this.liveCount) throw stateMismatch(`it lists ${live} live documents and counts ${this.liveCount}`);
  }

  // ---- IndexView ----

  inverted(key: string): InvertedField | undefined {
    this.flush();
    return this.invertedByKey.get(key);
  }

  numeric(key: string): NumericField | undefined {
    return this.numericByKey.get(key);
  }

  defaultTextFields(): readonly InvertedField[] {
    this.flush();
    if (this.defaultFields === null) {
      const fields = [...this.invertedByKey.values()].filter((f) => f.withPositions);
      fields.sort((a, b) => compareIds(a.key, b.key));
      this.defaultFields = fields;
    }
    return this.defaultFields;
  }

  docOf(id: string): number {
    const d = this.idToDoc.get(id);
    if (d !== undefined) return d;
    const r = this.restoredIds?.find(id) ?? -1;
    return r >= 0 && this.live[r] === 1 ? r : -1;
  }

  schemaBoost(key: string): number {
    return this.schema.fields.get(key)?.boost ?? 1;
  }

  // ---- read path ----

  /**
   * Phase 1: the total and the top offset+limit hits with their sort values. `floor` (a page
   * sorted by score only): a score that k = offset+limit documents searched elsewhere already
   * reach; hits scoring below it may be left out, as they cannot make the page. `sortFloor` (a
   * page whose first sort key is a number column, and trackTotalHits counted elsewhere): the
   * value of that key that k documents searched elsewhere already reach; documents whose value is
   * worse cannot make the page and may be left out of it and of the total (then a lower bound).
   */
  search(req: SearchRequest = {}, globalStats?: IndexStats, floor = -Infinity, sortFloor?: number): ShardSearchResult {
    const { offset, limit, q, filters, sort } = this.parseRequest(req);
    const stats = globalStats === undefined ? null : StatsLookup.of(globalStats);
    this.checkSortFields(sort, stats);

    const executor = new QueryExecutor(this, stats, req.boosts);
    const track = countUpTo(req.trackTotalHits);
    if (sort.length === 1 && sort[0].type === 'score' && sort[0].order === 'desc') {
      const top = executor.topByScore(q, filters, offset + limit, track, (d) => this.idAt(d) as string, floor);
      if (top !== null) {
        const hits: SearchHit[] = new Array(top.docs.length);
        for (let i = 0; i < hits.length; i++) hits[i] = { id: this.idAt(top.docs[i]) as string, score: top.scores[i], sortValues: [top.scores[i]] };
        return { total: top.total, hits, ...(!top.exact && { totalRelation: 'gte' as const }) };
      }
    }
    // A sort not by score scores only the page's hits (their score is still reported).
    const byScore = sort.some((key) => key.type === 'score');
    const early = byScore || track === Infinity ? null : this.competingMatches(executor, q, filters, offset + limit, track, sort[0], sortFloor);
    const m = early ?? executor.matches(q, filters, byScore);
    const top = this.selectTop(m, offset + limit, sort);
    const scores = byScore ? null : this.pageScores(executor, q, m, top);
    const hits: SearchHit[] = new Array(top.length);
    for (let i = 0; i < top.length; i++) {
      const doc = m.docs[top[i]];
      const score = scores === null ? m.scores![top[i]] : scores.get(doc)!;
      hits[i] = { id: this.idAt(doc) as string, score, sortValues: sort.map((key) => this.sortValue(key, doc, score)) };
    }
    return { total: early?.counted ?? m.size, hits, ...(early?.lowerBound === true && { totalRelation: 'gte' as const }) };
  }

  /**
   * The matches a sort whose first key is a single-valued number column needs once `track`
   * are counted (Lucene's skipping of non-competitive documents by sort value): the first
   * `track` matches in document order, then only the later documents whose value is at least
   * as good as the k-th best so far, each checked against the query. Null when that does not
   * apply (another sort, a multi-valued column, too many competing documents): every match then.
   * `floor`: a value k documents elsewhere reach (search's sortFloor): the bar starts there, and
   * no first k matches are needed to set it. Of the matches read, only those that can still make
   * the page are listed (`size`); `counted` is how many matched.
   */
  private competingMatches(executor: QueryExecutor, q: Query, filters: readonly Query[], k: number, track: number, key: SortKey, floor?: number): (Matches & { lowerBound: boolean; counted: number }) | null {
    if (key.type !== 'number') return null;
    const f = this.numeric(key.field);
    if (f === undefined || f.multi !== null) return null;
    const desc = key.order === 'desc';
    // Values as keys to maximize: a document whose key is below the bar cannot make the page.
    const floorKey = floor === undefined || Number.isNaN(floor) ? -Infinity : desc ? floor : -floor;
    const cursor = executor.filteredCursor(q, filters, false);
    const first = floorKey === -Infinity ? Math.max(track, k) : track;
    let docs = new Int32Array(Math.min(first + 1, 1024));
    let n = 0;
    const push = (d: number): void => {
      if (n === docs.length) docs = grow(docs, n * 2);
      docs[n++] = d;
    };
    let d = cursor.next();
    while (d !== NO_MORE_DOCS && n < first) {
      push(d);
      d = cursor.next();
    }
    if (k === 0) return { docs, scores: null, size: 0, counted: n, lowerBound: d !== NO_MORE_DOCS };
    // The k best values so far as keys to maximize (a min-heap: the k-th best at the root): a
    // later document with a worse one cannot make the page, and the bar rises as better ones come.
    const best = new KeyHeap(k);
    for (let i = 0; i < n; i++) {
      const v = f.values[docs[i]];
      if (v === v) best.offer(desc ? v : -v);
    }
    let bar = Math.max(best.least(), floorKey);
    if (d === NO_MORE_DOCS) return { docs, scores: null, size: contenders(f.values, desc, docs, n, bar), counted: n, lowerBound: false };
    if (bar === -Infinity) return null;
    // Worth it only when the competing documents are few against those left to read.
    const competing = f.competing(desc ? bar : -bar, desc, d, this.maxDoc, (this.maxDoc - d) >> 3);
    if (competing === null) return null;
    push(d);
    for (let i = 0; i < competing.length; i++) {
      const c = competing[i];
      const v = f.values[c];
      bar = Math.max(best.least(), floorKey);
      if ((desc ? v : -v) < bar) continue;
      if (cursor.doc < c && cursor.advance(c) === NO_MORE_DOCS) break;
      if (cursor.doc !== c) continue;
      push(c);
      best.offer(desc ? v : -v);
    }
    // (The heap lacks d's value: its bar may sit below the page's last, which only keeps more.)
    return { docs, scores: null, size: contenders(f.values, desc, docs, n, Math.max(best.least(), floorKey)), counted: n, lowerBound: true };
  }

  /**
   * Whether a document here may sort at least as well as `bar` on `key`, the first key of a page
   * sorted by a number column (ties included): false when none can (no value, or none as good), so
   * that the page needs nothing from this index. A multi-valued column always may.
   */
  mayReach(key: SortKey, bar: number): boolean {
    if (key.type !== 'number') return true;
    const f = this.numeric(key.field);
    if (f === undefined) return false;
    return f.multi !== null || f.reaches(bar, key.order === 'desc', this.maxDoc);
  }

  /**
   * The request with its query, filters and sort parsed, or what search(req) throws for a bad
   * one, in the same order; reads no document. Parts of a segmented index search it parsed once.
   */
  parsed(req: SearchRequest): SearchRequest & { q: Query; filters: Query[]; sort: SortSpec } {
    const { q, filters, sort } = this.parseRequest(req);
    return { ...req, q, filters, sort };
  }

  private parseRequest(req: SearchRequest): { offset: number; limit: number; q: Query; filters: Query[]; sort: SortSpec } {
    const { offset, limit } = checkPage(req);
    countUpTo(req.trackTotalHits);
    checkBoosts(req.boosts);
    const parseOptions = { defaultOperator: checkOperator(req.defaultOperator) };
    const q = req.q === undefined ? MATCH_ALL : typeof req.q === 'string' ? parseQuery(req.q, this.schema, parseOptions) : req.q;
    const filters = (req.filters ?? []).map((f) => (typeof f === 'string' ? parseQuery(f, this.schema, parseOptions) : f));
    const sort = req.sort === undefined || typeof req.sort === 'string' ? parseSort(req.sort, this.schema) : req.sort;
    return { offset, limit, q, filters, sort };
  }

  /** Whether each document matches q and the filters: the membership test of an export cursor. */
  matcher(req: Pick<SearchRequest, 'q' | 'filters' | 'defaultOperator'> = {}): (id: string) => boolean {
    const parseOptions = { defaultOperator: checkOperator(req.defaultOperator) };
    const q = req.q === undefined ? MATCH_ALL : typeof req.q === 'string' ? parseQuery(req.q, this.schema, parseOptions) : req.q;
    const filters = (req.filters ?? []).map((f) => (typeof f === 'string' ? parseQuery(f, this.schema, parseOptions) : f));
    const m = new QueryExecutor(this, null, undefined).matches(q, filters, false);
    const ids = new Set<string>();
    for (let i = 0; i < m.size; i++) ids.add(this.idAt(m.docs[i]) as string);
    return (id) => ids.has(id);
  }

  /** The statistics of the query's scoring terms and of its undeclared sort fields, for mergeStats. */
  collectStats(req: Pick<SearchRequest, 'q' | 'sort' | 'defaultOperator'> = {}): IndexStats {
    const q = req.q === undefined ? MATCH_ALL : typeof req.q === 'string' ? parseQuery(req.q, this.schema, { defaultOperator: checkOperator(req.defaultOperator) }) : req.q;
    const fields = new Map<string, FieldStats>();
    const terms = new Map<string, TermStats>();
    const addTerms = (fieldKey: string | null, words: readonly string[]): void => {
      const targets = fieldKey === null ? this.defaultTextFields() : [this.inverted(fieldKey)];
      for (const f of targets) {
        if (f === undefined || f.docCount === 0) continue;
        fields.set(f.key, { field: f.key, docCount: f.docCount, sumLength: f.sumLength });
        for (const term of words) {
          const id = f.termId(term);
          const docFreq = id >= 0 ? f.docFreqOf(id) : 0;
          if (docFreq > 0) terms.set(`${f.key}\u0000${term}`, { field: f.key, term, docFreq });
        }
      }
    };
    const walk = (node: Query): void => {
      if (node.kind === 'term') addTerms(node.field, [node.term]);
      else if (node.kind === 'phrase') addTerms(node.field, node.terms);
      else if (node.kind === 'bool') {
        node.must.forEach(walk);
        node.should.forEach(walk);
      }
    };
    walk(q);
    const sortFields: SortFieldStats[] = [];
    const sort = req.sort === undefined || typeof req.sort === 'string' ? parseSort(req.sort, this.schema) : req.sort;
    for (const key of sort) if (key.dynamic) sortFields.push({ field: key.field, docCount: this.localSortDocCount(key) });
    return { fields: [...fields.values()], terms: [...terms.values()], sortFields };
  }

  /** Phase 2: stored fields of `ids` (those still indexed), through the lookup given at construction. */
  async fetch(ids: readonly string[], fields?: string | readonly string[] | null): Promise<StoredDoc[]> {
    const lookup = this.lookup;
    if (lookup === undefined) throw new ShardexError('SHX_INTERNAL', 'this index has no document lookup: serve stored fields from the document store');
    const wanted = parseFieldList(fields);
    const out: StoredDoc[] = [];
    for (const id of ids) {
      if (!this.has(id)) continue;
      const doc = await lookup(id);
      if (doc !== null && doc !== undefined) out.push(projectFields(id, doc, wanted));
    }
    return out;
  }

  private localSortDocCount(key: SortKey): number {
    if (key.type === 'number') return this.numeric(key.field)?.docCount ?? 0;
    return this.inverted(key.field)?.docCount ?? 0;
  }

  /** An undeclared sort field must hold values somewhere (the collection's stats if given). */
  private checkSortFields(sort: SortSpec, stats: StatsLookup | null): void {
    for (const key of sort) {
      if (!key.dynamic) continue;
      const count = stats?.sortFieldDocCount(key.field) ?? this.localSortDocCount(key);
      if (count === 0) {
        const base = key.field.endsWith(KEYWORD_SUFFIX) ? key.field.slice(0, -KEYWORD_SUFFIX.length) : key.field;
        throw new ShardexError(
          'SHX_BAD_REQUEST',
          `invalid sort: unknown sort field '${key.field}': no document has ${key.type === 'number' ? 'numbers' : 'strings'} there (an undeclared field sorts by its numbers as '${base}' or by its strings as '${base}${KEYWORD_SUFFIX}')`,
          { details: { param: 'sort', field: key.field } },
        );
      }
    }
  }

  private sortValue(key: SortKey, doc: number, score: number): SortValue {
    switch (key.type) {
      case 'score':
        return score;
      case 'id':
        return this.idAt(doc) as string;
      case 'number': {
        const v = this.numeric(key.field)?.sortValue(doc, key.order) ?? NaN;
        return Number.isNaN(v) ? null : v;
      }
      case 'keyword': {
        const f = this.inverted(key.field);
        if (f === undefined || doc >= f.minValue.length) return null;
        const t = key.order === 'asc' ? f.minValue[doc] : f.maxValue[doc];
        return t < 0 ? null : f.terms[t];
      }
    }
  }

  /** The scores of the page's documents (`top`, indices into `m`), by document. */
  private pageScores(executor: QueryExecutor, q: Query, m: Matches, top: Int32Array): Map<number, number> {
    const docs = Int32Array.from(top, (i) => m.docs[i]).sort();
    const scores = executor.scoresOf(q, docs);
    const byDoc = new Map<number, number>();
    for (let i = 0; i < docs.length; i++) byDoc.set(docs[i], scores[i]);
    return byDoc;
  }

  /** Indices into `m` of its best `k` matches in the hit order of sort.ts. */
  private selectTop(m: Matches, k: number, sort: SortSpec): Int32Array {
    const n = m.size;
    if (k === 0 || n === 0) return new Int32Array(0);
    const docs = m.docs;
    const columns = sort.map((key) => this.sortColumn(key, m));
    return selectTop(n, k, columns, (i) => this.idAt(docs[i]) as string);
  }

  /** A sort key as one number per match (NaN = missing), or null for the id. */
  private sortColumn(key: SortKey, m: Matches): SortColumn {
    const desc = key.order === 'desc';
    const n = m.size;
    const docs = m.docs;
    switch (key.type) {
      case 'score':
        return { keys: m.scores as Float64Array, desc };
      case 'id':
        return { keys: null, desc };
      case 'number': {
        const keys = new Float64Array(n).fill(NaN);
        const f = this.numeric(key.field);
        if (f !== undefined) {
          const values = f.values;
          const multi = f.multi;
          for (let i = 0; i < n; i++) {
            const d = docs[i];
            if (d >= values.length) continue;
            keys[i] = desc && multi !== null && multi.has(d) ? f.sortValue(d, 'desc') : values[d];
          }
        }
        return { keys, desc };
      }
      case 'keyword': {
        const keys = new Float64Array(n).fill(NaN);
        const f = this.inverted(key.field);
        if (f !== undefined) {
          const ranks = f.termRanks();
          const values = desc ? f.maxValue : f.minValue;
          for (let i = 0; i < n; i++) {
            const d = docs[i];
            const t = d < values.length ? values[d] : -1;
            if (t >= 0) keys[i] = ranks[t];
          }
        }
        return { keys, desc };
      }
    }
  }
}

/** A persisted field: an inverted field (text, keyword) or a numeric column, by slot; `I` is flat in memory, packed in a segment file. */
export type SlotState<I extends InvertedState | PackedInvertedState = InvertedState> =
  | { readonly kind: 'inverted'; readonly key: string; readonly withPositions: boolean; readonly state: I }
  | { readonly kind: 'number'; readonly key: string; readonly state: NumericState };

/** An undeclared field and the slots of its text, keyword and number views (-1 = none yet). */
export interface DynamicPlanState {
  readonly name: string;
  readonly text: number;
  readonly keyword: number;
  readonly number: number;
}

/** What restore() takes: an exported state, or a segment file's. */
export type RestorableState = ShardIndexState<InvertedState | PackedInvertedState, readonly string[] | IdTable>;

/** What ShardIndex.exportState() gives and restore() takes: per-document arrays have maxDoc entries; `I` is flat in memory, packed in a segment file. */
export interface ShardIndexState<I extends InvertedState | PackedInvertedState = InvertedState, Ids extends readonly string[] | IdTable = readonly string[]> {
  readonly maxDoc: number;
  readonly liveCount: number;
  readonly deadDocs: number;
  /** By document number; '' for a deleted document (a segment file's: an IdTable). */
  readonly ids: Ids;
  readonly live: Uint8Array;
  readonly slots: readonly SlotState<I>[];
  readonly dynamic: readonly DynamicPlanState[];
}

function stateMismatch(why: string): ShardexError {
  return new ShardexError('SHX_BAD_CONFIG', `the persisted index does not fit this collection: ${why}`);
}

/** The number an undeclared field's value indexes as (a number, or a date string's epoch ms), or NaN. */
function dynamicNumber(v: unknown): number {
  return typeof v === 'number' ? v : typeof v === 'string' ? detectDate(v) : NaN;
}

function stringOf(v: unknown): string {
  return typeof v === 'string' ? v : String(v);
}

/** The request's offset and limit (defaults applied), refused as a search refuses them. */
export function checkPage(req: Pick<SearchRequest, 'offset' | 'limit'>): { offset: number; limit: number } {
  const offset = checkCount('offset', req.offset ?? 0);
  const limit = checkCount('limit', req.limit ?? DEFAULT_LIMIT);
  if (offset + limit > MAX_RESULT_WINDOW) {
    throw new ShardexError('SHX_BAD_REQUEST', `offset + limit must not exceed ${MAX_RESULT_WINDOW}, got ${offset + limit}`);
  }
  return { offset, limit };
}

function checkCount(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new ShardexError('SHX_BAD_REQUEST', `${name} must be a non-negative integer, got ${String(value)}`, { details: { param: name } });
  }
  return value;
}

/** The count trackTotalHits asks for (Infinity: exact), or a refusal that says what it may be. */
export function countUpTo(track: unknown): number {
  if (track === undefined || track === true) return Infinity;
  if (track === false) return 0;
  if (typeof track === 'number' && Number.isSafeInteger(track) && track >= 0) return track;
  throw new ShardexError('SHX_BAD_REQUEST', `trackTotalHits must be true, false or a non-negative integer, got ${JSON.stringify(track) ?? String(track)}`, { details: { param: 'trackTotalHits' } });
}

function checkBoosts(boosts: unknown): void {
  if (boosts === undefined) return;
  if (typeof boosts !== 'object' || boosts === null || Array.isArray(boosts)) {
    throw new ShardexError('SHX_BAD_REQUEST', 'boosts must map field names to numbers', { details: { param: 'boosts' } });
  }
  for (const [field, b] of Object.entries(boosts)) {
    if (typeof b !== 'number' || !Number.isFinite(b) || b < 0) {
      throw new ShardexError('SHX_BAD_REQUEST', `the boost of '${field}' must be a non-negative number, got ${String(b)}`, { details: { param: 'boosts', field } });
    }
  }
}

function checkOperator(op: unknown): 'OR' | 'AND' | undefined {
  if (op === undefined || op === 'OR' || op === 'AND') return op;
  throw new ShardexError('SHX_BAD_REQUEST', `the default operator must be OR or AND, got ${String(op)}`, { details: { param: 'defaultOperator' } });
}

/** The k greatest numbers offered (a min-heap: the least of them at the root). */
/**
 * Moves to the front of `docs[0..n)` the documents that can still make a page sorted on the
 * single-valued column `values` whose k-th best key is at least `bar` (values as keys to
 * maximize: negated for an ascending sort): those whose key reaches it, ties included. A document
 * without a value sorts after every one with one, so it goes once the bar is set (finite); with
 * no bar yet (fewer than k values and no floor) every document stays. Returns how many stay.
 */
function contenders(values: Float64Array, desc: boolean, docs: Int32Array, n: number, bar: number): number {
  if (bar === -Infinity) return n;
  let kept = 0;
  for (let i = 0; i < n; i++) {
    const doc = docs[i];
    const v = values[doc];
    if (v === v && (desc ? v : -v) >= bar) docs[kept++] = doc;
  }
  return kept;
}

class KeyHeap {
  private readonly keys: Float64Array;
  private size = 0;

  constructor(private readonly k: number) {
    this.keys = new Float64Array(k);
  }

  /** The k-th greatest so far (-Infinity until k were offered). */
  least(): number {
    return this.size < this.k ? -Infinity : this.keys[0];
  }

  offer(key: number): void {
    const h = this.keys;
    if (this.size < this.k) {
      let c = this.size++;
      while (c > 0) {
        const parent = (c - 1) >> 1;
        if (h[parent] <= key) break;
        h[c] = h[parent];
        c = parent;
      }
      h[c] = key;
      return;
    }
    if (key <= h[0]) return;
    let c = 0;
    for (;;) {
      const l = 2 * c + 1;
      if (l >= this.k) break;
      const r = l + 1;
      const m = r < this.k && h[r] < h[l] ? r : l;
      if (h[m] >= key) break;
      h[c] = h[m];
      c = m;
    }
    h[c] = key;
  }
}
