import { describe, expect, it } from 'vitest';
import { ShardexError } from '../src/errors.js';
import { Analyzer, checkDocument, parseFieldList, parseSchema, projectFields, ShardIndex } from '../src/index/index.js';
import { hashRange, TermTable } from '../src/index/term-table.js';

const terms = (text: string, analyzer = new Analyzer()): string[] => analyzer.terms(text).terms;

describe('analyzer', () => {
  it('splits on anything but letters, digits and marks, and lower-cases', () => {
    expect(terms('Hello, World! e-mail: foo_bar@example.com 42')).toEqual(['hello', 'world', 'e', 'mail', 'foo', 'bar', 'example', 'com', '42']);
  });

  it('keeps letters of every script and normalizes to NFC', () => {
    expect(terms('Café cafe\u0301 STRASSE Straße naïve ÉCOLE 𝒜bc')).toEqual(['café', 'café', 'strasse', 'straße', 'naïve', 'école', '𝒜bc']);
  });

  it('makes each Han and Hiragana character a token', () => {
    expect(terms('東京タワーに行く')).toEqual(['東', '京', 'タワー', 'に', '行', 'く']);
  });

  it('cuts tokens longer than 255 characters', () => {
    expect(terms('x'.repeat(300)).map((t) => t.length)).toEqual([255, 45]);
  });

  it('hands each token over with the hash of exactly its characters', () => {
    const seen: [string, number, number][] = [];
    const sink = {
      token(text: string, start: number, end: number, hash: number): void {
        seen.push([text.slice(start, end), hash, hashRange(text, start, end)]);
      },
    };
    new Analyzer().analyze(`Plain ascii42 Café 𝒜b𝒜 cafe\u0301 東京タワー naïve ${'y'.repeat(300)} 😀x a`, 0, sink);
    expect(seen.map((t) => t[0])).toEqual(['plain', 'ascii42', 'café', '𝒜b𝒜', 'café', '東', '京', 'タワー', 'naïve', 'y'.repeat(255), 'y'.repeat(45), 'x', 'a']);
    for (const [term, given, expected] of seen) expect(given, term).toBe(expected);
  });

  it('drops stop words but keeps their positions', () => {
    const english = new Analyzer({ stopWords: 'english' });
    expect(english.terms('The cat and the hat')).toEqual({ terms: ['cat', 'hat'], positions: [0, 3] });
    expect(new Analyzer({ stopWords: ['Cat'] }).terms('the cat')).toEqual({ terms: ['the'], positions: [0] });
  });

  it('analyzes documents and queries alike', () => {
    const ix = new ShardIndex(parseSchema({ title: 'text' }));
    ix.add('a', { title: 'ÉCOLE Straße' });
    expect(ix.search({ q: 'école AND STRASSE' }).total).toBe(0);
    expect(ix.search({ q: 'École AND straße' }).total).toBe(1);
    expect(ix.search({ q: 'title:ÉCO*' }).total).toBe(1);
  });
});

describe('term table', () => {
  it('finds terms by a range of a larger string, across growth and renumbering', () => {
    const table = new TermTable();
    const words = Array.from({ length: 5000 }, (_, i) => `w${i.toString(36)}`);
    for (const w of words) expect(table.add(w, hashRange(w, 0, w.length))).toBe(table.size - 1);
    const text = ` ${words[1234]} `;
    expect(table.find(text, 1, text.length - 1, hashRange(text, 1, text.length - 1))).toBe(1234);
    expect(table.get('absent')).toBe(-1);
    // Keep every third term, renumbered in order.
    const keep = new Int32Array(words.length).fill(-1);
    let next = 0;
    for (let i = 0; i < words.length; i += 3) keep[i] = next++;
    table.retain(keep);
    expect(table.size).toBe(next);
    for (let i = 0; i < words.length; i++) expect(table.get(words[i])).toBe(keep[i]);
  });

  it('tells apart terms whose hashes collide, and terms of other scripts and lengths', () => {
    const table = new TermTable();
    // Terms added with one forced hash: every lookup must compare the characters.
    const same = ['abc', 'abd', 'ab', 'abcd', 'é', '𝒜', ''];
    for (const t of same) table.add(t, 42);
    for (let i = 0; i < same.length; i++) expect(table.find(` ${same[i]} `, 1, 1 + same[i].length, 42)).toBe(i);
    expect(table.find('abe', 0, 3, 42)).toBe(-1);
    // Past several rehashes (which rehash from the strings), real hashes find every term.
    const many = Array.from({ length: 3000 }, (_, i) => `t${i}é𝒜`);
    for (const t of many) table.add(t, hashRange(t, 0, t.length));
    for (let i = 0; i < many.length; i++) expect(table.get(many[i])).toBe(same.length + i);
  });
});

