// Cluster coordination written once against the znode store, so that the embedded
// coordinator and ZooKeeper share every rule. Layout (under the store's chroot):
//   /live_nodes/<node>                                   ephemeral, NodeInfo JSON
//   /collections/<c>/state                               CollectionState JSON
//   /collections/<c>/leader_elect/<shard>/n_<seq>        ephemeral sequential, node name
//   /collections/<c>/leaders/<shard>                     {node, epoch}; epoch = znode version
//   /collections/<c>/terms/<shard>                       {node: term}
//   /config/<name>                                       JSON
// State is cached and refreshed by watches; reads never go to the store.
import type { Logger } from 'pino';
import { ShardexError } from '../errors.js';
import { partitionRange, formatRange } from '../hashrange/index.js';
import { placeReplicas, preferredLeaders } from './placement.js';
import { StoreError, type SessionState, type Watcher, type ZNodeStore } from './store.js';
import type {
  CollectionPatch,
  CollectionSpec,
  CollectionState,
  Coordinator,
  ElectionCandidate,
  LeaderInfo,
  NodeInfo,
  ReplicaState,
} from './types.js';

export interface ClusterCoordinatorOptions {
  readonly store: ZNodeStore;
  readonly logger: Logger;
  /** How long after a disconnect a leader may still act as leader (a part of the session timeout). */
  readonly leaderGraceMs?: number;
  /** Pause before a candidate that may not lead yet (term behind) checks again. */
  readonly electionRetryMs?: number;
}

interface Election {
  readonly collection: string;
  readonly shard: string;
  readonly candidate: ElectionCandidate;
  path?: string;
  leading: boolean;
  closed: boolean;
  /** A check is running; `recheck` asks it to run once more when done. */
  checking?: boolean;
  recheck?: boolean;
  /** A candidacy is being created (one at a time). */
  entering?: boolean;
  /** Its last candidacy was given up as not fit to lead: the re-entries that follow log at debug. */
  unfit?: boolean;
  /** A later attempt to enter the queue or check it is scheduled. */
  timer?: NodeJS.Timeout | undefined;
}

const json = (v: unknown): Buffer => Buffer.from(JSON.stringify(v));
const parse = <T>(b: Buffer): T => JSON.parse(b.toString('utf8')) as T;
const seqOf = (name: string): number => Number(name.slice(name.lastIndexOf('_') + 1));

/** Coordination did not answer: the operation's outcome is unknown, and it is worth trying again once it does. */
const unreachable = (err: unknown): err is StoreError =>
  err instanceof StoreError && (err.code === 'CONNECTION_LOSS' || err.code === 'SESSION_EXPIRED');

export class ClusterCoordinator implements Coordinator {
  private readonly store: ZNodeStore;
  private readonly log: Logger;
  private readonly leaderGraceMs: number;
  private readonly electionRetryMs: number;
  private selfInfo: NodeInfo | undefined;
  private live = new Map<string, NodeInfo>();
  private readonly states = new Map<string, CollectionState>();
  private readonly leaders = new Map<string, LeaderInfo>();
  private readonly listeners = new Set<() => void>();
  private readonly sessionListeners = new Set<(state: SessionState) => void>();
  private readonly elections = new Map<string, Election>();
  /**
   * Candidacies this session left whose delete got no answer: they may still sit in a queue,
   * ahead of live candidates, for as long as the session lives. Deleted on reconnect.
   */
  private readonly orphans = new Set<string>();
  private connected = true;
  private sessionLost = false;
  private disconnectedAt = 0;
  private closed = false;
  private unsubscribeSession: (() => void) | undefined;
  private notifyScheduled = false;

  constructor(opts: ClusterCoordinatorOptions) {
    this.store = opts.store;
    this.log = opts.logger;
    this.leaderGraceMs = opts.leaderGraceMs ?? 5000;
    this.electionRetryMs = opts.electionRetryMs ?? 500;
  }

  get self(): NodeInfo | undefined {
    return this.selfInfo;
  }

