import { describe, expect, it } from 'vitest';
import { ShardexError } from '../src/errors.js';
import { parseDate, parseQuery, parseSchema, parseSort, type Query } from '../src/index/index.js';

const schema = parseSchema({ title: 'text', body: 'text', category: 'keyword', price: 'number', ts: 'date' });
const parse = (q: string, options?: { defaultOperator?: 'OR' | 'AND' }): Query => parseQuery(q, schema, options);

const term = (field: string | null, t: string, boost = 1): Query => ({ kind: 'term', field, term: t, boost });
const bool = (must: Query[], should: Query[], mustNot: Query[] = [], boost = 1): Query => ({ kind: 'bool', must, should, mustNot, boost });
const numRange = (field: string, lower: number | null, upper: number | null, includeLower = true, includeUpper = true): Query => ({
  kind: 'range',
  target: 'number',
  field,
  lower,
  upper,
  includeLower,
  includeUpper,
  boost: 1,
});

function errorOf(fn: () => unknown): ShardexError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ShardexError);
    return err as ShardexError;
  }
  throw new Error('expected an error');
}

describe('query grammar', () => {
  it('parses a bare word as a term in the default fields, lower-cased', () => {
    expect(parse('Apple')).toEqual(term(null, 'apple'));
  });

  it('parses field:value on a text field through the analyzer', () => {
    expect(parse('title:Apple')).toEqual(term('title', 'apple'));
  });

  it('keeps a keyword value exact, quoted or not', () => {
    expect(parse('category:Cat-A')).toEqual(term('category', 'Cat-A'));
    expect(parse('category:"Cat A"')).toEqual(term('category', 'Cat A'));
  });

  it('parses a quoted phrase with relative positions', () => {
    expect(parse('"Quick Brown fox"')).toEqual({ kind: 'phrase', field: null, terms: ['quick', 'brown', 'fox'], positions: [0, 1, 2], boost: 1 });
    expect(parse('title:"a b"')).toEqual({ kind: 'phrase', field: 'title', terms: ['a', 'b'], positions: [0, 1], boost: 1 });
  });

  it('makes a word that analyzes to several tokens a phrase', () => {
    expect(parse('e-mail')).toEqual({ kind: 'phrase', field: null, terms: ['e', 'mail'], positions: [0, 1], boost: 1 });
  });

  it('joins side-by-side clauses with OR by default', () => {
    expect(parse('a b')).toEqual(bool([], [term(null, 'a'), term(null, 'b')]));
  });

  it('joins side-by-side clauses with AND when that is the default operator', () => {
    expect(parse('a b', { defaultOperator: 'AND' })).toEqual(bool([term(null, 'a'), term(null, 'b')], []));
  });

  it('parses AND, OR and their symbols', () => {
    expect(parse('a AND b')).toEqual(bool([term(null, 'a'), term(null, 'b')], []));
    expect(parse('a && b')).toEqual(parse('a AND b'));
    expect(parse('a OR b')).toEqual(bool([], [term(null, 'a'), term(null, 'b')]));
    expect(parse('a || b')).toEqual(parse('a OR b'));
  });

  it('binds AND tighter than OR', () => {
    expect(parse('a OR b AND c')).toEqual(bool([], [term(null, 'a'), bool([term(null, 'b'), term(null, 'c')], [])]));
    expect(parse('a AND b OR c')).toEqual(bool([], [bool([term(null, 'a'), term(null, 'b')], []), term(null, 'c')]));
  });

  it('reads lower-case and, or, not as words', () => {
    expect(parse('a and b')).toEqual(bool([], [term(null, 'a'), term(null, 'and'), term(null, 'b')]));
  });

  it('parses NOT, - and ! as exclusions and + as required', () => {
    expect(parse('a AND NOT b')).toEqual(bool([term(null, 'a')], [], [term(null, 'b')]));
    expect(parse('a -b')).toEqual(bool([], [term(null, 'a')], [term(null, 'b')]));
    expect(parse('a !b')).toEqual(parse('a -b'));
    expect(parse('+a b')).toEqual(bool([term(null, 'a')], [term(null, 'b')]));
  });

  it('keeps a query of only exclusions as a bool without positive clauses', () => {
    expect(parse('NOT a')).toEqual(bool([], [], [term(null, 'a')]));
    expect(parse('-category:x')).toEqual(bool([], [], [term('category', 'x')]));
  });

  it('groups with parentheses', () => {
    expect(parse('(a OR b) AND c')).toEqual(bool([bool([], [term(null, 'a'), term(null, 'b')]), term(null, 'c')], []));
  });

  it('applies a field to a parenthesized group', () => {
    expect(parse('title:(a OR b)')).toEqual(bool([], [term('title', 'a'), term('title', 'b')]));
  });

  it('parses * and *:* as every document', () => {
    expect(parse('*')).toEqual({ kind: 'all', boost: 1 });
    expect(parse('*:*')).toEqual({ kind: 'all', boost: 1 });
  });

  it('parses a trailing * as a prefix query, lower-cased for text and exact for keywords', () => {
    expect(parse('App*')).toEqual({ kind: 'prefix', field: null, prefix: 'app', boost: 1 });
    expect(parse('title:App*')).toEqual({ kind: 'prefix', field: 'title', prefix: 'app', boost: 1 });
    expect(parse('category:Cat*')).toEqual({ kind: 'prefix', field: 'category', prefix: 'Cat', boost: 1 });
  });

  it('parses field:* as "has the field"', () => {
    expect(parse('title:*')).toEqual({ kind: 'exists', target: 'inverted', field: 'title', boost: 1 });
    expect(parse('price:*')).toEqual({ kind: 'exists', target: 'number', field: 'price', boost: 1 });
  });

  it('parses inclusive, exclusive, mixed and open number ranges', () => {
    expect(parse('price:[10 TO 20]')).toEqual(numRange('price', 10, 20));
    expect(parse('price:{10 TO 20}')).toEqual(numRange('price', 10, 20, false, false));
    expect(parse('price:[10 TO 20}')).toEqual(numRange('price', 10, 20, true, false));
    expect(parse('price:[* TO 20]')).toEqual(numRange('price', null, 20));
  });

  it('parses date ranges in ISO 8601, UTC unless a zone is given', () => {
    expect(parse('ts:[2024-01-01 TO *]')).toEqual(numRange('ts', Date.UTC(2024, 0, 1), null));
    expect(parse('ts:[2024-01-01T10:00:00 TO 2024-01-01T12:00:00+02:00]')).toEqual(numRange('ts', Date.UTC(2024, 0, 1, 10), Date.UTC(2024, 0, 1, 10)));
  });

  it('parses equality on number and date fields as a one-point range', () => {
    expect(parse('price:12.5')).toEqual(numRange('price', 12.5, 12.5));
    expect(parse('ts:2024-03-01T10:00:00Z')).toEqual(numRange('ts', Date.UTC(2024, 2, 1, 10), Date.UTC(2024, 2, 1, 10)));
  });

  it('parses keyword ranges as string ranges', () => {
    expect(parse('category:[cat-a TO cat-c}')).toEqual({ kind: 'range', target: 'keyword', field: 'category', lower: 'cat-a', upper: 'cat-c', includeLower: true, includeUpper: false, boost: 1 });
  });

  it('parses boosts on terms, phrases and groups', () => {
    expect(parse('title:a^2.5')).toEqual(term('title', 'a', 2.5));
    expect(parse('(a b)^3')).toEqual(bool([], [term(null, 'a'), term(null, 'b')], [], 3));
  });

  it('drops a clause that is only a stop word', () => {
    const english = parseSchema({ title: 'text' }, { stopWords: 'english' });
    expect(parseQuery('apple AND the', english)).toEqual(term(null, 'apple'));
    expect(parseQuery('"apple of pie"', english)).toEqual({ kind: 'phrase', field: null, terms: ['apple', 'pie'], positions: [0, 2], boost: 1 });
  });

  it('reads escaped special characters as part of a word', () => {
    expect(parse('category:a\\:b\\(c\\)')).toEqual(term('category', 'a:b(c)'));
  });

  it('reads undeclared fields as text, and f.keyword as their exact values', () => {
    expect(parse('color:Red')).toEqual(term('color', 'red'));
    expect(parse('color.keyword:Red')).toEqual(term('color.keyword', 'Red'));
  });

  it('matches an undeclared field both as text and as a number when the value is numeric', () => {
    expect(parse('rating:4')).toEqual(bool([], [term('rating', '4'), numRange('rating', 4, 4)]));
  });

  it('matches an undeclared field as a date (epoch ms) too when the value is one', () => {
    const ms = Date.UTC(2024, 2, 1, 10);
    expect(parse('seen:2024-03-01T10:00:00Z')).toEqual(bool([], [parse('seen:"2024 03 01t10 00 00z"'), numRange('seen', ms, ms)]));
    const range = parse('seen:[2024-03-01T10:00:00Z TO *]') as { kind: string; should: Query[] };
    expect(range.kind).toBe('bool');
    expect(range.should[0]).toEqual(numRange('seen', ms, null));
  });

  it('reads id:value as a lookup by id', () => {
    expect(parse('id:doc-1')).toEqual({ kind: 'ids', ids: ['doc-1'], boost: 1 });
  });
});

