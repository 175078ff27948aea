package ingest

import (
	"compress/gzip"
	"context"

	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/store"
)

// WebhookConfig configures the audit webhook receiver.
type WebhookConfig struct {
	// MaxBodyBytes bounds one request body (default 64 MiB: 400 events of
	// up to the apiserver's 100 KiB truncation limit, with room to spare).
	// Larger bodies get 413.
	MaxBodyBytes int64
	// Tokens maps bearer tokens to their senders: a cluster, or one
	// apiserver of a cluster. When not empty, every request must carry one
	// of them, and the token decides the cluster (and the apiserver, when
	// it names one).
	Tokens map[string]Source
	// DefaultCluster names events posted to /audit with no cluster in the
	// path, token or client certificate (default "default").
	DefaultCluster string
	// AppendTimeout bounds the wait for the spool (default 20s, below the
	// apiserver's 30s webhook timeout).
	AppendTimeout time.Duration
	// Redactor cuts what must never be stored out of each event before it
	// is spooled (nil: nothing).
	Redactor *Redactor
	Logger   *slog.Logger
	Metrics  *Metrics
}

// Webhook receives audit.k8s.io EventList batches from kube-apiserver's
// webhook backend at POST /audit/{cluster} or /audit/{cluster}/{apiserver}.
// It answers 200 only after the batch's good events are durable in the
// spool.
type Webhook struct {
	sp  Appender
	cfg WebhookConfig
}

// Appender is the spool as the webhook uses it: it stores the raw events
// of decoded rows, and their source, durably before returning.
type Appender interface {
	AppendRows(ctx context.Context, src Source, rows []store.Row) error
}

// NewWebhook returns a handler that spools into sp.
func NewWebhook(sp Appender, cfg WebhookConfig) *Webhook {
	cfg.setDefaults()
	return &Webhook{sp: sp, cfg: cfg}
}

func (cfg *WebhookConfig) setDefaults() {
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
		// 503: the spool refused, and its health logs that once.
		if code >= 500 && code != http.StatusServiceUnavailable {
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
	if err := fromBrowser(r); err != nil {
		return resp, err
	}
	if err := jsonOnly(r); err != nil {
		return resp, err
	}
	src, err := h.source(r)
	if err != nil {
		return resp, err
	}
	cluster := src.Cluster
	body, err := readBody(r, h.cfg.MaxBodyBytes, "lower --audit-webhook-batch-max-size on the apiserver or raise --max-body-bytes")
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
	src.tag(batch.Rows)
	if n := h.cfg.Redactor.Apply(batch.Rows); n > 0 {
		h.cfg.Metrics.Redacted.Add(float64(n))
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
	if err := h.sp.AppendRows(ctx, src, batch.Rows); err != nil {
		resp.Accepted = 0
		// 503: the apiserver retries the whole batch later.
		return resp, errorf(http.StatusServiceUnavailable, "events not accepted, retry later: %v", err)
	}
	h.cfg.Metrics.SpoolSeconds.Observe(time.Since(start).Seconds())
	h.cfg.Metrics.Received.WithLabelValues(cluster).Add(float64(len(batch.Rows)))
	return resp, nil
}

// readBody reads a request body of at most maxBytes, after gzip
// decompression when it is so encoded. fix says, in a 413, how the sender
// can stay below the limit.
func readBody(r *http.Request, maxBytes int64, fix string) ([]byte, error) {
	var rd io.Reader = http.MaxBytesReader(nil, r.Body, maxBytes)
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(rd)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "reading gzip body: %v", err)
		}
		defer zr.Close()
		rd = io.LimitReader(zr, maxBytes+1)
	default:
		return nil, errorf(http.StatusUnsupportedMediaType, "unsupported Content-Encoding %q (send identity or gzip)", enc)
	}
	body, err := io.ReadAll(rd)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errorf(http.StatusRequestEntityTooLarge, "body larger than %d bytes; %s", maxBytes, fix)
		}
		return nil, errorf(http.StatusBadRequest, "reading body: %v", err)
	}
	if int64(len(body)) > maxBytes {
		return nil, errorf(http.StatusRequestEntityTooLarge, "decompressed body larger than %d bytes; %s", maxBytes, fix)
	}
	return body, nil
}

