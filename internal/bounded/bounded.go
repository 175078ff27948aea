// Package bounded serves HTTP so that no client holds more than its share:
// connections, time and bytes.
//
// A client of serve's one listener (the webhook, OTLP, the API and the UI)
// is bounded in four ways, each with a default here and a flag in serve:
//
//   - headers: ReadHeaderTimeout, as net/http applies it (slowloris);
//   - keep-alive: a connection idle longer than IdleTimeout is closed;
//   - request bodies: a body must arrive at MinBodyRate bytes a second
//     after BodyGrace, so one dripping a byte a second is cut after about
//     BodyGrace however large a body may be; a declared Content-Length
//     above MaxBodyBytes is answered 413 before a byte is read;
//   - connections: at most MaxConns are served at once. When one more
//     arrives, the connection idle longest is closed to make room (or
//     else one silent for a while since it connected); when none is, the
//     newcomer is answered 503 with Retry-After (up to
//     a few at a time; beyond those it is closed at once), so a flood of
//     connections slows nobody else's answers for longer than it lasts.
//
// An answer of 401 or 403 closes its connection: a client without the
// right credentials keeps nothing open.
package bounded

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Config bounds what the clients of one listener hold.
type Config struct {
	// MaxConns is the most connections served at once.
	MaxConns int
	// IdleTimeout closes a keep-alive connection that sends nothing for
	// this long.
	IdleTimeout time.Duration
	// ReadHeaderTimeout is the longest a client may take to send a
	// request's headers.
	ReadHeaderTimeout time.Duration
	// BodyGrace is how long a request body may take before MinBodyRate
	// applies.
	BodyGrace time.Duration
	// MinBodyRate is the slowest a request body may arrive, in bytes a
	// second, after BodyGrace.
	MinBodyRate int64
	// WriteTimeout is the longest an answer may take to write once its
	// request is read (a query streams for up to its own timeout).
	WriteTimeout time.Duration
	// MaxBodyBytes is the largest Content-Length accepted; larger is
	// answered 413 unread. gzip-encoded bodies may be slightly larger on
	// the wire than the MaxBodyBytes they decompress to.
	MaxBodyBytes int64
	// Refused, if set, hears of each request answered here rather than
	// by the handler (413, or 503 for too many connections), so a
	// handler's metrics can count them.
	Refused func(r *http.Request, code int)
}

// Defaults is what serve uses when no flag says otherwise.
func Defaults() Config {
	return Config{
		MaxConns:          1024,
		IdleTimeout:       90 * time.Second,
		ReadHeaderTimeout: 10 * time.Second,
		BodyGrace:         10 * time.Second,
		MinBodyRate:       64 << 10,
		WriteTimeout:      2 * time.Minute,
		MaxBodyBytes:      64 << 20,
	}
}

// RegisterFlags registers the bounds as flags on fs, with c's values as
// defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxConns, "max-conns", c.MaxConns, "most client connections at once; the one idle longest is closed for a newcomer, or the newcomer is answered 503")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "close a keep-alive connection idle this long")
	fs.DurationVar(&c.ReadHeaderTimeout, "read-header-timeout", c.ReadHeaderTimeout, "longest a client may take to send a request's headers")
	fs.DurationVar(&c.BodyGrace, "body-grace", c.BodyGrace, "how long a request body may take before --body-min-rate applies")
	fs.Int64Var(&c.MinBodyRate, "body-min-rate", c.MinBodyRate, "slowest a request body may arrive after --body-grace, in bytes a second")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", c.WriteTimeout, "longest an answer may take to write once its request is read")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest webhook or OTLP body accepted (after gzip); larger gets 413")
}

// Validate says what is wrong with c, if anything.
func (c Config) Validate() error {
	var errs []error
	if c.MaxConns < 1 {
		errs = append(errs, fmt.Errorf("--max-conns is %d: at least 1", c.MaxConns))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--idle-timeout", c.IdleTimeout}, {"--read-header-timeout", c.ReadHeaderTimeout}, {"--body-grace", c.BodyGrace}, {"--write-timeout", c.WriteTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s is %s: it must be positive", d.name, d.v))
		}
	}
	if c.MinBodyRate < 1 {
		errs = append(errs, fmt.Errorf("--body-min-rate is %d: at least 1 byte a second", c.MinBodyRate))
	}
	if c.MaxBodyBytes < 1 {
		errs = append(errs, fmt.Errorf("--max-body-bytes is %d: at least 1", c.MaxBodyBytes))
	}
	return errors.Join(errs...)
}

