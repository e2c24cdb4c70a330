// The one error catalog (as fastify keeps lib/errors.js): every error a caller can see has a
// stable code, an HTTP status and whether retrying the same request can succeed. Boundaries
// (HTTP, gRPC, client) map ShardexError once each; nothing else invents codes.

export interface ErrorSpec {
  readonly status: number;
  readonly retryable: boolean;
}

export const ERRORS = {
  SHX_BAD_REQUEST: { status: 400, retryable: false },
  SHX_BAD_DOCUMENT: { status: 400, retryable: false },
  SHX_BAD_ID: { status: 400, retryable: false },
  SHX_BAD_QUERY: { status: 400, retryable: false },
  SHX_BAD_CONFIG: { status: 400, retryable: false },
  /** A request over one of the node's limits (batch size, document size, query clauses, ...): nothing was done. */
  SHX_LIMIT_EXCEEDED: { status: 400, retryable: false },
  /** No valid API key (`Authorization: Bearer KEY`) on a node that requires keys. */
  SHX_UNAUTHORIZED: { status: 401, retryable: false },
  /** A valid API key without the role the endpoint needs. */
  SHX_FORBIDDEN: { status: 403, retryable: false },
  SHX_NOT_FOUND: { status: 404, retryable: false },
  SHX_COLLECTION_NOT_FOUND: { status: 404, retryable: false },
  SHX_COLLECTION_EXISTS: { status: 409, retryable: false },
  SHX_BODY_TOO_LARGE: { status: 413, retryable: false },
  SHX_UNSUPPORTED_MEDIA: { status: 415, retryable: false },
  SHX_BUSY: { status: 429, retryable: true },
  /** More requests in flight on one connection (HTTP pipelining) than the node allows: nothing was done. */
  SHX_TOO_MANY_REQUESTS: { status: 429, retryable: true },
  SHX_SNAPSHOT_BEHIND: { status: 409, retryable: false },
  SHX_INTERNAL: { status: 500, retryable: false },
  SHX_NOT_LEADER: { status: 503, retryable: true },
  SHX_NO_LEADER: { status: 503, retryable: true },
  SHX_STALE_EPOCH: { status: 503, retryable: true },
  SHX_UNAVAILABLE: { status: 503, retryable: true },
  SHX_RECOVERING: { status: 503, retryable: true },
  /** The write may or may not stand (it may have been applied somewhere before the failure). */
  SHX_INDETERMINATE: { status: 503, retryable: true },
  /** The node has not read the cluster state yet (just started): nothing was done. */
  SHX_STARTING: { status: 503, retryable: true },
  SHX_TIMEOUT: { status: 504, retryable: true },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof ERRORS;

export class ShardexError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly retryable: boolean;
  /** Extra fields a boundary may put into the response body (e.g. a document's position). */
  readonly details?: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; details?: Record<string, unknown> }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'ShardexError';
    this.code = code;
    this.status = ERRORS[code].status;
    this.retryable = ERRORS[code].retryable;
    if (options?.details) this.details = options.details;
  }

  toJSON(): { error: string; code: ErrorCode } & Record<string, unknown> {
    return { error: this.message, code: this.code, ...this.details };
  }
}

export function isShardexError(err: unknown): err is ShardexError {
  return err instanceof ShardexError;
}

/** Rebuilds an error received over the wire (gRPC metadata or HTTP body) into the catalog. */
export function errorFromWire(code: string | undefined, message: string): ShardexError {
  const known = code !== undefined && Object.hasOwn(ERRORS, code) ? (code as ErrorCode) : 'SHX_INTERNAL';
  return new ShardexError(known, message);
}
