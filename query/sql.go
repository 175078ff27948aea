package query

import (
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/store"
)

// DateTime64's range; times outside it are clamped so that the engine
// never has to parse a value it cannot represent.
var (
	minTime = store.MinTime
	maxTime = store.MaxTime
)

// SQL compiles f to a SELECT of columns from audit_events, ordered and
// limited as f says (reading dupSlack rows beyond the limit: see dupSlack). columns is SQL written by the caller, such as
// "ts, raw"; it must never come from user input.
//
// The SQL text depends only on which fields of f are set, never on their
// values: every value is bound as a server-side parameter. Parameter values
// are in the text form the engine parses for the placeholder's type
// (ClickHouse's escaped format for a String, a quoted literal list such as
// ['a','b\'c'] for an Array), so they can be handed to store.Store as they
// are.
//
// f is not validated; a Limit out of range is clamped. Call Validate first
// for an error instead.
//
// With f.All the query has no LIMIT. It sorts everything it selects (the
// table is sorted by cluster and hour first, not by time), so Events reads
// an All filter as a series of such queries over time windows of bounded
// size (see timeWindows) rather than as one.
func (f Filter) SQL(columns string) (string, store.Params) {
	return f.sql(columns, "audit_events")
}

// unsortedSQL is the SELECT of columns from audit_events that f matches,
// in no order and without a limit, for a reader that puts the rows in
// f's order itself (sortedWindow). The engine sorts rows with every
// column in them: on 800k stored events, reading them in 16 windows took
// 10.5 s sorted and 1.9 s unsorted.
func (f Filter) unsortedSQL(columns string) (string, store.Params) {
	var b strings.Builder
	p := store.Params{}
	f.selectFrom(&b, p, columns, "audit_events")
	return b.String(), p
}

// selectFrom writes the SELECT of columns from from that f matches to b,
// its parameters to p.
func (f Filter) selectFrom(b *strings.Builder, p store.Params, columns, from string) {
	b.WriteString("SELECT ")
	b.WriteString(columns)
	b.WriteString("\nFROM ")
	b.WriteString(from)
	b.WriteString(f.where(p))
}

// sql is SQL reading from (audit_events, or audit_events FINAL).
func (f Filter) sql(columns, from string) (string, store.Params) {
	var b strings.Builder
	p := store.Params{}
	f.selectFrom(&b, p, columns, from)
	if f.Order == Desc {
		b.WriteString("\nORDER BY ts DESC, audit_id DESC, stage DESC, cluster DESC")
	} else {
		b.WriteString("\nORDER BY ts, audit_id, stage, cluster")
	}
	if f.All {
		return b.String(), p
	}
	b.WriteString("\nLIMIT {limit:UInt32}")
	p["limit"] = strconv.Itoa(f.limit() + dupSlack)
	return b.String(), p
}

// dupSlack is the number of rows a listing reads beyond its limit. A
// listing does not read with FINAL (over a busy hour FINAL costs several
// times the query; ClickHouse then merges the whole range instead of
// reading only the newest rows): a row stored twice (a webhook batch
// retried across two inserts, rare since the writer looks each batch up
// first) comes back twice, next to itself in the listing's order, and
// Events drops the copy. The slack keeps the listing full when it does;
// when a window holds more copies than that, Events reads it again with
// FINAL.
const dupSlack = 64

// where renders f's conditions as a WHERE clause ("" when f selects
// everything), adding their values to p.
func (f Filter) where(p store.Params) string {
	var conds []string
	if !f.Since.IsZero() && f.Since.After(minTime) {
		p["since"] = formatTime(f.Since)
		conds = append(conds, "ts >= {since:DateTime64(6, 'UTC')}")
	}
	if !f.Until.IsZero() && f.Until.Before(maxTime) {
		p["until"] = formatTime(f.Until)
		conds = append(conds, "ts < {until:DateTime64(6, 'UTC')}")
	}
	in := func(col string, vals []string) {
		if len(vals) == 0 {
			return
		}
		p[col] = formatStringArray(vals)
		conds = append(conds, col+" IN {"+col+":Array(String)}")
	}
	// prefixed is in for a field whose values may end in "*".
	prefixed := func(col string, vals []string) {
		var exact, prefixes []string
		for _, v := range vals {
			if pre, ok := strings.CutSuffix(v, "*"); ok {
				prefixes = append(prefixes, pre)
			} else {
				exact = append(exact, v)
			}
		}
		var or []string
		if len(exact) > 0 {
			p[col] = formatStringArray(exact)
			or = append(or, col+" IN {"+col+":Array(String)}")
		}
		if len(prefixes) > 0 {
			name := col + "_prefix"
			p[name] = formatStringArray(prefixes)
			or = append(or, "arrayExists(p -> startsWith("+col+", p), {"+name+":Array(String)})")
		}
		switch len(or) {
		case 1:
			conds = append(conds, or[0])
		case 2:
			conds = append(conds, "("+or[0]+" OR "+or[1]+")")
		}
	}
	in("cluster", f.Cluster)
	in("apiserver", f.APIServer)
	in("verb", f.Verb)
	in("resource", f.Resource)
	in("namespace", f.Namespace)
	in("name", f.Name)
	prefixed("user", f.User)
	prefixed("user_agent", f.UserAgent)
	in("stage", f.Stage)
	in("level", f.Level)
	if len(f.Code) > 0 {
		p["code"] = formatInt32Array(f.Code)
		conds = append(conds, "code IN {code:Array(Int32)}")
	}
	var b strings.Builder
	for i, c := range conds {
		if i == 0 {
			b.WriteString("\nWHERE ")
		} else {
			b.WriteString("\n  AND ")
		}
		b.WriteString(c)
	}
	return b.String()
}

func formatTime(t time.Time) string { return store.TimeParam(t) }

// formatStringArray renders an Array(String) parameter.
func formatStringArray(vals []string) string { return store.StringArrayParam(vals) }

// formatInt32Array renders an Array(Int32) parameter.
func formatInt32Array(vals []int32) string {
	b := make([]byte, 0, 2+4*len(vals))
	b = append(b, '[')
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(v), 10)
	}
	return string(append(b, ']'))
}
