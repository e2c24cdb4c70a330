// Front door of src/client: the smart client, its batchers, and their public types.

export { ShardexClient } from './client.js';
export { ClusterSnapshot } from './cluster-state.js';
export type { NodeView, ShardView, ReplicaView, CollectionView, ClusterViewJson } from './cluster-state.js';
export { DEFAULT_MIN_HOSTS, DEFAULT_SUSPEND_TIME_MS, decideHostFailure, isMinHostsError } from './host-availability.js';
export type { HostFailureDecision, HostFailureInput } from './host-availability.js';
export { WriteBatcher, checkDocument } from './write-batcher.js';
export type {
  WriteBatcherOptions,
  WriteBatch,
  BatchSuccessEvent,
  BatchFailureEvent,
  BatchRetryEvent,
  DocumentRejectedEvent,
  WriteProgress,
  WriteJobReport,
} from './write-batcher.js';
export { QueryBatcher } from './query-batcher.js';
export type { QueryBatcherOptions, QueryBatch, QueryBatchFailureEvent, QueryBatchRetryEvent, QueryJobReport } from './query-batcher.js';
export type * from './types.js';
