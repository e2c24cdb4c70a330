// gRPC between nodes: the server side of proto/shardex.proto, and `PeerClients`, the
// client side (one channel per destination node, with two long-lived streams on it: updates,
// and reads (get, search), each request a frame answered by a frame with its id). Every
// request is checked against its RPC's schema (schemas.ts) before a handler sees it.
// ShardexError crosses the wire as a gRPC status plus the `shx-code` metadata entry, and is
// rebuilt on the other side; a broken channel becomes a transient SHX_UNAVAILABLE. With a cluster
// secret, every call between nodes and readers carries it (`shx-secret` metadata) and the server
// refuses every call without it (UNAUTHENTICATED, SHX_UNAUTHORIZED), in one server interceptor
// that runs on the call's metadata before any handler or schema sees the call. The one exception
// is a read (get, search) that a smart client sends a reader or a leader itself: clients hold an
// API key, not the cluster secret, so a read without the secret is served when the process's
// read access lets its `authorization` metadata in (a key with the `read` role, as on HTTP; open
// where the process has no API keys, as its HTTP API is).
// TLS (tls.ts): a server with a certificate serves TLS only; with a CA it also requires, and
// verifies against the CA, a client certificate on every connection (mutual TLS), so that only
// holders of a certificate from that CA reach any RPC, reads included. Clients verify the server
// against their CA (absent: the system's) and present their certificate when they have one.
import { createHash, timingSafeEqual } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { Logger } from 'pino';
import { ShardexError, errorFromWire } from '../errors.js';
import { REQUEST_ID_HEADER, currentRequestId, withRequestId } from '../request-id.js';
import type { z } from 'zod';
import type { UpdateOutcome, UpdateTransport } from '../distrib/distributor.js';
import { decodeOps, encodeOps, type ShardUpdate, type ShardUpdateResult } from './protocol.js';
import type { ClientTlsMaterial, TlsMaterial } from './tls.js';
import {
  CommitRequest,
  CopyShardRequest,
  GetRequest,
  SearchRequest,
  UpdatesAfterRequest,
  VersionsRequest,
  requestProblem,
} from './schemas.js';

const PROTO = fileURLToPath(new URL('../../proto/shardex.proto', import.meta.url));

interface WireShardUpdate {
  collection: string;
  shard: string;
  phase: string;
  epoch: number;
  ops: Buffer;
  minRf: number;
  from: string;
  requestId: string;
}
interface WireResult {
  ok: boolean;
  code: string;
  message: string;
  body: Buffer;
}
interface WireFrame {
  id: number;
  updates: WireShardUpdate[];
}
interface WireAck {
  id: number;
  results: WireResult[];
}
interface WireCall {
  id: number;
  method: string;
  body: Buffer;
  requestId: string;
}
interface WireCallReply {
  id: number;
  result: WireResult;
}
interface JsonMessage {
  body: Buffer;
}

let serviceDef: grpc.ServiceDefinition | undefined;
let clientCtor: grpc.ServiceClientConstructor | undefined;
function service(): { def: grpc.ServiceDefinition; Client: grpc.ServiceClientConstructor } {
  if (!serviceDef || !clientCtor) {
    const pkg = protoLoader.loadSync(PROTO, { keepCase: false, longs: Number, defaults: true });
    const loaded = grpc.loadPackageDefinition(pkg) as unknown as { shardex: { Shardex: grpc.ServiceClientConstructor } };
    clientCtor = loaded.shardex.Shardex;
    serviceDef = clientCtor.service;
  }
  return { def: serviceDef, Client: clientCtor };
}

const CHANNEL_OPTIONS: grpc.ChannelOptions = {
  'grpc.max_receive_message_length': 512 * 1024 * 1024,
  'grpc.max_send_message_length': 512 * 1024 * 1024,
  // Notice a dead or frozen peer within seconds, not at the TCP timeout.
  'grpc.keepalive_time_ms': 2000,
  'grpc.keepalive_timeout_ms': 3000,
  'grpc.keepalive_permit_without_calls': 1,
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': 1000,
};

