package ingest

import (
	"compress/gzip"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/store"
)

// WebhookConfig configures the audit webhook receiver.
type WebhookConfig struct {
	// MaxBodyBytes bounds one request body (default 64 MiB: 400 events of
	// up to the apiserver's 100 KiB truncation limit, with room to spare).
	// Larger bodies get 413.
	MaxBodyBytes int64
	// Tokens maps bearer tokens to cluster names. When not empty, every
	// request must carry one of them, and the token decides the cluster.
	Tokens map[string]string
	// DefaultCluster names events posted to /audit with no cluster in the
	// path, token or client certificate (default "default").
	DefaultCluster string
	// AppendTimeout bounds the wait for the spool (default 20s, below the
	// apiserver's 30s webhook timeout).
	AppendTimeout time.Duration
	Logger        *slog.Logger
	Metrics       *Metrics
}

// Webhook receives audit.k8s.io EventList batches from kube-apiserver's
// webhook backend at POST /audit/{cluster}. It answers 200 only after the
// batch's good events are durable in the spool.
type Webhook struct {
	sp  Appender
	cfg WebhookConfig
}

// Appender is the spool as the webhook uses it: it stores the raw events
// of decoded rows durably before returning.
type Appender interface {
	AppendRows(ctx context.Context, cluster string, rows []store.Row) error
}

// NewWebhook returns a handler that spools into sp.
func NewWebhook(sp Appender, cfg WebhookConfig) *Webhook {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 64 << 20
	}
	if cfg.DefaultCluster == "" {
		cfg.DefaultCluster = "default"
	}
	if cfg.AppendTimeout <= 0 {
		cfg.AppendTimeout = 20 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return &Webhook{sp: sp, cfg: cfg}
}

// WebhookResponse is the body of every webhook answer.
type WebhookResponse struct {
	Accepted int      `json:"accepted"`
	Rejected int      `json:"rejected"`
	Rejects  []Reject `json:"rejects,omitempty"`
	Error    string   `json:"error,omitempty"`
}

type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func errorf(code int, format string, args ...any) error {
	return &httpError{code: code, msg: fmt.Sprintf(format, args...)}
}

// maxRejectsShown caps the rejects listed in one response.
const maxRejectsShown = 100

var clusterName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ServeHTTP implements http.Handler. The one place that writes responses.
func (h *Webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	resp, err := h.serve(r)
	code := http.StatusOK
	if err != nil {
		var he *httpError
		if errors.As(err, &he) {
			code = he.code
		} else {
			code = http.StatusInternalServerError
		}
		resp.Error = err.Error()
		if code >= 500 {
			h.cfg.Logger.Error("webhook", "err", err, "remote", r.RemoteAddr)
		}
	}
	h.cfg.Metrics.Requests.WithLabelValues(strconv.Itoa(code)).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(resp)
}

func (h *Webhook) serve(r *http.Request) (WebhookResponse, error) {
	var resp WebhookResponse
	if r.Method != http.MethodPost {
		return resp, errorf(http.StatusMethodNotAllowed, "the audit webhook accepts POST, not %s", r.Method)
	}
	cluster, err := h.cluster(r)
	if err != nil {
		return resp, err
	}
	body, err := h.readBody(r)
	if err != nil {
		return resp, err
	}
	batch, err := DecodeBody(cluster, body)
	if err != nil {
		if errors.Is(err, ErrNotAudit) {
			return resp, errorf(http.StatusBadRequest, "%v", err)
		}
		return resp, errorf(http.StatusBadRequest, "decoding audit events: %v", err)
	}
	resp.Accepted = len(batch.Rows)
	resp.Rejected = len(batch.Rejects)
	if len(batch.Rejects) > 0 {
		h.cfg.Metrics.Rejected.WithLabelValues(cluster).Add(float64(len(batch.Rejects)))
		resp.Rejects = batch.Rejects[:min(len(batch.Rejects), maxRejectsShown)]
	}
	if len(batch.Rows) == 0 {
		if len(batch.Rejects) > 0 {
			return resp, errorf(http.StatusBadRequest, "every event in the batch was malformed; see rejects")
		}
		return resp, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.AppendTimeout)
	defer cancel()
	start := time.Now()
	if err := h.sp.AppendRows(ctx, cluster, batch.Rows); err != nil {
		resp.Accepted = 0
		// 503: the apiserver retries the whole batch later.
		return resp, errorf(http.StatusServiceUnavailable, "events not accepted, retry later: %v", err)
	}
	h.cfg.Metrics.SpoolSeconds.Observe(time.Since(start).Seconds())
	h.cfg.Metrics.Received.WithLabelValues(cluster).Add(float64(len(batch.Rows)))
	return resp, nil
}

func (h *Webhook) readBody(r *http.Request) ([]byte, error) {
	var rd io.Reader = http.MaxBytesReader(nil, r.Body, h.cfg.MaxBodyBytes)
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(rd)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "reading gzip body: %v", err)
		}
		defer zr.Close()
		rd = io.LimitReader(zr, h.cfg.MaxBodyBytes+1)
	default:
		return nil, errorf(http.StatusUnsupportedMediaType, "unsupported Content-Encoding %q (send identity or gzip)", enc)
	}
	body, err := io.ReadAll(rd)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errorf(http.StatusRequestEntityTooLarge, "body larger than %d bytes; lower --audit-webhook-batch-max-size on the apiserver or raise --max-body-bytes", h.cfg.MaxBodyBytes)
		}
		return nil, errorf(http.StatusBadRequest, "reading body: %v", err)
	}
	if int64(len(body)) > h.cfg.MaxBodyBytes {
		return nil, errorf(http.StatusRequestEntityTooLarge, "decompressed body larger than %d bytes", h.cfg.MaxBodyBytes)
	}
	return body, nil
}

// cluster decides which cluster sent the request: a bearer token's cluster,
// else the URL path (/audit/{cluster}), else a verified client
// certificate's common name, else the default.
func (h *Webhook) cluster(r *http.Request) (string, error) {
	pathCluster := ""
	if rest, ok := strings.CutPrefix(r.URL.Path, "/audit"); ok {
		pathCluster = strings.Trim(rest, "/")
	}
	if pathCluster != "" && !clusterName.MatchString(pathCluster) {
		return "", errorf(http.StatusBadRequest, "cluster name %q in the path must be 1-63 letters, digits, '.', '_' or '-'", pathCluster)
	}
	if len(h.cfg.Tokens) > 0 {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || tok == "" {
			return "", errorf(http.StatusUnauthorized, "a bearer token is required")
		}
		cluster := ""
		for t, c := range h.cfg.Tokens {
			if subtle.ConstantTimeCompare([]byte(t), []byte(tok)) == 1 {
				cluster = c
			}
		}
		if cluster == "" {
			return "", errorf(http.StatusUnauthorized, "unknown bearer token")
		}
		if pathCluster != "" && pathCluster != cluster {
			return "", errorf(http.StatusForbidden, "this token sends for cluster %q, not %q", cluster, pathCluster)
		}
		return cluster, nil
	}
	if pathCluster != "" {
		return pathCluster, nil
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		if cn := r.TLS.VerifiedChains[0][0].Subject.CommonName; clusterName.MatchString(cn) {
			return cn, nil
		}
	}
	return h.cfg.DefaultCluster, nil
}
