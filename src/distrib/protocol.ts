// What travels between nodes on the update path (the gRPC layer only encodes it).
import type { Doc } from '../ulog/index.js';

/** Solr's DistribPhase: NONE from a client, TOLEADER forwarded to a leader, FROMLEADER to replicas. */
export type Phase = 'NONE' | 'TOLEADER' | 'FROMLEADER';

/** One update op on the wire; `v` is set by the leader (absent on TOLEADER). doc null = delete. */
export interface WireOp {
  readonly id: string;
  readonly v?: number;
  readonly doc: Doc | null;
}

export interface ShardUpdate {
  readonly collection: string;
  readonly shard: string;
  readonly phase: 'TOLEADER' | 'FROMLEADER';
  /** The sender's leadership epoch (FROMLEADER); 0 otherwise. */
  readonly epoch: number;
  readonly ops: readonly WireOp[];
  readonly minRf: number;
  /** Name of the sending node. */
  readonly from: string;
}

export interface ShardUpdateResult {
  /** Achieved replication factor: the leader plus every replica that acknowledged. */
  readonly rf: number;
  /** Versions assigned by the leader, by id (TOLEADER). */
  readonly versions?: Record<string, number>;
  /** Ops applied (FROMLEADER: those newer than the stored version). */
  readonly applied?: number;
}
