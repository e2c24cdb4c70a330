import type { RouterName } from '../hashrange/index.js';
import type { SessionState } from './store.js';

export type NodeRole = 'data' | 'reader';

export interface NodeInfo {
  readonly name: string;
  /** Base URL of the node's HTTP API, e.g. http://127.0.0.1:8983 */
  readonly http: string;
  /** host:port of the node's gRPC service */
  readonly grpc: string;
  readonly role: NodeRole;
  /** Reader group (readers only); absent = "default". */
  readonly group?: string;
}

export type ReplicaState = 'active' | 'down' | 'recovering';

export interface ReplicaInfo {
  readonly node: string;
  readonly state: ReplicaState;
  readonly type: 'leader-eligible';
}

export interface ShardInfo {
  readonly name: string;
  /** Solr's Range.toString(): unsigned hex lo-hi, no padding. */
  readonly range: string;
  readonly replicas: readonly ReplicaInfo[];
  /**
   * The node whose replica should lead the shard when it is live and fit (Solr's `preferredLeader`
   * property): set at creation, one per node as evenly as the placement allows, and again by a
   * leader rebalance. Absent in collections created before it existed.
   */
  readonly preferredLeader?: string;
}

export interface CollectionSpec {
  readonly name: string;
  readonly numShards: number;
  readonly replicationFactor: number;
  readonly router: RouterName;
  /** Field types for the search index (issue: search), passed through unchanged. */
  readonly fields?: Record<string, string>;
  /** Auto-commit interval in ms; 0 = off. */
  readonly autoCommitMs?: number;
  /** `request` (default): every acknowledged update is synced on each counted replica; `async`: synced every syncIntervalMs. */
  readonly durability?: 'request' | 'async';
  /** With durability `async`: how often replicas sync (default 5000). */
  readonly syncIntervalMs?: number;
}

/** What a collection update may change. */
export type CollectionPatch = Partial<Pick<CollectionSpec, 'durability' | 'syncIntervalMs' | 'autoCommitMs'>>;

export interface CollectionState extends CollectionSpec {
  /** Shards in ascending range order: shard1, shard2, ... (never string-sorted). */
  readonly shards: readonly ShardInfo[];
  /** Leader rebalances an operator asked for (POST /api/collections/:c/rebalance-leaders). */
  readonly leaderRebalances?: number;
}

export interface LeaderInfo {
  readonly node: string;
  /** Election generation: grows by one with every new leadership of the shard. */
  readonly epoch: number;
}

export interface ElectionCandidate {
  /** Called when this candidate is at the head of the queue. Resolve true to take leadership. */
  canLead(): Promise<boolean>;
  /** Leadership was taken with this epoch. */
  onElected(epoch: number): void;
  /** Leadership (or the candidacy) was lost: session expired, or the candidate left. */
  onLost(): void;
}

export interface Coordinator {
  /**
   * Starts watching the cluster and registers this node as live (when given); `beforeLive`
   * runs once the cluster state is read and before the node is seen live.
   */
  start(self?: NodeInfo, beforeLive?: () => Promise<void>): Promise<void>;
  readonly self: NodeInfo | undefined;
  liveNodes(): readonly NodeInfo[];
  isLive(node: string): boolean;
  collections(): ReadonlyMap<string, CollectionState>;
  collection(name: string): CollectionState | undefined;
  /** The shard's current leader, if it is live. */
  leader(collection: string, shard: string): LeaderInfo | undefined;
  /** Whether the shard has had a leader (its leader record names one, live or not). */
  hadLeader(collection: string, shard: string): boolean;
  createCollection(spec: CollectionSpec): Promise<CollectionState>;
  deleteCollection(name: string): Promise<void>;
  /** Changes a collection's settings (durability, autoCommit); every node applies them from the state. */
  updateCollection(name: string, patch: CollectionPatch): Promise<CollectionState>;
  /**
   * Sets a replica's state. With `from`, only while it is still in that state (a compare-and-set
   * on the collection's state): otherwise it rejects with SHX_RECOVERING and changes nothing.
   */
  setReplicaState(collection: string, shard: string, node: string, state: ReplicaState, opts?: { from?: ReplicaState }): Promise<void>;
  /**
   * An operator's leader rebalance: sets shards' preferred leaders (shard name -> a node holding a
   * replica of it) and counts the request in `leaderRebalances` (leaders that wait before trying a
   * handover again try at once); resolves with the new state.
   */
  requestLeaderRebalance(collection: string, preferred: ReadonlyMap<string, string>): Promise<CollectionState>;
  /**
   * Stands in the shard's election. Resolves once the candidacy is queued, or at once when
   * coordination does not answer: the candidate then stays in the election, and its candidacy is
   * created when coordination answers again. Rejects (and leaves nothing behind) when the shard
   * does not exist.
   */
  joinElection(collection: string, shard: string, candidate: ElectionCandidate): Promise<void>;
  leaveElection(collection: string, shard: string): Promise<void>;
  /** Whether this coordinator stands in the shard's election (joined, and not left since). */
  inElection(collection: string, shard: string): boolean;
  /** The nodes in a shard's election queue, in queue order (the leader, if any, first). */
  electionCandidates(collection: string, shard: string): Promise<string[]>;
  /** Per-replica terms of a shard (node name -> term). */
  terms(collection: string, shard: string): Promise<Record<string, number>>;
  /** Raises the terms of `healthy` above those of `behind` (Solr's ensureTermsIsHigher). */
  raiseTerms(collection: string, shard: string, healthy: readonly string[], behind: readonly string[]): Promise<void>;
  /**
   * Raises a recovered replica's term to `upTo`: the shard's highest term when its recovery
   * began (Solr's doneRecovering), never to a term raised since, which a leader raised because
   * the replica missed a write during the recovery.
   */
  catchUpTerm(collection: string, shard: string, node: string, upTo: number): Promise<void>;
  /** True while the session is connected, and for a grace part of the session timeout after a disconnect. */
  canActAsLeader(): boolean;
  /** Called after any change of the cached cluster state. Returns an unsubscribe function. */
  onChange(listener: () => void): () => void;
  /** Called on each change of the coordination session (connected, disconnected, expired). Returns an unsubscribe function. */
  onSessionState(listener: (state: SessionState) => void): () => void;
  /** Shared small config documents (e.g. read_balance, selector profiles). */
  getConfig(name: string): Promise<unknown>;
  setConfig(name: string, value: unknown): Promise<void>;
  /**
   * Read-modify-write of a config document, compare-and-set: `change` gets the current value and
   * returns the next (undefined: leave it as it is); when another writer changed the document in
   * between, it runs again on that writer's value. Resolves with what was written (or left).
   */
  updateConfig<T>(name: string, change: (current: unknown) => T | undefined): Promise<T | undefined>;
  close(): Promise<void>;
}
