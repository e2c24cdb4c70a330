// A snapshot reader's full copy of a shard's commit point, read from the leader's copy stream
// (CopyShardRequest with `raw`): a header naming the commit point and, unless the reader copies
// documents only, the segment files of the leader's index at that point with the ids deleted
// from each then; the files' bytes; the entries as the leader stores them. The segments are
// loaded as they are, so the documents are not analysed again. A copy without usable segments
// (none sent, a file that does not load) indexes the copied documents instead: it is never
// served from a file that failed its checks. Every message is checked: the reader trusts the
// leader's data, not the shape of what arrives.
import { open, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { z } from 'zod';
import { indexStored, isSegmentFile, loadSegments } from '../distrib/index-persistence.js';
import type { BoundIndex, ShardReplica } from '../distrib/replica.js';
import { ShardexError } from '../errors.js';
import { SegmentedIndex, ShardIndex, type CollectionSchema } from '../index/index.js';
import { CopyMessage, type CopyStreamHeader } from '../transport/index.js';
import type { CommitPoint, StoredEntry } from '../ulog/index.js';

export interface ShardCopy {
  /** The commit point copied; null when the leader named none (it had none, or is of an earlier version). */
  readonly commit: CommitPoint | null;
  readonly index: BoundIndex;
  /** How the index was made: the leader's segments loaded, or the copied documents indexed here. */
  readonly how: 'segments' | 'documents';
  readonly segments: number;
  /** Documents indexed here (0 when the segments were loaded). */
  readonly indexed: number;
}

export interface ShardCopyOptions {
  /** Where the copy's files go (the store's directory). */
  readonly dir: string;
  /** Takes the entries (its store), with no index meanwhile; the caller binds `index` to it after. */
  readonly replica: ShardReplica;
  readonly schema: CollectionSchema;
  /** The collection's schema fingerprint: segments written for another are not loaded. */
  readonly fingerprint: string;
  readonly log: Logger;
}

/** A leader of an earlier version ignores `raw` and sends arrays of entries. */
const LegacyEntries = z.array(z.object({ id: z.string(), version: z.number(), doc: z.record(z.string(), z.unknown()).nullable() }));

/** Reads the copy stream `messages` into `o.replica` and `o.dir`, and makes the copy's index. */
export async function readShardCopy(o: ShardCopyOptions, messages: AsyncIterable<unknown>): Promise<ShardCopy> {
  const { commit, segments } = await receive(o, messages);
  if (segments) {
    const loaded = await loadSegments(o.dir, segments.files, o.schema, o.fingerprint);
    if (loaded.ok) return { commit, index: new SegmentedIndex(o.schema, loaded.segments), how: 'segments', segments: loaded.segments.length, indexed: 0 };
    o.log.warn({ dir: o.dir, problem: loaded.problem }, "a copied segment cannot be used; indexing the copy's documents instead");
  }
  const index = new ShardIndex(o.schema);
  const indexed = await indexStored(o.replica.store.entries(), index, (id, err) => o.log.error({ id, err }, 'a copied document the index refuses was left out of the search index'));
  return { commit, index, how: 'documents', segments: 0, indexed };
}

/** The stream's messages into the store and the files; returns what the header named. */
async function receive(o: ShardCopyOptions, messages: AsyncIterable<unknown>): Promise<{ commit: CommitPoint | null; segments: CopyStreamHeader['segments'] }> {
  let header: CopyStreamHeader | undefined;
  let file: { name: string; handle: FileHandle } | undefined;
  const closeFile = async (): Promise<void> => {
    await file?.handle.close();
    file = undefined;
  };
  o.replica.index = undefined;
  try {
    for await (const message of messages) {
      const legacy = LegacyEntries.safeParse(message);
      if (legacy.success) {
        await o.replica.apply(legacy.data as StoredEntry[]);
        continue;
      }
      const parsed = CopyMessage.safeParse(message);
      if (!parsed.success) throw new ShardexError('SHX_INTERNAL', `the leader's copy stream sent a message of no known shape (${parsed.error.issues[0]?.message ?? 'unknown'})`);
      const m = parsed.data;
      if ('raw' in m) {
        await closeFile();
        await o.replica.store.loadCopy(m.raw);
      } else if ('file' in m) {
        if (!header?.segments?.files.some((f) => f.name === m.file)) throw new ShardexError('SHX_INTERNAL', `the leader sent segment file '${m.file}', which its copy header did not name`);
        if (file?.name !== m.file) {
          await closeFile();
          // 'wx': a name the header gave twice, or sent apart, fails rather than overwriting.
          file = { name: m.file, handle: await open(join(o.dir, m.file), 'wx') };
        }
        await file.handle.write(Buffer.from(m.data, 'base64'));
      } else {
        if (header) throw new ShardexError('SHX_INTERNAL', "the leader's copy stream sent a second header");
        checkFiles(m);
        header = m;
      }
    }
  } finally {
    await closeFile();
  }
  return { commit: header?.commit ?? null, segments: header?.segments ?? null };
}

/** Every file the header names is a segment file's bare name, named once. */
function checkFiles(header: CopyStreamHeader): void {
  const seen = new Set<string>();
  for (const { name } of header.segments?.files ?? []) {
    if (!isSegmentFile(name) || name.includes('/') || name.includes('\\')) throw new ShardexError('SHX_INTERNAL', `the leader named '${name}' as a segment file to copy, which is not a segment file's name`);
    if (seen.has(name)) throw new ShardexError('SHX_INTERNAL', `the leader named segment file '${name}' twice`);
    seen.add(name);
  }
}

