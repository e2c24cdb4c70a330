// Admission before the log (issue 10, must-show 1): a batch with one refused document — at its
// start, middle or end; as a JSON array or NDJSON; for every kind of refusal — is refused whole
// through HTTP, the smart client and `shardex import`: nothing is stored on any replica (read with
// distrib=false on every node), and the replicas open again after a restart.
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShardexClient } from '../../src/client/index.js';
import { http, startCluster, type TestCluster } from '../support/cluster.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLI = join(ROOT, 'bin/shardex.js');
const C = 'admit';
const FIELDS = { title: 'text', price: 'number', ts: 'date', tag: 'keyword' };

/** Every kind of refusal: [what, the document, a phrase of the message, the field named]. */
const REFUSALS: Array<[string, unknown, string, string | undefined]> = [
  ['not an object', ['x'], 'is an array, not a JSON object', undefined],
  ['null', null, 'is null, not a JSON object', undefined],
  ['no id', { title: 'x' }, 'has no "id"', undefined],
  ['a numeric id', { id: 7 }, 'not a string', undefined],
  ['an empty id', { id: '' }, 'empty "id"', undefined],
  ['a lone surrogate in the id', { id: 'a\ud800' }, 'lone UTF-16 surrogate', undefined],
  ['an id over 512 bytes', { id: 'x'.repeat(513) }, 'the limit is 512', undefined],
  ['a reserved field', { id: 'r', _version_: 1 }, 'reserved field', undefined],
  ['a word in a number field', { id: 'n', price: 'cheap' }, "field 'price' is a number field", 'price'],
  ['a bad date in a date field', { id: 'd', ts: '2024-02-30' }, "field 'ts' is a date field", 'ts'],
  ['an object value', { id: 'o', meta: { x: 1 } }, "field 'meta'", 'meta'],
  ['a list of lists', { id: 'l', tags: [['a']] }, 'lists of lists', 'tags'],
  ['a .keyword field', { id: 'k', 'name.keyword': 'x' }, "names ending in '.keyword' are reserved", 'name.keyword'],
];

let tc: TestCluster;
let tmp: string;
let n = 0;

/** A batch of three good documents with `bad` at `where`; returns it and the good ids. */
function batch(bad: unknown, where: 'start' | 'middle' | 'end'): { docs: unknown[]; good: string[]; position: number } {
  const good = [0, 1, 2].map((i) => `ok-${n}-${i}`);
  n++;
  const docs: unknown[] = good.map((id) => ({ id, title: 'fine', price: 3 }));
  const position = where === 'start' ? 0 : where === 'middle' ? 2 : 3;
  docs.splice(position, 0, bad);
  return { docs, good, position };
}

/** Every node's own replicas (distrib=false): how many documents of `ids` any of them holds. */
async function storedAnywhere(ids: readonly string[]): Promise<string[]> {
  const found: string[] = [];
  for (const url of tc.urls) {
    for (const id of ids) {
      const res = await http('GET', `${url}/api/collections/${C}/docs/${encodeURIComponent(id)}?distrib=false`);
      if (res.status === 200) found.push(`${id} on ${url}`);
    }
  }
  return found;
}

function cli(args: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
  child.stdout.resume();
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stderr }));
  });
}

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'shardex-admission-'));
  tc = await startCluster({ nodes: 2, collection: { name: C, numShards: 2, replicationFactor: 2, router: 'compositeId', fields: FIELDS } });
  await tc.cluster.waitAllActive(30_000);
});

afterAll(async () => {
  await tc?.stop();
  await rm(tmp, { recursive: true, force: true });
});

