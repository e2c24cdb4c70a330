import { describe, expect, it } from 'vitest';
import { bm25, bm25Idf, parseSchema, ShardIndex, type ShardSearchResult } from '../src/index/index.js';

// A hand-computed example. BM25 as Lucene defines it, with exact field lengths:
//   idf(N, n)   = ln(1 + (N - n + 0.5) / (n + 0.5))
//   tf part     = tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)),  k1 = 1.2, b = 0.75
//   N = documents that have the field, n = those holding the term, avgdl = tokens / N.
//
//   d1  title "apple banana apple"         body "cherry pie"
//   d2  title "banana cherry"
//   d3  title "cherry cherry cherry date"
//   d4                                      body "apple cherry apple tart"
//
// title: N = 3 (d1, d2, d3), tokens 3 + 2 + 4 = 9, avgdl = 3
// body:  N = 2 (d1, d4),     tokens 2 + 4     = 6, avgdl = 3
//
// idf(title, apple)  = ln(1 + 2.5/1.5) = ln(8/3) = 0.9808292530117263
// idf(title, banana) = idf(title, cherry) = ln(1 + 1.5/2.5) = ln(1.6) = 0.47000362924573563
// idf(title, date)   = ln(8/3) = 0.9808292530117263
// idf(body, apple)   = ln(1 + 1.5/1.5) = ln 2 = 0.6931471805599453
// idf(body, cherry)  = ln(1 + 0.5/2.5) = ln 1.2 = 0.1823215567939546
//
// tf parts (avgdl 3 in both fields):
//   tf 1, dl 2: 2.2 / (1 + 1.2 * (0.25 + 0.75 * 2/3)) = 2.2 / 1.9 = 1.1578947368421053
//   tf 1, dl 3: 2.2 / (1 + 1.2)                        = 1
//   tf 2, dl 3: 4.4 / (2 + 1.2)                        = 1.375
//   tf 1, dl 4: 2.2 / (1 + 1.2 * 1.25)                 = 0.88
//   tf 2, dl 4: 4.4 / (2 + 1.2 * 1.25)                 = 1.2571428571428573
//   tf 3, dl 4: 6.6 / (3 + 1.2 * 1.25)                 = 1.4666666666666668

const EPS = 1e-9;

function example(): ShardIndex {
  const ix = new ShardIndex(parseSchema({ title: 'text', body: 'text' }));
  ix.add('d1', { title: 'apple banana apple', body: 'cherry pie' });
  ix.add('d2', { title: 'banana cherry' });
  ix.add('d3', { title: 'cherry cherry cherry date' });
  ix.add('d4', { body: 'apple cherry apple tart' });
  return ix;
}

function scores(result: ShardSearchResult): Record<string, number> {
  return Object.fromEntries(result.hits.map((h) => [h.id, h.score]));
}

function expectScores(result: ShardSearchResult, expected: Record<string, number>): void {
  expect(result.hits.map((h) => h.id)).toEqual(Object.keys(expected));
  const got = scores(result);
  for (const [id, score] of Object.entries(expected)) expect(Math.abs(got[id] - score), `score of ${id}`).toBeLessThan(EPS);
}

describe('BM25 formula', () => {
  it('computes idf as ln(1 + (N - n + 0.5) / (n + 0.5))', () => {
    expect(Math.abs(bm25Idf(3, 1) - 0.9808292530117263)).toBeLessThan(EPS);
    expect(Math.abs(bm25Idf(2, 2) - 0.1823215567939546)).toBeLessThan(EPS);
  });

  it('computes the tf part with k1 = 1.2, b = 0.75 and exact lengths', () => {
    expect(Math.abs(bm25(2, 3, 3, 1) - 1.375)).toBeLessThan(EPS);
    expect(Math.abs(bm25(1, 2, 3, 1) - 1.1578947368421053)).toBeLessThan(EPS);
    expect(Math.abs(bm25(3, 4, 3, 1) - 1.4666666666666668)).toBeLessThan(EPS);
  });
});

