import { describe, expect, it } from 'vitest';
import { Analyzer, checkDocument, parseFieldList, parseSchema, projectFields, ShardIndex } from '../src/index/index.js';
import { exactKey, hashRange, TermTable } from '../src/index/term-table.js';
import { detectDate } from '../src/index/values.js';
import { thrown } from './support/errors.js';

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

  it('hands each token over with the hash and exact key of exactly its characters', () => {
    const seen: { term: string; hash: number; key: number }[] = [];
    const sink = {
      token(text: string, start: number, end: number, hash: number, _position: number, key: number): void {
        seen.push({ term: text.slice(start, end), hash, key });
      },
    };
    const text = `Plain ascii42 Café 𝒜b𝒜 cafe\u0301 東京タワー naïve ${'y'.repeat(300)} 😀x a z9 0123456789 01234567890 abcdefghij abcdefghijk`;
    new Analyzer().analyze(text, 0, sink);
    expect(seen.map((t) => t.term)).toEqual([
      'plain', 'ascii42', 'café', '𝒜b𝒜', 'café', '東', '京', 'タワー', 'naïve', 'y'.repeat(255), 'y'.repeat(45), 'x', 'a', 'z9',
      '0123456789', '01234567890', 'abcdefghij', 'abcdefghijk',
    ]);
    for (const t of seen) {
      expect(t.hash, t.term).toBe(hashRange(t.term, 0, t.term.length));
      expect(t.key, t.term).toBe(exactKey(t.term, 0, t.term.length));
    }
    // Keys exist exactly for 1-10 ASCII letters and digits.
    expect(seen.filter((t) => t.key >= 0).map((t) => t.term)).toEqual(['plain', 'ascii42', 'x', 'a', 'z9', '0123456789', 'abcdefghij']);
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
    for (const w of words) expect(table.add(w, hashRange(w, 0, w.length), exactKey(w, 0, w.length))).toBe(table.size - 1);
    const text = ` ${words[1234]} `;
    expect(table.find(text, 1, text.length - 1, hashRange(text, 1, text.length - 1), exactKey(text, 1, text.length - 1))).toBe(1234);
    expect(table.get('absent')).toBe(-1);
    // Keep every third term, renumbered in order.
    const keep = new Int32Array(words.length).fill(-1);
    let next = 0;
    for (let i = 0; i < words.length; i += 3) keep[i] = next++;
    table.retain(keep);
    expect(table.size).toBe(next);
    for (let i = 0; i < words.length; i++) expect(table.get(words[i])).toBe(keep[i]);
  });

  it('tells apart terms whose hashes collide, keyed or not, of any script and length', () => {
    const table = new TermTable();
    // Terms added with one forced hash: every lookup must compare keys or characters.
    const same = ['abc', 'abd', 'ab', 'abcd', '0abc', 'abcdefghijk', 'abcdefghijl', 'ABC', 'a-b', 'é', '𝒜', ''];
    const key = (t: string): number => exactKey(t, 0, t.length);
    for (const t of same) table.add(t, 42, key(t));
    for (let i = 0; i < same.length; i++) expect(table.find(` ${same[i]} `, 1, 1 + same[i].length, 42, key(same[i])), same[i]).toBe(i);
    for (const absent of ['abe', 'abcdefghijm', 'ABD', 'b-b', 'è']) expect(table.find(absent, 0, absent.length, 42, key(absent)), absent).toBe(-1);
    // Past several rehashes and a renumbering, real hashes find every term.
    const many = Array.from({ length: 3000 }, (_, i) => (i % 2 === 0 ? `t${i}é𝒜` : `t${i}`));
    for (const t of many) table.add(t, hashRange(t, 0, t.length), key(t));
    for (let i = 0; i < many.length; i++) expect(table.get(many[i])).toBe(same.length + i);
    const keep = new Int32Array(table.size).fill(-1);
    let next = 0;
    for (let id = same.length; id < table.size; id += 2) keep[id] = next++;
    table.retain(keep);
    for (let i = 0; i < many.length; i++) expect(table.get(many[i]), many[i]).toBe(i % 2 === 0 ? i / 2 : -1);
  });

  it('indexes adopted terms (a loaded segment) at the first lookup, then adds after them', () => {
    const table = new TermTable();
    const adopted = Array.from({ length: 2000 }, (_, i) => (i % 3 === 0 ? `long-term-${i}-é` : `w${i.toString(36)}`));
    table.adopt(adopted);
    expect(table.size).toBe(adopted.length);
    expect(table.terms[1999]).toBe(adopted[1999]);
    // Found by a range of a larger string, keyed or not.
    for (const i of [0, 1, 999, 1999]) {
      const text = `(${adopted[i]})`;
      expect(table.find(text, 1, text.length - 1, hashRange(text, 1, text.length - 1), exactKey(text, 1, text.length - 1))).toBe(i);
    }
    expect(table.get('absent')).toBe(-1);
    expect(table.add('fresh', hashRange('fresh', 0, 5), exactKey('fresh', 0, 5))).toBe(2000);
    expect(table.get('fresh')).toBe(2000);
    for (let i = 0; i < adopted.length; i++) expect(table.get(adopted[i]!)).toBe(i);
    expect(() => table.adopt(['x'])).toThrow(/empty/);
    // Adopted, then added to before any lookup, then renumbered.
    const other = new TermTable();
    other.adopt(['a', 'b', 'c']);
    expect(other.add('d', hashRange('d', 0, 1), exactKey('d', 0, 1))).toBe(3);
    const keep = Int32Array.from([-1, 0, -1, 1]);
    other.retain(keep);
    expect([other.get('a'), other.get('b'), other.get('c'), other.get('d')]).toEqual([-1, 0, -1, 1]);
  });

  it('keys exactly the strings of 1-10 lower-case ASCII letters and digits, each to its own number', () => {
    expect(exactKey('', 0, 0)).toBe(-1);
    expect(exactKey('a', 0, 1)).toBe(11);
    expect(exactKey('0', 0, 1)).toBe(1);
    expect(exactKey('zzzzzzzzzz', 0, 10)).toBeLessThan(Number.MAX_SAFE_INTEGER);
    for (const bad of ['A', 'a b', 'é', 'abcdefghijk', 'a_b']) expect(exactKey(bad, 0, bad.length), bad).toBe(-1);
    // Distinct strings (leading "zeros" included) get distinct keys.
    const words = ['0', '00', '000', 'a', 'aa', '0a', 'a0', '9', 'z', 'z0', '10', '01'];
    expect(new Set(words.map((w) => exactKey(w, 0, w.length))).size).toBe(words.length);
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
      const err = thrown(() => parseSchema(input));
      expect(err.code).toBe('SHX_BAD_REQUEST');
      expect(err.message).toContain(message);
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
      const err = thrown(() => checkDocument(schema, doc));
      expect(err.code).toBe('SHX_BAD_DOCUMENT');
      expect(err.message).toContain(message);
      expect(err.details).toEqual(field === undefined ? undefined : { field });
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

  it('indexes undeclared ISO 8601 date strings as dates, as Elasticsearch date detection does', () => {
    const ix = new ShardIndex(schema);
    ix.add('jan', { seen: '2024-01-15T10:00:00Z' });
    ix.add('feb', { seen: '2024-02-01' });
    ix.add('jul', { seen: '2024-07-14T15:42:28.773+02:00' });
    ix.add('list', { seen: ['2023-12-31T23:59:59.999Z', 'not a date'] });
    // Not dates: other layouts, impossible days, and non-strings stay what they were.
    ix.add('text', { seen: '2024-1-5' });
    ix.add('slash', { seen: '2024/01/15' });
    ix.add('bad', { seen: '2024-02-30' });
    ix.add('space', { seen: '2024-01-15 10:00' });
    const ids = (q: string, sort?: string): string[] => ix.search({ q, limit: 100, ...(sort && { sort }) }).hits.map((h) => h.id);
    // Sorted as instants (the +02:00 one is 13:42 UTC), newest first; the strings have no date.
    expect(ix.search({ q: 'seen:*', sort: 'seen desc', limit: 4 }).hits.map((h) => [h.id, h.sortValues[0]])).toEqual([
      ['jul', Date.UTC(2024, 6, 14, 13, 42, 28, 773)],
      ['feb', Date.UTC(2024, 1, 1)],
      ['jan', Date.UTC(2024, 0, 15, 10)],
      ['list', Date.UTC(2023, 11, 31, 23, 59, 59, 999)],
    ]);
    // Date bounds match the dates as instants and the other strings as strings ('space' sorts between).
    expect(ids('seen:[2024-01-01 TO 2024-02-01]').sort()).toEqual(['feb', 'jan', 'space']);
    expect(ids('seen:[2024-01-01 TO 2024-02-01}').sort()).toEqual(['jan', 'space']);
    expect(ids('seen:2024-01-15T12:00:00+02:00')).toEqual(['jan']);
    // A query value in a form the index does not take for a date is only words, as that form is.
    expect(ids('seen:"2024-01-15 10:00"')).toEqual(['space']);
    expect(ids('seen:[* TO 2024-01-01]')).toEqual(['list']);
    // A date is indexed once, as a date: not as words, not as an exact string.
    expect(ids('seen:2024').sort()).toEqual(['bad', 'slash', 'space', 'text']);
    expect(ids('seen.keyword:*').sort()).toEqual(['bad', 'list', 'slash', 'space', 'text']);
    expect(ids('seen:date')).toEqual(['list']);
    expect(ids('seen:2024 AND seen:1 AND seen:5')).toEqual(['text']);
    // String bounds still compare the strings that are not dates.
    expect(ids('seen.keyword:[2024-01-01 TO 2024-12-31]').sort()).toEqual(['bad', 'space', 'text']);
    expect(ids('seen:[2024-02-01 TO 2024-03-01]').sort()).toEqual(['bad', 'feb']);
  });

  it('detects only strict ISO 8601 dates and date-times', () => {
    for (const yes of ['2024-01-15', '2024-01-15T10:00', '2024-01-15T10:00:00', '2024-01-15T10:00:00.1Z', '2024-01-15T10:00:00.123456789-0530', '2024-02-29']) {
      expect(detectDate(yes), yes).not.toBeNaN();
    }
    for (const no of ['', '2024', '2024-01', '2024-1-15', '2024/01/15', '2024-01-15 10:00', '2024-13-01', '2023-02-29', '+2024-01-15', '2024-01-15T25:00', 'x2024-01-15', '2024-01-15T10:00:00Zjunk', 'shipol ka neru kashikalo']) {
      expect(detectDate(no), no).toBeNaN();
    }
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