  /** Registers `self` as live and watches the cluster; without `self`, only watches (clients). */
  async start(self?: NodeInfo, beforeLive?: () => Promise<void>): Promise<void> {
    this.selfInfo = self;
    await Promise.all(['/live_nodes', '/collections', '/config'].map((p) => this.store.mkdirp(p)));
    this.unsubscribeSession = this.store.onSessionState((s) => this.sessionStateChanged(s));
    // Read the cluster first, so that the node can publish its replicas' state before anyone
    // sees it live.
    await Promise.all([this.watchLiveNodes(), this.watchCollections()]);
    // A restarted node's earlier session (killed before it expired) may still hold candidacies:
    // gone now, the shards elect among the replicas that open, rather than wait for the slowest
    // of them (which would delete its own at its open) or for the old session's expiry.
    if (self) await this.dropStaleCandidacies();
    await beforeLive?.();
    await this.registerLive();
    await this.watchLiveNodes();
  }

  private async registerLive(): Promise<void> {
    const self = this.selfInfo;
    if (!self) return;
    const path = `/live_nodes/${self.name}`;
    try {
      await this.store.create(path, json(self), 'ephemeral');
    } catch (err) {
      if (!(err instanceof StoreError && err.code === 'NODE_EXISTS')) throw err;
      // A previous incarnation of this node (killed before its session expired) still holds
      // the name; the name is ours, so take it over.
      await this.store.delete(path).catch(() => undefined);
      await this.store.create(path, json(self), 'ephemeral');
    }
  }

  private sessionStateChanged(state: SessionState): void {
    if (this.closed) return;
    this.log.info({ state }, 'coordination session state');
    for (const l of this.sessionListeners) l(state);
    if (state === 'disconnected') {
      if (this.connected) this.disconnectedAt = Date.now();
      this.connected = false;
    } else if (state === 'expired') {
      this.connected = false;
      this.sessionLost = true;
      // Every ephemeral of the old session is gone: no leadership survives, and no orphan.
      this.orphans.clear();
      for (const e of this.elections.values()) this.loseElection(e);
    } else {
      const expired = this.sessionLost;
      this.sessionLost = false;
      this.connected = true;
      if (expired) void this.afterReconnect();
      else void this.rearm().catch((err) => this.log.error({ err }, 'could not re-arm watches after reconnect'));
    }
  }

  /**
   * Reads everything again and re-arms every watch (one watcher per znode, so a watch that
   * survived is not doubled). After a plain reconnect this restores watches whose setting
   * failed with a connection loss; in both cases it deletes the orphaned candidacies, re-checks
   * elections whose predecessor watch was lost, and enters the queue of every election whose
   * candidacy is gone (expired) or could not be created while coordination was unreachable.
   */
  private async rearm(): Promise<void> {
    for (const path of [...this.orphans]) {
      try {
        await this.store.delete(path);
        this.orphans.delete(path);
      } catch (err) {
        if (unreachable(err)) throw err;
        this.orphans.delete(path); // gone already
      }
    }
    await Promise.all([this.watchLiveNodes(), this.watchCollections()]);
    for (const c of [...this.watchedCollections.keys()]) {
      await this.watchState(c);
      for (const s of this.states.get(c)?.shards ?? []) await this.watchLeader(c, s.name);
    }
    for (const e of this.elections.values()) {
      if (e.closed || e.leading) continue;
      await (e.path === undefined ? this.enterQueue(e) : this.checkElection(e)).catch((err) => this.electionFailed(e, err));
    }
  }

  /** After a session expiry: register again, re-read and re-watch everything, rejoin elections. */
  private async afterReconnect(): Promise<void> {
    try {
      if (this.selfInfo && !(await this.store.exists(`/live_nodes/${this.selfInfo.name}`))) await this.registerLive();
      // A new session has none of the old one's watches.
      await this.rearm();
    } catch (err) {
      // Lost again before it was done: the next 'connected' must do all of it again.
      if (unreachable(err)) this.sessionLost = true;
      this.log.error({ err }, 'could not re-register after reconnect; trying again on the next reconnect');
      if (this.connected && !this.closed) setTimeout(() => void this.retryAfterReconnect(), this.electionRetryMs).unref();
    }
  }

