// Merging segments as Lucene does: the live documents of several indexes become one index by
// combining their data, without analysing any document again. Documents are renumbered densely,
// source after source (so every term's postings stay in document order by concatenation); term
// dictionaries are united per field; postings, positions, lengths, keyword sort values and numeric
// columns are carried over with the new numbers. Dead documents, their
// postings and terms no live document holds are left behind. Pure: no I/O.

import { ShardIndex, type DynamicPlanState, type ShardIndexOptions, type ShardIndexState, type SlotState } from './shard-index.js';
import type { InvertedState } from './inverted-field.js';
import type { NumericState } from './numeric-field.js';
import type { CollectionSchema } from './schema.js';

/** One index holding the live documents of `sources` (in their order), answering as they do together. */
export function mergeIndexes(schema: CollectionSchema, sources: readonly ShardIndex[], options: ShardIndexOptions = {}): ShardIndex {
  return ShardIndex.restore(schema, mergeStates(sources.map((s) => s.exportState())), options);
}

const slotKey = (s: SlotState): string => `${s.kind}\u0000${s.key}`;

export function mergeStates(states: readonly ShardIndexState[]): ShardIndexState {
  // ---- documents: the new number of each live document of each source (-1 = dead) ----
  let maxDoc = 0;
  const newDocs = states.map((st) => {
    const map = new Int32Array(st.maxDoc).fill(-1);
    for (let d = 0; d < st.maxDoc; d++) if (st.live[d] === 1) map[d] = maxDoc++;
    return map;
  });
  const ids: string[] = new Array<string>(maxDoc);
  states.forEach((st, k) => {
    const map = newDocs[k]!;
    for (let d = 0; d < st.maxDoc; d++) if (map[d]! >= 0) ids[map[d]!] = st.ids[d]!;
  });

  // ---- fields: the first source's slots in order (the declared ones come first in every source), then new ones ----
  const slots: SlotState[] = [];
  const slotOf = new Map<string, number>();
  const slotMaps = states.map((st) =>
    Int32Array.from(st.slots, (s) => {
      const key = slotKey(s);
      let at = slotOf.get(key);
      if (at === undefined) {
        at = slots.length;
        slotOf.set(key, at);
        slots.push(s);
      }
      return at;
    }),
  );
  const dynamic = new Map<string, { text: number; keyword: number; number: number }>();
  states.forEach((st, k) => {
    const map = slotMaps[k]!;
    const mapped = (slot: number): number => (slot < 0 ? -1 : map[slot]!);
    for (const p of st.dynamic) {
      const cur = dynamic.get(p.name) ?? { text: -1, keyword: -1, number: -1 };
      if (cur.text < 0) cur.text = mapped(p.text);
      if (cur.keyword < 0) cur.keyword = mapped(p.keyword);
      if (cur.number < 0) cur.number = mapped(p.number);
      dynamic.set(p.name, cur);
    }
  });

  // ---- each field's data ----
  const merged: SlotState[] = slots.map((first, slot) => {
    const parts: { k: number; state: InvertedState | NumericState }[] = [];
    states.forEach((st, k) => {
      st.slots.forEach((s, i) => {
        if (slotMaps[k]![i] === slot) parts.push({ k, state: s.state });
      });
    });
    if (first.kind === 'number') return { kind: 'number', key: first.key, state: mergeNumeric(parts as { k: number; state: NumericState }[], newDocs, maxDoc) };
    const inverted = parts as { k: number; state: InvertedState }[];
    const state = mergeInverted(inverted, newDocs, maxDoc, first.withPositions);
    return { kind: 'inverted', key: first.key, withPositions: first.withPositions, state };
  });

  const dynamicStates: DynamicPlanState[] = [...dynamic].map(([name, p]) => ({ name, ...p }));
  return { maxDoc, liveCount: maxDoc, deadDocs: 0, ids, live: new Uint8Array(maxDoc).fill(1), slots: merged, dynamic: dynamicStates };
}

