// Writing files so that they survive a crash or a power loss: the coordinator's tree files
// (src/coordination/tree-store.ts) and a replica's segment and commit files
// (src/index/segment-file.ts).
import { open, rename, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';

/** Writes all of `bytes` to `fh` at its position (a write may take part of them). */
export async function writeAll(fh: FileHandle, bytes: Buffer): Promise<void> {
  for (let at = 0; at < bytes.length; ) at += (await fh.write(bytes, at, bytes.length - at)).bytesWritten;
}

/** Writes `chunks` as the new file `path` (replacing one there), syncs and closes it; returns the bytes written. */
export async function writeSynced(path: string, chunks: readonly Buffer[]): Promise<number> {
  const fh = await open(path, 'w');
  let size = 0;
  try {
    // One writev for all the chunks (a segment has dozens): each await is a turn of the event
    // loop, which on a busy node waits behind the requests queued before it.
    let rest: readonly Buffer[] = chunks.filter((c) => c.length > 0);
    for (const c of rest) size += c.length;
    while (rest.length > 0) {
      let { bytesWritten } = await fh.writev(rest as Buffer[]);
      let i = 0;
      while (i < rest.length && bytesWritten >= rest[i]!.length) bytesWritten -= rest[i++]!.length;
      rest = i < rest.length ? [rest[i]!.subarray(bytesWritten), ...rest.slice(i + 1)] : [];
    }
    await fh.sync();
  } finally {
    await fh.close();
  }
  return size;
}

/** Replaces `path` with `chunks` atomically: a temporary file, synced, renamed over it, the directory synced. Returns the bytes written. */
export async function replaceDurably(path: string, chunks: readonly Buffer[]): Promise<number> {
  const tmp = `${path}.tmp`;
  const size = await writeSynced(tmp, chunks);
  await rename(tmp, path);
  await syncDir(dirname(path));
  return size;
}

/** Syncs the directory `dir` (its entries: a file created or renamed in it). */
export async function syncDir(dir: string): Promise<void> {
  let fh: FileHandle | undefined;
  try {
    fh = await open(dir, 'r');
    await fh.sync();
  } catch (err) {
    // Some platforms (Windows) cannot open or sync a directory; the rename is all they offer.
    if (!['EISDIR', 'EPERM', 'EINVAL', 'EBADF'].includes((err as NodeJS.ErrnoException).code ?? '')) throw err;
  } finally {
    await fh?.close();
  }
}