const SECRET_KEY = 'shx-secret';
const AUTHORIZATION_KEY = 'authorization';
/** The RPCs a smart client calls itself (eventual and leader reads). */
const CLIENT_READS = new Set(['/shardex.Shardex/Get', '/shardex.Shardex/Search', '/shardex.Shardex/Calls']);
/** The reads the Calls stream carries: the RPCs of the same names, many on one stream. */
const STREAMED_CALLS = new Set(['get', 'search']);

/** Who may read without the cluster secret: undefined to serve a call with this `authorization`, or the refusal. */
export type ReadAccess = (authorization: string | undefined) => ShardexError | undefined;

/** A gRPC call to a peer that names no timeout ends after this long. */
export const DEFAULT_CALL_TIMEOUT_MS = 30_000;

/**
 * The server interceptor that refuses every call not carrying `secret` before any handler runs,
 * whatever the call's kind (unary, server stream, bidirectional stream), but for the reads that
 * `readAccess` lets in. The secrets are compared in constant time (of their SHA-256 digests).
 */
function secretInterceptor(secret: string, readAccess: ReadAccess | undefined): grpc.ServerInterceptor {
  const want = createHash('sha256').update(secret).digest();
  const carries = (metadata: grpc.Metadata): boolean => {
    const got = metadata.get(SECRET_KEY)[0];
    return typeof got === 'string' && timingSafeEqual(createHash('sha256').update(got).digest(), want);
  };
  const refusal = (path: string, metadata: grpc.Metadata): ShardexError | undefined => {
    if (carries(metadata)) return undefined;
    if (readAccess !== undefined && CLIENT_READS.has(path)) {
      const auth = metadata.get(AUTHORIZATION_KEY)[0];
      return readAccess(typeof auth === 'string' ? auth : undefined);
    }
    return new ShardexError('SHX_UNAUTHORIZED', 'this call does not carry the cluster secret: give every node and reader the same --cluster-secret-file');
  };
  return (method, call) =>
    new grpc.ServerInterceptingCall(call, {
      start: (next) =>
        next({
          onReceiveMetadata: (metadata, accept) => {
            const problem = refusal(method.path, metadata);
            if (problem === undefined) return accept(metadata);
            call.sendStatus(toServiceError(problem));
          },
        }),
    });
}

const toJson = (v: unknown): Buffer => Buffer.from(JSON.stringify(v ?? null));
const fromJson = <T>(b: Buffer | undefined): T => (b && b.length > 0 ? (JSON.parse(b.toString('utf8')) as T) : (undefined as T));

function statusOf(err: ShardexError): grpc.status {
  if (err.code === 'SHX_BUSY') return grpc.status.RESOURCE_EXHAUSTED;
  if (err.code === 'SHX_UNAUTHORIZED') return grpc.status.UNAUTHENTICATED;
  if (err.code === 'SHX_FORBIDDEN') return grpc.status.PERMISSION_DENIED;
  if (err.status === 404) return grpc.status.NOT_FOUND;
  if (err.status >= 400 && err.status < 500) return grpc.status.INVALID_ARGUMENT;
  if (err.retryable) return grpc.status.UNAVAILABLE;
  return grpc.status.INTERNAL;
}

function toServiceError(err: unknown): { code: grpc.status; details: string; metadata: grpc.Metadata } {
  const e = err instanceof ShardexError ? err : new ShardexError('SHX_INTERNAL', err instanceof Error ? err.message : String(err));
  const metadata = new grpc.Metadata();
  metadata.set('shx-code', e.code);
  return { code: statusOf(e), details: e.message, metadata };
}