// Server is an http.Server for h whose clients are bounded by c. Serve it
// on Listen's listener.
type Server struct {
	*http.Server
	conns *conns
}

// NewServer returns a server for h bounded by c; log may be nil.
func NewServer(h http.Handler, c Config, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cs := &conns{max: c.MaxConns, overflowMax: overflowMax(c.MaxConns), quiet: map[*conn]quiet{}, log: log}
	s := &http.Server{
		Handler:           handler(h, c),
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		// The handler sets each request's write deadline once its body
		// is read; this bounds what it never reaches.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ConnState: func(nc net.Conn, st http.ConnState) {
			if c := unwrap(nc); c != nil {
				cs.state(c, st)
			}
		},
		ConnContext: func(ctx context.Context, nc net.Conn) context.Context {
			if c := unwrap(nc); c != nil && c.overflow {
				return context.WithValue(ctx, overflowKey{}, true)
			}
			return ctx
		},
	}
	return &Server{Server: s, conns: cs}
}

// Listener bounds the connections of ln for s: wrap the plain TCP
// listener (before TLS, if any).
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &listener{Listener: ln, cs: s.conns}
}

// Stats counts a server's connections.
type Stats struct {
	// Open is how many are served now.
	Open int
	// Refused is how many were answered 503, or closed unanswered,
	// because MaxConns were open and none quiet, since the start.
	Refused uint64
	// Evicted is how many quiet connections were closed to make room.
	Evicted uint64
}

// Stats counts the server's connections now.
func (s *Server) Stats() Stats {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	return Stats{Open: s.conns.open, Refused: s.conns.refused.Load(), Evicted: s.conns.evicted.Load()}
}

// overflowMax is how many connections beyond MaxConns are answered 503 at
// once; more are closed unanswered.
func overflowMax(max int) int { return min(64, max/8+4) }

type overflowKey struct{}

// conns counts a listener's connections and knows which are idle.
type conns struct {
	max, overflowMax int
	log              *slog.Logger

	mu       sync.Mutex
	open     int // served, not overflow
	overflow int
	quiet    map[*conn]quiet
	refused  atomic.Uint64
	evicted  atomic.Uint64
}

func (cs *conns) state(c *conn, st http.ConnState) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	switch st {
	case http.StateIdle, http.StateNew:
		cs.quiet[c] = quiet{since: time.Now(), fresh: st == http.StateNew}
	default:
		delete(cs.quiet, c)
	}
}

// quiet is a connection that sends nothing: idle between requests, or
// fresh, not yet through its first request's headers.
type quiet struct {
	since time.Time
	fresh bool
}

// freshGrace is how long a new connection may stay silent before it may
// be closed to make room: a client sends its first request at once.
const freshGrace = 2 * time.Second

// admit decides for a connection just accepted: served, answered 503
// (overflow) or closed (false).
func (cs *conns) admit(c *conn) bool {
	cs.mu.Lock()
	if cs.open < cs.max {
		cs.open++
		cs.mu.Unlock()
		return true
	}
	// Make room: close the connection idle longest, or else the one
	// silent longest since it connected.
	var oldest *conn
	var since time.Time
	now := time.Now()
	for _, fresh := range []bool{false, true} {
		for qc, q := range cs.quiet {
			if q.fresh != fresh || fresh && now.Sub(q.since) < freshGrace {
				continue
			}
			if oldest == nil || q.since.Before(since) {
				oldest, since = qc, q.since
			}
		}
		if oldest != nil {
			break
		}
	}
	if oldest != nil {
		delete(cs.quiet, oldest)
		cs.open++ // the evicted one's Close gives its place back
		cs.mu.Unlock()
		cs.evicted.Add(1)
		_ = oldest.Close()
		return true
	}
	cs.refused.Add(1)
	if cs.overflow < cs.overflowMax {
		cs.overflow++
		c.overflow = true
		cs.mu.Unlock()
		return true
	}
	cs.mu.Unlock()
	return false
}

func (cs *conns) release(c *conn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	delete(cs.quiet, c)
	if c.overflow {
		cs.overflow--
	} else {
		cs.open--
	}
}

