import murmurhash from 'murmurhash';
import { describe, expect, it } from 'vitest';
import { ShardexError } from '../src/errors.js';
import {
  formatRange,
  hashId,
  isWellFormed,
  murmur3,
  murmur3Bytes,
  parseRange,
  partitionRange,
  routeId,
  routerFor,
  ShardRouter,
  utf8Length,
  type RouterName,
  type ShardRange,
} from '../src/hashrange/index.js';
import { splitRange } from '../src/hashrange/router.js';
import { mulberry32 } from '../src/corpus.js';

// Expected values come from Apache Solr: TestHashPartitioner (letters, 4-shard routing, range
// splits), CompositeIdRouter's javadoc (contact!0000000KISS) and its partitionRange; non-ASCII
// hashes are checked against the independent `murmurhash` package.

const ROUTERS: RouterName[] = ['compositeId', 'hash'];
const INT_MIN = -0x80000000;
const INT_MAX = 0x7fffffff;

/** Unsigned hex as an int32 (0x95de7e03 -> its signed value). */
const i32 = (u: number): number => u | 0;


/** A random well-formed string mixing ASCII, 2-, 3- and 4-byte UTF-8 characters. */
function randomString(rand: () => number): string {
  const n = Math.floor(rand() * 24);
  let s = '';
  for (let i = 0; i < n; i++) {
    const kind = rand();
    let cp: number;
    if (kind < 0.4) cp = 0x20 + Math.floor(rand() * 0x5f);
    else if (kind < 0.55) cp = 0x80 + Math.floor(rand() * 0x780);
    else if (kind < 0.8) {
      cp = 0x800 + Math.floor(rand() * 0xf800);
      if (cp >= 0xd800 && cp <= 0xdfff) cp -= 0x800; // no surrogate code points
    } else cp = 0x10000 + Math.floor(rand() * 0x100000);
    s += String.fromCodePoint(cp);
  }
  return s;
}

function expectShardexError(fn: () => unknown, code: string, message: RegExp): void {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(ShardexError);
  expect((caught as ShardexError).code).toBe(code);
  expect((caught as ShardexError).message).toMatch(message);
}

describe('murmur3', () => {
  // TestHashPartitioner's comment lists the hash of every lowercase letter.
  it.each([
    ['a', 0x3c2569b2], ['b', 0x95de7e03], ['c', 0xe132d65f], ['d', 0x27191473], ['e', 0x656c4367],
    ['f', 0x2b64883b], ['g', 0xf18ae416], ['h', 0xd482b2d3], ['i', 0x811a702b], ['j', 0xca745a39],
    ['k', 0xcfbda5d1], ['l', 0x1d5d6a2c], ['m', 0x5ae4385c], ['n', 0xc651d8ac], ['o', 0x68348473],
    ['p', 0x986fdf9a], ['q', 0xff8209e8], ['r', 0x5c9373f1], ['s', 0xff4acaf1], ['t', 0xca87df4d],
    ['u', 0x62203ae0], ['v', 0xbdafcc55], ['w', 0xff439d1f], ['x', 0x3e9a9b1b], ['y', 0x477d9216],
    ['z', 0xc1f69a17],
  ])('hashes %s as Solr does', (id, expected) => {
    expect(murmur3(id)).toBe(i32(expected));
  });

  it('hashes "contact" and "0000000KISS" as CompositeIdRouter documents', () => {
    expect(murmur3('contact')).toBe(-541354036);
    expect(murmur3('0000000KISS')).toBe(2099700320);
  });

  it('returns a signed 32-bit int', () => {
    expect(murmur3('b')).toBe(-1780580861);
    expect(murmur3('b')).toBeLessThan(0);
  });

  it('hashes the empty string to 0', () => {
    expect(murmur3('')).toBe(0);
  });

  it('covers every tail length of 0 to 3 bytes after whole blocks', () => {
    for (const id of ['abcd', 'abcde', 'abcdef', 'abcdefg', 'abcdefgh']) {
      expect(murmur3(id)).toBe(murmurhash.v3(id) | 0);
    }
  });

  it.each([
    ['2-byte UTF-8 (é)', 'café'],
    ['3-byte UTF-8 (日本語)', '日本語のドキュメント'],
    ['4-byte UTF-8 from a surrogate pair (emoji)', 'doc-😀-🎉'],
    ['a mix of ASCII and non-ASCII', 'tenant-Ω!doc-𝄞-ü'],
    ['non-ASCII after whole ASCII blocks', 'abcdefgh€'],
  ])('hashes %s over its UTF-8 bytes', (_what, id) => {
    expect(murmur3(id)).toBe(murmurhash.v3(id) | 0);
  });

  it('agrees with the murmurhash package on 5000 random well-formed strings', () => {
    const rand = mulberry32(20240101);
    for (let i = 0; i < 5000; i++) {
      const s = randomString(rand);
      expect(murmur3(s), JSON.stringify(s)).toBe(murmurhash.v3(s) | 0);
    }
  });

  it('hashes long ids past the reused scratch buffer', () => {
    const long = 'ü'.repeat(40000) + 'x'.repeat(3);
    expect(murmur3(long)).toBe(murmurhash.v3(long) | 0);
    expect(murmur3('after a long one')).toBe(murmurhash.v3('after a long one') | 0);
  });

  it('uses the seed, taken as a 32-bit int', () => {
    expect(murmur3('a', 42)).toBe(murmurhash.v3('a', 42) | 0);
    expect(murmur3('日本', 0x9747b28c)).toBe(murmurhash.v3('日本', 0x9747b28c) | 0);
    expect(murmur3('a', -1)).toBe(murmur3('a', 0xffffffff));
    expect(murmur3('a', 42)).not.toBe(murmur3('a'));
  });
});

