package detect

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/store"
)

// Every value a detector or the findings repository puts in SQL is a
// server-side parameter ({name:Type}), rendered by the store's helpers.

func stringParam(s string) string     { return store.StringParam(s) }
func arrayParam(vals []string) string { return store.StringArrayParam(vals) }

func timeParam(t time.Time) string { return store.TimeParam(t) }

// WindowParams binds the window as {since}, {until} and, when it names
// clusters, {clusters}; the returned condition uses them. The queries are
// functions of their conditions (a window, the resources, …), which they
// are given already rendered.
func WindowParams(w Window, p store.Params) string { return WindowCond(w, p, "") }

// WindowCond is WindowParams with the parameters' names prefixed, for a
// second window in the same query ({j_since}, … with prefix "j_").
func WindowCond(w Window, p store.Params, prefix string) string {
	p[prefix+"since"] = timeParam(w.Since)
	p[prefix+"until"] = timeParam(w.Until)
	cond := "ts >= {" + prefix + "since:DateTime64(6, 'UTC')} AND ts < {" + prefix + "until:DateTime64(6, 'UTC')}"
	if len(w.Clusters) > 0 {
		p[prefix+"clusters"] = arrayParam(w.Clusters)
		cond += " AND cluster IN {" + prefix + "clusters:Array(String)}"
	}
	return cond
}

// Micros converts microseconds since the epoch (what queries select with
// toUnixTimestamp64Micro) to a UTC time.
func Micros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// SelectRows runs sql and decodes each row into a new T (store.Each).
func SelectRows[T any](ctx context.Context, q Querier, what, sql string, p store.Params, fn func(T) error) error {
	if err := store.Each(ctx, q, sql, p, fn); err != nil {
		return fmt.Errorf("selecting %s: %w", what, err)
	}
	return nil
}

// CompareRV orders two resourceVersions: as integers when both are
// (etcd revisions, what every apiserver returns), otherwise ok is false
// (the API calls them opaque strings, so they cannot be ordered).
func CompareRV(a, b string) (c int, ok bool) {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return 0, false
	}
	switch {
	case x < y:
		return -1, true
	case x > y:
		return 1, true
	}
	return 0, true
}
