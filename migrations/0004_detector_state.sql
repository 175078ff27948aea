-- What stateful detectors remember between evaluations, so that an incident
-- that runs for days stays one finding across windows and restarts of serve:
-- for watch-loop, one row per reflector and static resourceVersion (its
-- restarts, iterations, victims, first and last seen) and one per cluster
-- (the highest resourceVersion seen, the apiserver versions). Each save adds a
-- version of a (detector, cluster, key) record; readers take the newest.
CREATE TABLE IF NOT EXISTS {{.DB}}detector_state{{.Local}} {{.OnCluster}}
(
    detector    LowCardinality(String),
    cluster     LowCardinality(String),
    key         String,
    last_seen   DateTime64(6, 'UTC'),
    updated_at  DateTime64(6, 'UTC'),
    body        String CODEC(ZSTD(3))
)
ENGINE = {{.Engine "ReplacingMergeTree" "updated_at"}}
ORDER BY (detector, cluster, key);
