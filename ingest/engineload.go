package ingest

// The engine's own reader of audit logs. A log that the apiserver's log
// backend wrote (one audit.k8s.io/v1 Event a line, plain or gzip) is read
// by ClickHouse's JSON parser straight into scan's table (store.ScanEvents), each
// column derived in SQL (engineColumns) as normalize and ParseRequestURI
// derive it in Go. That is several times faster than decoding in Go and
// inserting rows, and it is what scan does with such logs. Anything else
// (cloud envelopes, EventLists, old apiVersions, a malformed line, a value
// the engine would read differently) is left to the Go decoder, which
// explains every reject: EngineLoad refuses the whole input then
// (ErrNotEngineReadable) and the caller imports it the Go way.
//
// Two descriptions of one derivation must not drift apart:
// TestEngineDerivation loads every committed fixture both ways and
// compares every column of every event.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/auditlens/auditlens/store"
)

// ErrNotEngineReadable is wrapped by EngineLoad's errors when the engine
// cannot read the input the way the Go decoder would: the input is fine,
// but the caller should import it with Import.
var ErrNotEngineReadable = errors.New("not readable by the engine alone")

// EngineStore is what EngineLoad needs of a store: the embedded engine,
// whose file() reads local files.
type EngineStore interface {
	Exec(ctx context.Context, sql string, params store.Params) error
	store.Scanner
}

// engineFields is the structure file() reads of each line: the fields
// normalize reads of a v1 event, with the v1beta1 times it falls back to.
// Everything else of a line (requestObject, responseObject but its
// resourceVersion, user.extra) is skipped by the parser.
const engineFields = `kind String, apiVersion String, level String, auditID String, stage String, requestURI String, verb String, ` +
	`user Tuple(username String, groups Array(String)), impersonatedUser Tuple(username String), sourceIPs Array(String), userAgent String, ` +
	`objectRef Tuple(resource String, namespace String, name String, uid String, apiGroup String, apiVersion String, resourceVersion String, subresource String), ` +
	`responseStatus Tuple(code Dynamic), responseObject Tuple(metadata Tuple(resourceVersion String)), ` +
	`requestReceivedTimestamp String, stageTimestamp String, annotations Map(String, String), ` +
	`timestamp String, metadata Tuple(creationTimestamp String)`

// engineWith names the parts of each line that several columns use: the
// requestURI cut as ParseRequestURI cuts it (the path, the query without
// its fragment, its keys and values unescaped) and the times chosen as
// normalize chooses them.
const engineWith = `WITH
  position(requestURI, '?') AS _qi,
  if(_qi > 0, substring(requestURI, 1, _qi - 1), requestURI) AS _p0,
  if(_qi > 0, substring(requestURI, _qi + 1), '') AS _q0,
  if(position(_q0, '#') > 0, substring(_q0, 1, position(_q0, '#') - 1), _q0) AS _q,
  if(position(_q0, '#') = 0 AND position(_p0, '#') > 0, substring(_p0, 1, position(_p0, '#') - 1), _p0) AS _path,
  arrayMap(x -> if(position(x, '=') > 0, substring(x, 1, position(x, '=') - 1), x), splitByChar('&', _q)) AS _k0,
  arrayMap(x -> if(position(x, '=') > 0, substring(x, position(x, '=') + 1), ''), splitByChar('&', _q)) AS _v0,
  arrayMap(k -> if(match(k, '[%+]'), if(match(k, '^(?:[^%]|%[0-9A-Fa-f]{2})*$'), decodeURLFormComponent(k), '\xFF'), k), _k0) AS _keys,
  arrayMap(v -> if(match(v, '[%+]') AND match(v, '^(?:[^%]|%[0-9A-Fa-f]{2})*$'), decodeURLFormComponent(v), v), _v0) AS _vals,
  _vals[indexOf(_keys, 'watch')] AS _watch,
  _vals[indexOf(_keys, 'timeoutSeconds')] AS _timeout,
  _vals[indexOf(_keys, 'limit')] AS _limit,
  multiIf(stageTimestamp != '', stageTimestamp, timestamp != '', timestamp, metadata.creationTimestamp) AS _ts,
  multiIf(requestReceivedTimestamp != '', requestReceivedTimestamp, timestamp != '', timestamp, metadata.creationTimestamp) AS _recv,
  parseDateTime64BestEffortOrNull(_ts, 6, 'UTC') AS _tsv,
  parseDateTime64BestEffortOrNull(_recv, 6, 'UTC') AS _recvv,
  position(objectRef.apiVersion, '/') AS _slash
`

// rfc3339 is the form of time parseTime accepts that the engine parses the
// same way: anything else (a comma, lower-case t or z, a leap second)
// leaves the line to the Go decoder.
const rfc3339 = `'^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:[.][0-9]+)?(?:Z|[+-][0-9]{2}:[0-9]{2})$'`

