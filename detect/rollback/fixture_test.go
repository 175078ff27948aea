package rollback_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/rollback"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/ingest"
)

// TestRVRollbackFixtures runs rv-rollback over real kube-apiserver 1.37
// logs of etcd 3.6 restored with etcdutl while the real
// kube-controller-manager and fake kubelets kept running: without
// --bump-revision one critical finding whose resourceVersions are the
// ones etcd had (before) and handed out first again (after), with the
// kubelets' 409s and the clients left in the future; with
// --bump-revision --mark-compacted no critical finding.
func TestRVRollbackFixtures(t *testing.T) {
	st := detecttest.Engine(t)
	for _, name := range []string{"rv-rollback", "rv-rollback-bumped"} {
		t.Run(name, func(t *testing.T) {
			dir := detecttest.RollbackFixtures()
			var exp struct {
				Cluster string `json:"cluster"`
				RV      struct {
					Bump       int64  `json:"bump"`
					MaxBefore  uint64 `json:"driver_max_before"`
					HeadBefore uint64 `json:"etcd_head_before"`
					Restored   uint64 `json:"etcd_head_restored"`
					Conflicts  int    `json:"lease_conflicts"`
					Stale      int    `json:"stale_watches"`
				} `json:"rv_rollback"`
			}
			b, err := os.ReadFile(filepath.Join(dir, name+".json"))
			if err != nil { // committed: deploy/e2e records them
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &exp); err != nil {
				t.Fatal(err)
			}
			cluster := "fixture-" + name
			stats, err := ingest.Import(context.Background(), ingest.NewWriter(st, ingest.WriterConfig{}),
				[]string{filepath.Join(dir, name+".log")}, ingest.ImportConfig{Cluster: cluster})
			if err != nil || stats.Rejected != 0 {
				t.Fatalf("importing: %v (%d rejected)", err, stats.Rejected)
			}
			w := detect.Window{Since: stats.First, Until: stats.Last.Add(time.Microsecond), Clusters: []string{cluster}}
			got := detecttest.Evaluate(t, rollback.New(rollback.Config{}), st, w)
			for _, f := range got {
				t.Logf("%s %s\n%s", f.Severity, f.Title, f.Summary)
				roles := map[string]int{}
				for _, e := range f.Evidence {
					roles[e.Role]++
				}
				t.Logf("roles %v objects %v conflicts %d relists %d", roles, f.Objects, f.Subjects.Conflicts, f.Subjects.Relists)
			}
			if exp.RV.Bump > 0 {
				for _, f := range got {
					if f.Severity != detect.Info {
						t.Errorf("%s finding after a restore with --bump-revision: %s", f.Severity, f.Title)
					}
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d findings, want 1", len(got))
			}
			f := got[0]
			before, _ := strconv.ParseUint(f.Subjects.PreviousResourceVersion, 10, 64)
			after, _ := strconv.ParseUint(f.Subjects.ResourceVersion, 10, 64)
			if f.Severity != detect.Critical || before < exp.RV.MaxBefore || before > exp.RV.HeadBefore ||
				after+50 < exp.RV.Restored || after > exp.RV.Restored+50 {
				t.Errorf("%s from %d to %d; etcd had %d (the driver saw %d) and was restored to %d", f.Severity, before, after,
					exp.RV.HeadBefore, exp.RV.MaxBefore, exp.RV.Restored)
			}
			if f.Subjects.Conflicts < exp.RV.Conflicts {
				t.Errorf("%d conflicts, the driver saw %d Lease PUTs answered 409", f.Subjects.Conflicts, exp.RV.Conflicts)
			}
		})
	}
}

// TestRVRollbackSilentOnRealLogs runs rv-rollback over every other real
// kube-apiserver log of deploy/e2e (the watch loop, heartbeat loss, relist
// loops, healthy controllers, apiserver restarts among them): none holds
// a restore, so none may yield a finding.
func TestRVRollbackSilentOnRealLogs(t *testing.T) {
	st := detecttest.Engine(t)
	logs, err := filepath.Glob(filepath.Join(detecttest.RollbackFixtures(), "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) == 0 {
		t.Fatalf("no fixtures in %s: deploy/e2e's recordings are committed", detecttest.RollbackFixtures())
	}
	for _, path := range logs {
		name := strings.TrimSuffix(filepath.Base(path), ".log")
		if strings.HasPrefix(name, "rv-rollback") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			cluster := "silent-" + name
			stats, err := ingest.Import(context.Background(), ingest.NewWriter(st, ingest.WriterConfig{}), []string{path},
				ingest.ImportConfig{Cluster: cluster})
			if err != nil {
				t.Fatal(err)
			}
			w := detect.Window{Since: stats.First, Until: stats.Last.Add(time.Microsecond), Clusters: []string{cluster}}
			for _, f := range detecttest.Evaluate(t, rollback.New(rollback.Config{}), st, w) {
				t.Errorf("%s finding: %s", f.Severity, f.Title)
			}
		})
	}
}
