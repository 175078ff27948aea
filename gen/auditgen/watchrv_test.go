package auditgen_test

import (
	"cmp"
	"slices"
	"strconv"
	"testing"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/ingest"
)

// TestWatchResourceVersionsNeverGoBack: each client's watches of one
// collection, in the order they started, ask for resourceVersions that
// never decrease, as a client-go reflector's do. (The watch detectors
// report clients that go back.)
func TestWatchResourceVersionsNeverGoBack(t *testing.T) {
	b, err := ingest.DecodeBody("gen", auditgen.New(5, start).EventListBody(60000))
	if err != nil {
		t.Fatal(err)
	}
	type watch struct {
		start int64
		rv    uint64
	}
	byClient := map[string][]watch{}
	for _, r := range b.Rows {
		if !r.Watch {
			continue
		}
		rv, err := strconv.ParseUint(r.RequestedRV, 10, 64)
		if err != nil || rv == 0 {
			t.Fatalf("watch %s asks for resourceVersion %q", r.RequestURI, r.RequestedRV)
		}
		k := r.User + "|" + r.UserAgent + "|" + r.SourceIP + "|" + r.Resource + "|" + r.Namespace + "|" + r.FieldSelector
		byClient[k] = append(byClient[k], watch{r.ReceivedAt.UnixMicro(), rv})
	}
	long := 0
	for k, ws := range byClient {
		slices.SortFunc(ws, func(a, b watch) int { return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.rv, b.rv)) })
		for i := 1; i < len(ws); i++ {
			if ws[i].rv < ws[i-1].rv {
				t.Fatalf("%s: watch started at %d from %d after one from %d", k, ws[i].start, ws[i].rv, ws[i-1].rv)
			}
		}
		if len(ws) >= 10 {
			long++
		}
	}
	if long < 10 {
		t.Errorf("only %d clients with 10 watches or more: the check proves little", long)
	}
}
