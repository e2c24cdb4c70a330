// A fake network for the smart client's unit tests: nodes that answer the HTTP API from an
// in-memory document map, hosts that can be taken down (connection refused, as undici reports
// it: a TypeError whose cause has the socket code), scripted answers, and a log of every call.
// Also a scheduler whose timers the test fires by hand, and FakeHttpCluster: the same nodes
// served by real HTTP servers on 127.0.0.1 (free ports) that can refuse, hang, or reset, so the
// client meets the socket errors undici really reports.
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { partitionRange, routeId, formatRange } from '../../src/hashrange/index.js';
import type { ClusterViewJson } from '../../src/client/index.js';
import type { FetchLike, Scheduler } from '../../src/client/index.js';

export interface Call {
  readonly method: string;
  readonly host: string;
  readonly path: string;
  readonly body: unknown;
}

type Scripted = (call: Call) => Response | Error | undefined;

export function connectionRefused(host: string): TypeError {
  const socket = Object.assign(new Error(`connect ECONNREFUSED ${host}`), { code: 'ECONNREFUSED' });
  return new TypeError('fetch failed', { cause: socket });
}

export function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
}

export interface FakeClusterOptions {
  readonly nodes?: number;
  readonly shards?: number;
  readonly collection?: string;
  /** Reader nodes (role 'reader') added to the view. */
  readonly readers?: number;
  /** The data nodes' base URLs (default http://nodeN.test). */
  readonly urls?: readonly string[];
}

export class FakeNet {
  readonly collection: string;
  readonly numShards: number;
  view: ClusterViewJson;
  readonly down = new Set<string>();
  readonly calls: Call[] = [];
  readonly docs = new Map<string, Record<string, unknown>>();
  private readonly scripts: Scripted[] = [];
  private version = 1;

  constructor(opts: FakeClusterOptions = {}) {
    this.collection = opts.collection ?? 'docs';
    this.numShards = opts.shards ?? 4;
    const count = opts.urls?.length ?? opts.nodes ?? 3;
    const nodes = Array.from({ length: count }, (_, i) => ({ name: `node${i + 1}`, http: opts.urls?.[i] ?? `http://node${i + 1}.test`, grpc: `node${i + 1}.test:1`, role: 'data' }));
    const readers = Array.from({ length: opts.readers ?? 0 }, (_, i) => ({ name: `reader${i + 1}`, http: `http://reader${i + 1}.test`, grpc: `reader${i + 1}.test:1`, role: 'reader' }));
    const shards: Record<string, { range: string; leader: string | null; replicas: Array<{ node: string; state: string }> }> = {};
    partitionRange(this.numShards).forEach((r, i) => {
      const leader = nodes[i % nodes.length]!.name;
      shards[r.name] = { range: formatRange(r), leader, replicas: [{ node: leader, state: 'active' }] };
    });
    this.view = {
      nodes: [...nodes, ...readers],
      collections: { [this.collection]: { router: 'compositeId', numShards: this.numShards, replicationFactor: 1, shards } },
    };
  }

  host(node: string): string {
    return this.view.nodes.find((n) => n.name === node)?.http ?? `http://${node}.test`;
  }

  leaderOf(shard: string): string {
    const leader = this.view.collections[this.collection]!.shards[shard]!.leader!;
    return this.host(leader);
  }

  shardOf(id: string): string {
    return routeId(id, this.numShards, 'compositeId').shard;
  }

  /** Makes `node` the leader of `shard` in the view the nodes serve. */
  setLeader(shard: string, node: string | null): void {
    const c = this.view.collections[this.collection]!;
    this.view = { ...this.view, collections: { [this.collection]: { ...c, shards: { ...c.shards, [shard]: { ...c.shards[shard]!, leader: node } } } } };
  }

  /** Removes a node from the view (its live node is gone). */
  unlist(node: string): void {
    this.view = { ...this.view, nodes: this.view.nodes.filter((n) => n.name !== node) };
  }

  /** Answers matching calls from `fn` (first script that returns something wins). */
  script(fn: Scripted): void {
    this.scripts.push(fn);
  }

