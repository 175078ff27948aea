package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/auditlens/auditlens/query"
)

// defaultHistogramSpan is the window a histogram shows when since is not
// given.
const defaultHistogramSpan = time.Hour

// histogram serves GET /api/v1/histogram: the events the filters select
// counted per time bucket, stacked by one dimension (see
// query.HistogramEvents). since defaults to an hour before until, until to
// now.
func (s *server) histogram(c *gin.Context) {
	v := c.Request.URL.Query()
	f, err := query.ParseFilter(v, s.cfg.Now())
	if err != nil {
		s.fail(c, http.StatusBadRequest, err)
		return
	}
	f.Cluster = who(c).Scope(f.Cluster)
	if f.Until.IsZero() {
		f.Until = s.cfg.Now()
	}
	if f.Since.IsZero() {
		f.Since = f.Until.Add(-defaultHistogramSpan)
	}
	opt := query.HistogramOptions{By: v.Get("by")}
	if opt.Buckets, err = intParam(v, "buckets"); err != nil {
		s.fail(c, http.StatusBadRequest, err)
		return
	}
	if opt.Top, err = intParam(v, "top"); err != nil {
		s.fail(c, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout)
	defer cancel()
	h, err := query.HistogramEvents(ctx, s.cfg.Store, f, opt)
	if err != nil {
		s.failQuery(c, err)
		return
	}
	c.JSON(http.StatusOK, h)
}

// values serves GET /api/v1/values?field=F: the most frequent values of
// one field among the events the filters select (since defaults to a day
// before now), for filter suggestions.
func (s *server) values(c *gin.Context) {
	v := c.Request.URL.Query()
	f, err := query.ParseFilter(v, s.cfg.Now())
	if err != nil {
		s.fail(c, http.StatusBadRequest, err)
		return
	}
	f.Cluster = who(c).Scope(f.Cluster)
	if f.Since.IsZero() {
		f.Since = s.cfg.Now().Add(-24 * time.Hour)
	}
	if v.Get("limit") == "" {
		f.Limit = 50
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout)
	defer cancel()
	vals, err := query.Values(ctx, s.cfg.Store, f, v.Get("field"))
	if err != nil {
		s.failQuery(c, err)
		return
	}
	c.JSON(http.StatusOK, vals)
}

// objectHistory serves GET /api/v1/objects/history?resource=R&namespace=N&name=X
// (cluster, since, until and limit optional): every request that named
// the object, with the watches of its resource open meanwhile, and of the
// resources named by watch_resource (repeated or comma-separated; e.g.
// services for Endpoints), also grouped by watcher with their restarts.
func (s *server) objectHistory(c *gin.Context) {
	v := c.Request.URL.Query()
	tf, err := query.ParseFilter(url.Values{"since": v["since"], "until": v["until"]}, s.cfg.Now())
	if err != nil {
		s.fail(c, http.StatusBadRequest, err)
		return
	}
	limit, err := intParam(v, "limit")
	if err != nil {
		s.fail(c, http.StatusBadRequest, err)
		return
	}
	cluster, ok := s.scopedCluster(c, v.Get("cluster"))
	if !ok {
		return
	}
	obj := query.ObjectRef{Cluster: cluster, Resource: v.Get("resource"), Namespace: v.Get("namespace"), Name: v.Get("name")}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout)
	defer cancel()
	h, err := query.ObjectHistoryWith(ctx, s.cfg.Store, obj, query.HistoryOptions{Since: tf.Since, Until: tf.Until, Limit: limit,
		WatchResources: splitParam(v["watch_resource"])})
	if err != nil {
		s.failQuery(c, err)
		return
	}
	c.JSON(http.StatusOK, h)
}

// intParam parses an optional integer parameter; 0 when absent.
func intParam(v url.Values, name string) (int, error) {
	s := v.Get(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q is not a number", name, s)
	}
	return n, nil
}

// failQuery answers a failed query: 400 for a bad filter, 503 when it ran
// out of time, 500 otherwise.
func (s *server) failQuery(c *gin.Context, err error) {
	switch {
	case errors.Is(err, query.ErrBadFilter):
		s.fail(c, http.StatusBadRequest, err)
	case errors.Is(err, context.DeadlineExceeded):
		s.fail(c, http.StatusServiceUnavailable, fmt.Errorf("the query took longer than %s (serve --query-timeout): %w", s.cfg.QueryTimeout, err))
	default:
		s.fail(c, http.StatusInternalServerError, err)
	}
}