describe('query errors', () => {
  // [query, position, part of the message]
  const cases: [string, number, string][] = [
    ['', 0, 'empty query'],
    ['   ', 3, 'empty query'],
    ['a AND', 5, 'expected a clause after AND'],
    ['a OR', 4, 'expected a clause after OR'],
    ['AND a', 0, 'expected a clause, found AND'],
    ['a OR OR b', 5, 'expected a clause, found OR'],
    ['NOT', 3, "expected a clause after 'NOT'"],
    ['a -', 3, "expected a clause after '-'"],
    ['(a', 2, "missing ')' for the '(' at character 0"],
    ['a)', 1, "unexpected ')'"],
    ['()', 1, 'empty group'],
    ['"abc', 0, 'unterminated phrase'],
    ['title:', 6, "expected a value after 'title:'"],
    ['title:)', 6, "expected a value after 'title:'"],
    [':a', 0, "unexpected ':'"],
    ['a^', 2, "expected a non-negative number after '^'"],
    ['a^x', 2, "expected a non-negative number after '^'"],
    ['a ^2', 2, "unexpected '^'"],
    ['a~2', 1, "'~') are not supported"],
    ['a*b', 1, "'*' is only supported at the end of a word"],
    ['*a', 0, "'*' is only supported at the end of a word"],
    ['ti*:a', 0, "a field name cannot contain '*'"],
    ['*:a', 2, "only '*' may follow '*:'"],
    ['[1 TO 2]', 0, 'a range needs a field'],
    ['price:[10 20]', 10, "expected 'TO'"],
    ['price:[10 TO', 12, 'unterminated range'],
    ['price:[10 TO 20', 15, "expected ']' or '}'"],
    ['price:[ TO 20]', 8, 'expected a range bound'],
    ['price:abc', 6, "'abc' is not a number"],
    ['price:[1 TO x]', 12, "'x' is not a number"],
    ['ts:2024-13-01', 3, "'2024-13-01' is not a date"],
    ['ts:[2024-01-01 TO 2024-02-30]', 18, "'2024-02-30' is not a date"],
    ['price:1*', 6, 'prefix queries need a text or keyword field'],
    ['title:[a TO b]', 7, "'title' is a text field"],
    ['id:[a TO b]', 4, 'the document id'],
    ['id:a*', 3, "'id' supports exact matches only"],
    ['title.keyword:x', 0, "'title' is declared as text"],
    ['score:1', 0, "'score' is not a field"],
    ['a\\', 1, "a '\\' must escape a character"],
    ['a AND (b OR )', 12, 'expected a clause after OR'],
    ['((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((a))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))', 64, 'nests deeper than 64 levels'],
  ];

  for (const [q, position, message] of cases) {
    it(`rejects ${JSON.stringify(q)} at position ${position}`, () => {
      const err = errorOf(() => parse(q));
      expect(err.code).toBe('SHX_BAD_QUERY');
      expect(err.status).toBe(400);
      expect(err.message).toContain(message);
      expect(err.message).toContain(`at position ${position}`);
      expect(err.details).toEqual({ position });
    });
  }
});

