package web

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/report"
	"github.com/auditlens/auditlens/store"
)

// betaData matches what only beta's data holds: its cluster name as a
// value and its audit IDs (a node name the request itself gave, such as
// "beta-node", is an echo, not data).
var betaData = regexp.MustCompile(`"beta"|"beta-\d+-`)

func leaksBeta(body string) bool { return betaData.MatchString(body) }

// TestPerClusterAccess holds every read endpoint to per-cluster access,
// over the real engine with two clusters' events, findings and reports:
// without credentials 401; a token of cluster alpha asking for beta gets
// exactly what a cluster that does not exist gets (so it cannot tell that
// beta exists), while a token of every cluster sees beta's data there
// (so the comparison is not vacuous); alpha's token sees alpha's data as
// the every-cluster token does, and asking for no cluster means alpha.
func TestPerClusterAccess(t *testing.T) {
	st := storetest.Open(t)
	t0 := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	var rows []store.Row
	for ci, cluster := range []string{"alpha", "beta"} {
		for i := range 12 {
			at := t0.Add(time.Duration(i) * 10 * time.Second)
			rv := fmt.Sprint(1000*(ci+1) + i)
			id := fmt.Sprintf("%s-%d", cluster, i)
			raw := func(suffix string) []byte { return []byte(fmt.Sprintf(`{"auditID":%q}`, id+suffix)) }
			rows = append(rows,
				store.Row{Cluster: cluster, AuditID: id + "-lease", Stage: "ResponseComplete", Verb: "update", Time: at, User: "system:node:" + cluster + "-node",
					UserAgent: "kubelet/v1.37.2", Resource: "leases", APIGroup: "coordination.k8s.io", Namespace: "kube-node-lease", Name: cluster + "-node",
					Code: 200, ObjectRV: rv, ResponseRV: rv, Raw: raw("-lease")},
				store.Row{Cluster: cluster, AuditID: id + "-watch", Stage: "ResponseComplete", Verb: "watch", Time: at.Add(time.Second), User: cluster + "-user",
					UserAgent: "kubectl/v1.37.2", Resource: "endpoints", Namespace: "default", Watch: true, RequestedRV: rv, Code: 200, Raw: raw("-watch")},
				store.Row{Cluster: cluster, AuditID: id + "-delete", Stage: "ResponseComplete", Verb: "delete", Time: at.Add(2 * time.Second), User: cluster + "-user",
					Resource: "endpoints", Namespace: "default", Name: "cart", Code: 200, Raw: raw("-delete")},
			)
		}
	}
	if err := st.Insert(t.Context(), rows); err != nil {
		t.Fatal(err)
	}
	findings := detect.NewRepository(st, nil)
	var fs []detect.Finding
	for _, cluster := range []string{"alpha", "beta"} {
		fs = append(fs, detect.Finding{ID: "watch-loop-" + cluster, Detector: "watch-loop", Cluster: cluster, Severity: detect.Critical,
			Title: "loop in " + cluster, FirstSeen: t0, LastSeen: t0.Add(time.Minute),
			Objects: []detect.Object{{Resource: "endpoints", Namespace: "default", Name: "cart"}}})
	}
	if err := findings.Upsert(t.Context(), fs); err != nil {
		t.Fatal(err)
	}
	reports := report.NewRepository(st)
	for _, r := range []report.Report{
		{ID: "r-alpha", Name: "daily", Clusters: []string{"alpha"}},
		{ID: "r-beta", Name: "daily", Clusters: []string{"beta"}},
		{ID: "r-both", Name: "daily", Clusters: []string{"alpha", "beta"}},
		{ID: "r-every", Name: "daily", Clusters: []string{}},
	} {
		r.WindowStart, r.WindowEnd, r.GeneratedAt = t0, t0.Add(time.Hour), t0.Add(time.Hour)
		if err := reports.Save(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	h := NewRouter(Config{Store: st, Findings: findings, Reports: reports, Now: func() time.Time { return t0.Add(time.Hour) },
		APITokens: []auth.APIToken{{Token: "every"}, {Token: "only-alpha", Clusters: []string{"alpha"}}, {Token: "alpha-and-gamma", Clusters: []string{"alpha", "gamma"}}}})
	get := func(token, path string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	window := url.Values{"since": {t0.Add(-time.Minute).Format(time.RFC3339)}, "until": {t0.Add(10 * time.Minute).Format(time.RFC3339)}}
	endpoint := func(path string, extra url.Values, cluster string) string {
		q := url.Values{}
		for k, v := range window {
			q[k] = v
		}
		for k, v := range extra {
			q[k] = v
		}
		if cluster != "" {
			q.Set("cluster", cluster)
		}
		return path + "?" + q.Encode()
	}
	endpoints := []struct {
		name  string
		path  string
		extra url.Values
	}{
		{"events", "/api/v1/events", nil},
		{"events with jq", "/api/v1/events", url.Values{"jq": {".auditID"}}},
		{"histogram", "/api/v1/histogram", url.Values{"by": {"cluster"}}},
		// 30 s bars and minutes: the rollup, with ragged edges for the
		// first (see rollupHistograms below).
		{"histogram from the rollup", "/api/v1/histogram", url.Values{"by": {"cluster"}, "buckets": {"20"},
			"since": {t0.Add(7 * time.Second).Format(time.RFC3339Nano)}, "until": {t0.Add(9*time.Minute + 50500*time.Millisecond).Format(time.RFC3339Nano)}}},
		{"histogram by cluster from the rollup", "/api/v1/histogram", url.Values{"by": {"cluster"}, "buckets": {"11"}}},
		{"values", "/api/v1/values", url.Values{"field": {"cluster"}}},
		{"object history", "/api/v1/objects/history", url.Values{"resource": {"endpoints"}, "namespace": {"default"}, "name": {"cart"}}},
		{"heartbeats", "/api/v1/heartbeats", url.Values{"node": {"alpha-node,beta-node"}, "others": {"5"}}},
		{"resourceversions", "/api/v1/resourceversions", nil},
		{"findings", "/api/v1/findings", nil},
	}
	for _, ep := range endpoints {
		t.Run(ep.name, func(t *testing.T) {
			if code, _ := get("", endpoint(ep.path, ep.extra, "alpha")); code != 401 {
				t.Errorf("no credentials: %d, want 401", code)
			}
			if code, _ := get("wrong", endpoint(ep.path, ep.extra, "alpha")); code != 401 {
				t.Errorf("a wrong token: %d, want 401", code)
			}
			_, betaSeen := get("every", endpoint(ep.path, ep.extra, "beta"))
			_, nosuch := get("only-alpha", endpoint(ep.path, ep.extra, "nosuch"))
			code, beta := get("only-alpha", endpoint(ep.path, ep.extra, "beta"))
			if code != 200 || beta != strings.ReplaceAll(nosuch, "nosuch", "beta") {
				t.Errorf("alpha's token asking for beta: %d\n%s\nwant what a cluster that does not exist gets:\n%s", code, beta, nosuch)
			}
			if !leaksBeta(betaSeen) || betaSeen == beta {
				t.Errorf("the every-cluster token sees nothing of beta (the check above proves nothing):\n%s", betaSeen)
			}
			_, alphaAll := get("every", endpoint(ep.path, ep.extra, "alpha"))
			code, alpha := get("only-alpha", endpoint(ep.path, ep.extra, "alpha"))
			if code != 200 || alpha != alphaAll || !strings.Contains(alpha, "alpha") {
				t.Errorf("alpha's token asking for alpha: %d\n%s\nwant\n%s", code, alpha, alphaAll)
			}
			// No cluster named: alpha only, never beta.
			code, dflt := get("only-alpha", endpoint(ep.path, ep.extra, ""))
			if code != 200 || leaksBeta(dflt) {
				t.Errorf("alpha's token naming no cluster: %d\n%s", code, dflt)
			}
			// A token of two clusters naming none reads both of them, or
			// is asked to name one (single-cluster endpoints); never beta.
			code, two := get("alpha-and-gamma", endpoint(ep.path, ep.extra, ""))
			if (code != 200 && code != 400) || leaksBeta(two) {
				t.Errorf("alpha-and-gamma's token naming no cluster: %d\n%s", code, two)
			}
		})
	}

	t.Run("rollupHistograms", func(t *testing.T) {
		for _, ep := range endpoints {
			if !strings.HasSuffix(ep.name, "from the rollup") {
				continue
			}
			for _, cluster := range []string{"alpha", "beta", ""} {
				if _, body := get("every", endpoint(ep.path, ep.extra, cluster)); !strings.Contains(body, `"source":"rollup"`) || !strings.Contains(body, `"total":`) {
					t.Errorf("%s of %q: not from the rollup: %s", ep.name, cluster, body)
				}
			}
		}
	})

	t.Run("finding by id", func(t *testing.T) {
		if code, _ := get("only-alpha", "/api/v1/findings/watch-loop-alpha"); code != 200 {
			t.Errorf("alpha's finding: %d", code)
		}
		_, unknown := get("only-alpha", "/api/v1/findings/watch-loop-gamma")
		code, beta := get("only-alpha", "/api/v1/findings/watch-loop-beta")
		if code != 404 || beta != strings.ReplaceAll(unknown, "gamma", "beta") {
			t.Errorf("beta's finding with alpha's token: %d %s; want what an unknown id gets: %s", code, beta, unknown)
		}
		if code, _ := get("every", "/api/v1/findings/watch-loop-beta"); code != 200 {
			t.Errorf("beta's finding with the every-cluster token: %d", code)
		}
	})

	t.Run("reports", func(t *testing.T) {
		_, list := get("only-alpha", "/api/v1/reports")
		if !strings.Contains(list, `"r-alpha"`) || strings.Contains(list, "r-beta") || strings.Contains(list, "r-both") || strings.Contains(list, "r-every") {
			t.Errorf("alpha's token lists %s; want r-alpha alone (a report of beta, or of every cluster, tells about beta)", list)
		}
		_, all := get("every", "/api/v1/reports")
		for _, id := range []string{"r-alpha", "r-beta", "r-both", "r-every"} {
			if !strings.Contains(all, `"`+id+`"`) {
				t.Errorf("the every-cluster token does not list %s: %s", id, all)
			}
		}
		_, unknown := get("only-alpha", "/api/v1/reports/r-gamma?format=html")
		for _, id := range []string{"r-beta", "r-both", "r-every"} {
			for _, format := range []string{"json", "html", "md"} {
				code, body := get("only-alpha", "/api/v1/reports/"+id+"?format="+format)
				if code != 404 || body != strings.ReplaceAll(unknown, "r-gamma", id) {
					t.Errorf("%s as %s with alpha's token: %d %s; want what an unknown id gets", id, format, code, body)
				}
			}
			if code, _ := get("every", "/api/v1/reports/"+id); code != 200 {
				t.Errorf("%s with the every-cluster token: %d", id, code)
			}
		}
		if code, _ := get("only-alpha", "/api/v1/reports/r-alpha?format=html"); code != 200 {
			t.Errorf("r-alpha with alpha's token: %d", code)
		}
		if code, _ := get("", "/api/v1/reports/r-alpha"); code != 401 {
			t.Errorf("r-alpha without credentials: %d", code)
		}
	})

	t.Run("session of a scoped token", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/session", strings.NewReader(`{"token":"only-alpha"}`))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		cookies := rec.Result().Cookies()
		if rec.Code != 200 || len(cookies) != 1 {
			t.Fatalf("sign-in: %d %v", rec.Code, cookies)
		}
		req = httptest.NewRequest(http.MethodGet, endpoint("/api/v1/values", url.Values{"field": {"cluster"}}, ""), nil)
		req.AddCookie(cookies[0])
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), "alpha") || leaksBeta(rec.Body.String()) {
			t.Errorf("cluster values through the session: %d %s", rec.Code, rec.Body)
		}
	})
}
