package heartbeat

import (
	"encoding/json"
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
	var got struct {
		Counted []int  `json:"counted"`
		Node    string `json:"node"`
	}
	err := st.Select(t.Context(), sql, store.Params{"user": store.StringParam(User("node-1.example"))}, func(row []byte) error { return json.Unmarshal(row, &got) })
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