  private async retryAfterReconnect(): Promise<void> {
    if (this.closed || !this.connected) return;
    this.sessionLost = false;
    await this.afterReconnect();
  }

  canActAsLeader(): boolean {
    if (this.closed) return false;
    return this.connected || Date.now() - this.disconnectedAt < this.leaderGraceMs;
  }

  liveNodes(): readonly NodeInfo[] {
    return [...this.live.values()];
  }

  isLive(node: string): boolean {
    return this.live.has(node);
  }

  collections(): ReadonlyMap<string, CollectionState> {
    return this.states;
  }

  collection(name: string): CollectionState | undefined {
    return this.states.get(name);
  }

  leader(collection: string, shard: string): LeaderInfo | undefined {
    const l = this.leaders.get(`${collection}/${shard}`);
    return l && this.live.has(l.node) ? l : undefined;
  }

  hadLeader(collection: string, shard: string): boolean {
    return this.leaders.has(`${collection}/${shard}`);
  }

  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  onSessionState(listener: (state: SessionState) => void): () => void {
    this.sessionListeners.add(listener);
    return () => this.sessionListeners.delete(listener);
  }

  private notify(): void {
    if (this.notifyScheduled || this.closed) return;
    this.notifyScheduled = true;
    queueMicrotask(() => {
      this.notifyScheduled = false;
      for (const l of this.listeners) {
        try {
          l();
        } catch (err) {
          this.log.error({ err }, 'cluster state listener failed');
        }
      }
    });
  }

  // ---- watches ------------------------------------------------------------------------

  private async watchLiveNodes(): Promise<void> {
    if (this.closed) return;
    const names = await this.store.children(
      '/live_nodes',
      this.watcher('children:/live_nodes', () => void this.watchLiveNodes().catch((err) => this.watchFailed(err))),
    );
    // Read every entry again: a node restarted under the same name re-registers with new
    // addresses, possibly before this watch fires, so a cached entry may be stale.
    const next = new Map<string, NodeInfo>();
    await Promise.all(
      names.map(async (n) => {
        const d = await this.store.get(`/live_nodes/${n}`);
        if (d) next.set(n, parse<NodeInfo>(d.data));
      }),
    );
    this.live = next;
    this.notify();
  }

  /**
   * The collections this cache follows, each with a token of the time it was found: a read that is
   * answered after its collection was forgotten (deleted; or deleted and created again) is stale.
   */
  private readonly watchedCollections = new Map<string, object>();
  /** One watcher per znode, so that the store calls it once however often it was set. */
  private readonly watchers = new Map<string, Watcher>();

  private watcher(path: string, onEvent: Watcher): Watcher {
    let w = this.watchers.get(path);
    if (w === undefined) {
      w = onEvent;
      this.watchers.set(path, w);
    }
    return w;
  }

  private async watchCollections(): Promise<void> {
    if (this.closed) return;
    const names = await this.store.children(
      '/collections',
      this.watcher('children:/collections', () => void this.watchCollections().catch((err) => this.watchFailed(err))),
    );
    // A collection deleted while no watch was set (the session had expired) sends no 'deleted' event.
    const present = new Set(names);
    for (const c of [...this.watchedCollections.keys()]) if (!present.has(c)) this.forgetCollection(c);
    const fresh = names.filter((c) => !this.watchedCollections.has(c));
    for (const c of fresh) this.watchedCollections.set(c, {});
    await Promise.all(fresh.map((c) => this.watchState(c).catch((err) => this.watchFailed(err))));
  }

  private async watchState(c: string): Promise<void> {
    const token = this.watchedCollections.get(c);
    if (this.closed || token === undefined) return;
    const path = `/collections/${c}/state`;
    const d = await this.store.get(
      path,
      this.watcher(path, (ev) => {
        if (ev.type === 'deleted') this.forgetCollection(c);
        else void this.watchState(c).catch((err) => this.watchFailed(err));
      }),
    );
    // The answer may be handled after the 'deleted' event of the same node.
    if (this.watchedCollections.get(c) !== token) return;
    if (!d) {
      // Created but its state not written yet (the watch fires when it is), or deleted.
      if (!(await this.store.exists(`/collections/${c}`)) && this.watchedCollections.get(c) === token) this.forgetCollection(c);
      return;
    }
    const state = parse<CollectionState>(d.data);
    const fresh = !this.states.has(c);
    this.states.set(c, state);
    if (fresh) for (const s of state.shards) void this.watchLeader(c, s.name).catch((err) => this.watchFailed(err));
    this.notify();
  }