describe('a batch with a refused document, over HTTP', () => {
  for (const [what, doc, says, field] of REFUSALS) {
    for (const where of ['start', 'middle', 'end'] as const) {
      it(`is refused whole as JSON when ${what} is at its ${where}`, async () => {
        const { docs, good, position } = batch(doc, where);
        const res = await http('POST', `${tc.urls[0]}/api/collections/${C}/docs`, docs);
        expect(res.status, JSON.stringify(res.body)).toBe(400);
        expect(res.body.code).toBe('SHX_BAD_DOCUMENT');
        expect(res.body.error).toContain(says);
        expect(res.body.error).toContain(`document ${position}`);
        expect(res.body.position).toBe(position);
        expect(res.body.field).toBe(field);
        expect(await storedAnywhere(good)).toEqual([]);
      });
    }
  }

  for (const where of ['start', 'middle', 'end'] as const) {
    it(`is refused whole as NDJSON naming the line when the refused document is at its ${where}`, async () => {
      const { docs, good, position } = batch({ id: 'nd', price: 'cheap' }, where);
      // A blank first line: lines count from the top of the body, not the documents.
      const body = `\n${docs.map((d) => JSON.stringify(d)).join('\n')}\n`;
      const res = await http('POST', `${tc.urls[1]}/api/collections/${C}/docs`, body, { 'content-type': 'application/x-ndjson' });
      expect(res.status, JSON.stringify(res.body)).toBe(400);
      expect(res.body.line).toBe(position + 2);
      expect(res.body.error).toContain(`(line ${position + 2})`);
      expect(res.body.field).toBe('price');
      expect(await storedAnywhere(good)).toEqual([]);
    });
  }
});

describe('through the smart client', () => {
  it('refuses the whole add() naming the position and field, and stores nothing', async () => {
    const client = new ShardexClient({ urls: tc.urls });
    try {
      for (const where of ['start', 'middle', 'end'] as const) {
        const { docs, good, position } = batch({ id: 'c', price: 'cheap' }, where);
        const err = await client.add(C, docs).then(
          () => undefined,
          (e: unknown) => e as { code?: string; message: string; details?: Record<string, unknown> },
        );
        expect(err?.code).toBe('SHX_BAD_DOCUMENT');
        expect(err?.message).toContain(`document ${position}: field 'price' is a number field`);
        expect(await storedAnywhere(good)).toEqual([]);
      }
    } finally {
      await client.close();
    }
  });

  it('has the write batcher report refused documents by position and write the others', async () => {
    const client = new ShardexClient({ urls: tc.urls });
    try {
      const job = client.writeBatcher({ collection: C, batchSize: 2 });
      const rejected: Array<[number, string]> = [];
      job.onDocumentRejected((e) => void rejected.push([e.position, (e.error as Error).message]));
      await job.addAll([{ id: 'wb-1', price: 1 }, { id: 'wb-2', price: 'x' }, { id: 'wb-3', ts: 'soon' }, { id: 'wb-4' }]);
      await job.awaitCompletion();
      expect(rejected.map(([p]) => p)).toEqual([1, 2]);
      expect(rejected[0]![1]).toContain("field 'price'");
      expect(await storedAnywhere(['wb-2', 'wb-3'])).toEqual([]);
      expect((await storedAnywhere(['wb-1', 'wb-4'])).length).toBe(4);
    } finally {
      await client.close();
    }
  });
});

describe('through shardex import', () => {
  it('reports the refused lines by number and writes the rest', async () => {
    const file = join(tmp, 'import.ndjson');
    const lines = [{ id: 'im-1', price: 1 }, { id: 'im-2', price: 'cheap' }, { id: 'im-3' }, { id: 'im-4', meta: { deep: true } }];
    await writeFile(file, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
    const r = await cli(['import', C, file, '--url', tc.urls[0]!]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toMatch(/^line 2: .*field 'price' is a number field/m);
    expect(r.stderr).toMatch(/^line 4: .*field 'meta'/m);
    expect(await storedAnywhere(['im-2', 'im-4'])).toEqual([]);
    expect((await storedAnywhere(['im-1', 'im-3'])).length).toBe(4);
  });
});

describe('after the refusals', () => {
  it('every replica opens again after a restart and holds only admitted documents', async () => {
    await tc.cluster.nodes[1]!.stop();
    await tc.cluster.startNode(1);
    await tc.cluster.waitAllActive(30_000);
    const res = await http('GET', `${tc.cluster.urls[1]}/api/collections/${C}/search?q=*&limit=100`);
    expect(res.status).toBe(200);
    const ids = (res.body.hits as Array<{ id: string }>).map((h) => h.id).sort();
    expect(ids).toEqual(['im-1', 'im-3', 'wb-1', 'wb-4']);
  });
});
