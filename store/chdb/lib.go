package chdb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"
)

// LibVersion is the pinned libchdb release: the version of the npm package
// @chdb/lib-linux-x64-gnu that scripts/chdb-lib.sh fetches, and the name of
// its folder in the cache. Keep it in step with LIB_VERSION in that script.
const LibVersion = "26.7.3-stable.1"

const (
	// EnvLibPath names the environment variable that points at libchdb.so.
	EnvLibPath = "CHDB_LIB_PATH"
	// SystemLibPath is where a system-wide install of libchdb.so lives.
	SystemLibPath = "/usr/local/lib/libchdb.so"
)

// ErrLibraryNotFound is returned when libchdb.so is not where it was
// looked for. The error wrapping it names every way to provide it.
var ErrLibraryNotFound = errors.New("libchdb.so not found")

// CachePath returns where scripts/chdb-lib.sh puts the pinned library:
// ${XDG_CACHE_HOME:-$HOME/.cache}/auditlens/chdb/<LibVersion>/libchdb.so.
func CachePath() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("locating the chdb cache: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "auditlens", "chdb", LibVersion, "libchdb.so"), nil
}

// LibraryPath finds libchdb.so. It tries, in order: flagValue (the
// --chdb-lib flag), the CHDB_LIB_PATH environment variable, the user cache
// (see [CachePath]) and [SystemLibPath]. A flag or variable that is set but
// names no file is an error rather than a reason to look further, so a
// mistyped path is not silently replaced by another library. When nothing
// is found the error wraps [ErrLibraryNotFound] and lists what was tried and
// how to provide the library.
func LibraryPath(flagValue string) (string, error) {
	var tried []string
	check := func(label, path string) (string, bool) {
		abs, err := filepath.Abs(path)
		if err != nil {
			abs = path
		}
		fi, err := os.Stat(abs)
		switch {
		case err != nil:
			tried = append(tried, fmt.Sprintf("%s %s (%v)", label, abs, errors.Unwrap(err)))
		case !fi.Mode().IsRegular():
			tried = append(tried, fmt.Sprintf("%s %s (not a regular file)", label, abs))
		case fi.Size() == 0:
			tried = append(tried, fmt.Sprintf("%s %s (empty file)", label, abs))
		default:
			return abs, true
		}
		return "", false
	}

	if flagValue != "" {
		if p, ok := check("--chdb-lib", flagValue); ok {
			return p, nil
		}
		return "", notFound(tried)
	}
	if env := os.Getenv(EnvLibPath); env != "" {
		if p, ok := check(EnvLibPath, env); ok {
			return p, nil
		}
		return "", notFound(tried)
	}
	if cache, err := CachePath(); err != nil {
		tried = append(tried, "cache ("+err.Error()+")")
	} else if p, ok := check("cache", cache); ok {
		return p, nil
	}
	if p, ok := check("system", SystemLibPath); ok {
		return p, nil
	}
	return "", notFound(tried)
}

func notFound(tried []string) error {
	return fmt.Errorf("%w (tried: %s); the embedded ClickHouse engine needs it: "+
		"pass --chdb-lib=/path/to/libchdb.so, set %s=/path/to/libchdb.so, "+
		"run `make chdb` (scripts/chdb-lib.sh fetches chDB %s into the cache), "+
		"or install it as %s; a ClickHouse server (clickhouse://…) needs none of this",
		ErrLibraryNotFound, strings.Join(tried, "; "), EnvLibPath, LibVersion, SystemLibPath)
}

// Opaque handles owned by libchdb. They point into C memory, which the Go
// garbage collector ignores.
type (
	cConn   unsafe.Pointer // chdb_connection
	cResult unsafe.Pointer // chdb_result *
	cInsert unsafe.Pointer // chdb_insert_stream
)

