// Package web serves auditlens over HTTP with gin: the audit webhook
// (POST /audit/{cluster}[/{apiserver}]), the OTLP logs receiver (POST
// /v1/logs, /otlp/{cluster}[/{apiserver}]/v1/logs), the read API under /api/v1, Prometheus metrics,
// health checks and the explorer UI (ui.go).
package web

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/query"
)

// Config wires the router.
type Config struct {
	// Webhook receives audit batches; nil turns the receiver off.
	Webhook http.Handler
	// OTLPLogs receives OTLP/HTTP log records holding audit events; nil
	// turns the receiver off.
	OTLPLogs http.Handler
	// Store answers queries; nil turns the query API off.
	Store query.Selecter
	// Findings serves /api/v1/findings; nil turns it off.
	Findings FindingsSource
	// Reports serves /api/v1/reports; nil turns it off.
	Reports ReportsSource
	// Gatherer serves /metrics; nil serves the default registry.
	Gatherer prometheus.Gatherer
	// QueryLimits bound jq programs run by /api/v1/events.
	QueryLimits query.Limits
	// MaxConcurrentJQ bounds the jq queries (each a worker process) running
	// at once (default DefaultMaxConcurrentJQ).
	MaxConcurrentJQ int
	// QueryTimeout bounds one API query (default DefaultQueryTimeout).
	QueryTimeout time.Duration
	// APITokens, when not empty, are the bearer tokens the read API
	// accepts, each with the clusters it may read. The webhook has its
	// own tokens.
	APITokens []auth.APIToken
	// Reviewer, when set, checks bearer tokens that are not APITokens.
	Reviewer TokenReviewer
	// Proxy, when set, trusts an authenticating proxy's user and groups
	// headers on connections from its addresses.
	Proxy *auth.Proxy
	// OIDC, when set, signs browsers in with an OpenID Connect provider
	// (GET /auth/oidc/login and /auth/oidc/callback).
	OIDC *OIDC
	// SecureCookies marks cookies Secure on plain HTTP too: serve behind
	// a TLS-terminating proxy, whose clients see https. Over TLS they
	// always are.
	SecureCookies bool
	// SessionTTL is how long a browser that signed in stays signed in
	// (default auth.DefaultSessionTTL).
	SessionTTL time.Duration
	// Ready says, for /readyz, why serve is not ready, or nil when it is;
	// a nil Ready is always ready.
	Ready  func() error
	Logger *slog.Logger
	// Now is the clock for relative time filters (default time.Now).
	Now func() time.Time
	// Info is shown on the landing page, e.g. the webhook kubeconfig.
	Info string
}

// The defaults of Config's bounds (serve's flags default to them too).
const (
	DefaultQueryTimeout    = 60 * time.Second
	DefaultMaxConcurrentJQ = 4
	// DefaultMaxJQOutputs is serve's bound on one API query's jq outputs
	// (QueryLimits.MaxOutputs), lower than a trusted caller's.
	DefaultMaxJQOutputs = 100_000
)

// NewRouter returns the HTTP handler for serve.
func NewRouter(cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.QueryTimeout <= 0 {
		cfg.QueryTimeout = DefaultQueryTimeout
	}
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.DefaultGatherer
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	// The client address is the TCP peer's: a forwarded-for header is
	// anyone's to send (logs and the sign-in limit read it).
	_ = r.SetTrustedProxies(nil)
	r.Use(gin.Recovery())
	if cfg.MaxConcurrentJQ <= 0 {
		cfg.MaxConcurrentJQ = DefaultMaxConcurrentJQ
	}
	s := &server{cfg: cfg, jqSlots: make(chan struct{}, cfg.MaxConcurrentJQ), sessions: auth.NewSessions(cfg.SessionTTL, cfg.Now), oidc: newOIDCFlows(cfg.Now), signInFailures: newFailureLimiter(cfg.Now)}
	for _, t := range cfg.APITokens {
		s.tokens = append(s.tokens, t.Token)
	}

	if cfg.Webhook != nil {
		h := gin.WrapH(cfg.Webhook)
		r.POST("/audit", h)
		r.POST("/audit/:cluster", h)
		r.POST("/audit/:cluster/:apiserver", h)
	}
	if cfg.OTLPLogs != nil {
		h := gin.WrapH(cfg.OTLPLogs)
		r.POST("/v1/logs", h)
		r.POST("/otlp/:cluster/v1/logs", h)
		r.POST("/otlp/:cluster/:apiserver/v1/logs", h)
	}
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})))
	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok\n") })
	r.GET("/readyz", func(c *gin.Context) {
		if cfg.Ready != nil {
			if err := cfg.Ready(); err != nil {
				c.String(http.StatusServiceUnavailable, "not ready: %s\n", err)
				return
			}
		}
		c.String(http.StatusOK, "ok\n")
	})
	s.routeUI(r)
	r.GET("/api/v1/session", s.getSession)
	r.POST("/api/v1/session", s.signIn)
	r.DELETE("/api/v1/session", s.signOut)
	if cfg.OIDC != nil {
		r.GET("/auth/oidc/login", s.oidcLogin)
		r.GET("/auth/oidc/callback", s.oidcCallback)
	}
	api := r.Group("/api/v1", s.auth)
	api.GET("/info", s.info)
	if cfg.Findings != nil {
		api.GET("/findings", s.findings)
		api.GET("/findings/:id", s.finding)
	}
	if cfg.Reports != nil {
		api.GET("/reports", s.reports)
		api.GET("/reports/:id", s.report)
	}
	if cfg.Store != nil {
		api.GET("/events", s.events)
		api.GET("/histogram", s.histogram)
		api.GET("/values", s.values)
		api.GET("/objects/history", s.objectHistory)
		api.GET("/heartbeats", s.heartbeats)
		api.GET("/resourceversions", s.resourceVersions)
	}
	return r
}

