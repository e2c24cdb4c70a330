// Front door of src/read: what other parts (the node's read path, the smart client) may use.

export { parseDuration } from './duration.js';
export {
  ReaderSelector,
  DEFAULT_PROFILES,
  DEFAULT_GROUP,
  loadProfiles,
  rendezvousCandidates,
  candidateCount,
  busyTimeoutMs,
  errorDelayMs,
  adaptiveRank,
} from './selector.js';
export type {
  AttemptPlanConfig,
  ProfileConfig,
  AttemptPlan,
  Profile,
  ServerCount,
  ReaderInfo,
  Attempt,
  AttemptResult,
  ReaderStats,
  SelectInput,
  Selection,
  ReaderSelectorOptions,
} from './selector.js';
export { PRIMARY_TARGET, ReadBalancer, allowedTargets } from './balancer.js';
export type { BalanceSetting, ShardNeed, SlotRow, Outcome, RejectReason, UnbalancedReason } from './balancer.js';
export { ReadBalancerRuntime, coordinatorSettingsSource, outcomeError } from './balancer-runtime.js';
export type { CancelSignal, ReadAcquire, ReadPermit, ReadBalancerRuntimeOptions, SettingsSource } from './balancer-runtime.js';
export {
  READ_BALANCE_CONFIG,
  PriorityName,
  TargetName,
  parseSetting,
  parseFilter,
  parseStoredSettings,
  filterSettings,
  upsertSetting,
  eraseSettings,
  storedSettings,
} from './balance-settings.js';
export type { BalanceFilter } from './balance-settings.js';
export { EventualRouter, readerFailure, parseMinVersion } from './eventual.js';
export type { ServedBy, EventualRequest, EventualRoute, EventualResult, EventualRouterOptions, ReaderFailure } from './eventual.js';
export { readDeadline, DEFAULT_READ_TIMEOUT_MS } from './read-deadline.js';
export type { ReadDeadlineOptions } from './read-deadline.js';
export { ReadPath, ReaderGroupRouters } from './read-path.js';
export type { ReadOptions, ReadTransport, GroupRouting } from './read-path.js';