describe('murmur3Bytes', () => {
  it('hashes pre-encoded UTF-8 bytes like murmur3 hashes the string', () => {
    const bytes = new TextEncoder().encode('résumé-😀');
    expect(murmur3Bytes(bytes, bytes.length)).toBe(murmur3('résumé-😀'));
    expect(murmur3Bytes(bytes, bytes.length, 7)).toBe(murmur3('résumé-😀', 7));
  });

  it('hashes only the first `length` bytes', () => {
    const bytes = new TextEncoder().encode('contact!0000000KISS');
    expect(murmur3Bytes(bytes, 7)).toBe(murmur3('contact'));
  });

  it('rejects a length beyond the buffer', () => {
    expectShardexError(() => murmur3Bytes(new Uint8Array(4), 5), 'SHX_BAD_REQUEST', /length 5 is outside 0\.\.4/);
  });
});

describe('ids that are not well-formed UTF-16', () => {
  it('rejects a lone high surrogate with SHX_BAD_ID', () => {
    expectShardexError(() => murmur3('\ud800'), 'SHX_BAD_ID', /lone high surrogate U\+D800 at index 0/);
  });

  it('rejects a lone low surrogate, naming its position', () => {
    expectShardexError(() => murmur3('a\udc00b'), 'SHX_BAD_ID', /lone low surrogate U\+DC00 at index 1/);
  });

  it('rejects a high surrogate followed by a non-surrogate', () => {
    expectShardexError(() => murmur3('ab\ud83dx'), 'SHX_BAD_ID', /index 2/);
  });

  it('rejects a surrogate pair in the wrong order', () => {
    expectShardexError(() => murmur3('\ude00\ud83d'), 'SHX_BAD_ID', /low surrogate U\+DE00 at index 0/);
  });

  it('puts the position into the error details', () => {
    try {
      murmur3('xyz\udfff');
      expect.unreachable();
    } catch (err) {
      expect((err as ShardexError).details).toEqual({ index: 3 });
      expect((err as ShardexError).status).toBe(400);
    }
  });

  it('rejects a lone surrogate in a part of a composite id that is never hashed', () => {
    expectShardexError(() => hashId('a/\ud800!b'), 'SHX_BAD_ID', /index 2/);
  });

  it('is rejected by routeId and ShardRouter.route under both routers', () => {
    for (const router of ROUTERS) {
      expectShardexError(() => routeId('t!\ud800', 4, router), 'SHX_BAD_ID', /index 2/);
      expectShardexError(() => routerFor(2, router).route('\udc00'), 'SHX_BAD_ID', /index 0/);
    }
  });
});

