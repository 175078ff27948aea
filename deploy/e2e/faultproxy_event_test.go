package e2e

import (
	"encoding/json"
	"testing"
)

// TestFaultProxyEvent checks the proxy's rewriting of a Services stream
// event by event: it is fast and runs with -short.
func TestFaultProxyEvent(t *testing.T) {
	svc := func(name, uid, rv string, annotations map[string]string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"kind": "Service", "apiVersion": "v1",
			"metadata": map[string]any{"name": name, "namespace": "default", "uid": uid, "resourceVersion": rv, "annotations": annotations},
			"spec":     map[string]any{"ports": []map[string]any{{"port": 80}}}})
		return b
	}
	type step struct {
		typ    string
		obj    json.RawMessage
		keep   bool
		wantRV string
	}
	for _, tc := range []struct {
		name    string
		rewrite bool
		steps   []step
	}{
		{"rewrite", true, []step{
			{"ADDED", svc("legacy", "u1", "100", nil), true, "100"},
			{"ADDED", svc("promo", "u2", "105", nil), true, "105"},
			{"MODIFIED", svc("legacy", "u1", "110", nil), true, "110"},
			{"BOOKMARK", svc("", "", "120", nil), false, ""},
			{"BOOKMARK", svc("", "", "121", map[string]string{"k8s.io/initial-events-end": "true"}), true, "121"},
			{"DELETED", svc("legacy", "u1", "130", nil), true, "110"},
			// Replayed: the same deletion again carries the same old one.
			{"DELETED", svc("legacy", "u1", "130", nil), true, "110"},
			// Unknown UID: nothing to rewrite it to.
			{"DELETED", svc("ghost", "u9", "140", nil), true, "140"},
			{"ERROR", json.RawMessage(`{"kind":"Status","code":410}`), true, ""},
		}},
		{"control", false, []step{
			{"ADDED", svc("legacy", "u1", "100", nil), true, "100"},
			{"BOOKMARK", svc("", "", "120", nil), false, ""},
			{"DELETED", svc("legacy", "u1", "130", nil), true, "130"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &faultProxy{t: t, rewrite: tc.rewrite, lastRV: map[string]string{}}
			pw := &proxiedWatch{Events: map[string]int{}}
			for i, s := range tc.steps {
				out, keep := p.event(pw, s.typ, s.obj)
				if keep != s.keep {
					t.Fatalf("step %d %s: keep %v, want %v", i, s.typ, keep, s.keep)
				}
				if !keep || s.wantRV == "" {
					continue
				}
				var o object
				if err := json.Unmarshal(out, &o); err != nil {
					t.Fatalf("step %d: %v: %s", i, err, out)
				}
				if o.Metadata.ResourceVersion != s.wantRV {
					t.Errorf("step %d %s %s: resourceVersion %s, want %s", i, s.typ, o.Metadata.Name, o.Metadata.ResourceVersion, s.wantRV)
				}
				// Nothing else changes.
				var in, got map[string]any
				_ = json.Unmarshal(s.obj, &in)
				_ = json.Unmarshal(out, &got)
				in["metadata"].(map[string]any)["resourceVersion"] = s.wantRV
				a, _ := json.Marshal(in)
				b, _ := json.Marshal(got)
				if string(a) != string(b) {
					t.Errorf("step %d: forwarded %s, want %s", i, b, a)
				}
			}
			if tc.rewrite && len(pw.Rewrites) != 2 {
				t.Errorf("rewrites %v, want legacy's two", pw.Rewrites)
			}
			if pw.Dropped == 0 {
				t.Error("no bookmark dropped")
			}
		})
	}
}