// engineInvalid is true for a line normalize would not accept. Such a line
// is loaded with an empty stage, which no event has, and sends the input
// to the Go decoder: one pass over the file tells both.
const engineInvalid = `NOT (kind = 'Event' AND apiVersion = 'audit.k8s.io/v1' AND auditID != ''
  AND dynamicType(responseStatus.code) IN ('None', 'Int64') AND ifNull(responseStatus.code.Int64, 0) BETWEEN -2147483648 AND 2147483647
  AND stage IN ('RequestReceived', 'ResponseStarted', 'ResponseComplete', 'Panic')
  AND match(_ts, ` + rfc3339 + `) AND _tsv IS NOT NULL
  AND (_recv = '' OR (match(_recv, ` + rfc3339 + `) AND _recvv IS NOT NULL)))`

// engineColumns derives each column of the table that a Row holds
// (store.RowColumns) from a line, as normalize does: the column, then the
// expression ({cluster} is the cluster every event is tagged with).
var engineColumns = [][2]string{
	{"cluster", "{cluster:String}"},
	{"apiserver", "''"},
	{"ts", "ifNull(_tsv, 0)"},
	{"received_at", "if(_recv = '', ifNull(_tsv, 0), ifNull(_recvv, 0))"},
	{"audit_id", "auditID"},
	{"stage", "if(" + engineInvalid + ", '', stage)"},
	{"level", "level"},
	{"verb", "verb"},
	{"request_uri", "requestURI"},
	{"user", "user.username"},
	{"user_groups", "user.groups"},
	{"impersonated_user", "impersonatedUser.username"},
	{"user_agent", "userAgent"},
	{"source_ip", "sourceIPs[1]"},
	{"resource", "objectRef.resource"},
	{"subresource", "objectRef.subresource"},
	{"api_group", "if(objectRef.apiGroup = '' AND _slash > 0, substring(objectRef.apiVersion, 1, _slash - 1), objectRef.apiGroup)"},
	{"api_version", "if(objectRef.apiGroup = '' AND _slash > 0, substring(objectRef.apiVersion, _slash + 1), objectRef.apiVersion)"},
	{"namespace", "objectRef.namespace"},
	{"name", "objectRef.name"},
	{"object_rv", "objectRef.resourceVersion"},
	{"object_uid", "objectRef.uid"},
	{"code", "toInt32(ifNull(responseStatus.code.Int64, 0))"},
	{"response_rv", "responseObject.metadata.resourceVersion"},
	{"watch", "verb = 'watch' OR (indexOf(_keys, 'watch') > 0 AND _watch != '0' AND lower(_watch) != 'false')" +
		" OR match(_path, '(?s)^/*(?:api/[^/]*|apis/[^/]*/[^/]*)/watch/.*[^/]')"},
	{"req_rv", "_vals[indexOf(_keys, 'resourceVersion')]"},
	{"req_rv_match", "_vals[indexOf(_keys, 'resourceVersionMatch')]"},
	{"timeout_seconds", "if(match(_timeout, '^[+-]?[0-9]+$'), toInt32OrZero(_timeout), 0)"},
	{"label_selector", "_vals[indexOf(_keys, 'labelSelector')]"},
	{"field_selector", "_vals[indexOf(_keys, 'fieldSelector')]"},
	{"req_limit", "if(match(_limit, '^[+-]?[0-9]+$'), toInt64OrZero(_limit), 0)"},
	{"req_continue", "_vals[indexOf(_keys, 'continue')]"},
	{"annotations", "annotations"},
	{"raw", "''"},
	{"residual", "''"},
}

// engineSettings make the parser as strict as the Go decoder: a value of
// the wrong JSON type is an error, not converted, and any error fails the
// load (the input then goes to the Go decoder).
const engineSettings = `SETTINGS input_format_allow_errors_num = 0, input_format_allow_errors_ratio = 0,
  input_format_json_read_numbers_as_strings = 0, input_format_json_read_bools_as_strings = 0,
  input_format_json_read_bools_as_numbers = 0, input_format_json_read_arrays_as_strings = 0,
  input_format_json_read_objects_as_strings = 0, input_format_skip_unknown_fields = 1,
  input_format_json_ignore_unknown_keys_in_named_tuple = 1, input_format_null_as_default = 1,
  max_insert_block_size = 65536, min_insert_block_size_rows = 65536, min_insert_block_size_bytes = 67108864`

// engineFileSettings read a file with pread; engineFeedSettings read a
// feed's pipes, which cannot be read at an offset, each in one stream of
// its own (no parallel parsing: the pipes are the parallelism).
const (
	engineFileSettings = `, storage_file_read_method = 'pread'`
	engineFeedSettings = `, storage_file_read_method = 'read', input_format_parallel_parsing = 0`
)