describe('isWellFormed', () => {
  it('accepts ASCII, non-ASCII and surrogate pairs', () => {
    expect(isWellFormed('')).toBe(true);
    expect(isWellFormed('abc')).toBe(true);
    expect(isWellFormed('é日😀')).toBe(true);
  });

  it('refuses lone surrogates anywhere', () => {
    expect(isWellFormed('\ud800')).toBe(false);
    expect(isWellFormed('a\udc00b')).toBe(false);
    expect(isWellFormed('😀\ud83d')).toBe(false);
  });
});

describe('utf8Length', () => {
  it.each([
    ['', 0],
    ['doc-1', 5],
    ['é', 2],
    ['日本語', 9],
    ['😀', 4],
    ['a😀é日', 10],
  ])('counts %j as %i bytes', (s, n) => {
    expect(utf8Length(s)).toBe(n);
  });

  it('counts a lone surrogate as the 3 bytes TextEncoder writes for it', () => {
    expect(utf8Length('\ud800')).toBe(3);
    expect(utf8Length('a\udc00b')).toBe(Buffer.byteLength('a\udc00b'));
  });

  it('agrees with Buffer.byteLength on 2000 random strings', () => {
    const rand = mulberry32(7);
    for (let i = 0; i < 2000; i++) {
      const s = randomString(rand);
      expect(utf8Length(s)).toBe(Buffer.byteLength(s, 'utf8'));
    }
  });
});

describe('formatRange', () => {
  it('prints unsigned lowercase hex without zero padding', () => {
    expect(formatRange({ min: INT_MIN, max: -1 })).toBe('80000000-ffffffff');
    expect(formatRange({ min: 0, max: INT_MAX })).toBe('0-7fffffff');
    expect(formatRange({ min: 1, max: 0x2aaaaaab })).toBe('1-2aaaaaab');
  });
});

describe('parseRange', () => {
  it('parses what formatRange prints, as signed ints', () => {
    expect(parseRange('80000000-ffffffff')).toEqual({ min: INT_MIN, max: -1 });
    expect(parseRange('0-7fffffff')).toEqual({ min: 0, max: INT_MAX });
  });

  it('returns a shard range when given the shard name', () => {
    expect(parseRange('d5550000-2aa9ffff', 'shard2')).toEqual({ min: i32(0xd5550000), max: 0x2aa9ffff, name: 'shard2' });
  });

  it('accepts upper case and zero padding', () => {
    expect(parseRange('D5550000-0000FFFF')).toEqual({ min: i32(0xd5550000), max: 0xffff });
  });

  it('round-trips every range of 1 to 256 shards under both routers', () => {
    for (const router of ROUTERS) {
      for (let n = 1; n <= 256; n++) {
        for (const r of partitionRange(n, router)) {
          expect(parseRange(formatRange(r), r.name)).toEqual(r);
        }
      }
    }
  });

  it.each([
    [''],
    ['80000000'],
    ['80000000-'],
    ['-7fffffff'],
    ['0-1-2'],
    ['123456789-0'],
    ['0-g'],
    [' 0-1'],
    ['0x0-0x1'],
    ['+1-2'],
  ])('rejects the malformed text %j', (text) => {
    expectShardexError(() => parseRange(text), 'SHX_BAD_REQUEST', /is not "min-max"/);
  });

  it('rejects a range whose min is above its max', () => {
    expectShardexError(() => parseRange('0-80000000'), 'SHX_BAD_REQUEST', /min 0 is above its max -2147483648/);
  });

  it('rejects a value that is not a string', () => {
    expectShardexError(() => parseRange(42 as unknown as string), 'SHX_BAD_REQUEST', /is not "min-max"/);
  });
});

