package query

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

// TestEventsRebuiltOnEmbeddedEngine: events stored by the writer as
// residuals (raw empty) read back through Events, on the real engine, as
// the events received: byte for byte for what the apiserver wrote (the
// real apiserver's fixtures, generated log lines and webhook items), the
// same JSON value for the odd ones; jq sees them so too; rows stored
// before residuals (raw set) read as stored.
func TestEventsRebuiltOnEmbeddedEngine(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	w := ingest.NewWriter(st, ingest.WriterConfig{})

	byCluster := map[string]map[string][]byte{} // cluster → auditID/stage → raw
	add := func(cluster string, lines [][]byte) {
		var rows []store.Row
		want := map[string][]byte{}
		for _, raw := range lines {
			row, err := ingest.DecodeEvent(cluster, raw)
			if err != nil {
				t.Fatalf("decoding %s: %v", raw, err)
			}
			k := row.AuditID + "/" + row.Stage
			if _, dup := want[k]; dup {
				continue // the writer keeps the first
			}
			want[k] = raw
			rows = append(rows, row)
		}
		if _, err := w.Write(ctx, rows); err != nil {
			t.Fatal(err)
		}
		byCluster[cluster] = want
	}

	files, err := filepath.Glob("../deploy/e2e/fixtures/*.log")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		add("fixture-"+strings.TrimSuffix(filepath.Base(f), ".log"), bytes.Split(bytes.TrimSpace(data), []byte("\n")))
	}
	var log bytes.Buffer
	gen := auditgen.New(11, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	if err := gen.WriteLog(&log, 3000); err != nil {
		t.Fatal(err)
	}
	add("generated-log", bytes.Split(bytes.TrimSpace(log.Bytes()), []byte("\n")))
	var list struct{ Items []json.RawMessage }
	if err := json.Unmarshal(gen.EventListBody(1000), &list); err != nil {
		t.Fatal(err)
	}
	items := make([][]byte, len(list.Items))
	for i, it := range list.Items {
		items[i] = it
	}
	add("generated-webhook", items)
	odd := []string{
		`{"auditID":"o1","stage":"Panic","stageTimestamp":"2026-03-01T12:00:00Z","n":1e3,"user":{"username":"caf\u00e9","x":[1,2]},"annotations":{"k":"\u003c\u2028"}}`,
		"{\"auditID\":\"o2\",\"stage\":\"Panic\",\"stageTimestamp\":\"2026-03-01T12:00:00.123456789Z\",\"userAgent\":\"\xff\",\"verb\":\"get\",\"verb\":\"list\"}",
		`{"auditID":"o3","stage":"ResponseComplete","requestReceivedTimestamp":"1960-01-01T00:00:00.000000Z","stageTimestamp":"2300-01-01T00:00:00.000000Z","responseStatus":{"metadata":{},"code":500,"message":"boom"}}`,
		// Bytes the engine's JSON output escapes, in columns the skeleton
		// restores: NUL, control bytes, U+2028, a slash, quotes.
		`{"auditID":"o5","stage":"ResponseComplete","stageTimestamp":"2026-03-01T12:00:00.000000Z","requestReceivedTimestamp":"2026-03-01T12:00:00.000000Z","verb":"get","user":{"username":"a\u0000b\u001f\"c\\","groups":["\u2028/\t"]},"objectRef":{"resource":"pods","name":"x\ny"},"annotations":{"k\u0000":"v\r"}}`,
		`{"kind":"Event","apiVersion":"audit.k8s.io/v1beta1","auditID":"o4","stage":"ResponseComplete","timestamp":"2018-02-01T10:00:01Z","sourceIPs":["10.0.0.1","10.0.0.2"],"objectRef":{"resource":"deployments","apiVersion":"apps/v1beta1"}}`,
	}
	oddLines := make([][]byte, len(odd))
	for i, o := range odd {
		oddLines[i] = []byte(o)
	}
	add("odd", oddLines)

	// Rows as stored before residuals: raw set, no residual.
	oldRaw := `{"auditID":"old1",  "stage":"ResponseComplete","verb":"get","stageTimestamp":"2026-03-01T12:00:00Z"}`
	oldRow, err := ingest.DecodeEvent("old", []byte(oldRaw))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(ctx, []store.Row{oldRow}); err != nil {
		t.Fatal(err)
	}
	byCluster["old"] = map[string][]byte{"old1/ResponseComplete": []byte(oldRaw)}

	// What is stored: no raw but the old row's.
	var withRaw int
	if err := store.Each(ctx, st, "SELECT countIf(raw != '') AS n FROM audit_events", nil, func(n int) error {
		withRaw = n
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if withRaw != 1 {
		t.Errorf("%d stored rows keep raw, want 1 (the old one)", withRaw)
	}

	for cluster, want := range byCluster {
		var out bytes.Buffer
		stats, err := Events(ctx, st, Filter{Cluster: []string{cluster}, All: true}, nil, Limits{}, &out)
		if err != nil {
			t.Fatalf("%s: %v", cluster, err)
		}
		if stats.Emitted != len(want) {
			t.Errorf("%s: %d events read, %d stored", cluster, stats.Emitted, len(want))
		}
		exact := strings.HasPrefix(cluster, "fixture-") || strings.HasPrefix(cluster, "generated-")
		for line := range bytes.Lines(out.Bytes()) {
			line = bytes.TrimSuffix(line, []byte("\n"))
			var key struct{ AuditID, Stage string }
			if err := json.Unmarshal(line, &key); err != nil {
				t.Fatalf("%s: %s: %v", cluster, line, err)
			}
			orig, ok := want[key.AuditID+"/"+key.Stage]
			if !ok {
				t.Fatalf("%s: event %s was not stored", cluster, line)
			}
			if exact && !bytes.Equal(line, orig) {
				t.Errorf("%s: read back\n %s\nstored\n %s", cluster, line, orig)
			}
			if !sameJSON(t, line, orig) {
				t.Errorf("%s: read back\n %s\nnot the JSON value of\n %s", cluster, line, orig)
			}
		}

		// jq sees the rebuilt events as the originals.
		const program = `{id: .auditID, u: .user, o: .objectRef, s: .responseStatus, t: .stageTimestamp, extra: (to_entries | map(.key))}`
		var jqOut bytes.Buffer
		if _, err := Events(ctx, st, Filter{Cluster: []string{cluster}, All: true}, mustJQ(t, program), Limits{}, &jqOut); err != nil {
			t.Fatalf("%s: jq: %v", cluster, err)
		}
		for line := range bytes.Lines(jqOut.Bytes()) {
			var got struct{ ID string }
			if err := json.Unmarshal(line, &got); err != nil {
				t.Fatal(err)
			}
			// Several stages share an ID: the output must be one of theirs.
			match := false
			for k, raw := range want {
				if !strings.HasPrefix(k, got.ID+"/") {
					continue
				}
				v, err := DecodeEvent(raw)
				if err != nil {
					t.Fatal(err)
				}
				var wantOut bytes.Buffer
				if err := mustJQ(t, program).Run(ctx, v, func(x any) error {
					b, err := appendJSON(nil, x)
					wantOut.Write(b)
					return err
				}); err != nil {
					t.Fatal(err)
				}
				if bytes.Equal(bytes.TrimSpace(line), wantOut.Bytes()) {
					match = true
				}
			}
			if !match {
				t.Errorf("%s: jq over the rebuilt event gave %s, over no original event", cluster, line)
			}
		}
	}

	// A Parquet export's raw column holds each event as Events writes it.
	var pq bytes.Buffer
	if _, err := Export(ctx, st, Filter{}, Parquet, &pq, nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "events.parquet")
	if err := os.WriteFile(path, pq.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	n := 0
	err = st.SelectRows(ctx, "SELECT CAST(cluster, 'LowCardinality(String)') AS cluster, audit_id, CAST(stage, 'LowCardinality(String)') AS stage, raw "+
		"FROM file({f:String}, Parquet)", store.Params{"f": path}, func(r *store.Row) error {
		n++
		orig, ok := byCluster[r.Cluster][r.AuditID+"/"+r.Stage]
		switch {
		case !ok:
			t.Errorf("Parquet: event %s/%s/%s was not stored", r.Cluster, r.AuditID, r.Stage)
		case strings.HasPrefix(r.Cluster, "fixture-") || strings.HasPrefix(r.Cluster, "generated-") || r.Cluster == "old":
			if !bytes.Equal(r.Raw, orig) {
				t.Errorf("Parquet: %s: raw\n %s\nstored\n %s", r.Cluster, r.Raw, orig)
			}
		case !sameJSON(t, r.Raw, orig):
			t.Errorf("Parquet: %s: raw\n %s\nnot the JSON value of\n %s", r.Cluster, r.Raw, orig)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, want := range byCluster {
		total += len(want)
	}
	if n != total {
		t.Errorf("the Parquet file holds %d events, %d stored", n, total)
	}
}

// sameJSON reports whether a and b are the same JSON value, numbers as
// written.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	dec := func(x []byte) any {
		d := json.NewDecoder(bytes.NewReader(x))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("decoding %s: %v", x, err)
		}
		return v
	}
	return reflect.DeepEqual(dec(a), dec(b))
}
