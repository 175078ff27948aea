-- Findings are updated in place: an incident keeps its id across detector
-- evaluations, and the newest version (by updated_at) wins.
CREATE TABLE IF NOT EXISTS {{.DB}}findings{{.Local}} {{.OnCluster}}
(
    id          String,
    detector    LowCardinality(String),
    cluster     LowCardinality(String),
    severity    LowCardinality(String),
    confidence  Float32,
    title       String,
    first_seen  DateTime64(6, 'UTC'),
    last_seen   DateTime64(6, 'UTC'),
    updated_at  DateTime64(6, 'UTC'),
    body        String CODEC(ZSTD(3))
)
ENGINE = {{.Engine "ReplacingMergeTree" "updated_at"}}
ORDER BY (id);

CREATE TABLE IF NOT EXISTS {{.DB}}reports{{.Local}} {{.OnCluster}}
(
    id          String,
    name        LowCardinality(String),
    window_start DateTime64(6, 'UTC'),
    window_end  DateTime64(6, 'UTC'),
    created_at  DateTime64(6, 'UTC'),
    body        String CODEC(ZSTD(3))
)
ENGINE = {{.Engine "ReplacingMergeTree" "created_at"}}
ORDER BY (name, window_end, id);
