package heartbeatloss_test

import (
	"flag"
	"testing"

	"github.com/auditlens/auditlens/internal/testkit/detecttest"
)

// update asks the tests to rewrite their golden files in testdata
// (detecttest.CheckGolden reads it).
var _ = flag.Bool("update", false, "rewrite the golden files in testdata")

// The tests share one embedded engine (detecttest.Engine); Main closes it.
func TestMain(m *testing.M) { detecttest.Main(m) }