type server struct {
	cfg      Config
	jqSlots  chan struct{}
	sessions *auth.Sessions
	oidc     *oidcFlows
	// signInFailures bounds failed token sign-ins per client address.
	signInFailures *failureLimiter
	tokens         []string // cfg.APITokens' tokens, for auth.MatchSecret
}

// apiError is the one shape of API errors.
type apiError struct {
	Error string `json:"error"`
}

func (s *server) fail(c *gin.Context, code int, err error) {
	if code >= 500 {
		s.cfg.Logger.Error("api", "path", c.Request.URL.Path, "err", err)
	}
	c.AbortWithStatusJSON(code, apiError{Error: err.Error()})
}

// flushWriter flushes the response every few lines so results stream.
type flushWriter struct {
	w *bufio.Writer
	f http.Flusher
}

func (f flushWriter) Write(p []byte) (int, error) { return f.w.Write(p) }

func (f flushWriter) Flush() {
	_ = f.w.Flush()
	f.f.Flush()
}

func (s *server) events(c *gin.Context) {
	v := c.Request.URL.Query()
	f, err := query.ParseFilter(v, s.cfg.Now())
	if err != nil {
		s.fail(c, http.StatusBadRequest, err)
		return
	}
	f.Cluster = who(c).Scope(f.Cluster)
	var jq *query.JQ
	if prog := v.Get("jq"); prog != "" {
		jq, err = query.CompileJQ(prog)
		if err != nil {
			s.fail(c, http.StatusBadRequest, err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout)
	defer cancel()
	if jq != nil {
		// Each jq query runs in its own worker process; bound how many.
		select {
		case s.jqSlots <- struct{}{}:
			defer func() { <-s.jqSlots }()
		case <-time.After(2 * time.Second):
			s.fail(c, http.StatusServiceUnavailable, fmt.Errorf("more than %d jq queries are running; retry later (serve --jq-max-concurrent)", cap(s.jqSlots)))
			return
		}
	}
	c.Header("Content-Type", "application/x-ndjson")
	bw := bufio.NewWriterSize(c.Writer, 64<<10)
	out := flushWriter{w: bw, f: c.Writer}
	st, err := query.Events(ctx, s.cfg.Store, f, jq, s.cfg.QueryLimits, out)
	if err != nil {
		if st.Emitted == 0 && !c.Writer.Written() && bw.Buffered() == 0 {
			code := http.StatusInternalServerError
			switch {
			// The program or its limits are the caller's to fix: a jq error
			// on the data (or a crash of its worker) is not the server's.
			case errors.Is(err, query.ErrBadJQ), errors.Is(err, query.ErrLimit), errors.Is(err, query.ErrJQFailed):
				code = http.StatusBadRequest
			case errors.Is(err, context.DeadlineExceeded):
				code = http.StatusServiceUnavailable
				err = fmt.Errorf("query took longer than %s (serve --query-timeout): %w", s.cfg.QueryTimeout, err)
			}
			s.fail(c, code, err)
			return
		}
		// Mid-stream: the status is sent; end with an error line a client
		// can recognise.
		fmt.Fprintf(bw, "{\"error\":%q}\n", err.Error())
	}
	_ = bw.Flush()
}
