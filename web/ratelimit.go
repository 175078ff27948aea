package web

import (
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/auditlens/auditlens/internal/expiring"
)

// Failed sign-ins are bounded per client address, so that a hand-picked
// weak read token cannot be guessed by trying: after maxSignInFailures
// refusals within signInWindow an address gets 429 until the window has
// passed since its first refusal. The address is the TCP peer's (an IPv6
// client's /64), never a forwarded-for header, which anyone can send.

const (
	maxSignInFailures = 10
	signInWindow      = time.Minute
	// maxLimited bounds the addresses remembered; past it the oldest go.
	maxLimited = 10000
)

type failureLimiter struct {
	mu   sync.Mutex
	by   map[netip.Prefix]failures
	now  func() time.Time
	max  int
	span time.Duration
}

type failures struct {
	n     int
	first time.Time
}

func newFailureLimiter(now func() time.Time) *failureLimiter {
	return &failureLimiter{by: map[netip.Prefix]failures{}, now: now, max: maxSignInFailures, span: signInWindow}
}

// clientPrefix is the request's TCP peer: the address, or an IPv6 /64.
func clientPrefix(r *http.Request) (netip.Prefix, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Prefix{}, false
	}
	a := ap.Addr().Unmap()
	if a.Is4() {
		return netip.PrefixFrom(a, 32), true
	}
	p, _ := a.Prefix(64)
	return p, true
}

// wait reports how long the request's client must wait before it may try
// again; 0 when it may now.
func (l *failureLimiter) wait(r *http.Request) time.Duration {
	p, ok := clientPrefix(r)
	if !ok {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.by[p]
	if !ok {
		return 0
	}
	left := f.first.Add(l.span).Sub(l.now())
	if left <= 0 {
		delete(l.by, p)
		return 0
	}
	if f.n < l.max {
		return 0
	}
	return left
}

// fail counts a refused sign-in of the request's client.
func (l *failureLimiter) fail(r *http.Request) {
	p, ok := clientPrefix(r)
	if !ok {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.by[p]
	if !ok || !now.Before(f.first.Add(l.span)) {
		f = failures{first: now}
	}
	f.n++
	if !ok {
		expiring.MakeRoom(l.by, maxLimited, now, func(v failures) time.Time { return v.first.Add(l.span) })
	}
	l.by[p] = f
}

// limited answers 429 when the client has failed too often; true when it
// has.
func (s *server) limited(c *gin.Context) bool {
	left := s.signInFailures.wait(c.Request)
	if left <= 0 {
		return false
	}
	c.Header("Retry-After", strconv.Itoa(int(left.Round(time.Second)/time.Second)+1))
	s.fail(c, http.StatusTooManyRequests, errTooManySignIns)
	return true
}