describe('sort specs', () => {
  it('defaults to score desc', () => {
    expect(parseSort(undefined, schema)).toEqual([{ field: 'score', order: 'desc', type: 'score', dynamic: false }]);
    expect(parseSort('  ', schema)).toEqual(parseSort(undefined, schema));
  });

  it('parses several keys, directions case-insensitively', () => {
    expect(parseSort('price desc, ts ASC,category asc,id desc', schema)).toEqual([
      { field: 'price', order: 'desc', type: 'number', dynamic: false },
      { field: 'ts', order: 'asc', type: 'number', dynamic: false },
      { field: 'category', order: 'asc', type: 'keyword', dynamic: false },
      { field: 'id', order: 'desc', type: 'id', dynamic: false },
    ]);
  });

  it('sorts undeclared fields by their numbers or, as f.keyword, by their strings', () => {
    expect(parseSort('rating desc,color.keyword asc', schema)).toEqual([
      { field: 'rating', order: 'desc', type: 'number', dynamic: true },
      { field: 'color.keyword', order: 'asc', type: 'keyword', dynamic: true },
    ]);
  });

  const cases: [string, number, string][] = [
    ['title asc', 0, "cannot sort on 'title': it is a text field"],
    ['price', 5, "'price' needs a direction"],
    ['price up', 6, "direction must be asc or desc, got 'up'"],
    ['price desc,,ts asc', 11, 'empty sort clause'],
    ['price desc, ts asc extra', 12, "expected 'field asc' or 'field desc'"],
    ['title.keyword asc', 0, "'title' is declared as text"],
    ['bad:name asc', 0, 'not a valid field name'],
  ];
  for (const [spec, position, message] of cases) {
    it(`rejects ${JSON.stringify(spec)} at position ${position}`, () => {
      const err = errorOf(() => parseSort(spec, schema));
      expect(err.status).toBe(400);
      expect(err.message).toContain(message);
      expect(err.details).toEqual({ param: 'sort', position });
    });
  }
});

describe('dates', () => {
  it('reads ISO 8601 dates and instants as UTC epoch milliseconds', () => {
    expect(parseDate('2024-01-01')).toBe(Date.UTC(2024, 0, 1));
    expect(parseDate('2024-02-29T23:59:59.999Z')).toBe(Date.UTC(2024, 1, 29, 23, 59, 59, 999));
    expect(parseDate('2024-06-01T12:00-0130')).toBe(Date.UTC(2024, 5, 1, 13, 30));
    expect(parseDate('0099-01-01')).toBe(new Date('0099-01-01T00:00:00Z').getTime());
  });

  it('rejects what is not a valid date', () => {
    for (const bad of ['2023-02-29', '2024-1-1', '2024-01-01T24:00', 'yesterday', '2024-01-01T10:00:00Zjunk', '']) expect(parseDate(bad)).toBeNaN();
  });
});