describe('BM25 scoring on a hand-computed example', () => {
  it('scores a fielded term: title:apple', () => {
    // d1: 0.9808292530117263 * 1.375
    expectScores(example().search({ q: 'title:apple' }), { d1: 1.3486402228911236 });
  });

  it('counts N per field: a document without the field does not change its idf', () => {
    // d4 has no title; title's N stays 3, body's N is 2. d4: ln 2 * 1.2571428571428573
    expectScores(example().search({ q: 'body:apple' }), { d4: 0.8713850269896456 });
  });

  it('searches every text field for an unfielded word and sums the fields', () => {
    // d3: title tf 3 dl 4   0.47000362924573563 * 1.4666666666666668 = 0.689338656227079
    // d2: title tf 1 dl 2   0.47000362924573563 * 1.1578947368421053 = 0.5442147286003255
    // d1: body tf 1 dl 2    0.1823215567939546  * 1.1578947368421053 = 0.21110917102457902
    // d4: body tf 1 dl 4    0.1823215567939546  * 0.88               = 0.16044296997868007
    expectScores(example().search({ q: 'cherry' }), {
      d3: 0.689338656227079,
      d2: 0.5442147286003255,
      d1: 0.21110917102457902,
      d4: 0.16044296997868007,
    });
  });

  it('sums the clauses of a boolean query', () => {
    // d1: title apple 1.3486402228911236 + body cherry 0.21110917102457902
    // d4: body apple 0.8713850269896456 + body cherry 0.16044296997868007
    expectScores(example().search({ q: 'apple AND cherry' }), { d1: 1.5597493939157026, d4: 1.0318279969683257 });
  });

  it('scores a phrase with the sum of its terms idf and the phrase frequency', () => {
    // d3: (ln 1.6 + ln(8/3)) * tf part(1, dl 4) = 1.4508328822574619 * 0.88
    expectScores(example().search({ q: 'title:"cherry date"' }), { d3: 1.2767329363865667 });
  });

  it('multiplies by a query boost', () => {
    // d2: 2 * 0.5442147286003255; d1: 1 * 0.47000362924573563 * 1 (tf 1, dl 3)
    expectScores(example().search({ q: 'title:banana^2' }), { d2: 1.088429457200651, d1: 0.9400072584914713 });
  });

  it('multiplies by a per-field boost given with the request', () => {
    expectScores(example().search({ q: 'title:banana', boosts: { title: 3 } }), { d2: 3 * 0.5442147286003255, d1: 3 * 0.47000362924573563 });
  });

  it('multiplies by a boost declared in the schema', () => {
    const ix = new ShardIndex(parseSchema({ title: { type: 'text', boost: 2 }, body: 'text' }));
    ix.add('d1', { title: 'apple banana apple', body: 'cherry pie' });
    ix.add('d2', { title: 'banana cherry' });
    ix.add('d3', { title: 'cherry cherry cherry date' });
    ix.add('d4', { body: 'apple cherry apple tart' });
    expectScores(ix.search({ q: 'apple' }), { d1: 2 * 1.3486402228911236, d4: 0.8713850269896456 });
  });

  it('gives constant score 1 to prefix, range and match-all clauses', () => {
    expectScores(example().search({ q: 'ap*' }), { d1: 1, d4: 1 });
    expectScores(example().search({ q: '*', limit: 2 }), { d1: 1, d2: 1 });
  });

  it('does not count removed stop words in the field length', () => {
    const ix = new ShardIndex(parseSchema({ title: 'text' }, { stopWords: 'english' }));
    ix.add('a', { title: 'the apple' });
    ix.add('b', { title: 'banana cherry date' });
    // title: N = 2, tokens 1 + 3 = 4, avgdl 2; apple: n 1, idf ln(1 + 1.5/1.5) = ln 2
    // a: tf 1, dl 1: 2.2 / (1 + 1.2 * (0.25 + 0.75 * 1/2)) = 2.2 / 1.75
    expectScores(ix.search({ q: 'title:apple' }), { a: Math.LN2 * (2.2 / 1.75) });
  });
});