describe('partitionRange', () => {
  it('gives one shard the whole space, 80000000-7fffffff, under both routers', () => {
    for (const router of ROUTERS) {
      expect(partitionRange(1, router).map(formatRange)).toEqual(['80000000-7fffffff']);
    }
  });

  it('splits 2 shards at the natural boundary without an off-by-one', () => {
    for (const router of ROUTERS) {
      expect(partitionRange(2, router).map(formatRange)).toEqual(['80000000-ffffffff', '0-7fffffff']);
    }
  });

  it('rounds compositeId boundaries of 3 shards to 16-bit block ends', () => {
    expect(partitionRange(3).map(formatRange)).toEqual(['80000000-d554ffff', 'd5550000-2aa9ffff', '2aaa0000-7fffffff']);
  });

  it('splits 3 hash shards by plain long division, the last ending at 7fffffff', () => {
    expect(partitionRange(3, 'hash').map(formatRange)).toEqual([
      '80000000-d5555555',
      'd5555556-2aaaaaab',
      '2aaaaaac-7fffffff',
    ]);
  });

  it('gives 6 shards different ranges under the two routers', () => {
    expect(partitionRange(6).map(formatRange)).toEqual([
      '80000000-aaa9ffff', 'aaaa0000-d554ffff', 'd5550000-ffffffff',
      '0-2aa9ffff', '2aaa0000-5554ffff', '55550000-7fffffff',
    ]);
    expect(partitionRange(6, 'hash').map(formatRange)).toEqual([
      '80000000-aaaaaaaa', 'aaaaaaab-d5555555', 'd5555556-0',
      '1-2aaaaaab', '2aaaaaac-55555556', '55555557-7fffffff',
    ]);
  });

  it('is the compositeId router when no router is named', () => {
    expect(partitionRange(5)).toEqual(partitionRange(5, 'compositeId'));
  });

  it('accepts "plain" as the name of the hash router', () => {
    expect(partitionRange(7, 'plain')).toEqual(partitionRange(7, 'hash'));
  });

  it('gives the same ranges under both routers for powers of two', () => {
    for (const n of [1, 2, 4, 8, 16, 32, 64, 128, 256]) {
      expect(partitionRange(n, 'compositeId')).toEqual(partitionRange(n, 'hash'));
    }
  });

  for (const router of ROUTERS) {
    it.each(Array.from({ length: 16 }, (_, i) => i + 1))(
      `${router}: %i shards are ascending, contiguous and cover the whole signed 32-bit space`,
      (n) => {
        const ranges = partitionRange(n, router);
        expect(ranges).toHaveLength(n);
        expect(ranges[0].min).toBe(INT_MIN);
        expect(ranges[n - 1].max).toBe(INT_MAX);
        for (let i = 0; i < n; i++) {
          expect(ranges[i].min).toBeLessThanOrEqual(ranges[i].max);
          if (i > 0) expect(ranges[i].min).toBe(ranges[i - 1].max + 1);
        }
      },
    );
  }

  it('makes exactly n contiguous, covering ranges for every n up to 256 under both routers', () => {
    for (const router of ROUTERS) {
      for (let n = 1; n <= 256; n++) {
        const ranges = partitionRange(n, router);
        expect(ranges).toHaveLength(n);
        expect(ranges[0].min).toBe(INT_MIN);
        expect(ranges[n - 1].max).toBe(INT_MAX);
        for (let i = 1; i < n; i++) expect(ranges[i].min).toBe(ranges[i - 1].max + 1);
      }
    }
  });

  it('ends every compositeId range on a 16-bit block end, sizes within 1/16 of ideal (1..256 shards)', () => {
    for (let n = 1; n <= 256; n++) {
      const ideal = 2 ** 32 / n;
      for (const r of partitionRange(n)) {
        expect(r.max & 0xffff).toBe(0xffff);
        expect(Math.abs(ideal - (r.max - r.min))).toBeLessThan(ideal / 16);
      }
    }
  });

  it('names shards shard1..shardN in ascending range order, shard10 after shard9', () => {
    const ranges = partitionRange(12);
    expect(ranges.map((r) => r.name)).toEqual(Array.from({ length: 12 }, (_, i) => `shard${i + 1}`));
    expect(ranges[9].min).toBe(ranges[8].max + 1);
  });

  it.each([[0], [-1], [257], [2.5], [Number.NaN], [Number.POSITIVE_INFINITY]])('rejects numShards %s', (n) => {
    expectShardexError(() => partitionRange(n), 'SHX_BAD_REQUEST', /numShards must be an integer from 1 to 256, got /);
  });

  it('rejects a numShards that is not a number, quoting it', () => {
    expectShardexError(() => partitionRange('4' as unknown as number), 'SHX_BAD_REQUEST', /got "4"/);
  });

  it.each([['implicit'], ['CompositeId'], ['']])('rejects the unknown router %j', (router) => {
    expectShardexError(
      () => partitionRange(2, router as RouterName),
      'SHX_BAD_REQUEST',
      /unknown router .*use "compositeId" \(the default\) or "hash" \(alias "plain"\)/,
    );
  });
});