  /** Fails the next `times` calls matching `match` with `answer`. */
  failNext(match: (c: Call) => boolean, answer: () => Response | Error, times = 1): void {
    let left = times;
    this.script((c) => {
      if (left <= 0 || !match(c)) return undefined;
      left--;
      return answer();
    });
  }

  callsTo(host: string, method?: string, pathPrefix?: string): Call[] {
    return this.calls.filter((c) => c.host === host && (!method || c.method === method) && (!pathPrefix || c.path.startsWith(pathPrefix)));
  }

  docPosts(): Call[] {
    return this.calls.filter((c) => c.method === 'POST' && c.path.includes('/docs'));
  }

  readonly fetch: FetchLike = async (url, init) => {
    const u = new URL(url);
    const host = `${u.protocol}//${u.host}`;
    const call: Call = { method: init.method ?? 'GET', host, path: u.pathname + u.search, body: init.body ? JSON.parse(String(init.body)) : undefined };
    await Promise.resolve();
    if (this.down.has(host)) {
      this.calls.push(call);
      throw connectionRefused(u.host);
    }
    const r = this.respond(call);
    if (r instanceof Error) throw r;
    return r;
  };

  /** The answer to a call: the first script's, else the fake node's own. Logs the call. */
  respond(call: Call): Response | Error {
    this.calls.push(call);
    for (const s of this.scripts) {
      const r = s(call);
      if (r) return r;
    }
    return this.answer(call, new URL(call.host + call.path));
  }

  private answer(call: Call, u: URL): Response {
    const parts = u.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    if (u.pathname === '/api/cluster') return json(200, this.view);
    if (parts[0] !== 'api' || parts[1] !== 'collections' || parts[2] !== this.collection) return json(404, { error: 'no such route', code: 'SHX_NOT_FOUND' });
    const what = parts[3];
    if (what === 'docs' && call.method === 'POST') {
      const versions: Record<string, number> = {};
      for (const d of call.body as Array<Record<string, unknown>>) {
        const v = this.version++;
        this.docs.set(String(d.id), { ...d, _version_: v, _shard_: this.shardOf(String(d.id)) });
        versions[String(d.id)] = v;
      }
      return json(200, { added: Object.keys(versions).length, rf: 1, versions });
    }
    if (what === 'docs' && call.method === 'DELETE') {
      this.docs.delete(parts[4]!);
      return json(200, { id: parts[4], version: this.version++, rf: 1 });
    }
    if (what === 'docs' && call.method === 'GET') {
      const d = this.docs.get(parts[4]!);
      return d ? json(200, d) : json(404, { error: `document '${parts[4]}' not found`, code: 'SHX_NOT_FOUND' });
    }
    if (what === 'commit') return json(200, { commit: { shard1: { version: 1 } } });
    if (what === 'search') return json(200, { total: this.docs.size, hits: [...this.docs.values()].slice(0, 10).map((d) => ({ ...d, score: 1 })), shards: { total: this.numShards, ok: this.numShards, failed: 0 } });
    if (what === 'export') {
      const shard = u.searchParams.get('shard')!;
      const after = u.searchParams.get('after');
      const limit = Number(u.searchParams.get('limit') ?? 1000);
      const ids = [...this.docs.keys()].filter((id) => this.shardOf(id) === shard && (after === null || id > after)).sort();
      const page = ids.slice(0, limit);
      return json(200, { docs: page.map((id) => ({ id })), next: ids.length > limit ? page[page.length - 1] : null });
    }
    return json(404, { error: 'no such route', code: 'SHX_NOT_FOUND' });
  }
}

export interface FakeTimer {
  readonly fn: () => void;
  readonly ms: number;
  cleared: boolean;
  fired: boolean;
}

/** Timers that only run when the test fires them. */
export class ManualScheduler implements Scheduler {
  readonly timers: FakeTimer[] = [];

  setTimeout(fn: () => void, ms: number): unknown {
    const t: FakeTimer = { fn, ms, cleared: false, fired: false };
    this.timers.push(t);
    return t;
  }

  clearTimeout(handle: unknown): void {
    (handle as FakeTimer).cleared = true;
  }

  pending(): FakeTimer[] {
    return this.timers.filter((t) => !t.cleared && !t.fired);
  }

  /** Fires every pending timer. */
  fireAll(): void {
    for (const t of this.pending()) {
      t.fired = true;
      t.fn();
    }
  }
}

