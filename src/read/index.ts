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
