package main

import (
	"path/filepath"
	"testing"

	"github.com/auditlens/auditlens/config"
)

// TestDeployReportsConfigs loads the reports configuration each Kubernetes
// overlay mounts for serve --config as serve does at start (unknown keys,
// bad schedules and time zones are errors there); the rest of the
// manifests is checked by deploy/e2e TestManifestsDryRun against a real
// kube-apiserver.
func TestDeployReportsConfigs(t *testing.T) {
	files, err := filepath.Glob("../../deploy/kubernetes/overlays/*/reports.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no deploy/kubernetes/overlays/*/reports.yaml (%v)", err)
	}
	for _, f := range files {
		cfg, warnings, err := config.Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
		} else if len(cfg.Reports) == 0 {
			t.Errorf("%s defines no report", f)
		}
		if len(warnings) > 0 {
			t.Errorf("%s: %v", f, warnings)
		}
	}
}
