-- Codecs measured on the 1M-event generated log (one part after OPTIMIZE
-- FINAL, 56.0 MB before): the LowCardinality columns' index streams were
-- at the default LZ4 and shrink by half with ZSTD(1) (source_ip 1.03 →
-- 0.75 MB, user 0.81 → 0.57, user_agent and namespace 0.44 → 0.24, stage
-- 0.36 → 0.16), timeout_seconds (a few distinct values) 0.60 → 0.26 MB with
-- T64, name 1.75 → 1.55 and object_uid 0.70 → 0.59 MB at ZSTD(3). Tried and
-- kept as they are: DoubleDelta instead of Delta for ts and received_at
-- (2.0 → 2.9 and 3.1 → 3.5 MB: the sort key orders ts within a resource and
-- verb, not overall), ZSTD(3) or (6) for audit_id (18.7 → 18.9 MB: random
-- UUIDs are hex) and for the resourceVersion columns (no gain). The
-- residual shrinks 15.3 → 14.0 → 12.8 MB at ZSTD(5) and (6), but a rewrite
-- of the table (what merges do to each row two or three times during an
-- import) took 4.1 s instead of 2.4 s at level 6, which the ingest rate
-- cannot afford; it stays at ZSTD(1).
--
-- A codec change is metadata only: parts written before keep theirs until
-- merged. On a cluster the migrator makes the same change to the
-- Distributed table (see alterLocal in migrate.go).
ALTER TABLE {{.DB}}audit_events{{.Local}} {{.OnCluster}}
    MODIFY COLUMN source_ip LowCardinality(String) CODEC(ZSTD(1)),
    MODIFY COLUMN user LowCardinality(String) CODEC(ZSTD(1)),
    MODIFY COLUMN user_agent LowCardinality(String) CODEC(ZSTD(1)),
    MODIFY COLUMN namespace LowCardinality(String) CODEC(ZSTD(1)),
    MODIFY COLUMN stage LowCardinality(String) CODEC(ZSTD(1)),
    MODIFY COLUMN level LowCardinality(String) CODEC(ZSTD(1)),
    MODIFY COLUMN timeout_seconds Int32 CODEC(T64, ZSTD(1)),
    MODIFY COLUMN name String CODEC(ZSTD(3)),
    MODIFY COLUMN object_uid String CODEC(ZSTD(3));
