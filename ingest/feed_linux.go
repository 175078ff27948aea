package ingest

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// feedSupported is true where a file can be fed to the engine through
// named pipes without copying it (splice).
const feedSupported = true

// spliceRange moves the bytes [off, end) of src, a regular file, into the
// pipe w (fifo.Make's handle) without copying them through this process.
// w is non-blocking: a full pipe waits for the engine to read, and closing
// w ends the wait with an error.
func spliceRange(w, src *os.File, off, end int64) error {
	rc, err := w.SyscallConn()
	if err != nil {
		return err
	}
	in := int(src.Fd()) // a regular file: Fd changes nothing of it
	var serr error
	werr := rc.Write(func(out uintptr) bool {
		for off < end {
			n, err := syscall.Splice(in, &off, int(out), nil, int(min(end-off, feedPipeSize)), spliceFlags)
			switch {
			case errors.Is(err, syscall.EAGAIN):
				return false // the pipe is full: wait until it is not
			case errors.Is(err, syscall.EINTR):
				continue
			case err != nil:
				serr = err
				return true
			case n == 0:
				serr = fmt.Errorf("%s ends at byte %d, before %d", src.Name(), off, end)
				return true
			}
		}
		return true
	})
	runtime.KeepAlive(src)
	if serr == nil {
		serr = werr
	}
	return serr
}

// spliceFlags: move pages rather than copy them, do not block on the
// pipe, more data follows.
const spliceFlags = 0x1 | 0x2 | 0x4