describe('splitRange', () => {
  it('splits the upper half in two as TestHashPartitioner expects', () => {
    expect(splitRange({ min: 0, max: INT_MAX }, 2, 'compositeId').map(formatRange)).toEqual([
      '0-3fffffff',
      '40000000-7fffffff',
    ]);
  });

  it('does not round compositeId boundaries when a step is under 16 blocks of 2^16', () => {
    expect(splitRange({ min: 0, max: 0x1fffff }, 3, 'compositeId').map(formatRange)).toEqual([
      '0-aaaaa',
      'aaaab-155555',
      '155556-1fffff',
    ]);
  });
});

describe('hashId', () => {
  it('hashes an id without "!" whole under both routers', () => {
    for (const id of ['doc-1', 'b', '', 'a/8', '日本']) {
      expect(hashId(id, 'compositeId')).toBe(murmur3(id));
      expect(hashId(id, 'hash')).toBe(murmur3(id));
    }
  });

  it('hashes a composite id whole under the hash router', () => {
    expect(hashId('contact!0000000KISS', 'hash')).toBe(murmur3('contact!0000000KISS'));
  });

  it('uses the compositeId router when none is named', () => {
    expect(hashId('contact!0000000KISS')).toBe(hashId('contact!0000000KISS', 'compositeId'));
  });

  it('rejects an unknown router', () => {
    expectShardexError(() => hashId('a', 'implicit' as RouterName), 'SHX_BAD_REQUEST', /unknown router "implicit"/);
  });
});

