// The request id (issue 13): one id per client request, taken from its `x-request-id` header
// when that is a plausible id, made otherwise, echoed in the response, and carried to every node
// and reader the request reaches (gRPC metadata `x-request-id` on unary calls, a field of each
// update on the update stream). While a request's work runs, the id is in an AsyncLocalStorage,
// so that every log line made meanwhile, on any logger (src/logger.ts), carries it as `reqId`
// without each part passing it along.
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';

export const REQUEST_ID_HEADER = 'x-request-id';

/** Ids a caller may choose: bounded, and nothing that could forge a log line or a header. */
const PLAUSIBLE_ID = /^[A-Za-z0-9._:/+=@-]{1,128}$/;

/** The id itself when it is one a caller may give, else undefined. */
export function validRequestId(id: unknown): string | undefined {
  return typeof id === 'string' && PLAUSIBLE_ID.test(id) ? id : undefined;
}

/** The caller's id when it is valid, else a new one (a caller's bad id is replaced, not refused). */
export function requestIdFrom(header: string | string[] | undefined): string {
  return validRequestId(header) ?? randomUUID();
}

const current = new AsyncLocalStorage<string>();

/** The id of the request whose work is running, if any. */
export function currentRequestId(): string | undefined {
  return current.getStore();
}

/** Runs `fn` as part of request `id` (undefined or invalid: as part of none). */
export function withRequestId<T>(id: string | undefined, fn: () => T): T {
  const valid = validRequestId(id);
  return valid === undefined ? current.exit(fn) : current.run(valid, fn);
}
