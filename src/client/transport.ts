// The client's one HTTP boundary: a request to one host, and the mapping of whatever comes
// back (a JSON error body, a dropped connection, a timeout) into the error catalog, once.
// Socket errors stay in the `cause` chain, where the failover's classification finds them; an
// error answer carries its `status` in `details`: whatever its body says, the host answered.
import { request, type Agent } from 'node:https';
import { ERRORS, ShardexError, type ErrorCode } from '../errors.js';
import type { FetchLike } from './types.js';

export interface HttpCall {
  readonly method: 'GET' | 'POST' | 'DELETE';
  /** Base URL of the node, e.g. http://127.0.0.1:8983 */
  readonly host: string;
  /** Path and query string, starting with '/'. */
  readonly path: string;
  readonly body?: unknown;
  readonly timeoutMs: number;
  /** The caller's cancellation: aborting it rejects with its reason, never retried. */
  readonly signal?: AbortSignal;
}

export interface HttpAnswer<T> {
  readonly status: number;
  readonly body: T;
}

/** `fetchFn` sending `Authorization: Bearer KEY` on every request (nodes with --api-keys require it). */
export function withApiKey(fetchFn: FetchLike, key: string): FetchLike {
  const authorization = `Bearer ${key}`;
  return (url, init) => {
    const headers = new Headers(init.headers);
    headers.set('authorization', authorization);
    return fetchFn(url, { ...init, headers });
  };
}

/**
 * A `fetch` that sends https requests through `agent` (which holds the CA to trust and the
 * certificate to present: Node's fetch takes neither), and anything else to `fetch`. It does
 * what httpCall needs: method, headers, a string or bytes body, the abort signal.
 */
export function agentFetch(agent: Agent): FetchLike {
  return (url, init) => {
    if (!url.startsWith('https:')) return fetch(url, init);
    return new Promise<Response>((resolve, reject) => {
      const headers: Record<string, string> = {};
      new Headers(init.headers).forEach((value, name) => (headers[name] = value));
      const req = request(url, { method: init.method ?? 'GET', headers, agent, ...(init.signal && { signal: init.signal }) }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const answer = new Headers();
          for (const [name, value] of Object.entries(res.headers)) for (const v of [value ?? []].flat()) answer.append(name, v);
          const status = res.statusCode ?? 500;
          const body = chunks.length === 0 || status === 204 || status === 304 ? null : Buffer.concat(chunks);
          resolve(new Response(body, { status, headers: answer }));
        });
      });
      req.on('error', reject);
      const body = init.body;
      if (body !== undefined && body !== null && typeof body !== 'string' && !(body instanceof Uint8Array)) {
        req.destroy();
        reject(new TypeError('the https transport sends string or byte bodies only'));
        return;
      }
      req.end(body ?? undefined);
    });
  };
}

/** The catalog code for an HTTP error status whose body named no known code. */
function codeForStatus(status: number): ErrorCode {
  if (status === 404) return 'SHX_NOT_FOUND';
  if (status === 413) return 'SHX_BODY_TOO_LARGE';
  if (status === 415) return 'SHX_UNSUPPORTED_MEDIA';
  if (status === 429) return 'SHX_BUSY';
  if (status === 503) return 'SHX_UNAVAILABLE';
  if (status === 504) return 'SHX_TIMEOUT';
  if (status >= 400 && status < 500) return 'SHX_BAD_REQUEST';
  return 'SHX_INTERNAL';
}

/** An error answer of a node, as a ShardexError with the node's code and message. */
export function wireError(status: number, body: unknown, host: string): ShardexError {
  const b = (typeof body === 'object' && body !== null ? body : {}) as { error?: unknown; code?: unknown };
  const code = typeof b.code === 'string' && Object.hasOwn(ERRORS, b.code) ? (b.code as ErrorCode) : codeForStatus(status);
  const message = typeof b.error === 'string' ? b.error : typeof body === 'string' && body ? body.slice(0, 300) : `HTTP ${status}`;
  return new ShardexError(code, `${host}: ${message}`, { details: { host, status } });
}

function describe(err: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = err, i = 0; e && i < 5; e = (e as { cause?: unknown }).cause, i++) {
    const code = (e as { code?: unknown }).code;
    const msg = e instanceof Error ? e.message : String(e);
    parts.push(typeof code === 'string' && !msg.includes(code) ? `${msg} (${code})` : msg);
  }
  return parts.join(': ');
}

/**
 * Sends one request and returns the parsed JSON body of a 2xx answer. Throws a ShardexError:
 * the node's own for an error answer, SHX_UNAVAILABLE (cause: the socket error) when the host
 * could not be reached, SHX_TIMEOUT when it did not answer in time; or the caller's abort reason.
 */
export async function httpCall<T>(fetchFn: FetchLike, call: HttpCall): Promise<HttpAnswer<T>> {
  const timeout = AbortSignal.timeout(call.timeoutMs);
  const signal = call.signal ? AbortSignal.any([call.signal, timeout]) : timeout;
  const init: RequestInit = { method: call.method, signal, headers: { accept: 'application/json' } };
  if (call.body !== undefined) {
    init.body = JSON.stringify(call.body);
    init.headers = { accept: 'application/json', 'content-type': 'application/json' };
  }
  let status: number;
  let text: string;
  try {
    const res = await fetchFn(call.host + call.path, init);
    status = res.status;
    text = await res.text();
  } catch (err) {
    if (call.signal?.aborted) throw call.signal.reason;
    if (timeout.aborted) {
      // DMSDK's NoResponseListener: the host accepted the request and never answered.
      throw new ShardexError('SHX_TIMEOUT', `${call.host} did not answer ${call.method} ${call.path} within ${call.timeoutMs} ms`, {
        cause: err,
        details: { host: call.host, noResponse: true },
      });
    }
    throw new ShardexError('SHX_UNAVAILABLE', `could not reach ${call.host}: ${describe(err)}`, { cause: err, details: { host: call.host, unreachable: true } });
  }
  let body: unknown = text;
  if (text.length > 0) {
    try {
      body = JSON.parse(text);
    } catch {
      /* not JSON: keep the text for the message */
    }
  }
  if (status < 200 || status >= 300) throw wireError(status, body, call.host);
  return { status, body: body as T };
}