/** Rebuilds a ShardexError from a failed gRPC call. */
export function fromServiceError(err: grpc.ServiceError, dest: string): ShardexError {
  const code = err.metadata?.get('shx-code')[0];
  if (typeof code === 'string') return errorFromWire(code, err.details);
  if (err.code === grpc.status.UNAVAILABLE || err.code === grpc.status.CANCELLED) {
    return new ShardexError('SHX_UNAVAILABLE', `node ${dest} is unavailable: ${err.details || err.message}`, { cause: err });
  }
  if (err.code === grpc.status.DEADLINE_EXCEEDED) return new ShardexError('SHX_TIMEOUT', `node ${dest} did not answer in time`, { cause: err });
  return new ShardexError('SHX_INTERNAL', `call to ${dest} failed: ${err.details || err.message}`, { cause: err });
}

/** A listen failure, said so that a user knows what to change. */
export function portError(what: string, host: string, port: number, err: Error): Error {
  if (/EADDRINUSE/.test(err.message) || (err as { code?: string }).code === 'EADDRINUSE') {
    return new ShardexError('SHX_BAD_CONFIG', `the ${what} port ${port} on ${host} is already in use: stop what listens there, or choose other ports (--port / --grpc-port)`, { cause: err });
  }
  if (/EADDRNOTAVAIL/.test(err.message) || (err as { code?: string }).code === 'EADDRNOTAVAIL') {
    return new ShardexError('SHX_BAD_CONFIG', `cannot listen on ${host}: it is not an address of this machine (--host)`, { cause: err });
  }
  return err;
}

// ---- server ---------------------------------------------------------------------------

export interface PeerHandlers {
  update(u: ShardUpdate): Promise<ShardUpdateResult>;
  get(req: GetRequest): Promise<unknown>;
  search(req: SearchRequest): Promise<unknown>;
  commit(req: CommitRequest): Promise<unknown>;
  versions(req: VersionsRequest): Promise<unknown>;
  updatesAfter(req: UpdatesAfterRequest): Promise<unknown>;
  copyShard(req: CopyShardRequest): AsyncIterable<unknown>;
}

/** Parses a request body against its RPC's schema; SHX_BAD_REQUEST naming each bad field. */
function checked<S extends z.ZodType>(method: string, schema: S, body: Buffer | undefined): z.infer<S> {
  let json: unknown;
  try {
    json = fromJson<unknown>(body);
  } catch {
    throw new ShardexError('SHX_BAD_REQUEST', `${method} request body is not JSON`);
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) throw new ShardexError('SHX_BAD_REQUEST', requestProblem(method, parsed.error));
  return parsed.data;
}

export function decodeUpdate(w: WireShardUpdate): ShardUpdate {
  if (w.phase !== 'TOLEADER' && w.phase !== 'FROMLEADER') throw new ShardexError('SHX_BAD_REQUEST', `unknown update phase '${w.phase}'`);
  return {
    collection: w.collection,
    shard: w.shard,
    phase: w.phase,
    epoch: w.epoch,
    ops: decodeOps(w.ops),
    minRf: w.minRf,
    from: w.from,
    ...(w.requestId && { requestId: w.requestId }),
  };
}

/** Runs a call's work as part of the request its caller serves (src/request-id.ts), and says at debug level that it arrived. */
function asPartOf<T>(requestId: unknown, log: Logger, rpc: string, work: () => T): T {
  return withRequestId(typeof requestId === 'string' ? requestId : undefined, () => {
    if (currentRequestId() !== undefined) log.debug({ rpc }, 'peer call');
    return work();
  });
}

/** A request's outcome as a frame carries it: its JSON answer, or its ShardexError (anything else logged, sent as SHX_INTERNAL). */
function wireResult(work: Promise<unknown>, log: Logger, what: string): Promise<WireResult> {
  return work.then(
    (answer): WireResult => ({ ok: true, code: '', message: '', body: toJson(answer) }),
    (err: unknown): WireResult => {
      const e = err instanceof ShardexError ? err : new ShardexError('SHX_INTERNAL', (err as Error).message);
      if (!(err instanceof ShardexError)) log.error({ err }, `${what} failed`);
      return { ok: false, code: e.code, message: e.message, body: Buffer.alloc(0) };
    },
  );
}

