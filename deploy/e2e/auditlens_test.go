package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// receiver is an `auditlens serve` child process over TLS.
type receiver struct {
	proc   *proc
	base   string
	client *http.Client // for the read API
	sink   sink         // what an apiserver needs to send to it
}

// startReceiverMTLS starts serve requiring a client certificate signed by
// ca; the apiserver presents one, and so does the test's API client.
func startReceiverMTLS(t *testing.T, ca *testCA, dir string) *receiver {
	t.Helper()
	srvCert, srvKey := ca.issue(t, dir, "auditlens", "auditlens", true)
	apiCert, apiKey := ca.issue(t, dir, "kube-apiserver-client", "kube-apiserver", false)
	readerCert, readerKey := ca.issue(t, dir, "reader", "e2e-reader", false)
	r := startReceiver(t, dir, "--tls-cert", srvCert, "--tls-key", srvKey, "--client-ca", ca.pemPath)
	r.client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.tlsConfig(t, readerCert, readerKey)}}
	r.sink = sink{base: r.base, caPath: ca.pemPath, certPath: apiCert, keyPath: apiKey}
	return r
}

// startReceiverToken starts serve requiring a bearer token per cluster:
// token "webhook-<cluster>" sends for <cluster>.
func startReceiverToken(t *testing.T, ca *testCA, dir string, clusters ...string) *receiver {
	t.Helper()
	return startReceiverTokenArgs(t, ca, dir, clusters, nil)
}

// startReceiverTokenArgs is startReceiverToken with more serve flags.
func startReceiverTokenArgs(t *testing.T, ca *testCA, dir string, clusters, extra []string) *receiver {
	t.Helper()
	srvCert, srvKey := ca.issue(t, dir, "auditlens", "auditlens", true)
	args := []string{"--tls-cert", srvCert, "--tls-key", srvKey}
	for _, c := range clusters {
		args = append(args, "--webhook-token", webhookToken(c)+"="+c)
	}
	r := startReceiver(t, dir, append(args, extra...)...)
	r.client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.tlsConfig(t, "", "")}}
	r.sink = sink{base: r.base, caPath: ca.pemPath}
	return r
}

func webhookToken(cluster string) string { return "webhook-" + cluster }

func startReceiver(t *testing.T, dir string, args ...string) *receiver {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"),
		"--batch-wait", "200ms",
		// Evaluate the detectors every few seconds (default 1m) over the
		// default hour-long window, which holds every scenario whole.
		"--detect-interval", "5s"}, args...)
	p := startProc(t, dir, "auditlens", auditlensBin, args...)
	base := p.waitLog(t, listeningRE, 120*time.Second)
	if !strings.HasPrefix(base, "https://127.0.0.1:") {
		t.Fatalf("auditlens listens on %s, want https on 127.0.0.1", base)
	}
	return &receiver{proc: p, base: base}
}

// forCluster returns the sink an apiserver for cluster sends to.
func (r *receiver) forCluster(cluster string) sink {
	s := r.sink
	if s.certPath == "" {
		s.token = webhookToken(cluster)
	}
	return s
}

func (r *receiver) get(path string) (int, []byte, error) {
	resp, err := r.client.Get(r.base + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// eventKey identifies an audit event as the receiver deduplicates it.
type eventKey struct{ auditID, stage string }

// storedKeys returns how many times the API returns each (auditID, stage)
// of cluster.
func (r *receiver) storedKeys(cluster string) (map[eventKey]int, error) {
	return r.storedKeysFrom(cluster, "")
}

// storedKeysFrom is storedKeys of the events stored as sent by apiserver
// of cluster (all of them when apiserver is "").
func (r *receiver) storedKeysFrom(cluster, apiserver string) (map[eventKey]int, error) {
	q := url.Values{"cluster": {cluster}, "limit": {"100000"}, "jq": {"[.auditID, .stage]"}}
	if apiserver != "" {
		q.Set("apiserver", apiserver)
	}
	code, body, err := r.get("/api/v1/events?" + q.Encode())
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("GET /api/v1/events: %d %s", code, bytes.TrimSpace(body))
	}
	keys := map[eventKey]int{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var kv []string
		if err := json.Unmarshal(sc.Bytes(), &kv); err != nil || len(kv) != 2 {
			return nil, fmt.Errorf("GET /api/v1/events: unexpected line %q", sc.Text())
		}
		keys[eventKey{kv[0], kv[1]}]++
	}
	return keys, sc.Err()
}

// fileKeys reads an apiserver audit log file (one Event per line).
func fileKeys(path string) (map[eventKey]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys := map[eventKey]int{}
	for i, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev struct {
			AuditID string `json:"auditID"`
			Stage   string `json:"stage"`
		}
		if err := json.Unmarshal(line, &ev); err != nil || ev.AuditID == "" {
			return nil, fmt.Errorf("%s:%d: not an audit event: %v", path, i+1, err)
		}
		keys[eventKey{ev.AuditID, ev.Stage}]++
	}
	return keys, nil
}