  private forgetCollection(c: string): void {
    this.watchedCollections.delete(c);
    const had = this.states.delete(c);
    for (const k of [...this.leaders.keys()]) if (k.startsWith(`${c}/`)) this.leaders.delete(k);
    if (had) this.notify();
  }

  private async watchLeader(c: string, shard: string): Promise<void> {
    const token = this.watchedCollections.get(c);
    if (this.closed || token === undefined) return;
    const path = `/collections/${c}/leaders/${shard}`;
    const d = await this.store.get(
      path,
      this.watcher(path, (ev) => {
        if (ev.type !== 'deleted') void this.watchLeader(c, shard).catch((err) => this.watchFailed(err));
      }),
    );
    if (this.watchedCollections.get(c) !== token) return;
    const key = `${c}/${shard}`;
    if (d && d.data.length > 0) this.leaders.set(key, parse<LeaderInfo>(d.data));
    else this.leaders.delete(key);
    this.notify();
  }

  private watchFailed(err: unknown): void {
    if (this.closed) return;
    if (err instanceof StoreError && (err.code === 'CONNECTION_LOSS' || err.code === 'SESSION_EXPIRED' || err.code === 'CLOSED')) {
      this.log.warn({ err: err.message }, 'watch not re-armed; it is re-armed on reconnect');
      return;
    }
    this.log.error({ err }, 'cluster watch failed');
  }

  // ---- collections --------------------------------------------------------------------

  async createCollection(spec: CollectionSpec): Promise<CollectionState> {
    if (this.states.has(spec.name) || (await this.store.exists(`/collections/${spec.name}/state`))) {
      throw new ShardexError('SHX_COLLECTION_EXISTS', `collection '${spec.name}' already exists`);
    }
    const data = [...this.live.values()].filter((n) => n.role === 'data').map((n) => n.name).sort();
    if (spec.replicationFactor > data.length) {
      throw new ShardexError(
        'SHX_BAD_REQUEST',
        `replicationFactor ${spec.replicationFactor} is larger than the ${data.length} live data node(s); start more nodes or lower it`,
      );
    }
    const ranges = partitionRange(spec.numShards, spec.router);
    const placement = placeReplicas(data, spec.numShards, spec.replicationFactor);
    const preferred = preferredLeaders(placement);
    const state: CollectionState = {
      ...spec,
      shards: ranges.map((r, i) => ({
        name: r.name,
        range: formatRange(r),
        replicas: placement[i]!.map((node) => ({ node, state: 'active' as ReplicaState, type: 'leader-eligible' as const })),
        preferredLeader: preferred[i]!,
      })),
    };
    const base = `/collections/${spec.name}`;
    await this.store.mkdirp(base);
    for (const s of state.shards) {
      await this.store.mkdirp(`${base}/leader_elect/${s.name}`);
      await this.store.mkdirp(`${base}/leaders/${s.name}`);
      await this.store.mkdirp(`${base}/terms`);
      await this.store.create(`${base}/terms/${s.name}`, json(Object.fromEntries(s.replicas.map((r) => [r.node, 0]))), 'persistent').catch(ignoreExists);
    }
    try {
      await this.store.create(`${base}/state`, json(state), 'persistent');
    } catch (err) {
      if (err instanceof StoreError && err.code === 'NODE_EXISTS') throw new ShardexError('SHX_COLLECTION_EXISTS', `collection '${spec.name}' already exists`);
      throw err;
    }
    return state;
  }

  async deleteCollection(name: string): Promise<void> {
    if (!(await this.store.exists(`/collections/${name}/state`))) {
      throw new ShardexError('SHX_COLLECTION_NOT_FOUND', `collection '${name}' does not exist`);
    }
    await this.store.deleteRecursive(`/collections/${name}`);
  }