export interface PeerServerOptions {
  /** The cluster secret every call must carry; none: calls are not checked. */
  readonly secret?: string;
  /** With a secret: who may call get and search without it (smart clients); absent: nobody. */
  readonly readAccess?: ReadAccess;
  /** Serve TLS with this certificate; with its `ca`, require client certificates issued by it (mutual TLS). */
  readonly tls?: TlsMaterial;
}

function serverCredentials(tls: TlsMaterial | undefined): grpc.ServerCredentials {
  if (!tls) return grpc.ServerCredentials.createInsecure();
  return grpc.ServerCredentials.createSsl(tls.ca ?? null, [{ cert_chain: tls.cert, private_key: tls.key }], tls.ca !== undefined);
}

function channelCredentials(tls: ClientTlsMaterial | undefined): grpc.ChannelCredentials {
  if (!tls) return grpc.credentials.createInsecure();
  return grpc.credentials.createSsl(tls.ca ?? null, tls.key ?? null, tls.cert ?? null);
}

export class PeerServer {
  private readonly server: grpc.Server;
  private readonly credentials: grpc.ServerCredentials;
  private port = 0;
  /** The open update and read streams, each as the function that ends it once it owes no answer. */
  private readonly streams = new Set<() => void>();
  private closing = false;

  constructor(handlers: PeerHandlers, log: Logger, opts: PeerServerOptions = {}) {
    this.server = new grpc.Server({ ...CHANNEL_OPTIONS, ...(opts.secret !== undefined && { interceptors: [secretInterceptor(opts.secret, opts.readAccess)] }) });
    this.credentials = serverCredentials(opts.tls);
    /** One request of an RPC: its body checked against the RPC's schema, then its handler, as part of `requestId`. */
    const serve = async <S extends z.ZodType>(method: string, schema: S, fn: (req: z.infer<S>) => Promise<unknown>, body: Buffer | undefined, requestId: unknown): Promise<unknown> => {
      const req = checked(method, schema, body);
      return asPartOf(requestId, log, method, () => fn(req));
    };
    const unary =
      <S extends z.ZodType>(method: string, schema: S, fn: (req: z.infer<S>) => Promise<unknown>) =>
      (call: grpc.ServerUnaryCall<JsonMessage, JsonMessage>, cb: grpc.sendUnaryData<JsonMessage>): void => {
        serve(method, schema, fn, call.request.body, call.metadata.get(REQUEST_ID_HEADER)[0]).then(
          (res) => cb(null, { body: toJson(res) }),
          (err: unknown) => cb(toServiceError(err)),
        );
      };
    const read = (frame: WireCall): Promise<unknown> => {
      if (frame.method === 'get') return serve('get', GetRequest, (r) => handlers.get(r), frame.body, frame.requestId);
      if (frame.method === 'search') return serve('search', SearchRequest, (r) => handlers.search(r), frame.body, frame.requestId);
      return Promise.reject(new ShardexError('SHX_BAD_REQUEST', `unknown call '${frame.method}' on the Calls stream: it carries get and search`));
    };
    /**
     * Answers each frame of a bidirectional stream as its work ends, unless the stream is gone. A
     * stream stays open as long as its peer: at close, each one is ended once it has sent the
     * answers it owes, so that the shutdown does not wait for peers to hang up.
     */
    const answering =
      <In, Out>(answer: (frame: In) => Promise<Out>) =>
      (call: grpc.ServerDuplexStream<In, Out>): void => {
        let owed = 0;
        const endWhenAnswered = (): void => {
          if (owed === 0 && !call.writableEnded && !call.destroyed) call.end();
        };
        this.streams.add(endWhenAnswered);
        call.on('data', (frame: In) => {
          owed++;
          void answer(frame).then((reply) => {
            owed--;
            if (!call.writableEnded && !call.destroyed) call.write(reply);
            if (this.closing) endWhenAnswered();
          });
        });
        call.on('end', () => call.end());
        call.on('error', () => undefined);
        call.on('close', () => this.streams.delete(endWhenAnswered));
        if (this.closing) endWhenAnswered();
      };
    this.server.addService(service().def, {
      updates: answering((frame: WireFrame) =>
        Promise.all(
          frame.updates.map((w) =>
            wireResult(
              (async () => {
                const u = decodeUpdate(w);
                return asPartOf(u.requestId, log, `update ${u.phase}`, () => handlers.update(u));
              })(),
              log,
              'update',
            ),
          ),
        ).then((results): WireAck => ({ id: frame.id, results })),
      ),
      calls: answering((frame: WireCall) => wireResult(read(frame), log, frame.method).then((result): WireCallReply => ({ id: frame.id, result }))),
      get: unary('get', GetRequest, (r) => handlers.get(r)),
      search: unary('search', SearchRequest, (r) => handlers.search(r)),
      commit: unary('commit', CommitRequest, (r) => handlers.commit(r)),
      versions: unary('versions', VersionsRequest, (r) => handlers.versions(r)),
      updatesAfter: unary('updatesAfter', UpdatesAfterRequest, (r) => handlers.updatesAfter(r)),
      copyShard: (call: grpc.ServerWritableStream<JsonMessage, JsonMessage>) => {
        void (async () => {
          try {
            for await (const chunk of handlers.copyShard(checked('copyShard', CopyShardRequest, call.request.body))) {
              if (call.cancelled || call.destroyed) return;
              if (!call.write({ body: toJson(chunk) })) await writable(call);
            }
            call.end();
          } catch (err) {
            // Emitting the error sends it as the call's status (destroy() would leave the client waiting).
            call.emit('error', toServiceError(err));
          }
        })();
      },
    });
  }