// diffKeys describes how stored differs from want: keys missing, keys
// stored that the file does not hold, keys stored more than once.
func diffKeys(want, stored map[eventKey]int) string {
	var missing, extra, dup []string
	for k := range want {
		if stored[k] == 0 {
			missing = append(missing, k.auditID+"/"+k.stage)
		}
	}
	for k, n := range stored {
		if want[k] == 0 {
			extra = append(extra, k.auditID+"/"+k.stage)
		} else if n != want[k] {
			dup = append(dup, fmt.Sprintf("%s/%s ×%d", k.auditID, k.stage, n))
		}
	}
	if len(missing)+len(extra)+len(dup) == 0 {
		return ""
	}
	sort.Strings(missing)
	sort.Strings(extra)
	sort.Strings(dup)
	return fmt.Sprintf("%d in the log file, %d stored: %d missing %s, %d not in the file %s, %d duplicated %s",
		len(want), len(stored), len(missing), head(missing), len(extra), head(extra), len(dup), head(dup))
}

func head(s []string) string {
	if len(s) > 5 {
		return fmt.Sprint(s[:5], "…")
	}
	return fmt.Sprint(s)
}

// finding is the part of a finding (issue 3's JSON) the scenarios check.
type finding struct {
	ID         string    `json:"id"`
	Detector   string    `json:"detector"`
	Cluster    string    `json:"cluster"`
	Severity   string    `json:"severity"`
	Confidence float64   `json:"confidence"`
	Title      string    `json:"title"`
	Summary    string    `json:"summary"`
	FirstSeen  time.Time `json:"first_seen"`
	LastSeen   time.Time `json:"last_seen"`
	Subjects   struct {
		User            string `json:"user"`
		UserAgent       string `json:"user_agent"`
		Resource        string `json:"resource"`
		APIGroup        string `json:"api_group"`
		ResourceVersion string `json:"resource_version"`
		PartOf          string `json:"part_of"`
		SourceIP        string `json:"source_ip"`
		StaleRVs        []struct {
			RV       string `json:"rv"`
			Restarts int    `json:"restarts"`
		} `json:"stale_rvs"`
		WatchRestarts int `json:"watch_restarts"`
		Iterations    int `json:"iterations"`
	} `json:"subjects"`
	Objects  []findingObject `json:"objects"`
	Evidence []struct {
		AuditID         string    `json:"audit_id"`
		Stage           string    `json:"stage"`
		Verb            string    `json:"verb"`
		Role            string    `json:"role"`
		Time            time.Time `json:"time"`
		Resource        string    `json:"resource"`
		Name            string    `json:"name"`
		ResourceVersion string    `json:"resource_version"`
	} `json:"evidence"`
	Remediation string `json:"remediation"`
}

// findingObject is one object a finding names.
type findingObject struct {
	Resource  string `json:"resource"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// errNoFindingsAPI means the receiver serves no findings API yet.
var errNoFindingsAPI = fmt.Errorf("GET /api/v1/findings is not served")

// findings returns the findings of cluster. The API may answer a JSON array
// or an object holding one under "findings" or "items".
func (r *receiver) findings(cluster string) ([]finding, error) {
	code, body, err := r.get("/api/v1/findings?" + url.Values{"cluster": {cluster}}.Encode())
	if err != nil {
		return nil, err
	}
	if code == http.StatusNotFound {
		return nil, errNoFindingsAPI
	}
	if code != 200 {
		return nil, fmt.Errorf("GET /api/v1/findings: %d %s", code, bytes.TrimSpace(body))
	}
	var out []finding
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		err = json.Unmarshal(body, &out)
	} else if len(body) > 0 && body[0] == '{' {
		var wrap map[string]json.RawMessage
		if err = json.Unmarshal(body, &wrap); err == nil {
			for _, k := range []string{"findings", "items", "data"} {
				if raw, ok := wrap[k]; ok {
					err = json.Unmarshal(raw, &out)
					break
				}
			}
		}
	} else if len(body) > 0 {
		// NDJSON.
		for _, line := range bytes.Split(body, []byte("\n")) {
			var f finding
			if err = json.Unmarshal(line, &f); err != nil {
				break
			}
			out = append(out, f)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("decoding GET /api/v1/findings: %w: %s", err, head([]string{string(body)}))
	}
	return out, nil
}
