// Package chdb is a small binding over the stable C API of libchdb, the
// embedded ClickHouse engine (chDB), written with purego so that no C
// toolchain is needed to build it.
//
// The library is loaded lazily by the first [Open]: importing this package
// costs nothing, and a process that never opens the embedded engine never
// needs libchdb.so. [LibraryPath] finds the file (flag, CHDB_LIB_PATH, the
// user cache filled by scripts/chdb-lib.sh, /usr/local/lib).
//
// The engine is process-wide: it runs on one data path per process, and
// every connection of every [DB] shares it. A [DB] keeps a small pool of
// connections and is safe for concurrent use; each connection runs one
// statement at a time.
//
// Signal handlers: on its first connection libchdb installs ClickHouse's
// handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, … over the Go
// runtime's, which turns a recoverable nil-pointer panic into a crash (or a
// hang) and breaks os/signal. So the binding asks libchdb not to install
// them (chdb_set_signal_handlers_enabled(0), when the library has it), and,
// whatever the library does, saves the handlers of all signals 1..64 with
// the raw rt_sigaction system call before every dlopen, connect and close
// and puts the Go runtime's back afterwards. A handler libchdb installs for
// a signal that had none (26.7.3 does so for SIGRTMIN, with which
// system.stack_trace samples threads) is kept, with SA_ONSTACK added as the
// Go runtime requires.
package chdb
