package query

import (
	"strings"
	"time"

	"github.com/auditlens/auditlens/store"
)

// The rollup: audit_event_counts (migrations/0006_rollups.sql) holds the
// number of events per rollupSlot of event time and per value of every
// column a Filter names except the object name (cluster, apiserver, verb,
// resource, namespace, user, user_agent, code, stage, level). A
// materialized view counts each insert into audit_events as it is
// written; the migration counted what was stored before it.
//
// HistogramEvents and Values read it instead of the events when it answers
// exactly (useRollup): the request filters on no column it lacks (name),
// stacks by or lists no such column, and a histogram's step is a whole
// number of slots. The window's whole slots come from the rollup, its
// ragged edges — the part of a slot before since's first slot boundary and
// the part after until's last one, each shorter than a slot — from the
// events; an open end needs no edge. So the time a histogram takes grows
// with the combinations of values in the window, not with its events.
//
// When the rollup's count differs from audit_events read with FINAL (one
// row per event):
//
//   - A copy of an event that the writer's lookup did not drop is counted
//     for good, while FINAL drops it (and a read without FINAL, as the
//     events path does, drops it once ClickHouse merges the copies). It
//     takes two writers inserting the same event within about one batch
//     interval (the writer looks up the keys stored in a batch's window
//     before it inserts; one serve process writes its batches one after
//     another): receivers behind one Service both given one retried
//     webhook batch, or an import of a file serve is also receiving. The
//     difference is at most the number of such copies
//     (TestRollupCountsCopiesOfRacingWriters shows it).
//   - An insert that fails after audit_events stored its part but before
//     the view stored its counts (ClickHouse writes a table before its
//     views and does not undo it) leaves those events uncounted: the
//     writer's retry finds them stored and drops them. It takes an engine
//     error in the middle of an insert.
//   - The migration's count of the events stored before it assumes no
//     insert between the view's creation and that count (see the
//     migration).
//
// Retention drops whole days of both tables, each at its own merge, so a
// window older than the retention may briefly differ.
const rollupSlot = 30 * time.Second

// rollupTable is the rollup's table.
const rollupTable = "audit_event_counts"

// rollupFilter reports whether the rollup has every column f filters on.
func (f Filter) rollupFilter() bool { return len(f.Name) == 0 }

// rollupDimension reports whether the rollup has the column of a
// dimension.
func rollupDimension(name string) bool { return name != "name" }

// countSQL returns a query that counts the events f selects (its limit
// and order are not used) grouped by the expressions of sel, one row per
// group with the count as n. sel is SQL written by the caller over columns
// both tables have, with $T standing for the event time as Unix
// milliseconds (Int64); groupBy lists sel's aliases. With rollup, the
// window's whole slots are counted from audit_event_counts and its edges
// from audit_events; the caller checked that the rollup answers f.
func countSQL(f Filter, sel, groupBy string, rollup bool, p store.Params) string {
	if !rollup {
		return "SELECT " + strings.ReplaceAll(sel, "$T", "toUnixTimestamp64Milli(ts)") + ", count() AS n\nFROM audit_events" +
			f.where(p) + "\nGROUP BY " + groupBy
	}
	untimed := f
	untimed.Since, untimed.Until = time.Time{}, time.Time{}
	base := untimed.where(p)
	lo, hi := rollupSlots(f.Since, f.Until)
	var parts []string
	part := func(table, timeCol string, conds []string, count string) {
		where := base
		for _, c := range conds {
			where = and(where, c)
		}
		parts = append(parts, "SELECT "+strings.ReplaceAll(sel, "$T", "toUnixTimestamp64Milli("+timeCol+")")+", "+count+" AS c\nFROM "+table+
			where+"\nGROUP BY "+groupBy)
	}
	var slots []string
	if !lo.IsZero() {
		p["slot_lo"] = formatTime(lo)
		slots = append(slots, "slot >= {slot_lo:DateTime64(6, 'UTC')}")
	}
	if !hi.IsZero() {
		p["slot_hi"] = formatTime(hi)
		slots = append(slots, "slot < {slot_hi:DateTime64(6, 'UTC')}")
	}
	part(rollupTable, "slot", slots, "sum(n)")
	if !lo.IsZero() && f.Since.Before(lo) {
		p["since"] = formatTime(f.Since)
		part("audit_events", "ts", []string{"ts >= {since:DateTime64(6, 'UTC')}", "ts < {slot_lo:DateTime64(6, 'UTC')}"}, "count()")
	}
	if !hi.IsZero() && hi.Before(f.Until) {
		p["until"] = formatTime(f.Until)
		part("audit_events", "ts", []string{"ts >= {slot_hi:DateTime64(6, 'UTC')}", "ts < {until:DateTime64(6, 'UTC')}"}, "count()")
	}
	return "SELECT " + groupBy + ", sum(c) AS n\nFROM (\n" + strings.Join(parts, "\nUNION ALL\n") + "\n)\nGROUP BY " + groupBy
}

// rollupSlots returns the whole slots [lo, hi) of the window [since,
// until) the rollup counts: since rounded up and until rounded down to a
// slot. A zero lo or hi is an open end (a zero or unrepresentably early
// since, a zero or unrepresentably late until, as Filter.where reads
// them).
func rollupSlots(since, until time.Time) (lo, hi time.Time) {
	if !since.IsZero() && since.After(minTime) {
		lo = since.UTC().Truncate(rollupSlot)
		if lo.Before(since) {
			lo = lo.Add(rollupSlot)
		}
	}
	if !until.IsZero() && until.Before(maxTime) {
		hi = until.UTC().Truncate(rollupSlot)
	}
	return lo, hi
}

// useRollup reports whether the rollup answers the count of the events f
// selects grouped by dimension by (and by buckets of step when step is not
// 0) exactly: f filters only on the rollup's columns, by is one of them,
// the buckets are whole slots, and the window holds at least one whole
// slot (a shorter one is read from the events alone).
func useRollup(f Filter, by string, step time.Duration) bool {
	if !f.rollupFilter() || !rollupDimension(by) || step%rollupSlot != 0 {
		return false
	}
	lo, hi := rollupSlots(f.Since, f.Until)
	return lo.IsZero() || hi.IsZero() || lo.Before(hi)
}

// and adds cond to a WHERE clause as Filter.where renders it.
func and(where, cond string) string {
	if where == "" {
		return "\nWHERE " + cond
	}
	return where + "\n  AND " + cond
}