  /** Binds host:port (port 0 = any free port) and returns the bound port. */
  async listen(host: string, port: number): Promise<number> {
    this.port = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync(`${host}:${port}`, this.credentials, (err, p) => (err ? reject(portError('gRPC', host, port, err)) : resolve(p))),
    );
    return this.port;
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const end of this.streams) end();
    await new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, 2000);
      this.server.tryShutdown(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  forceClose(): void {
    this.server.forceShutdown();
  }
}

// ---- clients --------------------------------------------------------------------------

/**
 * One long-lived bidirectional stream to a peer carrying many requests at once: each a frame with
 * an id, answered by a frame with the same id, in any order. It is opened at the first request and
 * again at the first one after it broke; a break fails every request waiting on it.
 */
class FrameStream<Out extends { id: number }, In extends { id: number }> {
  private stream: grpc.ClientDuplexStream<Out, In> | undefined;
  private readonly pending = new Map<number, { resolve(answer: In): void; reject(err: ShardexError): void; timer: NodeJS.Timeout }>();

  constructor(
    private readonly open: () => grpc.ClientDuplexStream<Out, In>,
    /** What the waiting requests fail with when the stream breaks (with the stream's status, if it sent one). */
    private readonly brokenError: (err: grpc.ServiceError | undefined) => ShardexError,
  ) {}

  /** Sends `frame`; resolves its answer, or rejects with `timeoutError()` after `timeoutMs`. */
  request(frame: Out, timeoutMs: number, timeoutError: () => ShardexError): Promise<In> {
    const s = this.current();
    return new Promise<In>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(frame.id);
        reject(timeoutError());
      }, timeoutMs);
      this.pending.set(frame.id, { resolve, reject, timer });
      s.write(frame);
    });
  }

  /** Fails every waiting request with `err` and drops the stream (the next request opens another). */
  fail(err: ShardexError): void {
    const s = this.stream;
    this.stream = undefined;
    for (const [, f] of this.pending) {
      clearTimeout(f.timer);
      f.reject(err);
    }
    this.pending.clear();
    s?.cancel();
  }

  private current(): grpc.ClientDuplexStream<Out, In> {
    if (this.stream) return this.stream;
    const s = this.open();
    this.stream = s;
    s.on('data', (answer: In) => {
      const f = this.pending.get(answer.id);
      if (!f) return;
      this.pending.delete(answer.id);
      clearTimeout(f.timer);
      f.resolve(answer);
    });
    const broken = (err?: grpc.ServiceError): void => {
      if (this.stream === s) this.fail(this.brokenError(err));
    };
    s.on('error', broken);
    s.on('end', () => broken());
    return s;
  }
}

