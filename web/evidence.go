package web

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/detect/heartbeatloss"
	"github.com/auditlens/auditlens/detect/rollback"
	"github.com/auditlens/auditlens/query"
)

// The data a finding page draws beside a finding's own evidence: the
// heartbeats of the nodes a heartbeat-loss finding names, the
// resourceVersion line of a cluster whose resourceVersions rolled back.
// Both are per cluster and bounded in time (since defaults to an hour
// before until, until to now).

// evidenceRange parses since and until as the other endpoints do.
func (s *server) evidenceRange(c *gin.Context) (since, until time.Time, ok bool) {
	v := c.Request.URL.Query()
	tf, err := query.ParseFilter(url.Values{"since": v["since"], "until": v["until"]}, s.cfg.Now())
	if err != nil {
		s.fail(c, http.StatusBadRequest, err)
		return since, until, false
	}
	if tf.Until.IsZero() {
		tf.Until = s.cfg.Now()
	}
	if tf.Since.IsZero() {
		tf.Since = tf.Until.Add(-defaultHistogramSpan)
	}
	return tf.Since, tf.Until, true
}

// heartbeats serves GET /api/v1/heartbeats?cluster=C&node=N (repeated or
// comma-separated)&others=K&per_node=P&since&until: each node's Lease
// renewals and status posts (heartbeatloss.NodeHeartbeats).
func (s *server) heartbeats(c *gin.Context) {
	since, until, ok := s.evidenceRange(c)
	if !ok {
		return
	}
	v := c.Request.URL.Query()
	cluster, ok := s.scopedCluster(c, v.Get("cluster"))
	if !ok {
		return
	}
	opt := heartbeatloss.HeartbeatOptions{Cluster: cluster, Since: since, Until: until, Nodes: splitParam(v["node"])}
	var err error
	if opt.Others, err = intParam(v, "others"); err != nil {
		s.fail(c, http.StatusBadRequest, err)
		return
	}
	if opt.PerNode, err = intParam(v, "per_node"); err != nil {
		s.fail(c, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout)
	defer cancel()
	hb, err := heartbeatloss.NodeHeartbeats(ctx, s.cfg.Store, opt)
	if err != nil {
		s.failQuery(c, err)
		return
	}
	if cluster == auth.NoCluster {
		hb.Cluster = v.Get("cluster") // as for a cluster that does not exist
	}
	c.JSON(http.StatusOK, hb)
}

// resourceVersions serves GET /api/v1/resourceversions?cluster=C&buckets=N&since&until:
// the highest resourceVersion per time bucket (rollback.ResourceVersionLine).
func (s *server) resourceVersions(c *gin.Context) {
	since, until, ok := s.evidenceRange(c)
	if !ok {
		return
	}
	v := c.Request.URL.Query()
	cluster, ok := s.scopedCluster(c, v.Get("cluster"))
	if !ok {
		return
	}
	opt := rollback.RVLineOptions{Cluster: cluster, Since: since, Until: until}
	var err error
	if opt.Buckets, err = intParam(v, "buckets"); err != nil {
		s.fail(c, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout)
	defer cancel()
	l, err := rollback.ResourceVersionLine(ctx, s.cfg.Store, opt)
	if err != nil {
		s.failQuery(c, err)
		return
	}
	if cluster == auth.NoCluster {
		l.Cluster = v.Get("cluster")
	}
	c.JSON(http.StatusOK, l)
}
