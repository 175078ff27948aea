package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/alert"
	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/store"
)

// startAlerts runs the notifier in the background; the returned function
// stops it and waits (call it before closing the store).
// statePath keeps what was sent across restarts ("" for none).
func startAlerts(st store.Store, cfg alert.Config, statePath string, log *slog.Logger, reg prometheus.Registerer) (func(), error) {
	n, err := alert.NewNotifier(cfg, detect.NewRepository(st, nil), alert.Options{Logger: log, Metrics: alert.NewMetrics(reg), StatePath: statePath})
	if err != nil {
		return nil, fmt.Errorf("%w: --config: alerts: %v", errUsage, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.Run(ctx) // returns ctx's error; pass errors are logged
	}()
	for _, r := range cfg.Routes {
		log.Info("alert route", "route", r.Name, "kind", r.Kind(), "min_severity", r.MinSeverity, "clusters", r.Clusters, "detectors", r.Detectors)
	}
	return func() { cancel(); <-done }, nil
}