describe('schema', () => {
  it('accepts types as strings or as objects with a boost', () => {
    const schema = parseSchema({ title: { type: 'text', boost: 2 }, category: 'keyword', price: 'number', ts: 'date' });
    expect([...schema.fields.values()]).toEqual([
      { name: 'title', type: 'text', boost: 2 },
      { name: 'category', type: 'keyword', boost: 1 },
      { name: 'price', type: 'number', boost: 1 },
      { name: 'ts', type: 'date', boost: 1 },
    ]);
  });

  it('accepts no declarations at all', () => {
    expect(parseSchema(undefined).fields.size).toBe(0);
    expect(parseSchema({}).fields.size).toBe(0);
  });

  const bad: [unknown, string][] = [
    ['text', 'the schema must be an object'],
    [[], 'the schema must be an object'],
    [{ title: 'string' }, "field 'title': unknown type 'string' (expected one of text, keyword, number, date)"],
    [{ title: 3 }, "field 'title': the type must be one of"],
    [{ title: { type: 'text', boost: -1 } }, '"boost" must be a positive number'],
    [{ title: { type: 'text', analyzer: 'x' } }, "unknown option 'analyzer'"],
    [{ title: {} }, '"type" must be one of'],
    [{ id: 'keyword' }, "'id' is reserved"],
    [{ score: 'number' }, "'score' is reserved"],
    [{ 'name.keyword': 'keyword' }, "names ending in '.keyword' are reserved"],
    [{ '': 'text' }, 'a field name cannot be empty'],
    [{ 'a b': 'text' }, 'a field name starts with a letter, digit or _'],
  ];
  for (const [input, message] of bad) {
    it(`rejects ${JSON.stringify(input)}`, () => {
      let err: unknown;
      try {
        parseSchema(input);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ShardexError);
      expect((err as ShardexError).code).toBe('SHX_BAD_REQUEST');
      expect((err as ShardexError).message).toContain(message);
    });
  }

  it('rejects bad stop word options', () => {
    expect(() => parseSchema({}, { stopWords: 'french' as never })).toThrow(/stopWords must be 'english' or a list of words/);
  });
});

describe('documents', () => {
  const schema = parseSchema({ title: 'text', category: 'keyword', price: 'number', ts: 'date' });

  it('accepts declared values, lists, nulls and undeclared scalars', () => {
    expect(() =>
      checkDocument(schema, { id: 'x', title: ['a', 'b'], category: 7, price: '12.5', ts: 1700000000000, other: true, more: null, list: [1, 'a', null] }),
    ).not.toThrow();
  });

  const bad: [unknown, string, string | undefined][] = [
    [null, 'a document must be a JSON object', undefined],
    [['a'], 'a document must be a JSON object', undefined],
    [{ price: 'cheap' }, "field 'price' is a number field; got \"cheap\"", 'price'],
    [{ price: ' 12' }, "field 'price' is a number field", 'price'],
    [{ ts: '2024-02-30' }, "field 'ts' is a date field", 'ts'],
    [{ title: { nested: 1 } }, "field 'title': a text field holds strings, numbers or booleans", 'title'],
    [{ extra: { nested: 1 } }, "field 'extra': undeclared fields hold strings, numbers or booleans", 'extra'],
    [{ tags: [['a']] }, "field 'tags': lists of lists are not supported", 'tags'],
    [{ 'name.keyword': 'x' }, "names ending in '.keyword' are reserved", 'name.keyword'],
  ];
  for (const [doc, message, field] of bad) {
    it(`rejects ${JSON.stringify(doc)} naming the field`, () => {
      let err: unknown;
      try {
        checkDocument(schema, doc);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ShardexError);
      expect((err as ShardexError).code).toBe('SHX_BAD_DOCUMENT');
      expect((err as ShardexError).message).toContain(message);
      expect((err as ShardexError).details).toEqual(field === undefined ? undefined : { field });
    });
  }

  it('indexes only short undeclared strings as exact values', () => {
    const ix = new ShardIndex(schema);
    const long = `long ${'x'.repeat(300)}`;
    ix.add('a', { note: long, tags: ['short', long] });
    expect(ix.search({ q: 'note:long AND tags:long' }).hits.map((h) => h.id)).toEqual(['a']);
    expect(ix.search({ q: 'note.keyword:*' }).hits.map((h) => h.id)).toEqual([]);
    expect(ix.search({ q: 'tags.keyword:short' }).hits.map((h) => h.id)).toEqual(['a']);
    expect(ix.search({ sort: 'tags.keyword desc' }).hits[0].sortValues).toEqual(['short']);
  });

  it('projects stored fields, id first and reserved keys left out', () => {
    const doc = { id: 'x', title: 't', price: 3, _version_: 9 };
    expect(projectFields('x', doc, null)).toEqual({ id: 'x', title: 't', price: 3 });
    expect(projectFields('x', doc, parseFieldList('title, nope,score'))).toEqual({ id: 'x', title: 't' });
    expect(parseFieldList('')).toBeNull();
    expect(parseFieldList('*')).toBeNull();
    expect(parseFieldList(['a', 'a', ' b '])).toEqual(['a', 'b']);
  });
});

describe('search requests', () => {
  const ix = new ShardIndex(parseSchema({ title: 'text' }));
  ix.add('a', { title: 'x' });

  it('rejects bad paging', () => {
    expect(() => ix.search({ offset: -1 })).toThrow(/offset must be a non-negative integer/);
    expect(() => ix.search({ limit: 1.5 })).toThrow(/limit must be a non-negative integer/);
    expect(() => ix.search({ offset: 9000, limit: 1001 })).toThrow(/offset \+ limit must not exceed 10000/);
  });

  it('rejects bad boosts and operators', () => {
    expect(() => ix.search({ boosts: { title: -1 } })).toThrow(/the boost of 'title' must be a non-negative number/);
    expect(() => ix.search({ boosts: { title: '2' as never } })).toThrow(/the boost of 'title'/);
    expect(() => ix.search({ defaultOperator: 'XOR' as never })).toThrow(/the default operator must be OR or AND/);
  });

  it('defaults to every document, score desc, 10 hits', () => {
    for (let i = 0; i < 20; i++) ix.add(`d${String(i).padStart(2, '0')}`, { title: 'y' });
    const r = ix.search();
    expect(r.total).toBe(21);
    expect(r.hits.map((h) => h.id)).toEqual(['a', 'd00', 'd01', 'd02', 'd03', 'd04', 'd05', 'd06', 'd07', 'd08']);
  });

  it('fails fetch without a document lookup', async () => {
    await expect(ix.fetch(['a'])).rejects.toThrow(/no document lookup/);
  });
});