interface Peer {
  readonly address: string;
  readonly client: grpc.Client & Record<string, (...args: unknown[]) => unknown>;
  readonly updates: FrameStream<WireFrame, WireAck>;
  readonly calls: FrameStream<WireCall, WireCallReply>;
}

export interface PeerClientsOptions {
  /** node name -> gRPC address (host:port), from the live nodes. */
  readonly resolve: (node: string) => string | undefined;
  readonly logger: Logger;
  /** A frame or unary call not answered in this time fails as a timeout. */
  readonly callTimeoutMs?: number;
  /** The cluster secret, sent with every call. */
  readonly secret?: string;
  /** An `Authorization` value (`Bearer KEY`) sent with every call: a smart client's reads. */
  readonly authorization?: string;
  /** Connect with TLS: verify servers against `ca` (absent: the system's CAs), present `cert` when given. */
  readonly tls?: ClientTlsMaterial;
}

export class PeerClients implements UpdateTransport {
  private readonly peers = new Map<string, Peer>();
  private readonly o: PeerClientsOptions;
  private readonly credentials: grpc.ChannelCredentials;
  private nextId = 1;
  private closed = false;

  constructor(opts: PeerClientsOptions) {
    this.o = opts;
    this.credentials = channelCredentials(opts.tls);
  }

  /** The metadata every call carries (a fresh object: grpc-js may add to it), and the id of the request it serves. */
  private metadata(requestId?: string): grpc.Metadata {
    const m = new grpc.Metadata();
    if (this.o.secret !== undefined) m.set(SECRET_KEY, this.o.secret);
    if (this.o.authorization !== undefined) m.set(AUTHORIZATION_KEY, this.o.authorization);
    if (requestId !== undefined) m.set(REQUEST_ID_HEADER, requestId);
    return m;
  }

  private peer(dest: string): Peer {
    if (this.closed) throw new ShardexError('SHX_UNAVAILABLE', 'node is shutting down');
    const address = this.o.resolve(dest);
    if (!address) throw new ShardexError('SHX_UNAVAILABLE', `node ${dest} is not live`);
    let p = this.peers.get(dest);
    if (p && p.address !== address) {
      this.drop(dest, p, new ShardexError('SHX_UNAVAILABLE', `node ${dest} moved to ${address}`));
      p = undefined;
    }
    if (!p) {
      const { Client } = service();
      const client = new Client(address, this.credentials, CHANNEL_OPTIONS) as Peer['client'];
      const open =
        <Out, In>(rpc: 'updates' | 'calls') =>
        (): grpc.ClientDuplexStream<Out, In> =>
          client[rpc]!(this.metadata()) as grpc.ClientDuplexStream<Out, In>;
      p = {
        address,
        client,
        updates: new FrameStream(open<WireFrame, WireAck>('updates'), (err) => {
          const e = err ? fromServiceError(err, dest) : new ShardexError('SHX_UNAVAILABLE', `update stream to ${dest} ended`);
          // An update whose stream broke may or may not have been applied: always retryable.
          return e.retryable ? e : new ShardexError('SHX_UNAVAILABLE', e.message, { cause: e });
        }),
        // A refusal of the stream (no secret, no read role) fails its reads with that refusal.
        calls: new FrameStream(open<WireCall, WireCallReply>('calls'), (err) =>
          err ? fromServiceError(err, dest) : new ShardexError('SHX_UNAVAILABLE', `read stream to ${dest} ended`),
        ),
      };
      this.peers.set(dest, p);
    }
    return p;
  }

