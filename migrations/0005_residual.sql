-- An event is stored as its residual: what the typed columns cannot
-- restore of it (package store/residual; user.uid and extra, the request
-- and response objects, a failure's status, kind and apiVersion when
-- absent, …), and the reader rebuilds the event from the columns and the
-- residual. Rows written so keep raw empty; rows stored before this
-- migration keep their raw event, which readers use when it is not empty.
--
-- On a cluster the migrator adds the column to the Distributed table too
-- (see alterLocal in migrate.go).
ALTER TABLE {{.DB}}audit_events{{.Local}} {{.OnCluster}}
    ADD COLUMN IF NOT EXISTS residual String CODEC(ZSTD(3)) AFTER raw;
