package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Options configures Open.
type Options struct {
	// ChdbLib is the value of the --chdb-lib flag: the path of libchdb.so
	// for chdb:// URLs. Empty means look it up (CHDB_LIB_PATH, the cache
	// filled by `make chdb`, /usr/local/lib/libchdb.so).
	ChdbLib string
	// Logger receives the engines' start-up messages; nil discards them.
	Logger *slog.Logger
}

// openServer opens a ClickHouse server or cluster from a clickhouse:// URL.
// The server engine (server.go) sets it; Open fails while it is nil.
var openServer func(ctx context.Context, url string, opts Options) (Store, error)

// Open opens the Store that rawURL names:
//
//	chdb:///abs/path         the embedded engine, data in /abs/path
//	chdb://./rel/path        the embedded engine, data relative to the working directory
//	clickhouse://host:9000/db?…  a ClickHouse server (see server.go)
//	clickhouse://host:9000/db?cluster=NAME  a ClickHouse cluster (see ParseCluster)
//
// The data directory of the embedded engine is created if missing.
func Open(ctx context.Context, rawURL string, opts Options) (Store, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("store URL %q: want chdb:///abs/path, chdb://./rel/path or clickhouse://host:port/db", rawURL)
	}
	switch strings.ToLower(scheme) {
	case "chdb":
		path, err := chdbDataPath(rawURL)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(path, 0o750); err != nil {
			return nil, fmt.Errorf("creating the embedded engine's data directory: %w", err)
		}
		e, err := OpenEmbedded(ctx, path, EmbeddedOptions{ChdbLib: opts.ChdbLib, Logger: opts.Logger})
		if err != nil {
			return nil, err
		}
		return e, nil
	case "clickhouse":
		if openServer == nil {
			return nil, fmt.Errorf("store URL %s: this binary has no ClickHouse server engine", scheme+"://…")
		}
		return openServer(ctx, rawURL, opts)
	default:
		// Only the scheme is repeated: a server URL may carry a password.
		return nil, fmt.Errorf("store URL scheme %q: want chdb:// (embedded engine) or clickhouse:// (server)", scheme)
	}
}

// ClusterSpec is what a store URL says about ClickHouse cluster mode.
type ClusterSpec struct {
	// Name is the value of the URL's cluster query parameter: the cluster
	// (a remote_servers entry of the server's configuration) the tables are
	// spread over. Empty means a single server, or the embedded engine.
	Name string
	// Database is the database the URL's path names; empty when it names
	// none (the user's default database).
	Database string
}

// ParseCluster returns the cluster mode that rawURL asks for:
//
//	clickhouse://host:9000/audit?cluster=prod
//
// selects cluster mode on the remote_servers cluster "prod", with the
// tables in database "audit". The store itself reads and writes the same
// table names either way (on a cluster they are the Distributed tables);
// the migrator is what creates a different schema.
func ParseCluster(rawURL string) (ClusterSpec, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok || !strings.EqualFold(scheme, "clickhouse") {
		return ClusterSpec{}, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// The error would repeat the URL, and with it a password.
		return ClusterSpec{}, errors.New("parsing ClickHouse server URL: not a valid URL")
	}
	var spec ClusterSpec
	spec.Database = strings.Trim(u.Path, "/")
	q := u.Query()
	if vals, ok := q["cluster"]; ok {
		if len(vals) != 1 || strings.TrimSpace(vals[0]) == "" {
			return ClusterSpec{}, errors.New("store URL: the cluster parameter needs exactly one name (clickhouse://host:9000/db?cluster=NAME)")
		}
		spec.Name = vals[0]
	}
	return spec, nil
}

// withoutCluster returns rawURL without its cluster query parameter,
// which is auditlens's and not a ClickHouse setting (the driver would send
// every parameter it does not know as a setting, and the server would
// reject it).
func withoutCluster(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", errors.New("parsing ClickHouse server URL: not a valid URL")
	}
	q := u.Query()
	if _, ok := q["cluster"]; !ok {
		return rawURL, nil
	}
	q.Del("cluster")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// ChdbURL is the store URL of the embedded engine's data at the absolute
// path dir, its characters escaped: a directory named with "#", "?" or
// "%" (a scan's --tmp) is a path, not a fragment or a query.
func ChdbURL(dir string) string {
	return (&url.URL{Scheme: "chdb", Path: filepath.ToSlash(dir)}).String()
}

// chdbDataPath returns the absolute data directory a chdb:// URL names:
// chdb:///abs/path, or chdb://./rel/path (also chdb://../rel/path)
// relative to the working directory.
func chdbDataPath(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("parsing store URL: %w", err)
	}
	bad := func(why string) error {
		return fmt.Errorf("store URL %q: %s; want chdb:///abs/path or chdb://./rel/path", rawURL, why)
	}
	if u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" {
		return "", bad("a chdb URL holds only a path")
	}
	var p string
	switch u.Host {
	case "":
		p = u.Path
	case ".", "..":
		p = u.Host + u.Path
	default:
		return "", bad(fmt.Sprintf("%q is not a path (a relative path starts with ./)", u.Host+u.Path))
	}
	if p == "" || p == "/" {
		return "", bad("no data path")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("store URL %q: %w", rawURL, err)
	}
	return abs, nil
}
