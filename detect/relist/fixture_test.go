package relist_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/heartbeatloss"
	"github.com/auditlens/auditlens/detect/relist"
	"github.com/auditlens/auditlens/detect/rollback"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/ingest"
)

// TestRelistFixtures runs relist-loop and relist-herd over every audit log
// a real kube-apiserver wrote in the end-to-end scenarios
// (deploy/e2e/fixtures): the real kube-controller-manager's relist loop
// behind the expiring proxy is one finding with the turns the run counted;
// every other real log (the controller-manager starting and listing
// everything, the watch loop, healthy clients, and the busy cluster's
// kubelets reading each new Pod's ConfigMaps and Secrets) is silent, but
// for herds that a heartbeat-loss or rv-rollback finding of the same log
// explains.
func TestRelistFixtures(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	logs, err := filepath.Glob(filepath.Join("..", "..", "deploy", "e2e", "fixtures", "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no e2e fixtures: %v", err)
	}
	// The busy cluster's recordings, gzipped.
	busy, err := filepath.Glob(filepath.Join("..", "..", "deploy", "e2e", "fixtures", "busy-*.log.gz"))
	if err != nil || len(busy) == 0 {
		t.Fatalf("no busy-cluster recordings: %v", err)
	}
	for _, path := range append(logs, busy...) {
		name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".gz"), ".log")
		t.Run(name, func(t *testing.T) {
			var exp struct {
				RelistLoop *struct {
					User       string `json:"user"`
					Resource   string `json:"resource"`
					Iterations int    `json:"iterations"`
				} `json:"relist_loop"`
			}
			b, err := os.ReadFile(filepath.Join(filepath.Dir(path), name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &exp); err != nil {
				t.Fatal(err)
			}
			cluster := "relist-fixture-" + name
			stats, err := ingest.Import(context.Background(), ingest.NewWriter(st, ingest.WriterConfig{}), []string{path},
				ingest.ImportConfig{Cluster: cluster})
			if err != nil || stats.Rejected != 0 {
				t.Fatalf("importing %s: %v (%d rejected)", path, err, stats.Rejected)
			}
			w := detecttest.Span(stats, cluster)
			loops := detecttest.Evaluate(t, relist.NewLoop(relist.LoopConfig{}), st, w)
			// The detectors Default() runs before relist-herd, stored as the
			// Runner stores them: a herd they explain is part of them.
			causes := map[string]bool{}
			repo := detect.NewRepository(st, nil)
			for _, d := range []detect.Detector{heartbeatloss.New(heartbeatloss.Config{}), rollback.New(rollback.Config{})} {
				fs := detecttest.Evaluate(t, d, st, w)
				if err := repo.Upsert(context.Background(), fs); err != nil {
					t.Fatal(err)
				}
				for _, f := range fs {
					causes[f.ID] = true
				}
			}
			for _, f := range detecttest.Evaluate(t, relist.NewHerd(relist.HerdConfig{}), st, w) {
				if !causes[f.Subjects.PartOf] || f.Severity != detect.Info {
					t.Errorf("relist-herd finding %s (part of %q, %s)", f.Title, f.Subjects.PartOf, f.Severity)
				}
			}
			if exp.RelistLoop == nil {
				for _, f := range loops {
					t.Errorf("relist-loop finding %s", f.Title)
				}
				return
			}
			if len(loops) != 1 {
				t.Fatalf("%d relist-loop findings, want 1", len(loops))
			}
			f := loops[0]
			if f.Subjects.User != exp.RelistLoop.User || f.Subjects.Resource != exp.RelistLoop.Resource ||
				f.Subjects.Iterations != exp.RelistLoop.Iterations || f.Severity != detect.Warning {
				t.Errorf("finding %s: %s on %s, %d turns, severity %s; want %s on %s, %d turns, warning", f.ID, f.Subjects.User,
					f.Subjects.Resource, f.Subjects.Iterations, f.Severity, exp.RelistLoop.User, exp.RelistLoop.Resource, exp.RelistLoop.Iterations)
			}
			t.Logf("%s\n%s", f.Title, f.Summary)
		})
	}
}
