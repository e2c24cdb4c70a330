// Front door of src/client: the smart client, its batchers, and their public types.

export { ShardexClient } from './client.js';
export { ClusterSnapshot } from './cluster-state.js';
export type { NodeView, ShardView, ReplicaView, CollectionView, ClusterViewJson } from './cluster-state.js';
export { DEFAULT_HOST_UNAVAILABLE_CODES, DEFAULT_MIN_HOSTS, DEFAULT_SUSPEND_TIME_MS, classifyFailure, decideHostFailure, isMinHostsError } from './host-availability.js';
export type { FailureClass, HostFailureDecision, HostFailureInput } from './host-availability.js';
export type { AttemptFailure } from './failover.js';
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
export type { QueryBatcherOptions, QueryBatch, QueryBatchFailureEvent, QueryBatchListenerOptions, QueryBatchRetryEvent, QueryJobReport } from './query-batcher.js';
export type * from './types.js';
export { ReadBalanceAdmin } from './read-balance.js';
export type { ReadBalanceAdminOptions, NodeReadSlots, ReadSlotsOptions, BalanceSetting, SlotRow } from './read-balance.js';
