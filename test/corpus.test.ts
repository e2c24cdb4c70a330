import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { corpusNdjson, generateDocs, generateNdjson, type CorpusDoc } from '../src/corpus.js';
import { ShardexError } from '../src/errors.js';

// Expected values were produced by the project's gen-docs tool; the generator must keep
// printing exactly these bytes, since benchmarks and fixtures are compared across versions.

const sha256 = (text: string): string => createHash('sha256').update(text).digest('hex');
const take = (options: Parameters<typeof generateDocs>[0]): CorpusDoc[] => [...generateDocs(options)];

describe('generateDocs', () => {
  it('makes the first document of seed 1 exactly as the gen-docs tool does', () => {
    const [doc] = take({ count: 1 });
    expect(doc).toEqual({
      id: 'doc-0',
      title: 'shipol ka neru kashikalo vopolfla',
      body:
        'vo negar gardenlo pollo mipolmilo mimi ximi lo talo ru lo ximi ka nelo dentami shi mi ka pollo denshi ' +
        'kamine shi ne flasto kata quinmimi mi poldenlo mimi quinvomi tagarmilo ru rumimi lo pol shilo ru lo ' +
        'stogarlo garvo lo ta ka kapol miberta ru quinquinlolo lodenlo talo den garkalo loquinber garquingar ' +
        'lonelo votagar rutaru nequinpol lo ka polflata shi lopolvo garne voflapol netalo mi denkalo ruruber lo ' +
        'denxixi lo milo lo talo pol stosto garne voru ka shivone ximita vo lo den mishishi shi lo shisto mita pol ' +
        'lo lo ka den takalo losto lo denne karu ne neximi ta pollomilo polstober berxita ka mi ka berflakalo pol ' +
        'gardenlo stoquinta ka ru garxita denkane kaximi ne ka lo volo storu shi tastovo gar quindenden stodenta ' +
        'loquin voxi ru lolo den ne ta bervopol flatafla lo pol ka ka polquinmi milo ru lo vostone den shitashi ' +
        'miru pollo kamilo',
      category: 'cat-g',
      price: 245.26,
      ts: '2024-07-14T15:42:28.773Z',
    });
  });

  it('makes the documents of seed 42 from doc-1000 with 20-word bodies as the tool does', () => {
    expect(take({ count: 3, seed: 42, start: 1000, words: 20 })).toEqual([
      {
        id: 'doc-1000',
        title: 'ruden kami pollota shixi mi',
        body: 'miru vo rupol flaquinta denmi ru flapolvo flaflalo den mi rune kamilo kagar ka denmi mishiru ka polshi ka ta',
        category: 'cat-b',
        price: 185.69,
        ts: '2024-10-12T23:52:27.437Z',
      },
      {
        id: 'doc-1001',
        title: 'taru ka mi quinpolru flami',
        body: 'xivone gar lomi ka ka denta xishi ru vober ne den xiberlo vovota denne ne vo shi ka mifla lololo',
        category: 'cat-n',
        price: 927.84,
        ts: '2024-02-02T02:35:59.654Z',
      },
      {
        id: 'doc-1002',
        title: 'taquinquin quinlo fladenquin lo lo',
        body: 'ka fla bermi migar tastoshi ka tadenlo berberpol vo poltalo mi xine stostone lo tabermilo stota quinlogar berlo quinvo quin',
        category: 'cat-l',
        price: 322.96,
        ts: '2024-09-23T05:39:59.615Z',
      },
    ]);
  });

  it('gives the same documents for the same options', () => {
    expect(take({ count: 50, seed: 9 })).toEqual(take({ count: 50, seed: 9 }));
  });

  it('gives different documents for different seeds', () => {
    expect(take({ count: 1, seed: 2 })[0].body).not.toBe(take({ count: 1, seed: 3 })[0].body);
  });

  it('numbers ids from start', () => {
    expect(take({ count: 3, start: 7 }).map((d) => d.id)).toEqual(['doc-7', 'doc-8', 'doc-9']);
  });

  it('yields nothing for a count of 0', () => {
    expect(take({ count: 0 })).toEqual([]);
  });

  it('puts 5 words in a title and `words` words in a body', () => {
    for (const doc of take({ count: 20, words: 33 })) {
      expect(doc.title.split(' ')).toHaveLength(5);
      expect(doc.body.split(' ')).toHaveLength(33);
    }
  });

  it('leaves the body empty with words 0', () => {
    expect(take({ count: 2, words: 0 }).map((d) => d.body)).toEqual(['', '']);
  });

  it('draws categories from cat-a..cat-t, prices in 0..1000 with 2 decimals and timestamps in 2024', () => {
    for (const doc of take({ count: 500, seed: 5, words: 1 })) {
      expect(doc.category).toMatch(/^cat-[a-t]$/);
      expect(doc.price).toBeGreaterThanOrEqual(0);
      expect(doc.price).toBeLessThanOrEqual(1000);
      expect(Math.round(doc.price * 100) / 100).toBe(doc.price);
      expect(doc.ts.startsWith('2024-')).toBe(true);
      expect(new Date(doc.ts).toISOString()).toBe(doc.ts);
    }
  });

  it('takes the seed as an unsigned 32-bit int, so -1 is 4294967295', () => {
    expect(take({ count: 2, seed: -1 })).toEqual(take({ count: 2, seed: 4294967295 }));
  });

  it('is lazy: a huge count costs only the documents taken', () => {
    const it = generateDocs({ count: Number.MAX_SAFE_INTEGER - 1 });
    expect(it.next().value?.id).toBe('doc-0');
  });

  it.each([
    ['count', { count: -1 }],
    ['count', { count: 1.5 }],
    ['count', { count: Number.NaN }],
    ['start', { count: 1, start: -2 }],
    ['words', { count: 1, words: 2.5 }],
    ['seed', { count: 1, seed: 0.5 }],
  ])('rejects a bad %s option: %j', (name, options) => {
    const run = () => take(options);
    expect(run).toThrow(ShardexError);
    expect(run).toThrow(new RegExp(`corpus option ${name}`));
  });
});