/** Waits until `cond` holds, checking after each turn of the event loop. */
export async function until(cond: () => boolean, what = 'condition', turns = 2000): Promise<void> {
  for (let i = 0; i < turns; i++) {
    if (cond()) return;
    await new Promise((r) => setImmediate(r));
  }
  throw new Error(`${what} did not hold`);
}

export type NodeMode = 'up' | 'hang' | 'reset' | 'refuse';

/**
 * FakeNet's nodes behind real HTTP servers on 127.0.0.1. A node's mode: `up` answers, `hang`
 * accepts and never answers, `reset` destroys the connection on a request, `refuse` closes
 * the listening socket (connection refused). A script returning an Error resets the connection.
 * `tls` lists nodes whose URL says https:// while the server speaks plain HTTP (a TLS handshake
 * failure). close() stops every server, hung connections included.
 */
export class FakeHttpCluster {
  readonly net: FakeNet;
  private readonly servers: http.Server[];
  private readonly ports: number[];
  private readonly modes: NodeMode[];
  private readonly sockets = new Set<Socket>();

  private constructor(net: FakeNet, servers: http.Server[], ports: number[]) {
    this.net = net;
    this.servers = servers;
    this.ports = ports;
    this.modes = servers.map(() => 'up');
  }

  static async start(opts: Omit<FakeClusterOptions, 'urls'> & { tls?: readonly number[] } = {}): Promise<FakeHttpCluster> {
    const count = opts.nodes ?? 3;
    const servers: http.Server[] = [];
    let cluster: FakeHttpCluster | undefined;
    try {
      for (let i = 0; i < count; i++) {
        const server = http.createServer((req, res) => cluster!.handle(i, req, res));
        server.on('connection', (socket) => {
          cluster?.sockets.add(socket);
          socket.on('close', () => cluster?.sockets.delete(socket));
        });
        servers.push(server);
        await listen(server, 0);
      }
    } catch (err) {
      await Promise.all(servers.map((s) => close(s)));
      throw err;
    }
    const ports = servers.map((s) => (s.address() as AddressInfo).port);
    const urls = ports.map((p, i) => `${opts.tls?.includes(i + 1) ? 'https' : 'http'}://127.0.0.1:${p}`);
    cluster = new FakeHttpCluster(new FakeNet({ ...opts, urls }), servers, ports);
    return cluster;
  }

  /** Base URL of node `n` (1-based). */
  url(n: number): string {
    return this.net.host(`node${n}`);
  }

  get urls(): string[] {
    return this.ports.map((_, i) => this.url(i + 1));
  }

  async setMode(n: number, mode: NodeMode): Promise<void> {
    const i = n - 1;
    const was = this.modes[i];
    this.modes[i] = mode;
    if (mode === 'refuse' && was !== 'refuse') await close(this.servers[i]!);
    if (mode !== 'refuse' && was === 'refuse') await listen(this.servers[i]!, this.ports[i]!);
  }

  private handle(i: number, req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const mode = this.modes[i];
      const text = Buffer.concat(chunks).toString('utf8');
      const call: Call = { method: req.method ?? 'GET', host: this.url(i + 1), path: req.url ?? '/', body: text ? JSON.parse(text) : undefined };
      if (mode === 'hang') {
        // The cluster state still answers, so that the client can learn about the others.
        if (call.path === '/api/cluster') return void this.reply(this.net.respond(call), res, req);
        this.net.calls.push(call);
        return;
      }
      if (mode === 'reset') {
        this.net.calls.push(call);
        return void req.socket.destroy();
      }
      this.reply(this.net.respond(call), res, req);
    });
  }

  private reply(r: Response | Error, res: http.ServerResponse, req: http.IncomingMessage): void {
    if (r instanceof Error) return void req.socket.destroy();
    const answer = r;
    void answer.text().then((body) => {
      res.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'application/json' });
      res.end(body);
    });
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await Promise.all(this.servers.map((s, i) => (this.modes[i] === 'refuse' ? Promise.resolve() : close(s))));
  }
}

function listen(server: http.Server, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
}

function close(server: http.Server): Promise<void> {
  return new Promise((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  });
}