function mergeInverted(parts: readonly { k: number; state: InvertedState }[], newDocs: readonly Int32Array[], maxDoc: number, withPositions: boolean): InvertedState {
  // Pass 1: each source term's live postings and positions; terms only dead documents hold go.
  const termIds = new Map<string, number>();
  const terms: string[] = [];
  const postCount: number[] = [];
  const posCount: number[] = [];
  // A source without dead documents is copied whole: its counts are its starts.
  const allLive = parts.map(({ k }) => newDocs[k]!.every((d) => d >= 0));
  const maps = parts.map(({ k, state: s }, j) => {
    const docMap = newDocs[k]!;
    const map = new Int32Array(s.terms.length).fill(-1);
    for (let t = 0; t < s.terms.length; t++) {
      let posts = 0;
      let positions = 0;
      if (allLive[j]) {
        posts = (s.postingStarts[t + 1]! - s.postingStarts[t]!) / 2;
        positions = s.positionStarts[t + 1]! - s.positionStarts[t]!;
      } else {
        for (let i = s.postingStarts[t]!; i < s.postingStarts[t + 1]!; i += 2) {
          if (docMap[s.postings[i]!]! >= 0) {
            posts++;
            positions += s.postings[i + 1]!;
          }
        }
      }
      if (posts === 0) continue;
      const term = s.terms[t]!;
      let id = termIds.get(term);
      if (id === undefined) {
        id = terms.length;
        termIds.set(term, id);
        terms.push(term);
        postCount.push(0);
        posCount.push(0);
      }
      map[t] = id;
      postCount[id]! += posts;
      posCount[id]! += positions;
    }
    return map;
  });
  const n = terms.length;
  const postingStarts = new Int32Array(n + 1);
  const positionStarts = new Int32Array(n + 1);
  const docFreq = new Int32Array(n);
  for (let t = 0; t < n; t++) {
    docFreq[t] = postCount[t]!;
    postingStarts[t + 1] = postingStarts[t]! + 2 * postCount[t]!;
    positionStarts[t + 1] = positionStarts[t]! + (withPositions ? posCount[t]! : 0);
  }
  // Pass 2: copy, source after source (so each term's postings stay in document order).
  const postings = new Int32Array(postingStarts[n]!);
  const positions = new Int32Array(positionStarts[n]!);
  const postAt = postingStarts.slice(0, n);
  const posAt = positionStarts.slice(0, n);
  const lengths = new Int32Array(maxDoc);
  const minValue = withPositions ? null : new Int32Array(maxDoc).fill(-1);
  const maxValue = withPositions ? null : new Int32Array(maxDoc).fill(-1);
  let docCount = 0;
  let sumLength = 0;
  parts.forEach(({ k, state: s }, j) => {
    const docMap = newDocs[k]!;
    const map = maps[j]!;
    for (let t = 0; t < s.terms.length; t++) {
      const id = map[t]!;
      if (id < 0) continue;
      if (allLive[j]) {
        // Every document is live: numbers shift by the source's base, positions copy as they are.
        const sp = s.postings;
        const end = s.postingStarts[t + 1]!;
        const base = docMap.length > 0 ? docMap[0]! : 0;
        let out = postAt[id]!;
        for (let i = s.postingStarts[t]!; i < end; i += 2) {
          postings[out] = base + sp[i]!;
          postings[out + 1] = sp[i + 1]!;
          out += 2;
        }
        postAt[id] = out;
        if (withPositions) {
          const from = s.positions.subarray(s.positionStarts[t]!, s.positionStarts[t + 1]!);
          positions.set(from, posAt[id]!);
          posAt[id]! += from.length;
        }
        continue;
      }
      let pos = s.positionStarts[t]!;
      for (let i = s.postingStarts[t]!; i < s.postingStarts[t + 1]!; i += 2) {
        const nd = docMap[s.postings[i]!]!;
        const tf = s.postings[i + 1]!;
        if (nd >= 0) {
          postings[postAt[id]!++] = nd;
          postings[postAt[id]!++] = tf;
          if (withPositions) for (let p = 0; p < tf; p++) positions[posAt[id]!++] = s.positions[pos + p]!;
        }
        if (withPositions) pos += tf;
      }
    }
    for (let d = 0; d < docMap.length; d++) {
      const nd = docMap[d]!;
      if (nd < 0 || d >= s.lengths.length) continue;
      lengths[nd] = s.lengths[d]!;
      if (minValue && maxValue && s.minValue && s.maxValue) {
        if (s.minValue[d]! >= 0) minValue[nd] = map[s.minValue[d]!]!;
        if (s.maxValue[d]! >= 0) maxValue[nd] = map[s.maxValue[d]!]!;
      }
    }
    docCount += s.docCount;
    sumLength += s.sumLength;
  });
  return { terms, docFreq, deadCount: new Int32Array(n), postingStarts, postings, positionStarts, positions, lengths, minValue, maxValue, docCount, sumLength };
}

function mergeNumeric(parts: readonly { k: number; state: NumericState }[], newDocs: readonly Int32Array[], maxDoc: number): NumericState {
  const values = new Float64Array(maxDoc).fill(NaN);
  const multi: { doc: number; values: Float64Array }[] = [];
  let docCount = 0;
  for (const { k, state: s } of parts) {
    const docMap = newDocs[k]!;
    for (let d = 0; d < Math.min(docMap.length, s.values.length); d++) if (docMap[d]! >= 0) values[docMap[d]!] = s.values[d]!;
    for (let i = 0; i < s.multiDocs.length; i++) {
      const nd = docMap[s.multiDocs[i]!]!;
      if (nd >= 0) multi.push({ doc: nd, values: s.multiValues.subarray(s.multiStarts[i]!, s.multiStarts[i + 1]!) });
    }
    docCount += s.docCount;
  }
  multi.sort((a, b) => a.doc - b.doc);
  const multiDocs = Int32Array.from(multi, (m) => m.doc);
  const multiStarts = new Int32Array(multi.length + 1);
  multi.forEach((m, i) => (multiStarts[i + 1] = multiStarts[i]! + m.values.length));
  const multiValues = new Float64Array(multiStarts[multi.length]!);
  multi.forEach((m, i) => multiValues.set(m.values, multiStarts[i]!));
  return { values, multiDocs, multiStarts, multiValues, docCount };
}