// library holds the entry points of a loaded libchdb.so. The signatures
// follow programs/local/chdb.h of chdb-io/chdb-core; purego turns each Go
// argument into one C argument (pointers and uintptr as-is, int32 as int,
// string as a NUL-terminated copy only where the C side wants char*).
type library struct {
	path    string
	version string // chdb_version()

	connect       func(argc int32, argv *unsafe.Pointer) *cConn
	closeConn     func(conn *cConn)
	queryN        func(conn cConn, query *byte, queryLen uintptr, format *byte, formatLen uintptr) cResult
	queryParamsN  func(conn cConn, query *byte, queryLen uintptr, format *byte, formatLen uintptr, names *unsafe.Pointer, nameLens *uintptr, values *unsafe.Pointer, valueLens *uintptr, count uintptr) cResult
	streamParamsN func(conn cConn, query *byte, queryLen uintptr, format *byte, formatLen uintptr, names *unsafe.Pointer, nameLens *uintptr, values *unsafe.Pointer, valueLens *uintptr, count uintptr) cResult
	streamFetch   func(conn cConn, res cResult) cResult
	streamCancel  func(conn cConn, res cResult)
	destroyResult func(res cResult)

	insertN       func(conn cConn, query *byte, queryLen uintptr, format *byte, formatLen uintptr) cInsert
	insertAppend  func(stream cInsert, data unsafe.Pointer, n uintptr) int32
	insertDone    func(stream cInsert) cResult
	insertCancel  func(stream cInsert)
	insertError   func(stream cInsert) string
	insertDestroy func(stream cInsert)

	resultBuffer      func(res cResult) *byte
	resultLength      func(res cResult) uintptr
	resultError       func(res cResult) string
	resultRowsRead    func(res cResult) uint64
	resultRowsWritten func(res cResult) uint64

	chdbVersion func() string

	// Optional: absent from older releases.
	setSignalHandlersEnabled func(enabled int32)
}

// symbols maps each required C function to the field that calls it.
func (l *library) symbols() map[string]any {
	return map[string]any{
		"chdb_connect":                    &l.connect,
		"chdb_close_conn":                 &l.closeConn,
		"chdb_query_n":                    &l.queryN,
		"chdb_query_with_params_n":        &l.queryParamsN,
		"chdb_stream_query_with_params_n": &l.streamParamsN,
		"chdb_stream_fetch_result":        &l.streamFetch,
		"chdb_stream_cancel_query":        &l.streamCancel,
		"chdb_destroy_query_result":       &l.destroyResult,
		"chdb_stream_insert_n":            &l.insertN,
		"chdb_stream_append":              &l.insertAppend,
		"chdb_stream_done":                &l.insertDone,
		"chdb_stream_cancel_insert":       &l.insertCancel,
		"chdb_stream_insert_error":        &l.insertError,
		"chdb_destroy_insert_stream":      &l.insertDestroy,
		"chdb_result_buffer":              &l.resultBuffer,
		"chdb_result_length":              &l.resultLength,
		"chdb_result_error":               &l.resultError,
		"chdb_result_rows_read":           &l.resultRowsRead,
		"chdb_result_rows_written":        &l.resultRowsWritten,
		"chdb_version":                    &l.chdbVersion,
	}
}

// loadLibrary dlopens path and binds the entry points. Signal handlers are
// saved around dlopen as well, in case a static initializer installs any.
// engine.mu must be held.
func loadLibrary(path string) (*library, error) {
	saved := saveSignals()
	handle, err := dlopen(path)
	noteSignals(saved.restore())
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", path, err)
	}
	l := &library{path: path}
	var missing []string
	for name, fptr := range l.symbols() {
		if err := bind(handle, name, fptr); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("loading %s: missing %s (want chDB %s or newer)",
			path, strings.Join(missing, ", "), LibVersion)
	}
	// Optional entry point; its absence is not an error.
	_ = bind(handle, "chdb_set_signal_handlers_enabled", &l.setSignalHandlersEnabled)
	l.version = l.chdbVersion()
	return l, nil
}

// resultErr turns a result's error message into an error naming op.
func (l *library) resultErr(res cResult, op string) error {
	if res == nil {
		return fmt.Errorf("chdb %s: no result (connection closed?)", op)
	}
	if msg := l.resultError(res); msg != "" {
		return fmt.Errorf("chdb %s: %s", op, strings.TrimSpace(msg))
	}
	return nil
}

// resultBytes returns a view of the result's buffer, valid until the
// result is destroyed.
func (l *library) resultBytes(res cResult) []byte {
	n := l.resultLength(res)
	if n == 0 {
		return nil
	}
	p := l.resultBuffer(res)
	if p == nil {
		return nil
	}
	return unsafe.Slice(p, n)
}