  /**
   * Compare-and-set of a collection's state: `change` gets the current state and returns the next
   * (undefined: leave it); when another writer changed it in between, it runs again on theirs.
   * Resolves with what was written, or undefined when nothing was.
   */
  private async changeState(collection: string, change: (cur: CollectionState) => CollectionState | undefined): Promise<CollectionState | undefined> {
    const path = `/collections/${collection}/state`;
    for (;;) {
      const d = await this.store.get(path);
      if (!d) throw new ShardexError('SHX_COLLECTION_NOT_FOUND', `collection '${collection}' does not exist`);
      const next = change(parse<CollectionState>(d.data));
      if (next === undefined) return undefined;
      try {
        await this.store.set(path, json(next), d.version);
        return next;
      } catch (err) {
        if (!(err instanceof StoreError && err.code === 'BAD_VERSION')) throw err;
      }
    }
  }

  async updateCollection(name: string, patch: CollectionPatch): Promise<CollectionState> {
    return (await this.changeState(name, (cur) => ({ ...cur, ...patch })))!;
  }

  async requestLeaderRebalance(collection: string, preferred: ReadonlyMap<string, string>): Promise<CollectionState> {
    const next = (await this.changeState(collection, (cur) => {
      for (const [shard, node] of preferred) {
        const s = cur.shards.find((x) => x.name === shard);
        if (!s) throw new ShardexError('SHX_NOT_FOUND', `collection '${collection}' has no shard '${shard}'`);
        if (!s.replicas.some((r) => r.node === node)) throw new ShardexError('SHX_BAD_REQUEST', `${node} holds no replica of ${collection}/${shard}; a preferred leader must be one of its replicas' nodes`);
      }
      return {
        ...cur,
        shards: cur.shards.map((s) => (preferred.has(s.name) ? { ...s, preferredLeader: preferred.get(s.name)! } : s)),
        leaderRebalances: (cur.leaderRebalances ?? 0) + 1,
      };
    }))!;
    this.log.info({ collection, preferred: Object.fromEntries(preferred), rebalances: next.leaderRebalances }, 'leader rebalance requested: preferred leaders set');
    return next;
  }

  async setReplicaState(collection: string, shard: string, node: string, state: ReplicaState, opts: { from?: ReplicaState } = {}): Promise<void> {
    const next = await this.changeState(collection, (cur) => {
      let changed = false;
      const next: CollectionState = {
        ...cur,
        shards: cur.shards.map((s) =>
          s.name !== shard
            ? s
            : {
                ...s,
                replicas: s.replicas.map((r) => {
                  if (r.node === node && opts.from !== undefined && r.state !== opts.from) {
                    throw new ShardexError('SHX_RECOVERING', `${node}'s replica of ${collection}/${shard} is ${r.state}, not ${opts.from}: it was marked ${r.state} meanwhile`);
                  }
                  if (r.node !== node || r.state === state) return r;
                  changed = true;
                  return { ...r, state };
                }),
              },
        ),
      };
      return changed ? next : undefined;
    });
    if (next) this.log.info({ collection, shard, node, state }, 'replica state changed');
  }

  // ---- elections ----------------------------------------------------------------------

  async joinElection(collection: string, shard: string, candidate: ElectionCandidate): Promise<void> {
    const key = `${collection}/${shard}`;
    if (this.elections.has(key)) return;
    const e: Election = { collection, shard, candidate, leading: false, closed: false };
    this.elections.set(key, e);
    try {
      await this.enterQueue(e);
    } catch (err) {
      if (unreachable(err)) {
        // Coordination did not answer: the candidate stays in the election, and its candidacy is
        // created (or checked) as soon as coordination answers again.
        this.electionFailed(e, err);
        return;
      }
      // Not in the election after all: a later joinElection must be able to try again.
      if (this.elections.get(key) === e) this.elections.delete(key);
      e.closed = true;
      this.cancelRetry(e);
      if (e.path) await this.forget(e.path);
      e.path = undefined;
      if (err instanceof StoreError && err.code === 'NO_NODE') {
        throw new ShardexError('SHX_COLLECTION_NOT_FOUND', `collection '${collection}' has no shard '${shard}'`);
      }
      throw err;
    }
  }

