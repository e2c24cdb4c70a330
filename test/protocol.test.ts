import { describe, expect, it } from 'vitest';
import { decodeOps, encodeOps, type WireOp } from '../src/transport/index.js';
import { SearchRequest } from '../src/transport/schemas.js';
import { docText, encodeEntry, decodeEntry } from '../src/ulog/index.js';
import { thrown } from './support/errors.js';

const frame = (header: unknown, texts = ''): Buffer => Buffer.from(`${JSON.stringify(header)}\n${texts}`, 'utf8');

describe('update ops on the wire', () => {
  const ops: WireOp[] = [
    { id: 'plain', v: 1024, doc: { id: 'plain', title: 'hello', n: 3, tags: ['a', 'b'], nested: { x: null } } },
    { id: 'line\nbreak "quoted"', v: 1025, doc: { id: 'line\nbreak "quoted"', body: 'two\nlines and a \\ backslash' } },
    { id: 'emoji-😀', doc: { id: 'emoji-😀', title: 'café 😀 日本語', '__proto__': { polluted: true } } },
    { id: 'gone', v: 1027, doc: null },
    { id: 'empty', v: 1028, doc: { id: 'empty' } },
  ];

  it('round-trips ids, versions, documents and deletes, with each document text kept', () => {
    const back = decodeOps(encodeOps(ops));
    expect(back.map((o) => ({ id: o.id, v: o.v, doc: o.doc }))).toEqual(ops.map((o) => ({ id: o.id, v: o.v, doc: o.doc })));
    for (let i = 0; i < ops.length; i++) {
      expect(back[i]!.text).toBe(docText(ops[i]!));
      expect('v' in back[i]!).toBe(ops[i]!.v !== undefined);
    }
    // A "__proto__" key stays plain data: it neither sets the prototype nor pollutes Object.
    expect(Object.getPrototypeOf(back[2]!.doc)).toBe(Object.prototype);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('sends the text an op already carries rather than serializing its document again', () => {
    const op: WireOp = { id: 'a', v: 1, doc: { id: 'a', x: 1 }, text: '{"id":"a","x":1}' };
    expect(decodeOps(encodeOps([op]))[0]!.text).toBe('{"id":"a","x":1}');
  });

  it('stores the same entry from a carried text as from the document', () => {
    const doc = { id: 'é😀', title: 'x\ny' };
    const withText = encodeEntry({ id: doc.id, version: 7, doc, text: JSON.stringify(doc) });
    expect(withText).toBe(encodeEntry({ id: doc.id, version: 7, doc }));
    expect(decodeEntry(withText)).toEqual({ id: doc.id, version: 7, doc });
  });

  it('encodes no ops as nothing to apply', () => {
    expect(decodeOps(encodeOps([]))).toEqual([]);
    expect(decodeOps(undefined)).toEqual([]);
    expect(decodeOps(Buffer.alloc(0))).toEqual([]);
  });

  it.each([
    ['no header line', Buffer.from('[["a",1,2]]', 'utf8'), /no header line/],
    ['a header that is not JSON', Buffer.from('[["a",1,\n{}', 'utf8'), /header is not JSON/],
    ['a header that is not an array', frame({ a: 1 }), /not an array/],
    ['an entry that is not [id, version, length]', frame([[1, 1, 2]], '{}'), /entry 0/],
    ['a fractional length', frame([['a', 1, 1.5]], '{}'), /entry 0/],
    ['a negative length other than -1 (a delete)', frame([['a', 1, -2]]), /entry 0/],
    ['a text running past the end', frame([['a', 1, 10]], '{}'), /runs past the end/],
    ['a document that is not JSON', frame([['a', 1, 2]], '{x'), /'a' is not JSON/],
    ['a document that is not an object', frame([['a', 1, 2]], '[]'), /'a' is not an object/],
    ['bytes after the last document', frame([['a', 1, 2]], '{}{}'), /bytes after/],
  ])('rejects %s as a bad request', (_what, bytes, message) => {
    const err = thrown(() => decodeOps(bytes));
    expect(err.code).toBe('SHX_BAD_REQUEST');
    expect(err.message).toMatch(message);
  });
});

describe('search phases on the wire', () => {
  it('takes a query phase with the summed statistics, and without them (a one-shard collection scores with its own)', () => {
    const base = { kind: 'query', collection: 'c', shard: 'shard1', params: { q: 'a', limit: 10, fetchInQuery: true } };
    expect(SearchRequest.safeParse(base).success).toBe(true);
    expect(SearchRequest.safeParse({ ...base, stats: { docCount: 3 } }).success).toBe(true);
    expect(SearchRequest.safeParse({ ...base, stats: 'none' }).success).toBe(false);
    // The coordinator's own flags pass through to the shard.
    expect(SearchRequest.parse(base)).toMatchObject({ params: { fetchInQuery: true } });
  });
});
