package ingest

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// feedSupported is true where a file can be fed to the engine through
// named pipes without copying it (splice).
const feedSupported = true

// pipeSize is the buffer each pipe asks for: the largest an unprivileged
// process gets by default (/proc/sys/fs/pipe-max-size). The kernel's
// default 64 KiB makes the engine read in small pieces.
const pipeSize = 1 << 20

// openFeedPipe makes a named pipe at path and opens it read-write: Linux
// opens a FIFO that way without waiting for a reader, and the engine's
// reader then sees EOF only once this handle is closed.
func openFeedPipe(path string) (*os.File, error) {
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return nil, fmt.Errorf("making a pipe for the engine's input: %w", err)
	}
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the pipe for the engine's input: %w", err)
	}
	if rc, err := w.SyscallConn(); err == nil {
		// Best effort: a smaller pipe only reads slower.
		_ = rc.Control(func(fd uintptr) {
			_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETPIPE_SZ, pipeSize)
		})
	}
	return w, nil
}

// spliceRange moves the bytes [off, end) of src into the pipe w without
// copying them through this process. w is non-blocking (the runtime polls
// it): a full pipe waits for the engine to read, and closing w ends the
// wait with an error.
func spliceRange(w, src *os.File, off, end int64) error {
	rc, err := w.SyscallConn()
	if err != nil {
		return err
	}
	sc, err := src.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	cerr := sc.Read(func(in uintptr) bool {
		werr := rc.Write(func(out uintptr) bool {
			for off < end {
				n, err := syscall.Splice(int(in), &off, int(out), nil, int(min(end-off, pipeSize)), spliceFlags)
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
		if serr == nil {
			serr = werr
		}
		return true
	})
	if serr == nil {
		serr = cerr
	}
	return serr
}

// unread returns how many bytes the pipe w holds that no reader has read
// yet.
func unread(w *os.File) (int, error) {
	rc, err := w.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		v, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
		_ = v
		if errno != 0 {
			ierr = errno
		}
	}); err != nil {
		return 0, err
	}
	return n, ierr
}

// spliceFlags: move pages rather than copy them, do not block on the
// pipe, more data follows.
const spliceFlags = 0x1 | 0x2 | 0x4
