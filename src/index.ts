// The package root: what an application imports from 'shardex'.

export * from './client/index.js';
export { ShardexError, isShardexError, ERRORS } from './errors.js';
export type { ErrorCode, ErrorSpec } from './errors.js';