// engineInsertSQL loads the lines of one file ({path}, {compression}) into
// store.ScanEvents; fed, the lines of every pipe {path} names.
func engineInsertSQL(fed bool) string {
	cols := make([]string, len(engineColumns))
	exprs := make([]string, len(engineColumns))
	for i, c := range engineColumns {
		cols[i], exprs[i] = c[0], c[1]
	}
	settings := engineFileSettings
	if fed {
		settings = engineFeedSettings
	}
	return "INSERT INTO " + store.ScanEvents + " (" + strings.Join(cols, ", ") + ")\n" + engineWith +
		"SELECT " + strings.Join(exprs, ",\n  ") +
		"\nFROM file({path:String}, 'JSONEachRow', '" + engineFields + "', {compression:String})\n" + engineSettings + settings
}

// EngineLoad loads the audit log files into the table store.ScanEvents of
// st (store.CreateScanEvents: scan's throwaway table), every event tagged with
// cluster. It returns an error wrapping ErrNotEngineReadable, having
// stored nothing it reports, when any file is not a plain or gzip log of
// audit.k8s.io/v1 Events or holds a line the Go decoder would read
// differently; what it loaded so far stays in the table, and the caller
// then imports into a fresh store with Import, as scan does.
// Duplicated events (the same audit ID and stage) are stored once.
// onFile, when set, is called before each file is read.
func EngineLoad(ctx context.Context, st EngineStore, files []string, cluster string, onFile func(i, n int, path string)) (ImportStats, error) {
	start := time.Now()
	stats := ImportStats{Kinds: map[string]int64{}}
	type input struct {
		path, compression string
		size              int64
	}
	var inputs []input
	for _, f := range files {
		in, size, err := engineInput(f)
		if err != nil {
			return ImportStats{}, err
		}
		compression := "none"
		if size.gzip {
			compression = "gzip"
		}
		inputs = append(inputs, input{in, compression, size.bytes})
		stats.Bytes += size.bytes
		stats.Files++
	}
	for i, in := range inputs {
		if onFile != nil {
			onFile(i, len(inputs), in.path)
		}
		p := store.Params{"path": in.path, "compression": in.compression, "cluster": cluster}
		var before int64
		if err := selectCount(ctx, st, "SELECT count() AS n FROM "+store.ScanEvents, nil, &before); err != nil {
			return ImportStats{}, err
		}
		if err := engineRead(ctx, st, in.path, in.size, in.compression, p); err != nil {
			return ImportStats{}, err
		}
		var after, invalid int64
		if err := selectCount(ctx, st, "SELECT count() AS n FROM "+store.ScanEvents, nil, &after); err != nil {
			return ImportStats{}, err
		}
		if err := selectCount(ctx, st, "SELECT count() AS n FROM "+store.ScanEvents+" WHERE stage = ''", nil, &invalid); err != nil {
			return ImportStats{}, err
		}
		lines := after - before
		if invalid > 0 {
			return ImportStats{}, fmt.Errorf("%w: %s: %d of %d lines are not audit.k8s.io/v1 Events the engine reads as the decoder does",
				ErrNotEngineReadable, in.path, invalid, lines)
		}
		stats.Lines += lines
	}
	type summary struct {
		N     int64 `ch:"n"`
		Keys  int64 `ch:"keys"`
		First int64 `ch:"first"`
		Last  int64 `ch:"last"`
	}
	var sum summary
	// Distinct keys counted by a 64-bit hash of each (several times
	// faster than the pairs themselves): colliding hashes can only make
	// the count smaller, so when it equals the events every key is
	// distinct; otherwise the keys are counted exactly.
	err := store.Each(ctx, st, `SELECT count() AS n, uniqExact(cityHash64(audit_id, stage)) AS keys,
  toUnixTimestamp64Micro(min(ts)) AS first, toUnixTimestamp64Micro(max(ts)) AS last FROM `+store.ScanEvents, nil,
		func(r summary) error { sum = r; return nil })
	if err == nil && sum.Keys < sum.N {
		err = selectCount(ctx, st, "SELECT uniqExact(audit_id, stage) AS n FROM "+store.ScanEvents, nil, &sum.Keys)
	}
	if err != nil {
		return ImportStats{}, fmt.Errorf("summing up the load: %w", err)
	}
	if sum.Keys < sum.N {
		// Overlapping files: keep one row per event, as the durable
		// store's ReplacingMergeTree does.
		for _, sql := range []string{
			"CREATE TABLE scan_events_once AS " + store.ScanEvents,
			"INSERT INTO scan_events_once SELECT * FROM " + store.ScanEvents + " LIMIT 1 BY cluster, audit_id, stage",
			"EXCHANGE TABLES " + store.ScanEvents + " AND scan_events_once",
			"DROP TABLE scan_events_once",
		} {
			if err := st.Exec(ctx, sql, nil); err != nil {
				return ImportStats{}, fmt.Errorf("dropping duplicate events: %w", err)
			}
		}
	}
	stats.Events = sum.N
	stats.Stored = sum.Keys
	stats.Duplicates = sum.N - sum.Keys
	stats.Kinds[KindAudit] = sum.N
	if sum.N > 0 {
		stats.Clusters = []string{cluster}
		stats.First, stats.Last = time.UnixMicro(sum.First).UTC(), time.UnixMicro(sum.Last).UTC()
	}
	stats.Elapsed = time.Since(start)
	return stats, nil
}

