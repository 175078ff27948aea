package ingest

import (
	"net/url"
	"testing"
)

func TestParseRequestURI(t *testing.T) {
	tests := []struct {
		name string
		uri  string
		want URIParams
	}{
		{
			name: "reflector watch",
			uri:  "/api/v1/services?allowWatchBookmarks=true&resourceVersion=224&timeoutSeconds=423&watch=true",
			want: URIParams{Watch: true, ResourceVersion: "224", TimeoutSeconds: 423},
		},
		{
			name: "watch=1",
			uri:  "/api/v1/namespaces/kube-system/configmaps?watch=1&resourceVersion=5",
			want: URIParams{Watch: true, ResourceVersion: "5"},
		},
		{
			name: "bare watch counts, as in the apiserver",
			uri:  "/api/v1/pods?watch",
			want: URIParams{Watch: true},
		},
		{
			name: "watch=false",
			uri:  "/api/v1/pods?watch=false&limit=500",
			want: URIParams{Limit: 500},
		},
		{
			name: "watch=FALSE and 0",
			uri:  "/api/v1/pods?watch=FALSE&watch=true",
			want: URIParams{},
		},
		{
			name: "watch=0",
			uri:  "/api/v1/pods?watch=0",
			want: URIParams{},
		},
		{
			name: "legacy watch path",
			uri:  "/api/v1/watch/namespaces/default/endpoints?resourceVersion=10",
			want: URIParams{Watch: true, ResourceVersion: "10"},
		},
		{
			name: "legacy watch path with group",
			uri:  "/apis/apps/v1/watch/deployments",
			want: URIParams{Watch: true},
		},
		{
			name: "legacy watch path without a resource",
			uri:  "/api/v1/watch/",
			want: URIParams{},
		},
		{
			name: "watch as a resource name is no watch",
			uri:  "/api/v1/namespaces/default/configmaps/watch",
			want: URIParams{},
		},
		{
			name: "watch as a group is no watch",
			uri:  "/apis/watch/v1/things",
			want: URIParams{},
		},
		{
			name: "paginated list with selectors",
			uri:  "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-3%2Cstatus.phase%21%3DSucceeded&labelSelector=app+in+%28a%2Cb%29&limit=500&resourceVersion=0&resourceVersionMatch=NotOlderThan",
			want: URIParams{
				FieldSelector:        "spec.nodeName=node-3,status.phase!=Succeeded",
				LabelSelector:        "app in (a,b)",
				Limit:                500,
				ResourceVersion:      "0",
				ResourceVersionMatch: "NotOlderThan",
			},
		},
		{
			name: "continue token",
			uri:  "/apis/apps/v1/replicasets?continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzfQ%3D%3D&limit=250",
			want: URIParams{Continue: "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzfQ==", Limit: 250},
		},
		{
			name: "first value wins",
			uri:  "/api/v1/pods?resourceVersion=1&resourceVersion=2&limit=5&limit=6",
			want: URIParams{ResourceVersion: "1", Limit: 5},
		},
		{
			name: "bad escape keeps the raw value",
			uri:  "/api/v1/pods?labelSelector=a%3Gb&fieldSelector=x%3",
			want: URIParams{LabelSelector: "a%3Gb", FieldSelector: "x%3"},
		},
		{
			name: "escaped key",
			uri:  "/api/v1/pods?resource%56ersion=7&%77atch=true",
			want: URIParams{ResourceVersion: "7", Watch: true},
		},
		{
			name: "bad escape in a key skips the pair",
			uri:  "/api/v1/pods?limit%zz=5&limit=6",
			want: URIParams{Limit: 6},
		},
		{
			name: "invalid numbers are zero",
			uri:  "/api/v1/pods?limit=lots&timeoutSeconds=9999999999",
			want: URIParams{},
		},
		{
			name: "negative numbers are kept",
			uri:  "/api/v1/pods?limit=-1&timeoutSeconds=-5",
			want: URIParams{Limit: -1, TimeoutSeconds: -5},
		},
		{
			name: "keys are case-sensitive",
			uri:  "/api/v1/pods?ResourceVersion=1&WATCH=true",
			want: URIParams{},
		},
		{
			name: "empty values and separators",
			uri:  "/api/v1/pods?&&=&resourceVersion=&watch=true&",
			want: URIParams{Watch: true},
		},
		{
			name: "fragment",
			uri:  "/api/v1/pods?resourceVersion=3#frag&limit=9",
			want: URIParams{ResourceVersion: "3"},
		},
		{
			name: "no query",
			uri:  "/api/v1/namespaces/default/pods/p",
			want: URIParams{},
		},
		{
			name: "empty",
			uri:  "",
			want: URIParams{},
		},
		{
			name: "non-resource URL",
			uri:  "/healthz?verbose",
			want: URIParams{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseRequestURI(tt.uri); got != tt.want {
				t.Errorf("ParseRequestURI(%q)\n got %+v\nwant %+v", tt.uri, got, tt.want)
			}
		})
	}
}

// TestParseRequestURIAgreesWithNetURL checks the fast path against
// url.ParseQuery on URIs without malformed escapes, where both must agree.
func TestParseRequestURIAgreesWithNetURL(t *testing.T) {
	for _, uri := range []string{
		"/api/v1/services?allowWatchBookmarks=true&resourceVersion=224&timeoutSeconds=423&watch=true",
		"/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-3&labelSelector=a+b&limit=500&resourceVersion=0&resourceVersionMatch=NotOlderThan&continue=abc%2B%2F",
		"/api/v1/pods?limit=1&limit=2&watch=0",
	} {
		u, err := url.ParseRequestURI(uri)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		got := ParseRequestURI(uri)
		if got.ResourceVersion != q.Get("resourceVersion") || got.ResourceVersionMatch != q.Get("resourceVersionMatch") ||
			got.LabelSelector != q.Get("labelSelector") || got.FieldSelector != q.Get("fieldSelector") ||
			got.Continue != q.Get("continue") {
			t.Errorf("%s: got %+v, net/url says %v", uri, got, q)
		}
	}
}

func BenchmarkParseRequestURI(b *testing.B) {
	for _, bm := range []struct{ name, uri string }{
		{"watch", "/api/v1/namespaces/kube-system/configmaps?allowWatchBookmarks=true&resourceVersion=123456789&timeoutSeconds=423&watch=true"},
		{"list-escaped", "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-3&limit=500&resourceVersion=0"},
		{"get", "/api/v1/namespaces/default/pods/web-0"},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bm.uri)))
			for b.Loop() {
				_ = ParseRequestURI(bm.uri)
			}
		})
		b.Run(bm.name+"/net-url", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bm.uri)))
			for b.Loop() {
				u, _ := url.ParseRequestURI(bm.uri)
				_ = u.Query()
			}
		})
	}
}
