package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/query"
)

// FindingsSource reads stored findings; *detect.Repository is one.
type FindingsSource interface {
	List(ctx context.Context, f detect.ListFilter) ([]detect.Finding, error)
	Get(ctx context.Context, id string) (detect.Finding, error)
}

// findings serves GET /api/v1/findings: a JSON array of the findings seen
// in [since, until) (RFC 3339 times or durations before now, as for
// events), optionally of some detectors and clusters (repeated or
// comma-separated), at least as severe as severity, at most limit
// (default and maximum detect.MaxList), most recently seen first. object
// (repeated) keeps the findings that name one of these objects, each
// RESOURCE/NAMESPACE/NAME (NAMESPACE empty for a cluster-scoped one:
// "nodes//node-1").
func (s *server) findings(c *gin.Context) {
	v := c.Request.URL.Query()
	tf, err := query.ParseFilter(url.Values{"since": v["since"], "until": v["until"]}, s.cfg.Now())
	if err != nil {
		s.fail(c, http.StatusBadRequest, err)
		return
	}
	f := detect.ListFilter{Since: tf.Since, Until: tf.Until, Detectors: splitParam(v["detector"]), Clusters: who(c).Scope(splitParam(v["cluster"]))}
	for _, o := range v["object"] {
		parts := strings.SplitN(o, "/", 3)
		if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
			s.fail(c, http.StatusBadRequest, fmt.Errorf("object %q is not RESOURCE/NAMESPACE/NAME (NAMESPACE empty when cluster-scoped)", o))
			return
		}
		f.Objects = append(f.Objects, detect.Object{Resource: parts[0], Namespace: parts[1], Name: parts[2]})
	}
	if len(f.Objects) > maxObjectFilters {
		s.fail(c, http.StatusBadRequest, fmt.Errorf("%d objects: at most %d", len(f.Objects), maxObjectFilters))
		return
	}
	if sev := v.Get("severity"); sev != "" {
		if f.MinSeverity, err = detect.ParseSeverity(sev); err != nil {
			s.fail(c, http.StatusBadRequest, err)
			return
		}
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > detect.MaxList {
			s.fail(c, http.StatusBadRequest, fmt.Errorf("limit %q is not a number from 1 to %d", l, detect.MaxList))
			return
		}
		f.Limit = n
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout)
	defer cancel()
	fs, err := s.cfg.Findings.List(ctx, f)
	if err != nil {
		s.failStore(c, err)
		return
	}
	if fs == nil {
		fs = []detect.Finding{}
	}
	c.JSON(http.StatusOK, fs)
}

// maxObjectFilters bounds the object parameters of /api/v1/findings.
const maxObjectFilters = 100

// finding serves GET /api/v1/findings/{id}.
func (s *server) finding(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout)
	defer cancel()
	f, err := s.cfg.Findings.Get(ctx, c.Param("id"))
	if err == nil && !who(c).Allows(f.Cluster) {
		// Exactly what an unknown ID gets: nothing tells it exists.
		err = fmt.Errorf("%w: %q", detect.ErrNotFound, c.Param("id"))
	}
	if errors.Is(err, detect.ErrNotFound) {
		s.fail(c, http.StatusNotFound, err)
		return
	}
	if err != nil {
		s.failStore(c, err)
		return
	}
	c.JSON(http.StatusOK, f)
}

// failStore answers a failed store read: 503 when it ran out of time.
func (s *server) failStore(c *gin.Context, err error) {
	if errors.Is(err, context.DeadlineExceeded) {
		s.fail(c, http.StatusServiceUnavailable, fmt.Errorf("reading findings took longer than %s (serve --query-timeout): %w", s.cfg.QueryTimeout, err))
		return
	}
	s.fail(c, http.StatusInternalServerError, err)
}

// splitParam returns the non-empty items of a repeated, comma-separated
// parameter.
func splitParam(vals []string) []string {
	var out []string
	for _, v := range vals {
		for item := range strings.SplitSeq(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	return out
}
