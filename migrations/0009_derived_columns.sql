-- The request URI and the time the request was received are stored as what
-- the other columns do not already say (issue 13: disk per million
-- events). Readers still read request_uri and received_at, now ALIAS
-- columns that put the value back together; the writers write the stored
-- columns (store/derived.go). SELECT * does not list ALIAS columns: a
-- subquery over audit_events whose outer query reads them names them.
--
-- request_uri: most of a requestURI is its namespace, name,
-- resourceVersion and timeoutSeconds, which namespace, name, req_rv and
-- timeout_seconds hold already. request_uri_tmpl is the URI with each of
-- those replaced by a two-byte placeholder, 0xFF then 1-4, which no valid
-- UTF-8 text holds: a few dozen distinct strings per cluster, where the
-- URI itself was as varied as names and resourceVersions. request_uri_full
-- (the old column, renamed) holds the URI as is when it holds a 0xFF byte
-- and for every row written before this migration; request_uri_tmpl is
-- then empty.
--
-- received_at: ts minus received_lag microseconds (the request's latency
-- so far, 0 for RequestReceived) in place of a second timestamp. Rows
-- written before this migration read received_lag as its default, the
-- smallest Int64, which no lag between two DateTime64(6) values reaches,
-- and keep their time in received_at_full (the old column, renamed);
-- new rows leave received_at_full at the epoch.
--
-- Measured on the 1M-event generated log (`auditlens import` into a fresh
-- store, du -sb right after it: 55.8 → 50.35 MB; columns summed over the
-- parts): request_uri 4.64 MB → request_uri_tmpl 0.09 MB (72 distinct
-- templates; 0.53 MB as a String at ZSTD(3)); received_at 3.11 MB →
-- received_lag 2.10 MB (T64: 2.33 MB with ZSTD(1) alone). Import CPU did
-- not move beyond the run-to-run noise.
--
-- Tried and not done: the residual in blocks of up to 4 MiB instead of 1
-- (max_compress_block_size: 15.84 → 15.20 MB) made the import take ~20%
-- more CPU (60.9 against 50 s user+sys, alternating runs); ZSTD(2) or (3)
-- for the residual saves 0.29 or 0.36 MB for more CPU. audit_id as a UUID,
-- 18.7 → 16.0 MB, but it is in the sort key, which a column cannot leave,
-- so every reader of audit_id (two dozen queries) and the cluster's
-- sharding key would have to read the ID from two columns. A bloom filter
-- of 2.5% or 5% false positives for idx_audit_id (1.26 → 1.00 or 0.88 MB),
-- but parts written before would have no index until rewritten.
--
-- RENAME COLUMN and ADD COLUMN are metadata only. On a cluster the
-- migrator makes the same column changes to the Distributed table (see
-- alterLocal in migrate.go), whose ALIAS columns then compute the values
-- from what the shards return.
ALTER TABLE {{.DB}}audit_events{{.Local}} {{.OnCluster}}
    RENAME COLUMN IF EXISTS request_uri TO request_uri_full;

ALTER TABLE {{.DB}}audit_events{{.Local}} {{.OnCluster}}
    RENAME COLUMN IF EXISTS received_at TO received_at_full;

ALTER TABLE {{.DB}}audit_events{{.Local}} {{.OnCluster}}
    ADD COLUMN IF NOT EXISTS received_lag Int64 DEFAULT -9223372036854775808 CODEC(T64, ZSTD(1)) AFTER received_at_full,
    ADD COLUMN IF NOT EXISTS received_at DateTime64(6, 'UTC') ALIAS if(received_lag = -9223372036854775808, received_at_full, ts - toIntervalMicrosecond(received_lag)) AFTER received_lag,
    ADD COLUMN IF NOT EXISTS request_uri_tmpl LowCardinality(String) CODEC(ZSTD(1)) AFTER request_uri_full,
    ADD COLUMN IF NOT EXISTS request_uri String ALIAS if(request_uri_tmpl = '', request_uri_full, replaceOne(replaceOne(replaceOne(replaceOne(request_uri_tmpl, '\xFF\x03', toString(timeout_seconds)), '\xFF\x02', req_rv), '\xFF\x01', name), '\xFF\x04', namespace)) AFTER request_uri_tmpl;

