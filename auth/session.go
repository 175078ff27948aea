package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"

	"github.com/auditlens/auditlens/internal/expiring"
)

const (
	// DefaultSessionTTL is how long a browser stays signed in.
	DefaultSessionTTL = 12 * time.Hour
	// MaxSessions bounds the sessions kept; signing in past it drops the
	// soonest to expire.
	MaxSessions = 10000
)

// Sessions are the browsers signed in: a random ID each (the cookie's
// value), kept by its SHA-256 digest in this process only (a restart
// signs everyone out). It is safe for concurrent use.
type Sessions struct {
	mu   sync.Mutex
	byID map[[sha256.Size]byte]Session
	ttl  time.Duration
	now  func() time.Time
}

// Session is one signed-in browser.
type Session struct {
	Expires time.Time
	Who     Principal
	User    string // the provider's name of the user (OIDC); empty for a token
}

// NewSessions returns sessions that last ttl (0: DefaultSessionTTL) by
// the clock now.
func NewSessions(ttl time.Duration, now func() time.Time) *Sessions {
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	return &Sessions{byID: map[[sha256.Size]byte]Session{}, ttl: ttl, now: now}
}

// TTL is how long a session lasts.
func (s *Sessions) TTL() time.Duration { return s.ttl }

// Create starts a session of p (signed in as user, when known) and
// returns its ID.
func (s *Sessions) Create(p Principal, user string) (string, error) {
	id, err := RandomToken()
	if err != nil {
		return "", err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	expiring.MakeRoom(s.byID, MaxSessions, now, func(se Session) time.Time { return se.Expires })
	s.byID[sha256.Sum256([]byte(id))] = Session{Expires: now.Add(s.ttl), Who: p, User: user}
	return id, nil
}

// Get returns the live session of an ID.
func (s *Sessions) Get(id string) (Session, bool) {
	if id == "" {
		return Session{}, false
	}
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.byID[k]
	if ok && !s.now().Before(se.Expires) {
		delete(s.byID, k)
		return Session{}, false
	}
	return se, ok
}

// End ends the session of an ID.
func (s *Sessions) End(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, sha256.Sum256([]byte(id)))
}

// Len is how many sessions are kept (expired ones included until the
// next Create drops them).
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

// RandomToken returns 32 random bytes, base64url: a session ID, an OIDC
// state, verifier or nonce.
func RandomToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