describe('compositeId hashing', () => {
  const h = murmur3;
  const mask = (bits: number): number => (bits === 0 ? 0 : -1 << (32 - bits));

  it('hashes contact!0000000KISS to dfbbe260, as CompositeIdRouter documents', () => {
    expect(hashId('contact!0000000KISS')).toBe(i32(0xdfbbe260));
  });

  it('takes the top 16 bits from the route key and the low 16 from the rest', () => {
    expect(hashId('tenant!doc-1')).toBe((h('tenant') & 0xffff0000) | (h('doc-1') & 0xffff));
  });

  it('takes 8, 8 and 16 bits from the three parts of app!user!doc', () => {
    expect(hashId('app!user!doc')).toBe((h('app') & 0xff000000) | (h('user') & 0x00ff0000) | (h('doc') & 0xffff));
  });

  it.each([[1], [2], [4], [8], [20], [31]])('takes %i bits from tenant/B!doc', (bits) => {
    expect(hashId(`tenant/${bits}!doc`)).toBe((h('tenant') & mask(bits)) | (h('doc') & ~mask(bits)));
  });

  it('takes no bits from the route key with /0', () => {
    expect(hashId('tenant/0!doc')).toBe(h('doc'));
  });

  it('takes every bit from the route key with /32', () => {
    expect(hashId('tenant/32!doc')).toBe(h('tenant'));
  });

  it('reads an empty bit count (tenant/!doc) as 0 bits', () => {
    expect(hashId('tenant/!doc')).toBe(h('doc'));
  });

  it('takes B bits from each of the first two parts of app/B!user/C!doc', () => {
    expect(hashId('app/4!user/12!doc')).toBe(
      (h('app') & 0xf0000000) | (h('user') & 0x0fff0000) | (h('doc') & 0x0000ffff),
    );
  });

  it('gives the third part nothing when the first two take all 32 bits', () => {
    expect(hashId('app/16!user/16!doc')).toBe((h('app') & 0xffff0000) | (h('user') & 0xffff));
  });

  it('ignores a bits suffix on the last part, hashing it whole', () => {
    expect(hashId('tenant!doc/4')).toBe((h('tenant') & 0xffff0000) | (h('doc/4') & 0xffff));
  });

  it('ignores a "/" at the start of a part', () => {
    expect(hashId('/4!doc')).toBe((h('/4') & 0xffff0000) | (h('doc') & 0xffff));
  });

  it('reads only up to the first "/" as the key, and a non-digit bit count as -1', () => {
    // -1 is a shift count of 31 in Java: 31 bits from the key and 1 bit from the rest.
    expect(hashId('A/8/!B')).toBe((h('A') & 0xfffffffe) | (h('B') & 1));
  });

  it('treats a bit count above 32 (A/59!B, from Solr\'s odd ids) as -1', () => {
    expect(hashId('A/59!B')).toBe((h('A') & 0xfffffffe) | (h('B') & 1));
  });

  it('wraps a huge bit count like a Java int before checking it', () => {
    // 4294967297 wraps to 1.
    expect(hashId('t/4294967297!d')).toBe(hashId('t/1!d'));
  });

  it('adds an empty last part (hash 0) to a key ending in "!"', () => {
    expect(hashId('tenant!')).toBe(h('tenant') & 0xffff0000);
  });

  it('treats tenant!! like tenant!', () => {
    expect(hashId('tenant!!')).toBe(hashId('tenant!'));
  });

  it('makes app!user! a three-part key with an empty third part', () => {
    expect(hashId('app!user!')).toBe((h('app') & 0xff000000) | (h('user') & 0x00ff0000));
  });

  it('splits only at the first two "!", the third part keeping the rest', () => {
    expect(hashId('A!B!C!D')).toBe((h('A') & 0xff000000) | (h('B') & 0x00ff0000) | (h('C!D') & 0xffff));
  });

  it('keeps an empty middle part: A!!B!!C', () => {
    expect(hashId('A!!B!!C')).toBe((h('A') & 0xff000000) | (h('') & 0x00ff0000) | (h('B!!C') & 0xffff));
  });

  it('hashes an id of a lone "!" to 0', () => {
    expect(hashId('!')).toBe(0);
  });

  it('hashes non-ASCII parts over their UTF-8 bytes', () => {
    expect(hashId('日本!ドキュメント😀')).toBe((h('日本') & 0xffff0000) | (h('ドキュメント😀') & 0xffff));
  });

  it.each([
    ['A!B!C!D'], ['!!!!!!'], ['A!!!!B'], ['A!!B!!C'], ['A/59!B'], ['A/8/!B/19/'],
    ['A!B/-5'], ['!/130!'], ['!!A/1000'], ['A//8!B///10!C////'],
  ])("routes Solr's non-conforming id %j without error", (id) => {
    const { shard } = routeId(id, 4);
    expect(['shard1', 'shard2', 'shard3', 'shard4']).toContain(shard);
  });
});

