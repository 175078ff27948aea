-- One wide table: typed columns for what queries filter and group on, the
-- requestURI parsed once at ingest, and the raw event for jq and the detail
-- view. ReplacingMergeTree over a sort key made only of event content makes a
-- retried or re-imported event collapse into one row; readers use FINAL.
CREATE TABLE IF NOT EXISTS {{.DB}}audit_events{{.Local}} {{.OnCluster}}
(
    cluster           LowCardinality(String),
    ts                DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    received_at       DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    audit_id          String CODEC(ZSTD(1)),
    stage             LowCardinality(String),
    level             LowCardinality(String),
    verb              LowCardinality(String),
    request_uri       String CODEC(ZSTD(3)),
    user              LowCardinality(String),
    user_groups       Array(LowCardinality(String)),
    impersonated_user LowCardinality(String),
    user_agent        LowCardinality(String),
    source_ip         LowCardinality(String),
    resource          LowCardinality(String),
    subresource       LowCardinality(String),
    api_group         LowCardinality(String),
    api_version       LowCardinality(String),
    namespace         LowCardinality(String),
    name              String CODEC(ZSTD(1)),
    object_rv         String CODEC(ZSTD(1)),
    object_uid        String CODEC(ZSTD(1)),
    code              Int32,
    response_rv       String CODEC(ZSTD(1)),
    watch             Bool,
    req_rv            String CODEC(ZSTD(1)),
    req_rv_match      LowCardinality(String),
    timeout_seconds   Int32,
    label_selector    String CODEC(ZSTD(1)),
    field_selector    String CODEC(ZSTD(1)),
    req_limit         Int64,
    req_continue      String CODEC(ZSTD(1)),
    annotations       Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    raw               String CODEC(ZSTD(3)),
    INDEX idx_audit_id audit_id TYPE bloom_filter(0.01) GRANULARITY 4,
    INDEX idx_name name TYPE bloom_filter(0.01) GRANULARITY 4,
    INDEX idx_user user TYPE set(256) GRANULARITY 4
)
ENGINE = {{.Engine "ReplacingMergeTree"}}
PARTITION BY toDate(ts)
ORDER BY (cluster, toStartOfHour(ts), resource, verb, ts, audit_id, stage)
{{.TTL "ts"}}
SETTINGS index_granularity = 8192{{.TTLSettings}}, {{.PartSettings}}