describe('generateNdjson', () => {
  it('yields each document as one line of JSON with keys in the tool order', () => {
    const [line] = [...generateNdjson({ count: 1, words: 2 })];
    expect(line).not.toContain('\n');
    expect(Object.keys(JSON.parse(line) as object)).toEqual(['id', 'title', 'body', 'category', 'price', 'ts']);
  });

  it('yields the JSON of the documents generateDocs makes', () => {
    const docs = take({ count: 10, seed: 11 });
    expect([...generateNdjson({ count: 10, seed: 11 })]).toEqual(docs.map((d) => JSON.stringify(d)));
  });
});

describe('corpusNdjson', () => {
  it('prints the first 1000 documents of seed 1 byte for byte as the gen-docs tool does', () => {
    const text = corpusNdjson({ count: 1000 });
    expect(text.length).toBe(990704);
    expect(sha256(text)).toBe('544c5600ec49ba7d6eaecee7e49f65e00031bd31522e9eccea63a71ac51baafc');
  });

  it('prints 2500 documents of seed 7 byte for byte as the tool does', () => {
    expect(sha256(corpusNdjson({ count: 2500, seed: 7 }))).toBe(
      '72f2ef4bc1720f55731b1f3a0eb0c0fa16614110ddd586059f79ce16cae6afbd',
    );
  });

  it('prints 300 short documents of seed 42 from doc-1000 byte for byte as the tool does', () => {
    expect(sha256(corpusNdjson({ count: 300, seed: 42, start: 1000, words: 20 }))).toBe(
      '56024801d111e21bca7155d8feab49c70e9e7991c8219c3bd07da04bc5e13feb',
    );
  });

  it('ends every line, the last included, with a newline', () => {
    const text = corpusNdjson({ count: 3, words: 1 });
    expect(text.endsWith('}\n')).toBe(true);
    expect(text.split('\n')).toHaveLength(4);
  });

  it('prints nothing for a count of 0', () => {
    expect(corpusNdjson({ count: 0 })).toBe('');
  });
});
