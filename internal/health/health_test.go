package health

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestConditionLogsSpells(t *testing.T) {
	var logs bytes.Buffer
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	c := NewCondition("store", "events wait in the spool", slog.New(slog.NewTextHandler(&logs, nil)), func() time.Time { return now })
	var r Readiness
	r.Add(c, time.Minute)
	c.OK()
	if logs.Len() != 0 || r.Err() != nil {
		t.Fatalf("a working condition logged %q, unready %v", logs.String(), r.Err())
	}
	for i := range 110 {
		c.Fail(errors.New("connection refused"))
		now = now.Add(time.Second)
		if i == 10 && r.Err() != nil {
			t.Errorf("unready after 11 s of failures, within the grace: %v", r.Err())
		}
	}
	err := r.Err()
	if err == nil || !strings.Contains(err.Error(), "store failing for 1m50s (110 failures): connection refused") {
		t.Errorf("readiness after 110 s of failures: %v", err)
	}
	c.OK()
	if err := r.Err(); err != nil {
		t.Errorf("unready after recovering: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log lines for one failing spell of 110 failures, want 2:\n%s", len(lines), logs.String())
	}
	if !strings.Contains(lines[0], "level=ERROR") || !strings.Contains(lines[0], "events wait in the spool") {
		t.Errorf("first line %q", lines[0])
	}
	if !strings.Contains(lines[1], "store recovered") || !strings.Contains(lines[1], "failures=110") || !strings.Contains(lines[1], "failed_for=1m50s") {
		t.Errorf("second line %q", lines[1])
	}
}
