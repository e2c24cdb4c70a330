export { ClusterCoordinator, type ClusterCoordinatorOptions } from './cluster.js';
export { balanceLeaders, leaderHandovers, leaderTargets, placeReplicas, preferredLeaders, rebalancedPreferences } from './placement.js';
export type { ZNodeStore, SessionState } from './store.js';
export type * from './types.js';
export { clusterView } from './view.js';