describe('routing in a 4-shard collection (TestHashPartitioner)', () => {
  for (const router of ROUTERS) {
    it.each([
      ['b', 'shard1'],
      ['c', 'shard2'],
      ['d', 'shard3'],
      ['e', 'shard4'],
    ])(`${router}: routes %s to %s`, (id, shard) => {
      expect(routeId(id, 4, router).shard).toBe(shard);
    });
  }

  it.each([
    ['b!foo', 'shard1'], ['c!bar', 'shard2'], ['d!baz', 'shard3'], ['e!qux', 'shard4'],
  ])('compositeId: routes %s by its route key alone, to %s', (id, shard) => {
    expect(routeId(id, 4).shard).toBe(shard);
  });

  it.each([
    ['b/2!foo', 'shard1'], ['c/2!bar', 'shard2'], ['d/2!baz', 'shard3'], ['e/2!qux', 'shard4'],
    ['b/32!foo', 'shard1'], ['c/32!bar', 'shard2'], ['d/32!baz', 'shard3'], ['e/32!qux', 'shard4'],
  ])('compositeId: routes %s, with 2 or more key bits, to %s', (id, shard) => {
    expect(routeId(id, 4).shard).toBe(shard);
  });

  it.each([
    ['foo/0!b', 'shard1'], ['foo/0!c', 'shard2'], ['foo/0!d', 'shard3'], ['foo/0!e', 'shard4'],
  ])('compositeId: routes %s, with no key bits, by the rest alone, to %s', (id, shard) => {
    expect(routeId(id, 4).shard).toBe(shard);
  });

  it('routes the empty id (hash 0) to different shards of 6 under the two routers', () => {
    expect(routeId('', 6, 'hash')).toEqual({ hash: 0, shard: 'shard3' });
    expect(routeId('', 6, 'compositeId')).toEqual({ hash: 0, shard: 'shard4' });
  });
});

