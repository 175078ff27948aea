-- The last ~1% of issue 13's disk target (≤ 50 MB per million events, du
-- of the store right after importing the generated 1M-event log): 50.38 →
-- 49.79 MB, import CPU (user+sys) 37.7-38.0 → 38.4-39.3 s (three imports
-- of each, alternating). Measured on that log's store, each column
-- rewritten into one sorted part:
--
--   residual     ZSTD(1) → ZSTD(3)            15.19 → 14.85 MB
--   annotations  ZSTD(3) → ZSTD(6)             1.92 →  1.73 MB
--   ts           Delta, ZSTD(1) → Delta, T64   2.03 →  1.96 MB
--
-- The residual is the one column whose level costs import CPU that shows
-- (0.37 GB a million events to compress, two or three times over as parts
-- merge); level 3 is the cheapest step up, level 5 would save another
-- 1.1 MB at two to three times level 1's compression time (migration
-- 0008). The annotations are a quarter of the residual's bytes. T64 packs
-- the ts deltas' unused high bits before ZSTD sees them.
--
-- Tried and kept as they are: ZSTD(3) for received_lag (no gain) and for
-- audit_id (worse: random hex), ZSTD(6) for user_groups and name (worse).
--
-- A codec change is metadata only: parts written before keep theirs until
-- merged. On a cluster the migrator makes the same change to the
-- Distributed table (see alterLocal in migrate.go).
ALTER TABLE {{.DB}}audit_events{{.Local}} {{.OnCluster}}
    MODIFY COLUMN residual String CODEC(ZSTD(3)),
    MODIFY COLUMN annotations Map(LowCardinality(String), String) CODEC(ZSTD(6)),
    MODIFY COLUMN ts DateTime64(6, 'UTC') CODEC(Delta(8), T64, ZSTD(1));
