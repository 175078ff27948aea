// Package fifo makes the named pipes through which this process hands the
// embedded engine data (a large log fed to scan in parts, ingest/feed.go):
// the engine reads files by name, and a named pipe is a file name with no
// file behind it.
//
// A pipe is opened read-write by the side that makes it (Make). On Linux
// that open does not wait for the other side, and the pipe keeps what it
// holds while that handle is open: the other side's open never waits for
// a writer, and a reader sees EOF only once the handle is closed. The
// embedded engine runs only on Linux; elsewhere every function returns
// ErrUnsupported.
package fifo

import "errors"

// ErrUnsupported is returned where named pipes are not supported.
var ErrUnsupported = errors.New("named pipes to the embedded engine need Linux")