  private electionDir(e: Election): string {
    return `/collections/${e.collection}/leader_elect/${e.shard}`;
  }

  /** Creates the election's candidacy, at the back of the queue, and checks it (one creation at a time). */
  private async enterQueue(e: Election): Promise<void> {
    if (e.closed || this.closed || e.path !== undefined || e.entering) return;
    const dir = this.electionDir(e);
    const me = this.selfInfo!.name;
    let path: string;
    e.entering = true;
    try {
      // Drop candidacies left by an earlier incarnation of this node (so that a restarted node
      // does not wait behind its own dead session), and by this session: a create whose answer
      // was lost, a delete that got none.
      await this.dropOwnCandidacies(dir);
      path = await this.store.create(`${dir}/n_`, Buffer.from(me), 'ephemeral_sequential');
    } finally {
      e.entering = false;
    }
    if (e.closed || this.closed) {
      // Left while the candidacy was being created (resigns come in bursts): a candidacy nobody
      // acts on would sit ahead of the next one in the queue, and the shard would have no leader.
      await this.forget(path);
      return;
    }
    e.path = path;
    this.log[e.unfit ? 'debug' : 'info']({ collection: e.collection, shard: e.shard, candidacy: path }, 'entered the election queue');
    await this.checkElection(e);
  }

  /** Deletes every candidacy in the election queue `dir` that names this node. */
  private async dropOwnCandidacies(dir: string): Promise<void> {
    const me = this.selfInfo!.name;
    for (const child of await this.store.children(dir)) {
      const d = await this.store.get(`${dir}/${child}`);
      if (d && d.data.toString('utf8') === me) await this.forget(`${dir}/${child}`);
    }
  }

  /** At start, before any election is joined: drops this node's candidacies of an earlier session in every shard's queue. */
  private async dropStaleCandidacies(): Promise<void> {
    const dirs = [...this.states].flatMap(([c, state]) => state.shards.map((s) => `/collections/${c}/leader_elect/${s.name}`));
    await Promise.all(
      dirs.map((dir) =>
        this.dropOwnCandidacies(dir).catch((err: Error) => {
          // Missing queue (a collection being deleted) or coordination gone: enterQueue tries again.
          this.log.debug({ dir, err: err.message }, 'could not drop stale candidacies at start');
        }),
      ),
    );
  }

  /** Deletes a candidacy of this session; one whose delete gets no answer is deleted on reconnect. */
  private async forget(path: string): Promise<void> {
    try {
      await this.store.delete(path);
    } catch (err) {
      if (!unreachable(err)) return;
      this.log.warn({ candidacy: path, err: err.message }, 'could not delete a candidacy; deleting it on reconnect');
      this.orphans.add(path);
    }
  }

  /**
   * An election step failed. When coordination did not answer, the step is tried again: on
   * reconnect (rearm), or after electionRetryMs if the session is already back (the failure
   * raced the reconnect).
   */
  private electionFailed(e: Election, err: unknown): void {
    if (e.closed || this.closed || (err instanceof StoreError && err.code === 'CLOSED')) return;
    if (!unreachable(err)) {
      this.log.error({ err, collection: e.collection, shard: e.shard }, 'election step failed');
      return;
    }
    this.log.warn({ collection: e.collection, shard: e.shard, err: err.message }, 'election step got no answer from coordination; trying again once it answers');
    if (this.connected) this.retryLater(e, this.electionRetryMs);
  }

  /** Enters the queue (no candidacy) or checks the candidacy again, after `delayMs`; one pending at a time. */
  private retryLater(e: Election, delayMs: number): void {
    if (e.closed || this.closed || e.timer) return;
    e.timer = setTimeout(() => {
      e.timer = undefined;
      if (e.closed || this.closed || e.leading) return;
      (e.path === undefined ? this.enterQueue(e) : this.checkElection(e)).catch((err) => this.electionFailed(e, err));
    }, delayMs);
  }

  private cancelRetry(e: Election): void {
    if (e.timer) clearTimeout(e.timer);
    e.timer = undefined;
  }

