// The query language (a subset of Lucene's classic syntax, as Solr's `q` speaks it):
//
//   word              the word in the default fields (every text field, scores summed)
//   field:word        in one field: analyzed for text, exact for keyword, equality for number/date
//   "a phrase"        consecutive terms (field:"a phrase" too); on a keyword field, the exact value
//   pre*              terms starting with `pre` (constant score); field:* = has the field
//   *  or  *:*        every document
//   field:[a TO b]    inclusive range, {a TO b} exclusive, mixed [a TO b} allowed, * = open end;
//                     numbers, dates (ISO 8601, UTC unless a zone is given) or keyword strings
//   a AND b, a OR b, NOT a, -a, +a, !a, && and ||, ( ... ), field:( ... ), clause^2.5 (boost)
//
// Precedence: NOT (and the -, +, ! prefixes) binds tightest, then AND, then OR. Two clauses side
// by side are joined by the default operator, OR unless `defaultOperator: 'AND'` (Solr's q.op):
// `a b AND c` is `a OR (b AND c)`. As in Lucene, inside an OR group `+x` is required and `-x` /
// `NOT x` excludes: `a OR NOT b` is "a, minus b". A query of only exclusions matches everything
// else. A word that analyzes to several tokens (`e-mail`) is a phrase; one that analyzes to none
// (a stop word) is dropped from its group. Errors are SHX_BAD_QUERY naming the 0-based position.

import { ShardexError } from '../errors.js';
import type { AnalyzedText } from './analyzer.js';
import { MATCH_ALL, MATCH_NONE, withBoost, type Query } from './query.js';
import { resolveField, type CollectionSchema, type QueryField } from './schema.js';
import { detectDate, parseDate, parseNumber } from './values.js';

export interface ParseOptions {
  /** Operator between clauses written side by side (default 'OR', as Solr's q.op). */
  readonly defaultOperator?: 'OR' | 'AND';
}

export const MAX_QUERY_LENGTH = 65536;
const MAX_DEPTH = 64;

type Occur = 'should' | 'must' | 'not';

interface Clause {
  readonly occur: Occur;
  readonly node: Query;
}

interface Word {
  readonly text: string;
  readonly start: number;
  /** An unescaped trailing `*`. */
  readonly prefix: boolean;
  /** The word is an unescaped `*` alone. */
  readonly all: boolean;
}

/** Parses `q` against the collection's schema; throws ShardexError SHX_BAD_QUERY with the position. */
export function parseQuery(q: string, schema: CollectionSchema, options: ParseOptions = {}): Query {
  if (typeof q !== 'string') throw new ShardexError('SHX_BAD_QUERY', 'the query must be a string', { details: { position: 0 } });
  return new QueryParser(q, schema, options.defaultOperator === 'AND').parse();
}

export function queryError(message: string, position: number): ShardexError {
  return new ShardexError('SHX_BAD_QUERY', `${message} at position ${position}`, { details: { position } });
}

function isSpace(c: number): boolean {
  return c === 0x20 || (c >= 0x09 && c <= 0x0d) || c === 0xa0 || c === 0x3000 || c === 0xfeff || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029;
}

/** Characters that end a word (besides white space; ':' only outside field values). */
function isSpecial(ch: string): boolean {
  return ch === '(' || ch === ')' || ch === '"' || ch === '^' || ch === '[' || ch === ']' || ch === '{' || ch === '}' || ch === '~';
}

class QueryParser {
  private pos = 0;
  private depth = 0;

  constructor(
    private readonly src: string,
    private readonly schema: CollectionSchema,
    private readonly implicitAnd: boolean,
  ) {}

  parse(): Query {
    if (this.src.length > MAX_QUERY_LENGTH) throw queryError(`the query is longer than ${MAX_QUERY_LENGTH} characters`, MAX_QUERY_LENGTH);
    this.skipSpace();
    if (this.eof()) throw queryError('empty query', this.pos);
    const clauses = this.parseOr(null, false);
    return toQuery(clauses);
  }

  // ---- grammar ----