type listener struct {
	net.Listener
	cs *conns
	// warned limits the log line about a full listener to one a minute.
	warned atomic.Int64
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c := &conn{Conn: nc, cs: l.cs}
		if l.cs.admit(c) {
			if c.overflow {
				l.warnFull()
			}
			return c, nil
		}
		l.warnFull()
		_ = nc.Close()
	}
}

func (l *listener) warnFull() {
	now := time.Now().Unix()
	if last := l.warned.Load(); now-last >= 60 && l.warned.CompareAndSwap(last, now) {
		l.cs.log.Warn("too many client connections: newcomers are answered 503 (serve --max-conns)",
			"max", l.cs.max, "refused_so_far", l.cs.refused.Load())
	}
}

// conn gives its place back once, when closed.
type conn struct {
	net.Conn
	cs       *conns
	overflow bool
	once     sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.cs.release(c) })
	return err
}

// unwrap finds the conn under a TLS connection, or under nothing.
func unwrap(nc net.Conn) *conn {
	for {
		switch v := nc.(type) {
		case *conn:
			return v
		case interface{ NetConn() net.Conn }:
			nc = v.NetConn()
		default:
			return nil
		}
	}
}

// handler applies the per-request bounds around h.
func handler(h http.Handler, c Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(overflowKey{}) != nil {
			w.Header().Set("Connection", "close")
			w.Header().Set("Retry-After", "1")
			c.refused(r, http.StatusServiceUnavailable)
			refuse(w, http.StatusServiceUnavailable, "too many connections; retry later (serve --max-conns)")
			return
		}
		w = &closeOnDenied{ResponseWriter: w}
		if limit := wireLimit(c.MaxBodyBytes, r.Header.Get("Content-Encoding")); r.ContentLength > limit {
			w.Header().Set("Connection", "close")
			c.refused(r, http.StatusRequestEntityTooLarge)
			refuse(w, http.StatusRequestEntityTooLarge, "request body of "+strconv.FormatInt(r.ContentLength, 10)+
				" bytes is larger than the "+strconv.FormatInt(c.MaxBodyBytes, 10)+" accepted (serve --max-body-bytes)")
			return
		}
		rc := http.NewResponseController(w)
		start := time.Now()
		if r.Body != nil && r.Body != http.NoBody {
			b := &body{ReadCloser: r.Body, rc: rc, start: start, c: c}
			b.extend()
			r.Body = b
		} else {
			_ = rc.SetWriteDeadline(start.Add(c.WriteTimeout))
		}
		h.ServeHTTP(w, r)
	})
}

func (c Config) refused(r *http.Request, code int) {
	if c.Refused != nil {
		c.Refused(r, code)
	}
}

// refuse answers as the API and the receivers do: {"error": msg}.
func refuse(w http.ResponseWriter, code int, msg string) {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// wireLimit is the largest Content-Length a body of at most max bytes
// may have: gzip adds a little to what it cannot compress.
func wireLimit(max int64, encoding string) int64 {
	if encoding == "" || encoding == "identity" {
		return max
	}
	return max + max/1024 + 1024
}

// body moves the connection's read deadline on as the body arrives: it
// must come at MinBodyRate after BodyGrace. The write deadline follows,
// WriteTimeout after the read deadline.
type body struct {
	io.ReadCloser
	rc    *http.ResponseController
	start time.Time
	c     Config
	n     int64
	last  time.Time // the read deadline set last
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if n > 0 {
		b.extend()
	}
	if err != nil && isTimeout(err) {
		return n, fmt.Errorf("request body arrived slower than %d bytes a second (serve --body-min-rate): %w", b.c.MinBodyRate, err)
	}
	return n, err
}

func (b *body) extend() {
	d := b.start.Add(b.c.BodyGrace + time.Duration(float64(b.n)/float64(b.c.MinBodyRate)*float64(time.Second)))
	// A deadline costs a syscall: move it only when it moved a little.
	if d.Sub(b.last) < 10*time.Millisecond {
		return
	}
	b.last = d
	_ = b.rc.SetReadDeadline(d)
	_ = b.rc.SetWriteDeadline(d.Add(b.c.WriteTimeout))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// closeOnDenied closes the connection after a 401 or 403.
type closeOnDenied struct {
	http.ResponseWriter
}

func (w *closeOnDenied) WriteHeader(code int) {
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		w.Header().Set("Connection", "close")
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *closeOnDenied) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes on to the writer below, for streamed answers.
func (w *closeOnDenied) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
