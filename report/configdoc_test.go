package report

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestConfigKeysDocumented: every key a report's configuration takes is
// in docs/reports.md's table of keys, so that a key added to the structs
// cannot go unexplained.
func TestConfigKeysDocumented(t *testing.T) {
	page, err := os.ReadFile("../docs/reports.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(page), "Every key of a report")
	if !ok {
		t.Fatal("docs/reports.md has no table of keys (\"Every key of a report\")")
	}
	table, _, _ = strings.Cut(table, "Each run is stored")
	n := 0
	for _, typ := range []reflect.Type{reflect.TypeFor[Spec](), reflect.TypeFor[Outputs](), reflect.TypeFor[Webhook]()} {
		for i := range typ.NumField() {
			key, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if key == "" || key == "-" {
				continue
			}
			n++
			if !strings.Contains(table, "`"+key+"`") && !strings.Contains(table, "`outputs."+key+"`") {
				t.Errorf("%s's key %q is not in docs/reports.md's table of keys", typ.Name(), key)
			}
		}
	}
	if n < 15 {
		t.Errorf("only %d keys found: are the structs' json tags still read?", n)
	}
}