// source decides who sent a webhook request: the cluster and, when it is
// said, which of its apiservers. The URL path is /audit, /audit/{cluster}
// or /audit/{cluster}/{apiserver}; the rest is identify's.
func (h *Webhook) source(r *http.Request) (Source, error) {
	var path Source
	if rest, ok := strings.CutPrefix(r.URL.Path, "/audit"); ok {
		var err error
		if path, err = pathSource(rest, "/audit, /audit/{cluster} or /audit/{cluster}/{apiserver}", r.URL.Path); err != nil {
			return Source{}, err
		}
	}
	src, err := identify(r, h.cfg.Tokens, path)
	if err != nil {
		return Source{}, err
	}
	if src.Cluster == "" {
		src = Source{Cluster: h.cfg.DefaultCluster}
	}
	return src, nil
}

// pathSource reads the cluster and apiserver a URL path names: rest is
// the path after the receiver's prefix, "", "/{cluster}" or
// "/{cluster}/{apiserver}" (a trailing slash allowed). want describes the
// accepted paths for the error.
func pathSource(rest, want, full string) (Source, error) {
	var path Source
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	switch {
	case len(parts) > 2:
		return Source{}, errorf(http.StatusBadRequest, "path %q: want %s", full, want)
	case parts[0] == "":
	case !ValidName(parts[0]):
		return Source{}, errorf(http.StatusBadRequest, "cluster name %q in the path must be %s", parts[0], NameRule)
	default:
		path.Cluster = parts[0]
	}
	if len(parts) == 2 {
		if !ValidName(parts[1]) {
			return Source{}, errorf(http.StatusBadRequest, "apiserver name %q in the path must be %s", parts[1], NameRule)
		}
		path.APIServer = parts[1]
	}
	return path, nil
}

// identify decides who sent a request to a receiver (the webhook, the
// OTLP logs receiver) from its credentials and the Source its URL path
// names. It returns a Source with an empty Cluster when nothing names one;
// the caller falls back on its own default.
//
//   - With tokens set, the bearer token's Source (a token is required). A
//     path may repeat its cluster, not name another (403); a token of a
//     cluster alone lets the path name the apiserver, a token of one
//     apiserver refuses a path naming another.
//   - Else the path.
//   - Else a verified client certificate: its common name (CN) is the
//     cluster and its first organizational unit (OU) that is a valid name,
//     if any, the apiserver. With a path naming the cluster, the
//     certificate still names the apiserver when its CN is that cluster.
func identify(r *http.Request, tokens map[string]Source, path Source) (Source, error) {
	if len(tokens) > 0 {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || tok == "" {
			return Source{}, errorf(http.StatusUnauthorized, "a bearer token is required")
		}
		var src Source
		for t, s := range tokens {
			if auth.EqualSecret(t, tok) {
				src = s
			}
		}
		if src.Cluster == "" {
			return Source{}, errorf(http.StatusUnauthorized, "unknown bearer token")
		}
		if path.Cluster != "" && path.Cluster != src.Cluster {
			return Source{}, errorf(http.StatusForbidden, "this token sends for cluster %q, not %q", src.Cluster, path.Cluster)
		}
		if path.APIServer != "" && src.APIServer != "" && path.APIServer != src.APIServer {
			return Source{}, errorf(http.StatusForbidden, "this token sends for apiserver %q of cluster %q, not %q", src.APIServer, src.Cluster, path.APIServer)
		}
		if src.APIServer == "" {
			src.APIServer = path.APIServer
		}
		return src, nil
	}
	var cert Source
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		subject := r.TLS.VerifiedChains[0][0].Subject
		if ValidName(subject.CommonName) {
			cert.Cluster = subject.CommonName
			for _, ou := range subject.OrganizationalUnit {
				if ValidName(ou) {
					cert.APIServer = ou
					break
				}
			}
		}
	}
	switch {
	case path.Cluster != "":
		if path.APIServer == "" && cert.Cluster == path.Cluster {
			path.APIServer = cert.APIServer
		}
		return path, nil
	case cert.Cluster != "":
		return cert, nil
	}
	return Source{}, nil
}
