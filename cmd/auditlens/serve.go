package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/internal/bounded"
	"github.com/auditlens/auditlens/internal/health"
	"github.com/auditlens/auditlens/report"
	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/web"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "[flags]", stderr)
	var (
		sf            storeFlags
		dataDir       = fs.String("data", "./data", "directory for the spool and, with the default store, the embedded database")
		listen        = fs.String("listen", "127.0.0.1:8080", "address for the webhook, API and metrics")
		defCluster    = fs.String("default-cluster", "default", "cluster name for events posted to /audit without one")
		logLevel      = logLevelFlag(fs, "info")
		configFile    = fs.String("config", "", "configuration file (YAML): scheduled reports and their outputs, alert routes, detector parameters (see docs/configuration.md)")
		storeGrace    = fs.Duration("ready-store-grace", 2*time.Minute, "/readyz fails once the store has failed this long (the spool keeps accepting meanwhile); it fails at once while the spool refuses writes")
		openReads     = fs.Bool(insecureReadsFlag, false, "serve the read API and UI WITHOUT authentication on a non-loopback --listen address: anyone who reaches it reads every audit event (who did what, from where)")
		webhookTokens multiFlag
		tf            tlsFlags
		rd            readFlags
		qf            queryFlags
		wf            writerFlags
		df            detectFlags
		rf            redactFlags
		of            oidcFlags
	)
	sf.register(fs, "")
	limits := bounded.Defaults()
	limits.RegisterFlags(fs)
	for _, g := range []interface{ register(*flag.FlagSet) }{&tf, &rd, &qf, &wf, &df, &rf, &of} {
		g.register(fs)
	}
	fs.Var(&webhookTokens, "webhook-token", "TOKEN=CLUSTER or TOKEN=CLUSTER/APISERVER: accept webhook and OTLP posts bearing this token as that cluster (and apiserver of it) (repeatable; when set, a token is required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	if err := limits.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	cfg, err := loadConfig(*configFile, log)
	if err != nil {
		return err
	}
	reports, alerts := cfg.Reports, cfg.Alerts
	if err := tf.validate(); err != nil {
		return err
	}
	readTokens, err := rd.tokens()
	if err != nil {
		return err
	}
	proxy, err := rd.proxy()
	if err != nil {
		return err
	}
	kubeAuth, err := rd.kubeAuth()
	if err != nil {
		return err
	}
	oidcCfg, secureCookies, err := of.config()
	if err != nil {
		return err
	}
	if err := checkReadAccess(*listen, len(readTokens) > 0 || kubeAuth || proxy != nil || oidcCfg != nil, tf.clientCA != "", *openReads); err != nil {
		return err
	}
	if *openReads && !loopbackAddr(*listen) {
		log.Warn("the read API and UI answer WITHOUT authentication on a non-loopback address: anyone who reaches "+*listen+
			" reads every audit event", "flag", "--"+insecureReadsFlag)
	}
	redactor, err := rf.redactor()
	if err != nil {
		return err
	}
	tokens := map[string]ingest.Source{}
	for _, t := range webhookTokens {
		tok, sender, ok := strings.Cut(t, "=")
		if !ok || tok == "" || sender == "" {
			return fmt.Errorf("%w: --webhook-token %q: want TOKEN=CLUSTER or TOKEN=CLUSTER/APISERVER", errUsage, t)
		}
		src, err := ingest.ParseSource(sender)
		if err != nil {
			return fmt.Errorf("%w: --webhook-token …=%s: %v", errUsage, sender, err)
		}
		tokens[tok] = src
	}
	tlsCfg, err := tf.config()
	if err != nil {
		return err
	}
	if sf.url == "" {
		abs, err := filepath.Abs(filepath.Join(*dataDir, "clickhouse"))
		if err != nil {
			return err
		}
		sf.url = store.ChdbURL(abs)
	}

	st, err := sf.open(ctx, log)
	if err != nil {
		return err
	}
	defer st.Close()
	reviewer, err := rd.reviewer(st)
	if err != nil {
		return err
	}
	if oidcCfg != nil {
		// A provider that does not answer now is tried again at each
		// sign-in; say so now rather than at the first one.
		if err := checkOIDC(ctx, oidcCfg); err != nil {
			log.Warn("OIDC provider does not answer yet; sign-in will retry it", "err", err)
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := ingest.NewMetrics(reg)
	stopDetect, err := startDetectors(st, df, cfg.Detectors, log, reg)
	if err != nil {
		return err
	}
	defer stopDetect() // before st.Close: deferred calls run last first
	stopReports, err := startReports(st, reports, log, reg)
	if err != nil {
		return err
	}
	defer stopReports()
	if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		return fmt.Errorf("creating --data: %w", err)
	}
	stopAlerts, err := startAlerts(st, alerts, filepath.Join(*dataDir, "alerts-sent.json"), log, reg)
	if err != nil {
		return err
	}
	defer stopAlerts()

	sp, err := ingest.OpenSpool(ingest.SpoolConfig{Dir: filepath.Join(*dataDir, "spool"), Logger: log})
	if err != nil {
		return err
	}
	if s := sp.Stats(); s.PendingRecords > 0 {
		log.Info("replaying spooled batches not yet stored", "batches", s.PendingRecords)
	}
	writer := ingest.NewWriter(st, ingest.WriterConfig{MaxRows: wf.rows, MaxWait: wf.wait, Logger: log, Metrics: metrics})
	wctx, stopWriter := context.WithCancel(context.Background())
	writerDone := make(chan error, 1)
	go func() { writerDone <- writer.RunSpool(wctx, sp, wf.drain) }()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		stopWriter()
		<-writerDone
		sp.Close()
		return fmt.Errorf("listening on %s: %w", *listen, err)
	}
	base := fmt.Sprintf("%s://%s", tf.scheme(), ln.Addr())
	kubeconfig := webhookKubeconfig(base+"/audit/my-cluster", tf.clientCA != "", len(tokens) > 0)
	kcPath := filepath.Join(*dataDir, "webhook-kubeconfig.yaml")
	if err := os.WriteFile(kcPath, []byte(kubeconfig), 0o644); err != nil {
		log.Warn("writing the example webhook kubeconfig", "err", err)
	}

	// Ready once listening, until shutting down; meanwhile not while the
	// spool refuses writes, nor once the store has failed for longer than
	// --ready-store-grace.
	var ready atomic.Bool
	var readiness health.Readiness
	readiness.Add(sp.Health(), 0)
	readiness.Add(writer.Health(), *storeGrace)
	readyErr := func() error {
		if !ready.Load() {
			return errors.New("starting or shutting down")
		}
		return readiness.Err()
	}
	// The OTLP logs receiver authenticates as the webhook does, with the
	// same tokens and limits.
	receiverCfg := ingest.WebhookConfig{
		MaxBodyBytes: limits.MaxBodyBytes, Tokens: tokens, DefaultCluster: *defCluster, Redactor: redactor, Logger: log, Metrics: metrics,
	}
	handler := web.NewRouter(web.Config{
		Webhook:         ingest.NewWebhook(sp, receiverCfg),
		OTLPLogs:        ingest.NewOTLPLogs(sp, receiverCfg),
		Store:           st,
		Findings:        detect.NewRepository(st, nil),
		Reports:         report.NewRepository(st),
		Gatherer:        reg,
		QueryLimits:     qf.limits(),
		QueryTimeout:    qf.timeout,
		MaxConcurrentJQ: qf.jqConcurrent,
		APITokens:       readTokens,
		Reviewer:        reviewer,
		Proxy:           proxy,
		OIDC:            oidcCfg,
		SecureCookies:   secureCookies,
		Ready:           readyErr,
		Logger:          log,
		Info:            kubeconfig,
	})
	// Requests answered by the listener's bounds count with the
	// receivers' own answers.
	limits.Refused = func(r *http.Request, code int) {
		switch p := r.URL.Path; {
		case strings.HasPrefix(p, "/audit"):
			metrics.Requests.WithLabelValues(strconv.Itoa(code)).Inc()
		case strings.HasPrefix(p, "/otlp/"), p == "/v1/logs":
			metrics.OTLPRequests.WithLabelValues(strconv.Itoa(code)).Inc()
		}
	}
	srv := bounded.NewServer(handler, limits, log)
	ln = srv.Listener(ln)
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "auditlens_http_connections", Help: "Client connections open now (at most --max-conns)."},
			func() float64 { return float64(srv.Stats().Open) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "auditlens_http_connections_refused_total", Help: "Connections answered 503 or closed unanswered because --max-conns were open and none quiet."},
			func() float64 { return float64(srv.Stats().Refused) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "auditlens_http_connections_evicted_total", Help: "Quiet connections closed to make room for a newcomer at --max-conns."},
			func() float64 { return float64(srv.Stats().Evicted) }),
	)
	if tlsCfg != nil {
		srv.TLSConfig = tlsCfg
		ln = tls.NewListener(ln, tlsCfg)
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	ready.Store(true)
	log.Info("auditlens serving", "url", base, "store", st.Kind(), "data", *dataDir)
	fmt.Fprintf(stdout, `auditlens %s is listening on %s (store: %s)

Point a kube-apiserver at it with these flags:
  --audit-policy-file=deploy/audit-policy.yaml
  --audit-webhook-config-file=%s
  --audit-webhook-batch-max-wait=5s

%s (the path /audit/my-cluster names the cluster; on an HA control plane give
each apiserver its own kubeconfig with /audit/my-cluster/APISERVER, or
use auditlens webhook-config --cluster NAME --apiserver NAME)

An OpenTelemetry Collector ships the apiserver's --audit-log-path with its
otlphttp exporter to %s/otlp/my-cluster/v1/logs (deploy/otelcol/config.yaml).

Events: %s/api/v1/events?since=15m    Metrics: %s/metrics
`, version, base, st.Kind(), kcPath, kubeconfig, base, base, base)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			runErr = fmt.Errorf("serving HTTP: %w", err)
		}
	case err := <-writerDone:
		// The writer only stops on its own for an unrecoverable spool error.
		writerDone <- err
		runErr = fmt.Errorf("writer stopped: %w", err)
	}
	// Shut down in order: fail readiness, stop accepting and finish
	// in-flight requests, store what is spooled, close the store.
	ready.Store(false)
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("HTTP shutdown", "err", err)
	}
	cancel()
	stopWriter()
	if err := <-writerDone; err != nil && !errors.Is(err, context.Canceled) {
		log.Warn("writer", "err", err)
	}
	if err := sp.Close(); err != nil {
		log.Warn("closing spool", "err", err)
	}
	if s := sp.Stats(); s.PendingRecords > 0 {
		log.Info("batches left in the spool for the next start", "batches", s.PendingRecords)
	}
	return runErr
}

// webhookKubeconfig renders the example kubeconfig serve prints and writes
// for --audit-webhook-config-file: paths where a kube-apiserver host
// usually keeps the files, and a token placeholder (auditlens
// webhook-config writes a real one).
func webhookKubeconfig(url string, clientCert, token bool) string {
	s := webhookKubeconfigSpec{Server: url}
	if clientCert {
		s.ClientCert, s.ClientKey = "/etc/kubernetes/audit/client.crt", "/etc/kubernetes/audit/client.key"
	}
	if token {
		s.Token = "REPLACE-WITH-A-WEBHOOK-TOKEN"
	}
	if strings.HasPrefix(url, "https://") {
		s.CA = "/etc/kubernetes/audit/auditlens-ca.crt"
	}
	return renderWebhookKubeconfig(s)
}