  private drop(dest: string, p: Peer, err: ShardexError): void {
    p.updates.fail(err);
    p.calls.fail(err);
    p.client.close();
    if (this.peers.get(dest) === p) this.peers.delete(dest);
  }

  /** UpdateTransport: one frame on the destination's stream, answered by one ack. */
  send(dest: string, updates: readonly ShardUpdate[]): Promise<UpdateOutcome[]> {
    let p: Peer;
    try {
      p = this.peer(dest);
    } catch (err) {
      return Promise.reject(err);
    }
    const frame: WireFrame = {
      id: this.nextId++,
      updates: updates.map((u) => ({
        collection: u.collection,
        shard: u.shard,
        phase: u.phase,
        epoch: u.epoch,
        ops: encodeOps(u.ops),
        minRf: u.minRf,
        from: u.from,
        requestId: u.requestId ?? '',
      })),
    };
    const timeout = this.o.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    return p.updates.request(frame, timeout, () => new ShardexError('SHX_TIMEOUT', `node ${dest} did not acknowledge an update within ${timeout} ms`)).then(({ results }) =>
      results.map((r): UpdateOutcome =>
        r.ok ? { ok: true, result: fromJson<ShardUpdateResult>(r.body) } : { ok: false, error: errorFromWire(r.code, r.message) },
      ),
    );
  }

  /**
   * A JSON call: get and search as frames on the destination's Calls stream, the others (commit,
   * versions, updatesAfter: rare, and their answers can be large) as unary RPCs.
   */
  call<T>(dest: string, method: 'get' | 'search' | 'commit' | 'versions' | 'updatesAfter', body: unknown, timeoutMs?: number): Promise<T> {
    let p: Peer;
    try {
      p = this.peer(dest);
    } catch (err) {
      return Promise.reject(err);
    }
    const timeout = timeoutMs ?? this.o.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    if (STREAMED_CALLS.has(method)) {
      const frame: WireCall = { id: this.nextId++, method, body: toJson(body), requestId: currentRequestId() ?? '' };
      return p.calls.request(frame, timeout, () => new ShardexError('SHX_TIMEOUT', `node ${dest} did not answer in time`)).then(({ result }) => {
        if (!result.ok) throw errorFromWire(result.code, result.message);
        return fromJson<T>(result.body);
      });
    }
    const deadline = new Date(Date.now() + timeout);
    return new Promise<T>((resolve, reject) => {
      p.client[method]!({ body: toJson(body) }, this.metadata(currentRequestId()), { deadline }, (err: grpc.ServiceError | null, res: JsonMessage) => {
        if (err) reject(fromServiceError(err, dest));
        else resolve(fromJson<T>(res.body));
      });
    });
  }

  /** A server-streaming JSON call (copyShard). */
  async *streamCall<T>(dest: string, method: 'copyShard', body: unknown): AsyncGenerator<T> {
    const p = this.peer(dest);
    const call = p.client[method]!({ body: toJson(body) }, this.metadata()) as grpc.ClientReadableStream<JsonMessage>;
    try {
      for await (const msg of call as AsyncIterable<JsonMessage>) yield fromJson<T>(msg.body);
    } catch (err) {
      throw fromServiceError(err as grpc.ServiceError, dest);
    } finally {
      call.cancel();
    }
  }

  close(): void {
    this.closed = true;
    for (const [dest, p] of this.peers) this.drop(dest, p, new ShardexError('SHX_UNAVAILABLE', 'node is shutting down'));
  }
}

/**
 * Resolves once `call` takes writes again, or is cancelled or closed: a cancelled call never
 * drains, and a stream that waited for it would never end (nor release what it holds).
 */
function writable(call: grpc.ServerWritableStream<JsonMessage, JsonMessage>): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      call.off('drain', done);
      call.off('cancelled', done);
      call.off('close', done);
      resolve();
    };
    call.once('drain', done);
    call.once('cancelled', done);
    call.once('close', done);
  });
}