  private parseOr(field: string | null, nested: boolean): Clause[] {
    const items: Clause[] = [];
    const groupStart = this.pos;
    for (;;) {
      this.skipSpace();
      if (this.eof()) break;
      if (this.ch() === ')') {
        if (nested) break;
        throw queryError("unexpected ')' without a matching '('", this.pos);
      }
      if (items.length > 0) {
        const op = this.peekOperator();
        if (op === 'OR') {
          this.consumeOperator(op);
          this.skipSpace();
          if (this.eof() || this.ch() === ')') throw queryError('expected a clause after OR', this.pos);
        }
      }
      items.push(this.parseAnd(field));
    }
    if (items.length === 0) throw queryError('empty group', groupStart);
    return items;
  }

  private parseAnd(field: string | null): Clause {
    const parts: Clause[] = [this.parseUnary(field)];
    for (;;) {
      this.skipSpace();
      if (this.eof()) break;
      const op = this.peekOperator();
      if (op === 'AND') {
        this.consumeOperator(op);
        this.skipSpace();
        if (this.eof() || this.ch() === ')') throw queryError('expected a clause after AND', this.pos);
        parts.push(this.parseUnary(field));
      } else if (this.implicitAnd && op !== 'OR' && this.ch() !== ')') {
        parts.push(this.parseUnary(field));
      } else {
        break;
      }
    }
    if (parts.length === 1) return parts[0];
    const node = makeBool(parts.map((p) => ({ occur: p.occur === 'not' ? 'not' : 'must', node: p.node })));
    return { occur: 'should', node };
  }

  private parseUnary(field: string | null): Clause {
    this.skipSpace();
    if (this.eof()) throw queryError('expected a clause', this.pos);
    const op = this.peekOperator();
    if (op === 'AND' || op === 'OR') throw queryError(`expected a clause, found ${op}`, this.pos);
    const c = this.ch();
    if (op === 'NOT' || c === '-' || c === '!' || c === '+') {
      const at = this.pos;
      if (op === 'NOT') this.consumeOperator(op);
      else this.pos++;
      this.skipSpace();
      if (this.eof() || this.ch() === ')') throw queryError(`expected a clause after '${op ?? c}'`, this.pos);
      this.enter(at);
      const inner = this.parseUnary(field);
      this.depth--;
      if (c === '+' && op === null) return { occur: inner.occur === 'not' ? 'not' : 'must', node: inner.node };
      const node = inner.occur === 'not' ? makeBool([inner]) : inner.node;
      return { occur: 'not', node };
    }
    return { occur: 'should', node: this.parsePrimary(field) };
  }

  private parsePrimary(field: string | null): Query {
    const start = this.pos;
    const c = this.ch();
    let node: Query;
    if (c === '(') {
      node = this.parseGroup(field);
    } else if (c === '"') {
      node = this.resolveValue(field, this.readQuoted(), start, false, false);
    } else if (c === '[' || c === '{') {
      if (field === null) throw queryError('a range needs a field, as in price:[10 TO 20]', start);
      node = this.parseRange(field, start);
    } else if (isSpecial(c) || c === ':') {
      throw queryError(`unexpected '${c}'`, start);
    } else {
      const word = this.readWord(false);
      if (this.ch() === ':') {
        node = this.parseFielded(word);
      } else {
        this.rejectTilde();
        node = word.all && field === null ? MATCH_ALL : this.resolveValue(field, word.text, start, word.prefix, word.all);
      }
    }
    return this.parseBoost(node);
  }

  private parseGroup(field: string | null): Query {
    const open = this.pos;
    this.enter(open);
    this.pos++;
    const clauses = this.parseOr(field, true);
    if (this.eof()) throw queryError(`missing ')' for the '(' at character ${open}`, this.pos);
    this.pos++;
    this.depth--;
    return toQuery(clauses);
  }

  private parseFielded(name: Word): Query {
    if (name.prefix && !name.all) throw queryError("a field name cannot contain '*'", name.start);
    this.pos++; // ':'
    this.skipSpace();
    if (this.eof() || this.ch() === ')') throw queryError(`expected a value after '${name.text}:'`, this.pos);
    if (name.all) {
      // Solr's `*:*`.
      const value = this.readWord(true);
      if (!value.all) throw queryError("only '*' may follow '*:'", value.start);
      return MATCH_ALL;
    }
    const field = name.text;
    const resolved = resolveField(this.schema, field);
    if (typeof resolved === 'string') throw queryError(resolved, name.start);
    const start = this.pos;
    const c = this.ch();
    if (c === '(') return this.parseGroup(field);
    if (c === '"') return this.resolveValue(field, this.readQuoted(), start, false, false);
    if (c === '[' || c === '{') return this.parseRange(field, start);
    if (isSpecial(c)) throw queryError(`unexpected '${c}' after '${field}:'`, start);
    const value = this.readWord(true);
    this.rejectTilde();
    return this.resolveValue(field, value.text, start, value.prefix, value.all);
  }

