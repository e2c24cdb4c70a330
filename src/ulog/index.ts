export { ReplicaStore, docText, encodeEntry, decodeEntry, type Doc, type UpdateOp, type StoredEntry, type CommitPoint, type ReplicaStoreOptions } from './replica-store.js';
