package watchloop_test

import (
	"testing"

	"github.com/auditlens/auditlens/internal/testkit/detecttest"
)

// The tests share one embedded engine (detecttest.Engine); Main closes it.
func TestMain(m *testing.M) { detecttest.Main(m) }