  private parseRange(field: string, start: number): Query {
    const includeLower = this.ch() === '[';
    this.pos++;
    this.skipSpace();
    const lowerAt = this.pos;
    const lower = this.readBound(start);
    this.skipSpace();
    if (!this.src.startsWith('TO', this.pos) || !(this.pos + 2 >= this.src.length || isSpace(this.src.charCodeAt(this.pos + 2)))) {
      throw queryError(`expected 'TO' in the range at character ${start}`, this.pos);
    }
    this.pos += 2;
    this.skipSpace();
    const upperAt = this.pos;
    const upper = this.readBound(start);
    this.skipSpace();
    const close = this.ch();
    if (close !== ']' && close !== '}') {
      throw queryError(`expected ']' or '}' to close the range at character ${start}`, this.pos);
    }
    this.pos++;
    return this.resolveRange(field, lower, lowerAt, upper, upperAt, includeLower, close === ']');
  }

  private parseBoost(node: Query): Query {
    if (this.ch() !== '^') return node;
    this.pos++;
    const begin = this.pos;
    while (!this.eof() && /[0-9.]/.test(this.ch())) this.pos++;
    const text = this.src.slice(begin, this.pos);
    const boost = parseNumber(text);
    if (text.length === 0 || !(boost >= 0)) throw queryError("expected a non-negative number after '^'", begin);
    return withBoost(node, boost);
  }

  // ---- lexing ----

  /** A bare word up to white space or a special character; `valueMode` lets ':' inside. */
  private readWord(valueMode: boolean): Word {
    const start = this.pos;
    let text = '';
    let prefix = false;
    let rawStar = -1;
    while (!this.eof()) {
      const c = this.ch();
      if (isSpace(this.src.charCodeAt(this.pos)) || isSpecial(c) || (c === ':' && !valueMode)) break;
      if (c === '\\') {
        if (this.pos + 1 >= this.src.length) throw queryError("a '\\' must escape a character", this.pos);
        text += this.src[this.pos + 1];
        this.pos += 2;
        continue;
      }
      if (c === '*') {
        if (rawStar >= 0) throw queryError("'*' is only supported at the end of a word (prefix query)", rawStar);
        rawStar = this.pos;
      } else if (rawStar >= 0) {
        throw queryError("'*' is only supported at the end of a word (prefix query)", rawStar);
      }
      if (c !== '*') text += c;
      this.pos++;
    }
    if (rawStar >= 0) prefix = true;
    return { text, start, prefix, all: prefix && text.length === 0 };
  }

  private readQuoted(): string {
    const open = this.pos;
    this.pos++;
    let text = '';
    for (;;) {
      if (this.eof()) throw queryError(`unterminated phrase: no closing '"'`, open);
      const c = this.ch();
      if (c === '"') break;
      if (c === '\\') {
        if (this.pos + 1 >= this.src.length) throw queryError(`unterminated phrase: no closing '"'`, open);
        text += this.src[this.pos + 1];
        this.pos += 2;
        continue;
      }
      text += c;
      this.pos++;
    }
    this.pos++;
    this.rejectTilde();
    return text;
  }

  /** A range bound: a quoted string, `*` (open, returned as null) or a word up to white space, ] or }. */
  private readBound(rangeStart: number): string | null {
    if (this.eof()) throw queryError(`unterminated range at character ${rangeStart}`, this.pos);
    if (this.ch() === '"') return this.readQuoted();
    const start = this.pos;
    let text = '';
    let escaped = false;
    while (!this.eof()) {
      const c = this.ch();
      if (isSpace(this.src.charCodeAt(this.pos)) || c === ']' || c === '}') break;
      if (c === '\\' && this.pos + 1 < this.src.length) {
        text += this.src[this.pos + 1];
        this.pos += 2;
        escaped = true;
        continue;
      }
      text += c;
      this.pos++;
    }
    if (text.length === 0 || (text === 'TO' && !escaped)) throw queryError(`expected a range bound in the range at character ${rangeStart}`, start);
    return text === '*' && !escaped ? null : text;
  }

