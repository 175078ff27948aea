package query

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

// TestAPIServerOnEmbeddedEngine: on an HA control plane the events of one
// cluster come from several apiservers; the filter selects them by
// apiserver, the histogram stacks and Values lists by it, and an object's
// history says which apiserver served each request.
func TestAPIServerOnEmbeddedEngine(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	t0 := time.Date(2024, 7, 1, 9, 0, 0, 0, time.UTC)
	var rows []store.Row
	for i, api := range []string{"master-1", "master-2", "master-1", ""} {
		id := string(rune('a' + i))
		verb := "delete"
		if i%2 == 1 {
			verb = "create"
		}
		rows = append(rows, store.Row{Cluster: "ha", APIServer: api, AuditID: id, Stage: "ResponseComplete", Verb: verb,
			Time: t0.Add(time.Duration(i) * time.Second), Resource: "endpoints", Namespace: "default", Name: "web", Code: 200,
			Raw: []byte(`{"auditID":"` + id + `"}`)})
	}
	rows = append(rows, store.Row{Cluster: "ha", APIServer: "master-2", AuditID: "w", Stage: "RequestReceived", Verb: "watch",
		Time: t0.Add(-time.Minute), Resource: "endpoints", Watch: true, RequestedRV: "7", Raw: []byte(`{"auditID":"w"}`)})
	if err := st.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	stats, err := Events(ctx, st, Filter{Cluster: []string{"ha"}, APIServer: []string{"master-1"}}, nil, Limits{}, &out)
	if err != nil || stats.Matched != 2 || out.String() != "{\"auditID\":\"a\"}\n{\"auditID\":\"c\"}\n" {
		t.Errorf("events of master-1: %+v %v\n%s", stats, err, out.String())
	}
	vals, err := Values(ctx, st, Filter{Cluster: []string{"ha"}}, "apiserver")
	if got, _ := json.Marshal(vals); err != nil || string(got) != `[{"value":"master-1","count":2},{"value":"master-2","count":2},{"value":"","count":1}]` {
		t.Errorf("values: %s %v", got, err)
	}
	h, err := HistogramEvents(ctx, st, Filter{Cluster: []string{"ha"}, Since: t0, Until: t0.Add(time.Minute)}, HistogramOptions{By: "apiserver", Buckets: 1})
	if got, _ := json.Marshal(h.Series); err != nil || string(got) != `[{"key":"master-1","total":2},{"key":"","total":1},{"key":"master-2","total":1}]` {
		t.Errorf("histogram series: %s %v", got, err)
	}
	hist, err := ObjectHistory(ctx, st, ObjectRef{Cluster: "ha", Resource: "endpoints", Namespace: "default", Name: "web"}, time.Time{}, time.Time{}, 0)
	if err != nil || len(hist.Events) != 4 || len(hist.Watches) != 1 {
		t.Fatalf("history: %v, %d events, %d watches", err, len(hist.Events), len(hist.Watches))
	}
	var apis []string
	for _, e := range hist.Events {
		apis = append(apis, e.APIServer)
	}
	if strings.Join(apis, ",") != "master-1,master-2,master-1," || hist.Watches[0].APIServer != "master-2" {
		t.Errorf("history apiservers %q, watch %q", apis, hist.Watches[0].APIServer)
	}
}
