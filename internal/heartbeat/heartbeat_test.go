package heartbeat

import (
	"slices"
	"testing"

	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

// TestFragments evaluates the fragments on the real engine: which codes
// count, and the node of a kubelet's user. (Which requests are heartbeats
// is held against both the detector and the query by
// detect.TestHeartbeatDefinition.)
func TestFragments(t *testing.T) {
	st := storetest.Open(t)
	sql := `SELECT arrayFilter(code -> ` + CountsSQL("code") + `, [0, 100, 200, 201, 204, 299, 300, 304, 401, 403, 404, 409, 410, 429, 500, 503, 504]) AS counted,
       ` + NodeSQL + ` AS node
FROM (SELECT {user:String} AS user)`
	type fragments struct {
		Counted []int  `ch:"counted"`
		Node    string `ch:"node"`
	}
	var got fragments
	err := store.Each(t.Context(), st, sql, store.Params{"user": store.StringParam(User("node-1.example"))}, func(r fragments) error {
		got = r
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 200, 201, 204, 299, 409}; !slices.Equal(got.Counted, want) {
		t.Errorf("codes counted %v, want %v", got.Counted, want)
	}
	if got.Node != "node-1.example" {
		t.Errorf("node of %q is %q", User("node-1.example"), got.Node)
	}
}
