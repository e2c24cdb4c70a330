// The deterministic test corpus: the same documents, byte for byte once serialized, as the
// project's `gen-docs.mjs` tool prints for the same count/seed/start/words, so tests and
// benchmarks can make it in-process without the tool.
//   id        `doc-<n>`, n counting from `start`
//   title     5 words; body `words` words; both drawn from a 5,000-word Zipf(s=1) vocabulary
//   category  `cat-a`..`cat-t`; price a number with at most 2 decimals in 0..1000;
//   ts        an ISO-8601 instant in 2024
// The order of draws from the generator (title, body, category, price, ts per document)
// is part of the format: changing it changes every document after the first.

import { ShardexError } from './errors.js';

// A type, not an interface: a generated document is a StoredDoc (a record of its fields) as it is.
export type CorpusDoc = {
  id: string;
  title: string;
  body: string;
  category: string;
  price: number;
  ts: string;
};

export interface CorpusOptions {
  /** Number of documents. */
  count: number;
  /** PRNG seed, taken as an unsigned 32-bit int (default 1). */
  seed?: number;
  /** Number in the first document's id (default 0). */
  start?: number;
  /** Words per body (default 150). */
  words?: number;
}

const SYLLABLES = ['ka', 'lo', 'mi', 'ne', 'ru', 'ta', 'vo', 'shi', 'den', 'gar', 'pol', 'quin', 'ber', 'sto', 'fla', 'xi'];
const VOCABULARY_SIZE = 5000;
const TITLE_WORDS = 5;
const CATEGORIES = Array.from({ length: 20 }, (_, i) => `cat-${String.fromCharCode(97 + i)}`);
const YEAR_START = Date.UTC(2024, 0, 1);
const YEAR_MS = 365 * 86400000;

interface Vocabulary {
  readonly words: readonly string[];
  /** Running sums of 1/rank, in rank order; the last is the total weight. */
  readonly cdf: Float64Array;
}

let vocabulary: Vocabulary | undefined;

function getVocabulary(): Vocabulary {
  if (vocabulary !== undefined) return vocabulary;
  // Word i spells i in base 16 with one syllable per digit, least significant first.
  const words: string[] = [];
  for (let i = 0; i < VOCABULARY_SIZE; i++) {
    let n = i;
    let w = '';
    do {
      w += SYLLABLES[n % SYLLABLES.length];
      n = Math.floor(n / SYLLABLES.length);
    } while (n > 0);
    words.push(w);
  }
  // Summed in rank order so that every float matches the tool's.
  const cdf = new Float64Array(VOCABULARY_SIZE);
  let total = 0;
  for (let r = 1; r <= VOCABULARY_SIZE; r++) {
    total += 1 / r;
    cdf[r - 1] = total;
  }
  vocabulary = { words, cdf };
  return vocabulary;
}

/** mulberry32: a small, fast 32-bit PRNG; returns floats in [0, 1). Tests reuse it for reproducible picks. */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function checkCount(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new ShardexError('SHX_BAD_REQUEST', `corpus option ${name} must be a non-negative integer, got ${String(value)}`);
  }
  return value;
}

/** Yields `count` documents, the same ones for the same options. */
export function* generateDocs(options: CorpusOptions): Generator<CorpusDoc, void, undefined> {
  const count = checkCount('count', options.count);
  const start = checkCount('start', options.start ?? 0);
  const bodyWords = checkCount('words', options.words ?? 150);
  const seed = options.seed ?? 1;
  if (typeof seed !== 'number' || !Number.isInteger(seed)) {
    throw new ShardexError('SHX_BAD_REQUEST', `corpus option seed must be an integer, got ${String(seed)}`);
  }
  const rand = mulberry32(seed);
  const { words, cdf } = getVocabulary();
  const total = cdf[cdf.length - 1];

  const word = (): string => {
    const x = rand() * total;
    let lo = 0;
    let hi = cdf.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid] < x) lo = mid + 1;
      else hi = mid;
    }
    return words[lo];
  };
  const phrase = (n: number): string => {
    const out: string[] = new Array(n);
    for (let i = 0; i < n; i++) out[i] = word();
    return out.join(' ');
  };

  for (let n = start; n < start + count; n++) {
    const title = phrase(TITLE_WORDS);
    const body = phrase(bodyWords);
    const category = CATEGORIES[Math.floor(rand() * CATEGORIES.length)];
    const price = Math.round(rand() * 100000) / 100;
    const ts = new Date(YEAR_START + Math.floor(rand() * YEAR_MS)).toISOString();
    yield { id: `doc-${n}`, title, body, category, price, ts };
  }
}

/** The documents as NDJSON lines (JSON text, no newline), keys in the tool's order. */
export function* generateNdjson(options: CorpusOptions): Generator<string, void, undefined> {
  for (const doc of generateDocs(options)) yield JSON.stringify(doc);
}

/** The whole corpus as NDJSON text, each line ending in '\n': what the tool prints. */
export function corpusNdjson(options: CorpusOptions): string {
  let text = '';
  for (const line of generateNdjson(options)) text += line + '\n';
  return text;
}
