// gRPC between nodes: the server side of proto/shardex.proto, and `PeerClients`, the
// client side (one channel and one long-lived update stream per destination node). Every
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
const CLIENT_READS = new Set(['/shardex.Shardex/Get', '/shardex.Shardex/Search']);

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

  constructor(handlers: PeerHandlers, log: Logger, opts: PeerServerOptions = {}) {
    this.server = new grpc.Server({ ...CHANNEL_OPTIONS, ...(opts.secret !== undefined && { interceptors: [secretInterceptor(opts.secret, opts.readAccess)] }) });
    this.credentials = serverCredentials(opts.tls);
    const unary =
      <S extends z.ZodType>(method: string, schema: S, fn: (req: z.infer<S>) => Promise<unknown>) =>
      (call: grpc.ServerUnaryCall<JsonMessage, JsonMessage>, cb: grpc.sendUnaryData<JsonMessage>): void => {
        let req: z.infer<S>;
        try {
          req = checked(method, schema, call.request.body);
        } catch (err) {
          return cb(toServiceError(err));
        }
        asPartOf(call.metadata.get(REQUEST_ID_HEADER)[0], log, method, () => fn(req)).then(
          (res) => cb(null, { body: toJson(res) }),
          (err: unknown) => cb(toServiceError(err)),
        );
      };
    this.server.addService(service().def, {
      updates: (call: grpc.ServerDuplexStream<WireFrame, WireAck>) => {
        call.on('data', (frame: WireFrame) => {
          void Promise.all(
            frame.updates.map(async (w): Promise<WireResult> => {
              try {
                const u = decodeUpdate(w);
                const result = await asPartOf(u.requestId, log, `update ${u.phase}`, () => handlers.update(u));
                return { ok: true, code: '', message: '', body: toJson(result) };
              } catch (err) {
                const e = err instanceof ShardexError ? err : new ShardexError('SHX_INTERNAL', (err as Error).message);
                if (!(err instanceof ShardexError)) log.error({ err }, 'update failed');
                return { ok: false, code: e.code, message: e.message, body: Buffer.alloc(0) };
              }
            }),
          ).then((results) => {
            if (!call.writableEnded && !call.destroyed) call.write({ id: frame.id, results });
          });
        });
        call.on('end', () => call.end());
        call.on('error', () => undefined);
      },
      get: unary('get', GetRequest, (r) => handlers.get(r)),
      search: unary('search', SearchRequest, (r) => handlers.search(r)),
      commit: unary('commit', CommitRequest, (r) => handlers.commit(r)),
      versions: unary('versions', VersionsRequest, (r) => handlers.versions(r)),
      updatesAfter: unary('updatesAfter', UpdatesAfterRequest, (r) => handlers.updatesAfter(r)),
      copyShard: (call: grpc.ServerWritableStream<JsonMessage, JsonMessage>) => {
        void (async () => {
          try {
            for await (const chunk of handlers.copyShard(checked('copyShard', CopyShardRequest, call.request.body))) {
              if (call.cancelled) return;
              if (!call.write({ body: toJson(chunk) })) await new Promise((r) => call.once('drain', r));
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

interface PendingFrame {
  resolve(results: WireResult[]): void;
  reject(err: ShardexError): void;
  timer: NodeJS.Timeout;
}

interface Peer {
  readonly address: string;
  readonly client: grpc.Client & Record<string, (...args: unknown[]) => unknown>;
  stream?: grpc.ClientDuplexStream<WireFrame, WireAck>;
  readonly pending: Map<number, PendingFrame>;
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
      p = { address, client: new Client(address, this.credentials, CHANNEL_OPTIONS) as Peer['client'], pending: new Map() };
      this.peers.set(dest, p);
    }
    return p;
  }

  private drop(dest: string, p: Peer, err: ShardexError): void {
    this.failStream(p, err);
    p.client.close();
    if (this.peers.get(dest) === p) this.peers.delete(dest);
  }

  private failStream(p: Peer, err: ShardexError): void {
    const s = p.stream;
    p.stream = undefined;
    for (const [, f] of p.pending) {
      clearTimeout(f.timer);
      f.reject(err);
    }
    p.pending.clear();
    s?.cancel();
  }

  private stream(dest: string, p: Peer): grpc.ClientDuplexStream<WireFrame, WireAck> {
    if (p.stream) return p.stream;
    const s = p.client.updates(this.metadata()) as grpc.ClientDuplexStream<WireFrame, WireAck>;
    p.stream = s;
    s.on('data', (ack: WireAck) => {
      const f = p.pending.get(ack.id);
      if (!f) return;
      p.pending.delete(ack.id);
      clearTimeout(f.timer);
      f.resolve(ack.results);
    });
    const broken = (err?: grpc.ServiceError): void => {
      if (p.stream !== s) return;
      const e = err ? fromServiceError(err, dest) : new ShardexError('SHX_UNAVAILABLE', `update stream to ${dest} ended`);
      this.failStream(p, e.retryable ? e : new ShardexError('SHX_UNAVAILABLE', e.message, { cause: e }));
    };
    s.on('error', broken);
    s.on('end', () => broken());
    return s;
  }

  /** UpdateTransport: one frame on the destination's stream, answered by one ack. */
  send(dest: string, updates: readonly ShardUpdate[]): Promise<UpdateOutcome[]> {
    let p: Peer;
    try {
      p = this.peer(dest);
    } catch (err) {
      return Promise.reject(err);
    }
    const s = this.stream(dest, p);
    const id = this.nextId++;
    const frame: WireFrame = {
      id,
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
    return new Promise<WireResult[]>((resolve, reject) => {
      const timeout = this.o.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
      const timer = setTimeout(() => {
        p.pending.delete(id);
        reject(new ShardexError('SHX_TIMEOUT', `node ${dest} did not acknowledge an update within ${timeout} ms`));
      }, timeout);
      p.pending.set(id, { resolve, reject, timer });
      s.write(frame);
    }).then((results) =>
      results.map((r): UpdateOutcome =>
        r.ok ? { ok: true, result: fromJson<ShardUpdateResult>(r.body) } : { ok: false, error: errorFromWire(r.code, r.message) },
      ),
    );
  }

  /** A unary JSON call (get, search, commit, versions, updatesAfter). */
  call<T>(dest: string, method: 'get' | 'search' | 'commit' | 'versions' | 'updatesAfter', body: unknown, timeoutMs?: number): Promise<T> {
    let p: Peer;
    try {
      p = this.peer(dest);
    } catch (err) {
      return Promise.reject(err);
    }
    const deadline = new Date(Date.now() + (timeoutMs ?? this.o.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS));
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
