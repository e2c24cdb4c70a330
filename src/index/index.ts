// The per-replica search index: what other parts may use.
export { Analyzer, ENGLISH_STOP_WORDS, type AnalyzerOptions } from './analyzer.js';
export { admissionProblem, checkDocument, describeProblem, documentProblem, idProblem, MAX_ID_BYTES, parseFieldList, projectFields, type DocumentProblem, type StoredDoc } from './document.js';
export type { Query } from './query.js';
export { parseQuery, MAX_QUERY_LENGTH, type ParseOptions } from './query-parser.js';
export { parseSchema, FIELD_TYPES, KEYWORD_SUFFIX, type CollectionSchema, type FieldDef, type FieldType } from './schema.js';
export {
  ShardIndex,
  DEFAULT_LIMIT,
  MAX_RESULT_WINDOW,
  type DocLookup,
  type SearchHit,
  type SearchRequest,
  type ShardIndexOptions,
  type ShardIndexState,
  type ShardSearchResult,
} from './shard-index.js';
export { hashId, IdTable, type IdTableArrays } from './id-table.js';
export { mergeIndexes, mergeStates } from './merge-segments.js';
export { DEFAULT_MERGE_POLICY, pickMerge, SegmentedIndex, type MergePolicy, type Segment, type ReplicaSearcher } from './segmented-index.js';
export {
  decodeCommit,
  decodeSegment,
  encodeCommit,
  encodeSegment,
  LAZY_SECTION_BYTES,
  loadSegment,
  readCommit,
  SEGMENT_FORMAT,
  SegmentProblem,
  writeCommit,
  writeSegment,
  type CommitInfo,
  type CommitRead,
  type SegmentInfo,
  type SegmentLoad,
} from './segment-file.js';
export { compareHits, DEFAULT_SORT, formatSort, mergeHitLists, parseSort, type SortKey, type SortOrder, type SortSpec, type SortValue } from './sort.js';
export { bm25, bm25Idf, BM25_B, BM25_K1, mergeStats, sameStats, type FieldStats, type IndexStats, type SortFieldStats, type TermStats } from './stats.js';
export { parseDate } from './values.js';