// engineRead has the engine insert the lines of the file path into
// store.ScanEvents: a large plain file through a feed, several streams at
// once, anything else read by the engine itself.
func engineRead(ctx context.Context, st EngineStore, path string, size int64, compression string, p store.Params) error {
	var fd *feed
	if compression == "none" {
		var err error
		if fd, err = startFeed(path, size, feedParts(size)); err != nil {
			return err
		}
	}
	insert := engineInsertSQL(fd != nil)
	if fd != nil {
		p["path"] = fd.pattern
	}
	err := st.Exec(ctx, insert, p)
	if fd != nil {
		// A part the engine left unread is its failure's doing when it
		// failed; a transfer's error, or a part unread by an engine that
		// says it read everything, is an error of its own.
		if ferr := fd.Stop(); ferr != nil && (err == nil || !errors.Is(ferr, errPartsUnread)) {
			return ferr
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s: %v", ErrNotEngineReadable, path, err)
	}
	return nil
}

// gzipRatio is how many bytes of log a gzip byte holds, about: audit logs
// compress 8-12 to 1.
const gzipRatio = 10

// LogBytes estimates the bytes of log text in files, a gzip file counted
// gzipRatio times its size; unreadable files and standard input count 0.
func LogBytes(files []string) int64 {
	var n int64
	for _, f := range files {
		if f == Stdin {
			continue
		}
		file, err := os.Open(f)
		if err != nil {
			continue
		}
		var magic [2]byte
		_, _ = io.ReadFull(file, magic[:])
		if fi, err := file.Stat(); err == nil {
			if magic == [2]byte{0x1f, 0x8b} {
				n += gzipRatio * fi.Size()
			} else {
				n += fi.Size()
			}
		}
		file.Close()
	}
	return n
}

// selectCount runs sql, which returns one row with a count n.
func selectCount(ctx context.Context, st EngineStore, sql string, p store.Params, n *int64) error {
	return store.Each(ctx, st, sql, p, func(r struct {
		N int64 `ch:"n"`
	}) error {
		*n = r.N
		return nil
	})
}

// engineSize is what engineInput learnt of a file.
type engineSize struct {
	bytes int64
	gzip  bool
}

// engineInput checks that the engine can be given the file f: a regular
// file, named without the characters file() reads as a glob, plain or gzip
// (by its first bytes, as readLines decides), whose first line is an
// audit.k8s.io/v1 Event. It returns f's absolute path.
func engineInput(f string) (string, engineSize, error) {
	var size engineSize
	if f == Stdin {
		return "", size, fmt.Errorf("%w: standard input", ErrNotEngineReadable)
	}
	abs, err := filepath.Abs(f)
	if err != nil {
		return "", size, err
	}
	if strings.ContainsAny(abs, "*?{}[]'\\") {
		return "", size, fmt.Errorf("%w: %s: the engine would read its name as a pattern", ErrNotEngineReadable, f)
	}
	file, err := os.Open(abs)
	if err != nil {
		return "", size, err
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return "", size, err
	}
	if !fi.Mode().IsRegular() {
		return "", size, fmt.Errorf("%w: %s is not a regular file", ErrNotEngineReadable, f)
	}
	size.bytes = fi.Size()
	br := bufio.NewReader(file)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return "", size, fmt.Errorf("%s: %w", f, err)
		}
		defer zr.Close()
		r, size.gzip = zr, true
	}
	// The first non-blank line, up to 1 MiB of it.
	lr := bufio.NewReaderSize(io.LimitReader(r, 64<<20), 1<<20)
	for {
		line, err := lr.ReadSlice('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 {
			var env envelope
			if unmarshal(t, &env) != nil || env.Kind != "Event" || env.APIVersion != auditV1 {
				return "", size, fmt.Errorf("%w: %s: not a log of audit.k8s.io/v1 Events", ErrNotEngineReadable, f)
			}
			return abs, size, nil
		}
		if err != nil {
			if err == io.EOF {
				return "", size, fmt.Errorf("%w: %s: no event", ErrNotEngineReadable, f)
			}
			return "", size, fmt.Errorf("%w: %s: %v", ErrNotEngineReadable, f, err)
		}
	}
}
