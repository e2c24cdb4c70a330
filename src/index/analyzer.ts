// Text analysis: the one analyzer a collection uses at index time and at query time, so that
// a query term and an indexed term are spelled the same way.
//
// Tokens are maximal runs of letters, digits and combining marks (\p{L}\p{N}\p{M}), after
// lower-casing and NFC normalization (so "Café" written precomposed or with a combining accent
// is one term). Han and Hiragana characters are one token each, as Lucene's StandardTokenizer
// emits them. A token longer than MAX_TOKEN_LENGTH UTF-16 units is cut into pieces of that length
// (Lucene's maxTokenLength default is 255). Stop words are optional; a removed stop word still
// takes its position, as in Lucene's StopFilter, so that a phrase does not match across the gap
// with other words.

import { exactKey, FNV_BASIS, FNV_PRIME, hashRange, KEY_BASE, keyDigit, MAX_KEY_LENGTH, TermTable } from './term-table.js';

export const MAX_TOKEN_LENGTH = 255;

/** Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET. */
export const ENGLISH_STOP_WORDS: readonly string[] = [
  'a', 'an', 'and', 'are', 'as', 'at', 'be', 'but', 'by', 'for', 'if', 'in', 'into', 'is', 'it', 'no', 'not',
  'of', 'on', 'or', 'such', 'that', 'the', 'their', 'then', 'there', 'these', 'they', 'this', 'to', 'was',
  'will', 'with',
];

export interface AnalyzerOptions {
  /** Words to drop ('english' for ENGLISH_STOP_WORDS); none by default, as Lucene's StandardAnalyzer. */
  readonly stopWords?: 'english' | readonly string[] | null;
}

/**
 * Receives the tokens of one field value, in order (the write path: no closure per document).
 * A token is text[start, end), with its hashRange() and exactKey() already computed: no
 * substring is made.
 */
export interface TokenSink {
  token(text: string, start: number, end: number, hash: number, position: number, key: number): void;
}

/** Terms of a query string, with their positions relative to the first one. */
export interface AnalyzedText {
  readonly terms: string[];
  readonly positions: number[];
}

// One code point at lastIndex; sticky and reused, so testing a character allocates nothing.
const WORD_CHAR = /[\p{L}\p{N}\p{M}]/uy;
const SINGLE_CHAR_TOKEN = /[\p{Script=Han}\p{Script=Hiragana}]/uy;

const enum CharClass {
  Other = 0,
  Word = 1,
  Single = 2,
}

export class Analyzer {
  private readonly stopWords: TermTable | null = null;

  constructor(options: AnalyzerOptions = {}) {
    const words = options.stopWords === 'english' ? ENGLISH_STOP_WORDS : options.stopWords;
    if (words && words.length > 0) {
      const table = new TermTable();
      for (const w of words) {
        const n = normalize(w);
        const h = hashRange(n, 0, n.length);
        const key = exactKey(n, 0, n.length);
        if (table.find(n, 0, n.length, h, key) < 0) table.add(n, h, key);
      }
      this.stopWords = table;
    }
  }

  /**
   * Feeds the tokens of `text` to `sink` with positions counted from `firstPosition`; returns
   * the position after the last token (stop words included), for the next value of the field.
   */
  analyze(text: string, firstPosition: number, sink: TokenSink): number {
    const s = normalize(text);
    const n = s.length;
    const stop = this.stopWords;
    let pos = firstPosition;
    let i = 0;
    while (i < n) {
      const c = s.charCodeAt(i);
      let cls: CharClass;
      let width = 1;
      if (c < 0x80) {
        cls = (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) ? CharClass.Word : CharClass.Other;
      } else {
        if (c >= 0xd800 && c <= 0xdbff && i + 1 < n) width = 2;
        cls = classify(s, i);
      }
      if (cls === CharClass.Other) {
        i += width;
        continue;
      }
      // hashRange(s, i, end) and exactKey(s, i, end), folded into the scan: the token's
      // characters are read once.
      let hash = Math.imul(FNV_BASIS ^ c, FNV_PRIME);
      if (width === 2) hash = Math.imul(hash ^ s.charCodeAt(i + 1), FNV_PRIME);
      let key = c < 0x80 ? keyDigit(c) : -1;
      let end = i + width;
      if (cls === CharClass.Word) {
        while (end < n && end - i < MAX_TOKEN_LENGTH) {
          const d = s.charCodeAt(end);
          if (d < 0x80) {
            if ((d >= 0x61 && d <= 0x7a) || (d >= 0x30 && d <= 0x39)) {
              hash = Math.imul(hash ^ d, FNV_PRIME);
              key = key >= 0 && end - i < MAX_KEY_LENGTH ? key * KEY_BASE + keyDigit(d) : -1;
              end++;
              continue;
            }
            break;
          }
          if (classify(s, end) !== CharClass.Word) break;
          hash = Math.imul(hash ^ d, FNV_PRIME);
          key = -1;
          if (d >= 0xd800 && d <= 0xdbff && end + 1 < n) {
            hash = Math.imul(hash ^ s.charCodeAt(end + 1), FNV_PRIME);
            end += 2;
          } else end++;
        }
      }
      if (stop === null || stop.find(s, i, end, hash, key) < 0) sink.token(s, i, end, hash, pos, key);
      pos++;
      i = end;
    }
    return pos;
  }

  /** Query-time analysis of a word or a quoted phrase. */
  terms(text: string): AnalyzedText {
    const collector = new TermCollector();
    this.analyze(text, 0, collector);
    const first = collector.positions.length > 0 ? collector.positions[0] : 0;
    for (let k = 0; k < collector.positions.length; k++) collector.positions[k] -= first;
    return { terms: collector.terms, positions: collector.positions };
  }

  /** The form a prefix (`Foo*`) takes to be compared with indexed terms. */
  normalizePrefix(prefix: string): string {
    return normalize(prefix);
  }
}

class TermCollector implements TokenSink {
  readonly terms: string[] = [];
  readonly positions: number[] = [];
  token(text: string, start: number, end: number, _hash: number, position: number): void {
    this.terms.push(text.slice(start, end));
    this.positions.push(position);
  }
}

function classify(s: string, i: number): CharClass {
  SINGLE_CHAR_TOKEN.lastIndex = i;
  if (SINGLE_CHAR_TOKEN.test(s)) return CharClass.Single;
  WORD_CHAR.lastIndex = i;
  return WORD_CHAR.test(s) ? CharClass.Word : CharClass.Other;
}

function normalize(text: string): string {
  const lower = text.toLowerCase();
  for (let i = 0; i < lower.length; i++) {
    if (lower.charCodeAt(i) >= 0x80) return lower.normalize('NFC');
  }
  return lower;
}
