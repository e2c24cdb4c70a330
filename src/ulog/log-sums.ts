// Sums of the update log's versions per bucket of versions, so that a digest of any stretch of the
// log (what peer sync compares before it lists versions, as Solr's fingerprint) reads the sums
// of the whole buckets inside it and scans only the keys of its two edge buckets. A sum is
// order-independent (two 32-bit sums of mixed versions, with the count): two logs holding the
// same versions have the same sums however their writes were batched. Pure: the store persists
// the buckets a batch changes in that batch.

/** Versions per bucket: a digest scans at most two buckets' keys. */
export const BUCKET_SIZE = 4096;

export interface BucketSum {
  readonly count: number;
  readonly a: number;
  readonly b: number;
}

export interface Digest {
  readonly count: number;
  readonly hash: string;
}

const EMPTY: BucketSum = { count: 0, a: 0, b: 0 };
const TWO_32 = 2 ** 32;

export const bucketOf = (version: number): number => Math.floor(version / BUCKET_SIZE);

/** MurmurHash3's 32-bit finalizer. */
function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Adds (sign 1) or removes (sign -1) `version` to a sum. */
export function addVersion(s: BucketSum, version: number, sign: 1 | -1): BucketSum {
  const lo = version >>> 0;
  const hi = Math.floor(version / TWO_32) >>> 0;
  const a = fmix32(lo ^ Math.imul(hi, 0x9e3779b1));
  const b = fmix32(a ^ Math.imul(hi + 0x27d4eb2f, 0x165667b1));
  return { count: s.count + sign, a: (s.a + sign * a) >>> 0, b: (s.b + sign * b) >>> 0 };
}

/** The sum of a list of versions. */
export function sumOf(versions: Iterable<number>): BucketSum {
  let s = EMPTY;
  for (const v of versions) s = addVersion(s, v, 1);
  return s;
}

function combine(x: BucketSum, y: BucketSum): BucketSum {
  return { count: x.count + y.count, a: (x.a + y.a) >>> 0, b: (x.b + y.b) >>> 0 };
}

export function digestOf(s: BucketSum): Digest {
  return { count: s.count, hash: `${s.a.toString(16)}:${s.b.toString(16)}` };
}

export function encodeSum(s: BucketSum): string {
  return `${s.count} ${s.a} ${s.b}`;
}

export function decodeSum(text: string): BucketSum | undefined {
  const [count, a, b] = text.split(' ').map(Number);
  return Number.isSafeInteger(count) && Number.isSafeInteger(a) && Number.isSafeInteger(b) ? { count: count!, a: a!, b: b! } : undefined;
}

export class LogSums {
  private readonly buckets = new Map<number, BucketSum>();

  /** The buckets held (for tests and the store's load). */
  get size(): number {
    return this.buckets.size;
  }

  set(bucket: number, s: BucketSum): void {
    if (s.count === 0) this.buckets.delete(bucket);
    else this.buckets.set(bucket, s);
  }

  clear(): void {
    this.buckets.clear();
  }

  /** The sums of the buckets `added` and `removed` change, after the change; applied by commit() once written. */
  preview(added: readonly number[], removed: readonly number[] = []): Map<number, BucketSum> {
    const next = new Map<number, BucketSum>();
    const change = (v: number, sign: 1 | -1): void => {
      const k = bucketOf(v);
      next.set(k, addVersion(next.get(k) ?? this.buckets.get(k) ?? EMPTY, v, sign));
    };
    for (const v of added) change(v, 1);
    for (const v of removed) change(v, -1);
    return next;
  }

  commit(next: ReadonlyMap<number, BucketSum>): void {
    for (const [k, s] of next) this.set(k, s);
  }

  /**
   * The digest of the versions in (`after`, `upto`]: the sums of the buckets wholly inside, plus
   * `scan`'s sum of the versions in each edge bucket's part of the range.
   */
  async digest(after: number, upto: number, scan: (after: number, upto: number) => Promise<BucketSum>): Promise<Digest> {
    if (upto <= after) return digestOf(EMPTY);
    const first = bucketOf(after + 1);
    const last = bucketOf(upto);
    if (first === last) return digestOf(await scan(after, upto));
    let s = combine(await scan(after, (first + 1) * BUCKET_SIZE - 1), await scan(last * BUCKET_SIZE - 1, upto));
    for (const [k, b] of this.buckets) if (k > first && k < last) s = combine(s, b);
    return digestOf(s);
  }
}
