// Front door of routing: the hash Solr routes with, shard ranges and id -> shard lookup.

export { murmur3, murmur3Bytes, utf8Length, isWellFormed } from './murmur3.js';
export { formatRange, parseRange, HASH_MIN, HASH_MAX } from './range.js';
export type { HashRange, ShardRange } from './range.js';
export {
  partitionRange,
  hashId,
  routeId,
  routerFor,
  parseRouterName,
  ShardRouter,
  DEFAULT_ROUTER,
  MAX_SHARDS,
} from './router.js';
export type { RouterName, RouterNameInput, RouteResult } from './router.js';