  private peekOperator(): 'AND' | 'OR' | 'NOT' | null {
    const s = this.src;
    const p = this.pos;
    const word = (w: string): boolean => s.startsWith(w, p) && (p + w.length >= s.length || isSpace(s.charCodeAt(p + w.length)) || s[p + w.length] === '(' || s[p + w.length] === '"');
    if (word('AND') || word('&&')) return 'AND';
    if (word('OR') || word('||')) return 'OR';
    if (word('NOT')) return 'NOT';
    return null;
  }

  private consumeOperator(op: 'AND' | 'OR' | 'NOT'): void {
    this.pos += this.src.startsWith(op, this.pos) ? op.length : 2;
  }

  private rejectTilde(): void {
    if (this.ch() === '~') throw queryError("fuzzy and proximity searches ('~') are not supported", this.pos);
  }

  private skipSpace(): void {
    while (this.pos < this.src.length && isSpace(this.src.charCodeAt(this.pos))) this.pos++;
  }

  private eof(): boolean {
    return this.pos >= this.src.length;
  }

  private ch(): string {
    return this.pos < this.src.length ? this.src[this.pos] : '';
  }

  private enter(at: number): void {
    if (++this.depth > MAX_DEPTH) throw queryError(`the query nests deeper than ${MAX_DEPTH} levels`, at);
  }

  // ---- resolution against the schema ----

  private field(name: string, at: number): QueryField {
    const f = resolveField(this.schema, name);
    if (typeof f === 'string') throw queryError(f, at);
    return f;
  }

  private resolveValue(fieldName: string | null, text: string, at: number, prefix: boolean, all: boolean): Query {
    const analyzer = this.schema.analyzer;
    if (fieldName === null) {
      if (prefix) return { kind: 'prefix', field: null, prefix: analyzer.normalizePrefix(text), boost: 1 };
      return textClause(null, analyzer.terms(text));
    }
    const f = this.field(fieldName, at);
    switch (f.kind) {
      case 'id':
        if (all) return MATCH_ALL;
        if (prefix) throw queryError("'id' supports exact matches only", at);
        return { kind: 'ids', ids: [text], boost: 1 };
      case 'dynamic-keyword':
        return keywordValue(f.key, text, prefix, all);
      case 'dynamic': {
        if (all) {
          return makeBool([
            { occur: 'should', node: { kind: 'exists', target: 'inverted', field: f.name, boost: 1 } },
            { occur: 'should', node: { kind: 'exists', target: 'number', field: f.name, boost: 1 } },
          ]);
        }
        if (prefix) return { kind: 'prefix', field: f.name, prefix: analyzer.normalizePrefix(text), boost: 1 };
        const textQuery = textClause(f.name, analyzer.terms(text));
        // A number, or a date (which an undeclared field indexes as its epoch ms: detectDate).
        const n = dynamicValue(text.trim());
        if (Number.isNaN(n)) return textQuery;
        return makeBool([
          { occur: 'should', node: textQuery },
          { occur: 'should', node: numberRange(f.name, n, n, true, true) },
        ]);
      }
      case 'declared': {
        const { name, type } = f.def;
        if (type === 'keyword') return keywordValue(name, text, prefix, all);
        if (type === 'text') {
          if (all) return { kind: 'exists', target: 'inverted', field: name, boost: 1 };
          if (prefix) return { kind: 'prefix', field: name, prefix: analyzer.normalizePrefix(text), boost: 1 };
          return textClause(name, analyzer.terms(text));
        }
        if (all) return { kind: 'exists', target: 'number', field: name, boost: 1 };
        if (prefix) throw queryError(`prefix queries need a text or keyword field; '${name}' is a ${type} field`, at);
        const v = type === 'number' ? parseNumber(text.trim()) : parseDate(text.trim());
        if (Number.isNaN(v)) throw queryError(`'${text}' is not a ${type === 'number' ? 'number' : 'date (ISO 8601)'}, as field '${name}' needs`, at);
        return numberRange(name, v, v, true, true);
      }
    }
  }