  /** Runs one election check at a time per candidacy; a check asked for meanwhile runs after it. */
  private async checkElection(e: Election): Promise<void> {
    if (e.checking) {
      e.recheck = true;
      return;
    }
    e.checking = true;
    try {
      do {
        e.recheck = false;
        await this.checkElectionOnce(e);
      } while (e.recheck);
    } finally {
      e.checking = false;
    }
  }

  private async checkElectionOnce(e: Election): Promise<void> {
    if (e.closed || this.closed || e.path === undefined || e.leading) return;
    const dir = this.electionDir(e);
    let children: string[];
    try {
      children = (await this.store.children(dir)).sort((a, b) => seqOf(a) - seqOf(b));
    } catch (err) {
      return this.electionFailed(e, err);
    }
    const mine = e.path.slice(dir.length + 1);
    const idx = children.indexOf(mine);
    if (idx < 0) {
      e.path = undefined;
      return this.enterQueue(e);
    }
    if (idx > 0) {
      // Watch only the candidate just ahead (no herd effect).
      const ahead = `${dir}/${children[idx - 1]}`;
      // One watcher per (candidacy, predecessor); it forgets itself when it fires.
      const key = `exists:${e.path}>${ahead}`;
      const onGone = this.watcher(key, () => {
        this.watchers.delete(key);
        void this.checkElection(e).catch((err) => this.electionFailed(e, err));
      });
      const exists = await this.store.exists(ahead, onGone);
      if (!exists) return this.checkElectionOnce(e);
      this.log.debug({ collection: e.collection, shard: e.shard, candidacy: e.path, ahead }, 'waiting behind the candidacy ahead');
      return;
    }
    const candidacy = e.path;
    let may = false;
    try {
      may = await e.candidate.canLead();
    } catch (err) {
      this.log.error({ err, shard: e.shard }, 'leader candidate check failed');
    }
    // The answer counts only for the candidacy it was asked for: while canLead() was pending the
    // session may have expired (and a new candidacy queued behind the new leader), or the
    // candidate stepped back or left.
    if (e.closed || this.closed || e.path !== candidacy) return;
    if (!may) {
      // Not fit to lead (term behind): go to the back of the queue and look again later.
      const old = e.path;
      e.path = undefined;
      // Once per spell of unfitness (a recovery may take minutes, at a retry every electionRetryMs).
      if (!e.unfit) this.log.info({ collection: e.collection, shard: e.shard, candidacy: old }, 'not fit to lead yet (term behind, or recovering): back of the queue until it is');
      e.unfit = true;
      await this.forget(old);
      this.retryLater(e, this.electionRetryMs);
      return;
    }
    e.unfit = false;
    const lpath = `/collections/${e.collection}/leaders/${e.shard}`;
    for (;;) {
      const cur = await this.store.get(lpath);
      if (e.closed || this.closed || e.path !== candidacy) return;
      if (!cur) throw new ShardexError('SHX_COLLECTION_NOT_FOUND', `collection '${e.collection}' was deleted during election`);
      const epoch = cur.version + 1;
      try {
        await this.store.set(lpath, json({ node: this.selfInfo!.name, epoch } satisfies LeaderInfo), cur.version);
        e.leading = true;
        this.leaders.set(`${e.collection}/${e.shard}`, { node: this.selfInfo!.name, epoch });
        this.log.info({ collection: e.collection, shard: e.shard, epoch }, 'elected leader');
        e.candidate.onElected(epoch);
        this.notify();
        return;
      } catch (err) {
        if (!(err instanceof StoreError && err.code === 'BAD_VERSION')) throw err;
      }
    }
  }

  private loseElection(e: Election): void {
    const was = e.leading;
    e.leading = false;
    e.path = undefined;
    this.cancelRetry(e);
    if (was || !e.closed) e.candidate.onLost();
  }

  inElection(collection: string, shard: string): boolean {
    return this.elections.has(`${collection}/${shard}`);
  }

