package alert

import "testing"

// FuzzParse: no configuration document makes Parse panic, and what it
// accepts validates.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"alerts:\n  routes:\n  - name: a\n    alertmanager: {url: http://am:9093}\n",
		"alerts:\n  resolve_after: 5m\n  routes:\n  - name: b\n    webhook: {url: https://h/x, format: slack, retries: 2, backoff: 1s}\n",
		"reports: []\n", "alerts: 3\n", "alerts:\n  routes: {}\n", "- a\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		c, err := Parse([]byte(doc))
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that does not validate: %v", err)
		}
	})
}
