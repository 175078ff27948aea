-- The explorer's rollup (issue 13): events counted per 30-second slot by
-- every field the histogram stacks by and the value lists and filters use,
-- except the object name. query.HistogramEvents and query.Values read it
-- instead of audit_events when a request can be answered from it exactly
-- (see query/rollup.go), reading only a window's ragged edges from the
-- events.
--
-- Why these keys: one table keyed by all of them answers every combination
-- of exact and prefix filters on them, and it is still small, because the
-- key counts distinct combinations, not events. Measured on the 10M-event
-- bench store (66 minutes, 2,500 events/s): 375,526 rows at 30 s (27x fewer
-- than the events), 209,839 at one minute, 859,646 at 10 s; without user
-- and user_agent 18,784 a minute, but then a user filter or stacking by
-- user, the commonest clicks, would read the events again. Why 30 s and
-- not a minute: the timeline asks for ~140 bars, so an hour is drawn in
-- 30 s steps, which a per-minute table cannot answer.
--
-- slot is a DateTime64 as ts is, and computed in milliseconds: a DateTime
-- and toStartOfInterval(ts, INTERVAL 30 SECOND) wrap outside 1970-2106,
-- which ts may not.
--
-- Why SummingMergeTree: n is the only aggregate, and readers sum it with
-- GROUP BY anyway (merges are eventual, and on a cluster each shard holds
-- part of a slot's counts).
CREATE TABLE IF NOT EXISTS {{.DB}}audit_event_counts{{.Local}} {{.OnCluster}}
(
    cluster    LowCardinality(String),
    slot       DateTime64(0, 'UTC') CODEC(Delta, ZSTD(1)),
    apiserver  LowCardinality(String),
    verb       LowCardinality(String),
    resource   LowCardinality(String),
    namespace  LowCardinality(String),
    user       LowCardinality(String),
    user_agent LowCardinality(String),
    code       Int32,
    stage      LowCardinality(String),
    level      LowCardinality(String),
    n          UInt64
)
ENGINE = {{.Engine "SummingMergeTree"}}
PARTITION BY toDate(slot)
ORDER BY (cluster, slot, verb, resource, namespace, user, user_agent, code, stage, level, apiserver)
{{.TTL "slot"}}
SETTINGS index_granularity = 8192{{.TTLSettings}}, {{.PartSettings}};

-- Every insert into audit_events is counted as it is written. On a cluster
-- the view sits on each shard's local table and writes that shard's local
-- counts; readers go through the Distributed table and sum across shards.
-- It counts rows inserted, not FINAL's rows: a copy of an event that the
-- writer's lookup did not drop (two writers inserting one retried batch at
-- the same moment) counts twice here for good, while audit_events merges
-- it away in time (query/rollup.go says how far the counts can differ).
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}audit_event_counts_mv {{.OnCluster}}
TO {{.DB}}audit_event_counts{{.Local}}
AS SELECT
    cluster,
    toStartOfInterval(ts, INTERVAL 30000 MILLISECOND) AS slot,
    apiserver, verb, resource, namespace, user, user_agent, code, stage, level,
    count() AS n
FROM {{.DB}}audit_events{{.Local}}
GROUP BY cluster, slot, apiserver, verb, resource, namespace, user, user_agent, code, stage, level;

-- The events stored before this migration, counted once with FINAL. Emptied
-- first so that running the migration again (a crash before its version was
-- recorded) rebuilds the counts instead of adding them twice. The migrator
-- runs before the process starts writing, so nothing is inserted between
-- the view's creation and this count; with several receivers on one server
-- or cluster, run `auditlens migrate` before starting the new version's
-- receivers, or events they insert meanwhile are counted twice.
TRUNCATE TABLE IF EXISTS {{.DB}}audit_event_counts{{.Local}} {{.OnCluster}};

INSERT INTO {{.DB}}audit_event_counts
    (cluster, slot, apiserver, verb, resource, namespace, user, user_agent, code, stage, level, n)
SETTINGS distributed_foreground_insert = 1
SELECT
    cluster,
    toStartOfInterval(ts, INTERVAL 30000 MILLISECOND) AS slot,
    apiserver, verb, resource, namespace, user, user_agent, code, stage, level,
    count() AS n
FROM {{.DB}}audit_events FINAL
GROUP BY cluster, slot, apiserver, verb, resource, namespace, user, user_agent, code, stage, level;