  async electionCandidates(collection: string, shard: string): Promise<string[]> {
    const dir = `/collections/${collection}/leader_elect/${shard}`;
    const children = (await this.store.children(dir).catch(() => [] as string[])).sort((a, b) => seqOf(a) - seqOf(b));
    const names: string[] = [];
    for (const child of children) {
      const d = await this.store.get(`${dir}/${child}`);
      if (d) names.push(d.data.toString('utf8'));
    }
    return names;
  }

  async leaveElection(collection: string, shard: string): Promise<void> {
    const key = `${collection}/${shard}`;
    const e = this.elections.get(key);
    if (!e) return;
    this.elections.delete(key);
    e.closed = true;
    const path = e.path;
    this.loseElection(e);
    this.log.info({ collection, shard, candidacy: path }, 'left the election');
    if (path) await this.forget(path);
  }

  // ---- terms --------------------------------------------------------------------------

  async terms(collection: string, shard: string): Promise<Record<string, number>> {
    const d = await this.store.get(`/collections/${collection}/terms/${shard}`);
    return d ? parse<Record<string, number>>(d.data) : {};
  }

  private async updateTerms(collection: string, shard: string, f: (t: Record<string, number>) => boolean): Promise<void> {
    const path = `/collections/${collection}/terms/${shard}`;
    for (;;) {
      const d = await this.store.get(path);
      if (!d) return;
      const t = parse<Record<string, number>>(d.data);
      if (!f(t)) return;
      try {
        await this.store.set(path, json(t), d.version);
        return;
      } catch (err) {
        if (!(err instanceof StoreError && err.code === 'BAD_VERSION')) throw err;
      }
    }
  }

  async raiseTerms(collection: string, shard: string, healthy: readonly string[], behind: readonly string[]): Promise<void> {
    await this.updateTerms(collection, shard, (t) => {
      const top = Math.max(0, ...behind.map((n) => t[n] ?? 0));
      let changed = false;
      for (const n of healthy) {
        if ((t[n] ?? 0) <= top) {
          t[n] = top + 1;
          changed = true;
        }
      }
      return changed;
    });
  }

  async catchUpTerm(collection: string, shard: string, node: string, upTo: number): Promise<void> {
    await this.updateTerms(collection, shard, (t) => {
      const to = Math.min(upTo, Math.max(0, ...Object.values(t)));
      if ((t[node] ?? 0) >= to) return false;
      t[node] = to;
      return true;
    });
  }

  // ---- config -------------------------------------------------------------------------

  async getConfig(name: string): Promise<unknown> {
    const d = await this.store.get(`/config/${name}`);
    return d ? parse<unknown>(d.data) : undefined;
  }

  async setConfig(name: string, value: unknown): Promise<void> {
    const path = `/config/${name}`;
    if (await this.store.exists(path)) await this.store.set(path, json(value));
    else await this.store.create(path, json(value), 'persistent').catch(async (err) => {
      if (err instanceof StoreError && err.code === 'NODE_EXISTS') await this.store.set(path, json(value));
      else throw err;
    });
  }

  async updateConfig<T>(name: string, change: (current: unknown) => T | undefined): Promise<T | undefined> {
    const path = `/config/${name}`;
    for (;;) {
      const d = await this.store.get(path);
      const next = change(d ? parse<unknown>(d.data) : undefined);
      if (next === undefined) return undefined;
      try {
        if (d) await this.store.set(path, json(next), d.version);
        else await this.store.create(path, json(next), 'persistent');
        return next;
      } catch (err) {
        // Another writer got there first: start again from what it wrote.
        if (err instanceof StoreError && (err.code === 'BAD_VERSION' || err.code === 'NODE_EXISTS' || err.code === 'NO_NODE')) continue;
        throw err;
      }
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    for (const [k, e] of this.elections) {
      this.elections.delete(k);
      e.closed = true;
      this.cancelRetry(e);
      if (e.path) await this.store.delete(e.path).catch(() => undefined);
      e.leading = false;
    }
    this.closed = true;
    this.unsubscribeSession?.();
    this.listeners.clear();
    await this.store.close();
  }
}

function ignoreExists(err: unknown): void {
  if (!(err instanceof StoreError && err.code === 'NODE_EXISTS')) throw err;
}
