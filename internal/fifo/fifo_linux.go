package fifo

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// Make makes a named pipe at path and opens it read-write. The handle is
// non-blocking (the runtime polls it): a write to a full pipe waits for
// the reader, and closing the handle ends the wait.
func Make(path string) (*os.File, error) {
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return nil, fmt.Errorf("making a named pipe: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening a named pipe: %w", err)
	}
	return f, nil
}

// Grow asks for a pipe buffer of size bytes: the kernel's 64 KiB makes a
// reader read in small pieces. It returns the error the kernel gives
// (size beyond /proc/sys/fs/pipe-max-size for this process, 1 MiB by
// default), which only makes the pipe slower.
func Grow(f *os.File, size int) error {
	return control(f, func(fd uintptr) syscall.Errno {
		_, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETPIPE_SZ, uintptr(size))
		return errno
	})
}

// Unread returns how many bytes the pipe f holds that no reader has read.
func Unread(f *os.File) (int, error) {
	var n int32
	err := control(f, func(fd uintptr) syscall.Errno {
		_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
		return errno
	})
	return int(n), err
}

func control(f *os.File, op func(fd uintptr) syscall.Errno) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) { errno = op(fd) }); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}
