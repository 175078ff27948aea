package rollback

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/query"

	"github.com/auditlens/auditlens/store"
)

// RVLine is the highest resourceVersion a cluster showed per time bucket:
// the JSON of GET /api/v1/rv, which the finding page draws for an
// rv-rollback finding. resourceVersions are etcd revisions, one counter
// for the whole cluster, so the line rises with every write; an etcd
// restored from an old snapshot makes it drop.
type RVLine struct {
	Cluster string    `json:"cluster"`
	Since   time.Time `json:"since"` // the start of the first bucket
	Until   time.Time `json:"until"`
	StepMS  int64     `json:"step_ms"`
	// Buckets are the steps in which the cluster showed a resourceVersion,
	// oldest first; steps without one are left out.
	Buckets []RVBucket `json:"buckets"`
}

// RVBucket is one step of an RVLine.
type RVBucket struct {
	T time.Time `json:"t"`
	// Head is the highest resourceVersion the apiserver answered with or
	// accepted: a response object's (responseObject, at level
	// RequestResponse), the one a successful request carried in its
	// object (objectRef: an update or delete from the version the client
	// held) and the one a successful list asked for. 0 when none.
	Head uint64 `json:"head,omitempty"`
	// Asked is the highest resourceVersion a watch asked for (any
	// response: after a restore without --bump-revision, watches "from the
	// future" are answered 200 and stay open), 0 when none.
	Asked uint64 `json:"asked,omitempty"`
}

// RVLineOptions select an RVLine.
type RVLineOptions struct {
	Cluster      string
	Since, Until time.Time
	// Buckets is about how many steps to cut the range into (default 120,
	// at most 1000), as for a histogram.
	Buckets int
}

// MaxRVLineSpan is the longest range ResourceVersionLine reads.
const MaxRVLineSpan = 7 * 24 * time.Hour

// rvLineSQL takes, per bucket, the highest resourceVersion among the
// request's columns. Non-numeric resourceVersions (an aggregated API's
// own) and "0" (any version) count as none.
const rvLineSQL = `SELECT toUInt32(intDiv(toUnixTimestamp64Milli(ts) - {start_ms:Int64}, {step_ms:Int64})) AS b,
	max(if(code >= 200 AND code < 300,
		greatest(toUInt64OrZero(response_rv), toUInt64OrZero(object_rv), if(verb = 'list', toUInt64OrZero(req_rv), 0)), 0)) AS head,
	max(if(verb = 'watch', toUInt64OrZero(req_rv), 0)) AS asked
FROM audit_events
WHERE cluster = {cluster:String}
  AND ts >= {since:DateTime64(6, 'UTC')} AND ts < {until:DateTime64(6, 'UTC')}
  AND (response_rv != '' OR object_rv != '' OR req_rv != '')
GROUP BY b
HAVING head != 0 OR asked != 0
ORDER BY b`

// ResourceVersionLine returns the highest resourceVersion per time bucket
// of one cluster in [opt.Since, opt.Until). RVs of different clusters are
// different counters: the line is per cluster.
func ResourceVersionLine(ctx context.Context, st store.Scanner, opt RVLineOptions) (RVLine, error) {
	l := RVLine{Cluster: opt.Cluster, Buckets: []RVBucket{}}
	switch {
	case opt.Cluster == "":
		return l, fmt.Errorf("%w: resourceVersions are per cluster: name one", query.ErrBadFilter)
	case opt.Since.IsZero() || opt.Until.IsZero() || !opt.Since.Before(opt.Until):
		return l, fmt.Errorf("%w: the resourceVersion line needs since before until", query.ErrBadFilter)
	case opt.Until.Sub(opt.Since) > MaxRVLineSpan:
		return l, fmt.Errorf("%w: a resourceVersion line over %s asked for, at most %s", query.ErrBadFilter, opt.Until.Sub(opt.Since), MaxRVLineSpan)
	case opt.Buckets == 0:
		opt.Buckets = 120
	case opt.Buckets < 1 || opt.Buckets > 1000:
		return l, fmt.Errorf("%w: buckets %d is not from 1 to 1000", query.ErrBadFilter, opt.Buckets)
	}
	step := query.HistogramStep(opt.Until.Sub(opt.Since), opt.Buckets)
	start := opt.Since.UTC().Truncate(step)
	l.Since, l.Until, l.StepMS = start, opt.Until.UTC(), step.Milliseconds()
	p := store.Params{
		"cluster":  store.StringParam(opt.Cluster),
		"since":    store.TimeParam(opt.Since),
		"until":    store.TimeParam(opt.Until),
		"start_ms": strconv.FormatInt(start.UnixMilli(), 10),
		"step_ms":  strconv.FormatInt(l.StepMS, 10),
	}
	err := store.Each(ctx, st, rvLineSQL, p, func(r struct {
		B           uint32
		Head, Asked uint64
	}) error {
		l.Buckets = append(l.Buckets, RVBucket{T: start.Add(time.Duration(r.B) * step), Head: r.Head, Asked: r.Asked})
		return nil
	})
	if err != nil {
		return l, fmt.Errorf("reading resourceVersions: %w", err)
	}
	return l, nil
}