describe('ShardRouter', () => {
  it('finds the shard of the first and last hash of every range, for 1 to 16 shards', () => {
    for (const router of ROUTERS) {
      for (let n = 1; n <= 16; n++) {
        const ranges = partitionRange(n, router);
        const sr = new ShardRouter(ranges, router);
        for (const r of ranges) {
          expect(sr.shardFor(r.min)).toBe(r.name);
          expect(sr.shardFor(r.max)).toBe(r.name);
        }
      }
    }
  });

  it('agrees with a linear scan of the ranges on random hashes', () => {
    const rand = mulberry32(99);
    const ranges = partitionRange(37);
    const sr = new ShardRouter(ranges);
    for (let i = 0; i < 5000; i++) {
      const hash = (rand() * 2 ** 32) | 0;
      expect(sr.shardFor(hash)).toBe(ranges.find((r) => hash >= r.min && hash <= r.max)?.name);
    }
  });

  it('takes an unsigned hash as its signed 32-bit value', () => {
    const sr = new ShardRouter(partitionRange(2));
    expect(sr.shardFor(0x95de7e03)).toBe('shard1');
  });

  it('routes an id to its hash and shard', () => {
    const sr = new ShardRouter(partitionRange(4), 'compositeId');
    expect(sr.route('contact!0000000KISS')).toEqual({ hash: i32(0xdfbbe260), shard: 'shard2' });
  });

  it('hashes with its own router', () => {
    expect(new ShardRouter(partitionRange(4), 'hash').hash('a!b')).toBe(murmur3('a!b'));
    expect(new ShardRouter(partitionRange(4)).hash('a!b')).toBe(hashId('a!b', 'compositeId'));
  });

  it('orders ranges by hash, never by name, whatever order it is given', () => {
    const ranges = partitionRange(12);
    const byName = [...ranges].sort((a, b) => a.name.localeCompare(b.name)); // shard1, shard10, shard11, shard12, shard2...
    const sr = new ShardRouter(byName);
    expect(sr.ranges.map((r) => r.name)).toEqual(ranges.map((r) => r.name));
    expect(sr.shardFor(INT_MAX)).toBe('shard12');
    expect(sr.shardFor(ranges[9].min)).toBe('shard10');
  });

  it('routes by ranges read back from cluster state', () => {
    const state = partitionRange(5).map((r) => ({ name: r.name, range: formatRange(r) }));
    const sr = new ShardRouter(state.map((s) => parseRange(s.range, s.name)));
    expect(sr.route('tenant!x')).toEqual(routeId('tenant!x', 5));
  });

  it('reports its router name (plain as hash) and shard count', () => {
    const sr = new ShardRouter(partitionRange(3, 'hash'), 'plain');
    expect(sr.router).toBe('hash');
    expect(sr.numShards).toBe(3);
  });

  it('does not change when the caller later edits the array it was given', () => {
    const ranges: ShardRange[] = partitionRange(2);
    const sr = new ShardRouter(ranges);
    ranges.reverse();
    expect(sr.ranges[0].name).toBe('shard1');
  });

  const two = (a: ShardRange, b: ShardRange): ShardRange[] => [a, b];

  it('rejects an empty list of ranges', () => {
    expectShardexError(() => new ShardRouter([]), 'SHX_BAD_REQUEST', /at least one shard range/);
  });

  it('rejects ranges that leave a gap', () => {
    expectShardexError(
      () => new ShardRouter(two({ min: INT_MIN, max: -2, name: 's1' }, { min: 0, max: INT_MAX, name: 's2' })),
      'SHX_BAD_REQUEST',
      /80000000-fffffffe \(s1\) and 0-7fffffff \(s2\) leave a gap/,
    );
  });

  it('rejects ranges that overlap', () => {
    expectShardexError(
      () => new ShardRouter(two({ min: INT_MIN, max: 5, name: 's1' }, { min: 0, max: INT_MAX, name: 's2' })),
      'SHX_BAD_REQUEST',
      /overlap/,
    );
  });

  it('rejects ranges that do not start at 80000000', () => {
    expectShardexError(
      () => new ShardRouter([{ min: 0, max: INT_MAX, name: 's1' }]),
      'SHX_BAD_REQUEST',
      /must start at 80000000, but the lowest is 0-7fffffff \(s1\)/,
    );
  });

  it('rejects ranges that do not end at 7fffffff', () => {
    expectShardexError(
      () => new ShardRouter([{ min: INT_MIN, max: 0, name: 's1' }]),
      'SHX_BAD_REQUEST',
      /must end at 7fffffff, but the highest is 80000000-0 \(s1\)/,
    );
  });

  it('rejects a shard name used twice', () => {
    expectShardexError(
      () => new ShardRouter(two({ min: INT_MIN, max: -1, name: 's1' }, { min: 0, max: INT_MAX, name: 's1' })),
      'SHX_BAD_REQUEST',
      /shard name "s1" is used by two ranges/,
    );
  });

  it('rejects a range with no name', () => {
    expectShardexError(() => new ShardRouter([{ min: INT_MIN, max: INT_MAX, name: '' }]), 'SHX_BAD_REQUEST', /has no name/);
  });

  it('rejects a range whose min is above its max', () => {
    expectShardexError(() => new ShardRouter([{ min: 5, max: 1, name: 's1' }]), 'SHX_BAD_REQUEST', /"s1" has a bad range/);
  });

  it('rejects bounds that are not signed 32-bit ints', () => {
    expectShardexError(
      () => new ShardRouter([{ min: INT_MIN, max: 0xffffffff, name: 's1' }]),
      'SHX_BAD_REQUEST',
      /both must be signed 32-bit ints/,
    );
  });

  it('rejects an unknown router', () => {
    expectShardexError(() => new ShardRouter(partitionRange(1), 'implicit' as RouterName), 'SHX_BAD_REQUEST', /unknown router/);
  });
});

describe('routeId', () => {
  it('routes as a ShardRouter over partitionRange would', () => {
    for (const router of ROUTERS) {
      const sr = new ShardRouter(partitionRange(10, router), router);
      for (const id of ['doc-1', 'doc-2', 'tenant!doc-3', 'a!b!c', '日本!x']) {
        expect(routeId(id, 10, router)).toEqual(sr.route(id));
      }
    }
  });

  it('uses the compositeId router when none is named', () => {
    expect(routeId('t!d', 3)).toEqual(routeId('t!d', 3, 'compositeId'));
  });

  it('reuses one router per shard count and router name', () => {
    expect(routerFor(8, 'hash')).toBe(routerFor(8, 'plain'));
    expect(routerFor(8, 'compositeId')).not.toBe(routerFor(8, 'hash'));
  });

  it('rejects a bad numShards', () => {
    expectShardexError(() => routeId('a', 0), 'SHX_BAD_REQUEST', /numShards must be an integer from 1 to 256, got 0/);
  });

  it('rejects an unknown router', () => {
    expectShardexError(() => routeId('a', 2, 'implicit' as RouterName), 'SHX_BAD_REQUEST', /unknown router "implicit"/);
  });
});
