package heartbeatloss_test

import (
	"path/filepath"
	"testing"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/heartbeatloss"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/gen/scenario"
)

// TestHeartbeatLossGolden pins the findings of a wave with evictions and
// of a silent feed (compressed traces) as the API and `scan --format json`
// show them.
func TestHeartbeatLossGolden(t *testing.T) {
	st := detecttest.Engine(t)
	var all []detect.Finding
	for _, name := range []string{"heartbeat-loss-partial-evictions", "heartbeat-feed-silent"} {
		sc, _ := scenario.ByName(name)
		tr := sc.Generate(scenario.Compressed, scenario.Start, 1)
		cluster := "golden-" + name
		w := detecttest.Span(detecttest.ImportTrace(t, st, tr, cluster), cluster)
		all = append(all, detecttest.Evaluate(t, heartbeatloss.New(heartbeatloss.Config{}), st, w)...)
	}
	detect.SortFindings(all)
	detecttest.CheckGolden(t, filepath.Join("testdata", "heartbeat-loss.golden.json"), all)
}
