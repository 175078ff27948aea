package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/auditlens/auditlens/report"
)

// ReportsSource reads stored reports; *report.Repository is one.
type ReportsSource interface {
	List(ctx context.Context, f report.ListFilter) ([]report.Summary, error)
	Get(ctx context.Context, id string) (report.Report, error)
}

// reports serves GET /api/v1/reports: a JSON array of the stored reports
// (id, name, window, created_at), optionally of one name, at most limit
// (default and maximum report.MaxList), the latest window end first.
func (s *server) reports(c *gin.Context) {
	v := c.Request.URL.Query()
	f := report.ListFilter{Name: v.Get("name")}
	if p := who(c); !p.All {
		f.Within = p.Clusters
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > report.MaxList {
			s.fail(c, http.StatusBadRequest, fmt.Errorf("limit %q is not a number from 1 to %d", l, report.MaxList))
			return
		}
		f.Limit = n
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout)
	defer cancel()
	list, err := s.cfg.Reports.List(ctx, f)
	if err != nil {
		s.failReports(c, err)
		return
	}
	if list == nil {
		list = []report.Summary{}
	}
	c.JSON(http.StatusOK, list)
}

// report serves GET /api/v1/reports/{id}: the stored report as JSON, or
// rendered with ?format=html or md.
func (s *server) report(c *gin.Context) {
	format := c.DefaultQuery("format", "json")
	ctype := map[string]string{"json": "application/json; charset=utf-8", "html": "text/html; charset=utf-8", "md": "text/markdown; charset=utf-8"}[format]
	if ctype == "" {
		s.fail(c, http.StatusBadRequest, fmt.Errorf("format %q: want json, html or md", format))
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout)
	defer cancel()
	r, err := s.cfg.Reports.Get(ctx, c.Param("id"))
	if err == nil && !who(c).Within(r.Clusters) {
		// A report of other clusters, or of every cluster, is one this
		// reader cannot see whole: exactly what an unknown ID gets.
		err = fmt.Errorf("%w: report %q", report.ErrNotFound, c.Param("id"))
	}
	if errors.Is(err, report.ErrNotFound) {
		s.fail(c, http.StatusNotFound, err)
		return
	}
	if err != nil {
		s.failReports(c, err)
		return
	}
	c.Header("Content-Type", ctype)
	c.Status(http.StatusOK)
	if err := report.Render(c.Writer, format, r); err != nil {
		s.cfg.Logger.Error("api", "path", c.Request.URL.Path, "err", err)
	}
}

// failReports answers a failed read of stored reports: 503 when it ran out
// of time.
func (s *server) failReports(c *gin.Context, err error) {
	if errors.Is(err, context.DeadlineExceeded) {
		s.fail(c, http.StatusServiceUnavailable, fmt.Errorf("reading reports took longer than %s (serve --query-timeout): %w", s.cfg.QueryTimeout, err))
		return
	}
	s.fail(c, http.StatusInternalServerError, err)
}