  private resolveRange(fieldName: string, lower: string | null, lowerAt: number, upper: string | null, upperAt: number, incL: boolean, incU: boolean): Query {
    const f = this.field(fieldName, lowerAt);
    const bad = (what: string): never => {
      throw queryError(`ranges need a number, date or keyword field; '${fieldName}' is ${what}`, lowerAt);
    };
    switch (f.kind) {
      case 'id':
        return bad('the document id');
      case 'dynamic-keyword':
        return keywordRange(f.key, lower, upper, incL, incU);
      case 'dynamic': {
        const lo = lower === null ? null : parseNumber(lower);
        const hi = upper === null ? null : parseNumber(upper);
        if ((lo === null || !Number.isNaN(lo)) && (hi === null || !Number.isNaN(hi))) return numberRange(f.name, lo, hi, incL, incU);
        const strings = keywordRange(`${f.name}.keyword`, lower, upper, incL, incU);
        // Date bounds also match the field's dates (indexed as epoch ms); other strings compare as strings.
        const loDate = lower === null ? null : detectDate(lower);
        const hiDate = upper === null ? null : detectDate(upper);
        if ((loDate !== null && Number.isNaN(loDate)) || (hiDate !== null && Number.isNaN(hiDate))) return strings;
        return makeBool([
          { occur: 'should', node: numberRange(f.name, loDate, hiDate, incL, incU) },
          { occur: 'should', node: strings },
        ]);
      }
      case 'declared': {
        const { name, type } = f.def;
        if (type === 'text') return bad('a text field');
        if (type === 'keyword') return keywordRange(name, lower, upper, incL, incU);
        const parse = type === 'number' ? parseNumber : parseDate;
        const what = type === 'number' ? 'number' : 'date (ISO 8601)';
        const lo = lower === null ? null : parse(lower);
        if (lo !== null && Number.isNaN(lo)) throw queryError(`'${lower}' is not a ${what}, as field '${name}' needs`, lowerAt);
        const hi = upper === null ? null : parse(upper);
        if (hi !== null && Number.isNaN(hi)) throw queryError(`'${upper}' is not a ${what}, as field '${name}' needs`, upperAt);
        return numberRange(name, lo, hi, incL, incU);
      }
    }
  }
}

/**
 * A query value as an undeclared field's numbers hold it: a number, or the epoch ms of a date in
 * the form the index detects (detectDate: a string it did not take for a date is text); else NaN.
 */
function dynamicValue(text: string): number {
  const n = parseNumber(text);
  return Number.isNaN(n) ? detectDate(text) : n;
}

function keywordValue(key: string, text: string, prefix: boolean, all: boolean): Query {
  if (all) return { kind: 'exists', target: 'inverted', field: key, boost: 1 };
  if (prefix) return { kind: 'prefix', field: key, prefix: text, boost: 1 };
  return { kind: 'term', field: key, term: text, boost: 1 };
}

function keywordRange(field: string, lower: string | null, upper: string | null, includeLower: boolean, includeUpper: boolean): Query {
  return { kind: 'range', target: 'keyword', field, lower, upper, includeLower, includeUpper, boost: 1 };
}

function numberRange(field: string, lower: number | null, upper: number | null, includeLower: boolean, includeUpper: boolean): Query {
  return { kind: 'range', target: 'number', field, lower, upper, includeLower, includeUpper, boost: 1 };
}

function textClause(field: string | null, analyzed: AnalyzedText): Query {
  const { terms, positions } = analyzed;
  if (terms.length === 0) return MATCH_NONE;
  if (terms.length === 1) return { kind: 'term', field, term: terms[0], boost: 1 };
  return { kind: 'phrase', field, terms, positions, boost: 1 };
}

/** The query of a top-level or parenthesized list of clauses. */
function toQuery(clauses: Clause[]): Query {
  if (clauses.length === 1 && clauses[0].occur !== 'not') return clauses[0].node;
  return makeBool(clauses);
}

/** A bool of `clauses`, without the clauses that match nothing; one plain clause stands for itself. */
function makeBool(clauses: readonly Clause[]): Query {
  const must: Query[] = [];
  const should: Query[] = [];
  const mustNot: Query[] = [];
  for (const c of clauses) {
    if (c.node.kind === 'none') continue;
    if (c.occur === 'must') must.push(c.node);
    else if (c.occur === 'should') should.push(c.node);
    else mustNot.push(c.node);
  }
  if (mustNot.length === 0) {
    if (must.length + should.length === 0) return MATCH_NONE;
    if (must.length + should.length === 1) return must.length === 1 ? must[0] : should[0];
  }
  if (must.length + should.length + mustNot.length === 0) return MATCH_NONE;
  return { kind: 'bool', must, should, mustNot, boost: 1 };
}
