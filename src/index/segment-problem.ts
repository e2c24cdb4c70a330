// Why a segment file cannot be used: thrown where its bytes are checked (segment-file.ts) and
// caught where a damaged file must not become a wrong answer (segmented-index.ts,
// src/distrib/index-persistence.ts). A module of its own, so that pure parts can name it.

/** A segment file that does not check (at load, or read again later): the index is rebuilt from the documents. */
export class SegmentProblem extends Error {}
