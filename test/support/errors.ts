// The ShardexError a call throws, for tests that then check its code, message and details.
import { expect } from 'vitest';
import { ShardexError } from '../../src/errors.js';

/** Runs `fn`, expects it to throw a ShardexError, and returns that error. */
export function thrown(fn: () => unknown): ShardexError {
  let err: unknown;
  try {
    fn();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(ShardexError);
  return err as ShardexError;
}

/** Awaits `p`, expects it to reject with a ShardexError, and returns that error. */
export async function rejected(p: Promise<unknown>): Promise<ShardexError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ShardexError);
  return err as ShardexError;
}
