// Package query answers questions about stored audit events.
//
// A [Filter] (time range, cluster, verb, resource, namespace, name, user,
// user agent, stage, level, status code) selects events. [ParseFilter] builds
// one from the query string of an HTTP request, and [Filter.SQL] compiles it
// to ClickHouse SQL whose text depends only on which fields are set: every
// value travels as a server-side query parameter ({name:Type}), so user input
// never becomes SQL text.
//
// An optional jq program ([CompileJQ], run with gojq) transforms or selects
// the matching events. [Events] streams the result as NDJSON: one event per
// line, as received (rebuilt from its typed columns and residual, package
// store/residual), or one jq output per line. Every query is bounded by [Limits]: a
// time limit, limits on the number and size of the lines written, and a
// limit on the memory a jq program may take. An error for a limit that was
// hit is a [*LimitError] that names the setting to raise.
//
// A jq program from the network can crash the process that runs it: gojq
// does not limit nesting, its builtins (tojson, ==, sort, setpath…) recurse
// on nested values, and a stack overflow is fatal in Go, beyond recover.
// With [Limits.Worker] set, Events runs the program in a child process
// started by a [ProcessRunner] (a program that calls [ServeWorker], such as
// auditlens jq-worker), whose stack and memory are bounded; a worker that
// dies fails only its query.
//
// Errors that callers branch on are sentinels checked with errors.Is:
// [ErrBadFilter] and [ErrBadJQ] are the caller's fault (HTTP 400), [ErrLimit]
// is a limit that was hit (a timeout becomes HTTP 503), [ErrJQFailed] is a jq
// program that raised an error while running over an event.
package query
