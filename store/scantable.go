package store

import (
	"context"
	"fmt"
	"strings"
)

// ScanEvents is the table scan loads logs into before it becomes the
// store's audit_events (UseScanEvents). It needs no migration, so the
// load runs while the rest of the schema is created.
const ScanEvents = "scan_events"

// ScanEventsDDL is the CREATE TABLE of ScanEvents, a throwaway
// audit_events: the columns a Row holds (rowColumns, received_at and
// request_uri as plain columns) without a sort key, so an insert sorts
// nothing. In memory it is a Memory table (no compression, parts or
// merges); on disk, for inputs larger than memory should hold, a MergeTree
// without a sort key whose merges CreateScanEvents stops. scan loads logs
// into it with the engine's own JSON parser and runs the detectors on it,
// so detector SQL uses nothing a Memory table lacks (FINAL, PREWHERE).
func ScanEventsDDL(onDisk bool) string {
	var b strings.Builder
	b.WriteString("CREATE TABLE " + ScanEvents + " (")
	for i, c := range rowColumns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.name + " " + c.typ)
	}
	if onDisk {
		// Merges stop (CreateScanEvents): the parts of a large load must
		// neither slow nor refuse inserts.
		b.WriteString(") ENGINE = MergeTree ORDER BY tuple() SETTINGS parts_to_delay_insert = 1000000, parts_to_throw_insert = 1000000, max_parts_in_total = 1000000")
	} else {
		b.WriteString(") ENGINE = Memory")
	}
	return b.String()
}

// CreateScanEvents creates ScanEvents in the embedded store st, empty,
// dropping any there was.
func CreateScanEvents(ctx context.Context, st Store, onDisk bool) error {
	stmts := []string{"DROP TABLE IF EXISTS " + ScanEvents, ScanEventsDDL(onDisk)}
	if onDisk {
		stmts = append(stmts, "SYSTEM STOP MERGES "+ScanEvents)
	}
	return execAll(ctx, st, "creating the scan's table", stmts)
}

// UseScanEvents replaces the migrated audit_events of the embedded store
// st, and the rollup that follows its inserts, with ScanEvents, loaded.
// The store is then a throwaway, for scan.
func UseScanEvents(ctx context.Context, st Store, onDisk bool) error {
	stmts := []string{
		"DROP VIEW IF EXISTS audit_event_counts_mv",
		"DROP TABLE IF EXISTS audit_events",
		"RENAME TABLE " + ScanEvents + " TO audit_events",
	}
	if onDisk {
		// Renamed, the table must not start merging under the detectors.
		stmts = append(stmts, "SYSTEM STOP MERGES audit_events")
	}
	return execAll(ctx, st, "making the scan's table audit_events", stmts)
}

func execAll(ctx context.Context, st Store, what string, stmts []string) error {
	for _, sql := range stmts {
		if err := st.Exec(ctx, sql, nil); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}
