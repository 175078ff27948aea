-- Parts reach the disk before they count, and merged-away parts leave it
-- at once (issue 13: the store's size right after an import).
--
-- ClickHouse does not fsync a part it writes by default; it keeps the parts
-- a merge replaced ("outdated") for old_parts_lifetime (480 s on a server)
-- so that a merged part lost to a power cut can be rebuilt from them. The
-- spool's checkpoint moves past a batch once its insert returns, so an
-- insert that the kernel had not yet written out could be lost with the
-- machine although its events were acknowledged. With both kinds of part
-- fsync'd (fsync_after_insert, and min_compressed_bytes_to_fsync_after_merge
-- = 1: every merged part) the outdated parts protect nothing and go at the
-- next cleanup. Measured on a 1M-event import (two rounds, interleaved): the
-- fsyncs cost no measurable CPU or wall time.
--
-- The cleanup period: the embedded engine already keeps outdated parts for
-- 0 s, but cleans up only every cleanup_delay_period (30 s, plus up to 10 s
-- at random), so an import of a minute ended with 107 MB of outdated parts
-- beside 79 MB of live ones (du 189 MB; 81 MB with these settings). A
-- replicated table's cleanup also prunes its Keeper logs, which is why the
-- period is not shortened on a cluster. The settings (migrate.go,
-- PartSettings) are also in the CREATE TABLE of both tables, for stores
-- created since: a table started with the default period keeps it until
-- the next start, so a first import would not have their benefit.
ALTER TABLE {{.DB}}audit_events{{.Local}} {{.OnCluster}}
    MODIFY SETTING {{.PartSettings}};

ALTER TABLE {{.DB}}audit_event_counts{{.Local}} {{.OnCluster}}
    MODIFY SETTING {{.PartSettings}};
