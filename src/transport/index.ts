// The node-to-node wire: gRPC service and clients, the ops codec, one schema per RPC.
export { PeerClients, PeerServer, decodeUpdate, fromServiceError, portError, type PeerClientsOptions, type PeerHandlers, type PeerServerOptions } from './grpc.js';
export { decodeOps, encodeOps, type Phase, type ShardUpdate, type ShardUpdateResult, type WireOp } from './protocol.js';
export { CopyMessage } from './schemas.js';
export type { CommitRequest, CopyShardRequest, CopyStreamFile, CopyStreamHeader, CopyStreamRaw, GetRequest, SearchRequest, UpdatesAfterRequest, VersionsRequest } from './schemas.js';
export { SERVER_TLS_FLAGS, checkCertificateHost, loadClientTls, loadTls, type ClientTlsMaterial, type TlsFiles, type TlsFlagNames, type TlsMaterial } from './tls.js';
