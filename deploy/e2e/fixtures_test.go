package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/store"
)

// fixtureDir holds one real kube-apiserver audit log per scenario
// (<scenario>.log, one Event per line as the log backend writes it) and
// what the scenario must make the detectors say (<scenario>.json).
const fixtureDir = "fixtures"

// saveFixture writes the scenario's audit log and expectation to fixtures/.
func saveFixture(t *testing.T, name, auditLog string, exp expectation) {
	t.Helper()
	b, err := os.ReadFile(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fixtureDir, name+".log"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	writeExpectation(t, name, exp)
	t.Logf("wrote %s/%s.log (%d bytes) and %s.json", fixtureDir, name, len(b), name)
}

// saveFixtureGzip is saveFixture for the long recordings of the busy
// cluster: the audit log goes to fixtures/<name>.log.gz.
func saveFixtureGzip(t *testing.T, name, auditLog string, exp expectation) {
	t.Helper()
	in, err := os.Open(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	path := filepath.Join(fixtureDir, name+".log.gz")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw, err := gzip.NewWriterLevel(out, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(zw, in)
	if err == nil {
		err = zw.Close()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
	writeExpectation(t, name, exp)
	t.Logf("wrote %s (%d bytes before compression) and %s.json", path, n, name)
}

// readExpectation reads fixtures/<name>.json.
func readExpectation(t *testing.T, name string) expectation {
	t.Helper()
	var exp expectation
	j, err := os.ReadFile(filepath.Join(fixtureDir, name+".json"))
	if err != nil {
		t.Fatalf("%v (regenerate with make e2e-fixtures)", err)
	}
	if err := json.Unmarshal(j, &exp); err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	return exp
}

// writeExpectation writes fixtures/<name>.json.
func writeExpectation(t *testing.T, name string, exp expectation) {
	t.Helper()
	j, err := json.MarshalIndent(exp, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fixtureDir, name+".json"), append(j, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// loadFixture decodes fixtures/<name>.log with auditlens's decoder and
// reads its expectation.
func loadFixture(t *testing.T, name string) ([]store.Row, expectation) {
	t.Helper()
	exp := readExpectation(t, name)
	f, err := os.Open(filepath.Join(fixtureDir, name+".log"))
	if err != nil {
		t.Fatalf("%v (regenerate with make e2e-fixtures)", err)
	}
	defer f.Close()
	var b ingest.Batch
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4<<20), 4<<20)
	for n := 1; sc.Scan(); n++ {
		if err := ingest.DecodeLine(exp.Cluster, bytes.Clone(sc.Bytes()), &b); err != nil {
			t.Fatalf("%s.log:%d: %v", name, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, r := range b.Rejects {
		t.Errorf("%s.log: auditlens rejects a real apiserver event: %+v", name, r)
	}
	return b.Rows, exp
}

// TestFixtures checks the committed real-apiserver audit logs: auditlens
// decodes every line, and each holds what its scenario is about. It is fast
// and runs with -short.
func TestFixtures(t *testing.T) {
	if updateFixtures {
		t.Skip("AUDITLENS_E2E_UPDATE=1 rewrites the fixtures in this run; check them in the next")
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			rows, exp := loadFixture(t, sc.name)
			if len(rows) == 0 {
				t.Fatal("no events")
			}
			watches := map[string]int{} // requested RV → watch starts, of the scenario's subject
			writes := map[string]int{}  // verb name → Endpoints writes
			var subject *expectedFinding
			if exp.WatchLoop != nil {
				subject = exp.WatchLoop
			} else if exp.RVRegression != nil {
				subject = exp.RVRegression
			}
			for _, r := range rows {
				if r.Watch && r.Stage == "ResponseStarted" && subject != nil && r.User == subject.User && r.Resource == subject.Resource {
					watches[r.RequestedRV]++
				}
				if r.Resource == "endpoints" && r.Stage == "ResponseComplete" && (r.Verb == "create" || r.Verb == "delete") {
					writes[r.Verb+" "+r.Name]++
					if r.Verb == "create" && r.Code == 201 && r.ResponseRV == "" {
						t.Errorf("Endpoints create %s carries no response resourceVersion (audit policy level?)", r.AuditID)
					}
				}
			}
			switch {
			case exp.WatchLoop != nil:
				if n := watches[exp.WatchLoop.ResourceVersion]; n < exp.WatchLoop.Iterations {
					t.Errorf("%d watches of %s by %s from resourceVersion %s, want %d", n, subject.Resource, subject.User, subject.ResourceVersion, exp.WatchLoop.Iterations)
				}
				for _, o := range exp.WatchLoop.Objects {
					if writes["delete "+o.Name] < exp.WatchLoop.Iterations || writes["create "+o.Name] < exp.WatchLoop.Iterations {
						t.Errorf("Endpoints %s: %d deletes, %d creates, want %d each", o.Name, writes["delete "+o.Name], writes["create "+o.Name], exp.WatchLoop.Iterations)
					}
				}
			case exp.RVRegression != nil:
				if watches[exp.RVRegression.ResourceVersion] == 0 {
					t.Errorf("no watch of %s by %s from resourceVersion %s", subject.Resource, subject.User, subject.ResourceVersion)
				}
			}
		})
	}
}
