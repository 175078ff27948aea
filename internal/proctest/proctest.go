// Package proctest lists child processes, for tests that check nothing was
// left behind.
package proctest

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Children returns the PIDs of pid's child processes, exited ones that were
// not waited for included. It skips the test where there is no /proc.
func Children(t testing.TB, pid int) []int {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("lists child processes through /proc")
	}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // it exited
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			pids = append(pids, child)
		}
	}
	return pids
}
