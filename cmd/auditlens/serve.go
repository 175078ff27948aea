package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
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

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/internal/bounded"
	"github.com/auditlens/auditlens/internal/health"
	"github.com/auditlens/auditlens/query"
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
		tlsCert       = fs.String("tls-cert", "", "serve HTTPS with this certificate (PEM)")
		tlsKey        = fs.String("tls-key", "", "private key for --tls-cert (PEM)")
		clientCA      = fs.String("client-ca", "", "require client certificates signed by this CA (PEM) on every request")
		defCluster    = fs.String("default-cluster", "default", "cluster name for events posted to /audit without one")
		queryTimeout  = fs.Duration("query-timeout", web.DefaultQueryTimeout, "longest an API query may run")
		jqTimeout     = fs.Duration("jq-timeout", query.DefaultTimeout, "longest a jq program may run per query")
		jqMaxOut      = fs.Int("jq-max-outputs", 100000, "most jq outputs per query")
		jqConcurrent  = fs.Int("jq-max-concurrent", web.DefaultMaxConcurrentJQ, "most jq queries running at once (each in its own worker process)")
		batchRows     = fs.Int("batch-rows", ingest.DefaultBatchRows, "largest insert into the store")
		batchWait     = fs.Duration("batch-wait", ingest.DefaultBatchWait, "longest the writer waits to fill an insert")
		drain         = fs.Duration("drain-timeout", 30*time.Second, "at shutdown, how long to keep storing spooled events (the rest is replayed at the next start)")
		logLevel      = logLevelFlag(fs, "info")
		configFile    = fs.String("config", "", "configuration file (YAML): scheduled reports and their outputs, alert routes, detector parameters (see docs/configuration.md)")
		webhookTokens multiFlag
		apiTokens     multiFlag
		apiTokenFile  = fs.String("api-token-file", "", "file of read tokens, one per line as --api-token takes them (TOKEN or TOKEN=CLUSTER,...; # comments): a mounted Secret, not visible in ps")
		kubeAuthKC    = fs.String("kube-auth-kubeconfig", "", "check other bearer tokens with the Kubernetes apiserver of this kubeconfig (TokenReview, then SubjectAccessReview of get clusters.auditlens.io per cluster; docs/access.md)")
		kubeAuthPod   = fs.Bool("kube-auth-in-cluster", false, "as --kube-auth-kubeconfig, with the pod's own service account and apiserver")
		kubeAuthTTL   = fs.Duration("kube-auth-cache-ttl", auth.DefaultKubeCacheTTL, "how long a token's reviews are reused: a removed RoleBinding takes effect within this")
		proxyUserHdr  = fs.String("auth-proxy-user-header", "X-Forwarded-User", "with --auth-proxy-from: the header naming the proxy's authenticated user")
		proxyGroupHdr = fs.String("auth-proxy-groups-header", "X-Forwarded-Groups", "with --auth-proxy-from: the header listing the user's groups (comma-separated, or repeated)")
		proxyFrom     multiFlag
		proxyGroups   multiFlag
		storeGrace    = fs.Duration("ready-store-grace", 2*time.Minute, "/readyz fails once the store has failed this long (the spool keeps accepting meanwhile); it fails at once while the spool refuses writes")
		openReads     = fs.Bool(insecureReadsFlag, false, "serve the read API and UI WITHOUT authentication on a non-loopback --listen address: anyone who reaches it reads every audit event (who did what, from where)")
	)
	sf.register(fs, "")
	limits := bounded.Defaults()
	limits.RegisterFlags(fs)
	var df detectFlags
	df.register(fs)
	var rf redactFlags
	rf.register(fs)
	var of oidcFlags
	of.register(fs)
	fs.Var(&webhookTokens, "webhook-token", "TOKEN=CLUSTER or TOKEN=CLUSTER/APISERVER: accept webhook and OTLP posts bearing this token as that cluster (and apiserver of it) (repeatable; when set, a token is required)")
	fs.Var(&proxyFrom, "auth-proxy-from", "CIDR: trust an authenticating proxy's user and groups headers on connections from these addresses only, e.g. 127.0.0.1/32 for a sidecar (repeatable)")
	fs.Var(&proxyGroups, "auth-proxy-group", "GROUP=CLUSTER[,CLUSTER...] or GROUP=*: what the proxy's users in GROUP may read (repeatable)")
	fs.Var(&apiTokens, "api-token", "TOKEN or TOKEN=CLUSTER[,CLUSTER...]: a bearer token the read API and UI accept, for every cluster or only these (repeatable)")
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
	if (*tlsCert == "") != (*tlsKey == "") {
		return fmt.Errorf("%w: --tls-cert and --tls-key go together", errUsage)
	}
	if *apiTokenFile != "" {
		toks, err := readTokenFile(*apiTokenFile)
		if err != nil {
			return err
		}
		apiTokens = append(apiTokens, toks...)
	}
	readTokens := make([]auth.APIToken, 0, len(apiTokens))
	for _, t := range apiTokens {
		rt, err := auth.ParseAPIToken(t, ingest.ValidName)
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		readTokens = append(readTokens, rt)
	}
	proxy, err := authProxy(proxyFrom, proxyGroups, *proxyUserHdr, *proxyGroupHdr)
	if err != nil {
		return err
	}
	if *kubeAuthKC != "" && *kubeAuthPod {
		return fmt.Errorf("%w: --kube-auth-kubeconfig and --kube-auth-in-cluster exclude each other", errUsage)
	}
	kubeAuth := *kubeAuthKC != "" || *kubeAuthPod
	oidcCfg, secureCookies, err := of.config()
	if err != nil {
		return err
	}
	if err := checkReadAccess(*listen, len(readTokens) > 0 || kubeAuth || proxy != nil || oidcCfg != nil, *clientCA != "", *openReads); err != nil {
		return err
	}
	if *openReads && !loopbackAddr(*listen) {
		log.Warn("the read API and UI answer WITHOUT authentication on a non-loopback address: anyone who reaches "+*listen+
			" reads every audit event", "flag", "--"+insecureReadsFlag)
	}
	if *clientCA != "" && *tlsCert == "" {
		return fmt.Errorf("%w: --client-ca needs --tls-cert and --tls-key", errUsage)
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
	var tlsCfg *tls.Config
	if *tlsCert != "" {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			return fmt.Errorf("loading TLS certificate: %w", err)
		}
		tlsCfg.Certificates = []tls.Certificate{cert}
		if *clientCA != "" {
			pem, err := os.ReadFile(*clientCA)
			if err != nil {
				return fmt.Errorf("reading --client-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("--client-ca %s holds no PEM certificate", *clientCA)
			}
			tlsCfg.ClientCAs = pool
			tlsCfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
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
	reviewer, err := newKubeReviewer(*kubeAuthKC, *kubeAuthPod, *kubeAuthTTL, st)
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
	writer := ingest.NewWriter(st, ingest.WriterConfig{MaxRows: *batchRows, MaxWait: *batchWait, Logger: log, Metrics: metrics})
	wctx, stopWriter := context.WithCancel(context.Background())
	writerDone := make(chan error, 1)
	go func() { writerDone <- writer.RunSpool(wctx, sp, *drain) }()

	scheme := "http"
	if *tlsCert != "" {
		scheme = "https"
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		stopWriter()
		<-writerDone
		sp.Close()
		return fmt.Errorf("listening on %s: %w", *listen, err)
	}
	base := fmt.Sprintf("%s://%s", scheme, ln.Addr())
	kubeconfig := webhookKubeconfig(base+"/audit/my-cluster", *clientCA != "", len(tokens) > 0)
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
		QueryLimits:     query.Limits{Timeout: *jqTimeout, MaxOutputs: *jqMaxOut, Worker: &query.ProcessRunner{Args: jqWorkerArgs}},
		QueryTimeout:    *queryTimeout,
		MaxConcurrentJQ: *jqConcurrent,
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
