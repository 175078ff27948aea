-- Which kube-apiserver of a cluster sent an event: an HA control plane runs
-- several, each with its own webhook token, client certificate or URL path
-- (/audit/{cluster}/{apiserver}). Empty when the sender did not say; events
-- stored before this migration read as empty. Not part of the sort key: the
-- dedup key stays (cluster, audit_id, stage), and one request is audited by
-- the one apiserver that served it.
--
-- On a cluster the migrator adds the column to the Distributed table too
-- (see alterLocal in migrate.go).
ALTER TABLE {{.DB}}audit_events{{.Local}} {{.OnCluster}}
    ADD COLUMN IF NOT EXISTS apiserver LowCardinality(String) AFTER cluster;
