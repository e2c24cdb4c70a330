// Helpers for tests that use the ZooKeeper started by test/setup/zookeeper.ts.

import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { inject } from 'vitest';
import type { ZNodeStore } from '../../src/coordination/store.js';
import { ZooKeeperStore } from '../../src/coordination/zookeeper-store.js';

/** 'host:port' of the test ZooKeeper (no chroot). */
export function zkServer(): string {
  return inject('zkConnect');
}

/**
 * A connect string with a chroot of its own, e.g. '127.0.0.1:PORT/shardex-test-1a2b3c4d', so that
 * tests never see each other's znodes. `chroot` names the test; a random suffix makes it unique.
 */
export function zkConnect(chroot = 'shardex-test'): string {
  const name = chroot.replace(/^\/+/, '').replace(/\/+$/, '');
  return `${zkServer()}/${name}-${randomBytes(4).toString('hex')}`;
}

interface ProxiedConnection {
  readonly client: net.Socket;
  upstream: net.Socket | undefined;
  /** Silenced by blackhole(): nothing crosses it any more, in either direction, not even a close. */
  frozen: boolean;
  upstreamClosed: boolean;
}

/**
 * A TCP proxy in front of a server, to do to a client what a network can: `blackhole()` silences
 * every connection as a cut cable does (the server then expires a ZooKeeper session it stops
 * hearing from, while the client only notices the silence), `reset()` drops connections at once,
 * `heal()` ends the blackhole and resets the connections that lived through it, as the server's
 * RST would once packets flow again.
 */
export class TcpProxy {
  private readonly connections = new Set<ProxiedConnection>();
  private blackholed = false;
  private readonly changed = new Set<() => void>();

  private constructor(
    private readonly server: net.Server,
    private readonly target: { host: string; port: number },
  ) {
    server.on('connection', (client) => this.accept(client));
  }

  /** Starts a proxy on a free 127.0.0.1 port to `target` ('host:port'). */
  static async start(target: string): Promise<TcpProxy> {
    const [host, port] = target.split(':');
    if (!host || !port) throw new TypeError(`Expected host:port, got ${JSON.stringify(target)}`);
    const server = net.createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    return new TcpProxy(server, { host, port: Number(port) });
  }

  get port(): number {
    return (this.server.address() as net.AddressInfo).port;
  }

  /** 'host:port' of the proxy. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  blackhole(): void {
    this.blackholed = true;
    for (const c of this.connections) c.frozen = true;
  }

  /** Drops every current connection now; clients see a connection loss. */
  reset(): void {
    for (const c of [...this.connections]) this.drop(c);
  }

  heal(): void {
    this.blackholed = false;
    for (const c of [...this.connections]) if (c.frozen) this.drop(c);
  }

  /**
   * Resolves once the server has closed every connection the blackhole silenced — for ZooKeeper,
   * once it has expired the sessions on them. Rejects after `timeoutMs`.
   */
  async serverClosedAll(timeoutMs: number): Promise<void> {
    const done = () => [...this.connections].every((c) => !c.frozen || c.upstream === undefined || c.upstreamClosed);
    if (done()) return;
    await new Promise<void>((resolve, reject) => {
      const check = () => {
        if (!done()) return;
        clearTimeout(timer);
        this.changed.delete(check);
        resolve();
      };
      const timer = setTimeout(() => {
        this.changed.delete(check);
        reject(new Error(`The server did not close the blackholed connections within ${timeoutMs} ms`));
      }, timeoutMs);
      this.changed.add(check);
    });
  }

  async close(): Promise<void> {
    for (const c of [...this.connections]) this.drop(c);
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: net.Socket): void {
    const c: ProxiedConnection = { client, upstream: undefined, frozen: this.blackholed, upstreamClosed: false };
    this.connections.add(c);
    client.on('error', () => {});
    client.on('close', () => {
      if (c.frozen) return;
      c.upstream?.destroy();
      this.connections.delete(c);
    });
    // A connection opened into the blackhole never reaches the server.
    if (c.frozen) return;
    const upstream = net.connect(this.target);
    c.upstream = upstream;
    upstream.on('error', () => {});
    upstream.on('close', () => {
      c.upstreamClosed = true;
      for (const check of [...this.changed]) check();
      if (c.frozen) return;
      client.destroy();
      this.connections.delete(c);
    });
    client.on('data', (chunk) => {
      if (!c.frozen) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!c.frozen) client.write(chunk);
    });
  }

  private drop(c: ProxiedConnection): void {
    this.connections.delete(c);
    c.client.destroy();
    c.upstream?.destroy();
  }
}

/**
 * ZooKeeper sessions, each through a TcpProxy of its own (so that one session's network can fail
 * alone), on one fresh chroot: what the store and coordinator contract suites' harnesses share.
 */
export class ProxiedSessions {
  readonly chroot: string;
  private readonly proxies = new Map<ZNodeStore, TcpProxy>();
  private readonly stores: ZNodeStore[] = [];

  constructor(
    name: string,
    private readonly defaultSessionTimeoutMs: number,
  ) {
    const connectString = zkConnect(name);
    this.chroot = connectString.slice(connectString.indexOf('/'));
  }

  async connect(sessionTimeoutMs = this.defaultSessionTimeoutMs): Promise<ZNodeStore> {
    const proxy = await TcpProxy.start(zkServer());
    try {
      const store = await ZooKeeperStore.connect({ connectString: proxy.address + this.chroot, sessionTimeoutMs, connectTimeoutMs: 10_000 });
      this.proxies.set(store, proxy);
      this.stores.push(store);
      return store;
    } catch (err) {
      await proxy.close();
      throw err;
    }
  }

  proxyOf(store: ZNodeStore): TcpProxy {
    const proxy = this.proxies.get(store);
    if (proxy === undefined) throw new Error('store not from this harness');
    return proxy;
  }

  /** Ends every partition, then closes every session (and `others`) and every proxy. */
  async close(others: readonly ZNodeStore[] = []): Promise<void> {
    for (const proxy of this.proxies.values()) proxy.heal();
    await Promise.allSettled([...this.stores, ...others].map((s) => s.close()));
    await Promise.allSettled([...this.proxies.values()].map((p) => p.close()));
  }
}
