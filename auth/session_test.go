package auth

import (
	"testing"
	"time"
)

func TestSessionsBounded(t *testing.T) {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	s := NewSessions(time.Hour, func() time.Time { return now })
	first, err := s.Create(EveryCluster, "")
	if err != nil {
		t.Fatal(err)
	}
	for range MaxSessions {
		now = now.Add(time.Millisecond)
		if _, err := s.Create(EveryCluster, ""); err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() != MaxSessions {
		t.Errorf("%d sessions kept, want %d", s.Len(), MaxSessions)
	}
	if _, ok := s.Get(first); ok {
		t.Error("the oldest session survived the bound")
	}
}

// TestSessionsExpire: a session is found until its TTL has passed, not
// after; an ended one is not found; nor is an ID never given.
func TestSessionsExpire(t *testing.T) {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	s := NewSessions(time.Hour, func() time.Time { return now })
	p := Principal{Clusters: []string{"alpha"}}
	id, err := s.Create(p, "ann")
	if err != nil {
		t.Fatal(err)
	}
	if se, ok := s.Get(id); !ok || se.User != "ann" || !se.Who.Allows("alpha") || se.Who.Allows("beta") {
		t.Fatalf("Get = %+v, %v; want ann's session of alpha", se, ok)
	}
	if _, ok := s.Get(""); ok {
		t.Error("the empty ID names a session")
	}
	if _, ok := s.Get(id + "x"); ok {
		t.Error("another ID names the session")
	}
	now = now.Add(time.Hour - time.Nanosecond)
	if _, ok := s.Get(id); !ok {
		t.Error("the session ended before its TTL")
	}
	now = now.Add(time.Nanosecond)
	if _, ok := s.Get(id); ok {
		t.Error("the session outlived its TTL")
	}
	id2, err := s.Create(p, "")
	if err != nil {
		t.Fatal(err)
	}
	s.End(id2)
	if _, ok := s.Get(id2); ok {
		t.Error("an ended session is still found")
	}
	if id == id2 || len(id) < 40 {
		t.Errorf("IDs %q and %q: want two random 256-bit tokens", id, id2)
	}
}
