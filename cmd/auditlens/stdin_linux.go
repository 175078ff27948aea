package main

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// takeStdin hands standard input to the caller and points file
// descriptor 0 at /dev/null. The embedded engine reads fd 0 as the
// external data of an INSERT whenever it is not a terminal, so an import
// from a pipe (`... | auditlens import -`) would have its schema
// migration refused ("Processing async inserts with both inlined and
// external data ... is not supported") and its data read by the engine.
func takeStdin() (io.Reader, error) {
	fd, err := syscall.Dup(0)
	if err != nil {
		return nil, fmt.Errorf("taking standard input: %w", err)
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("taking standard input: %w", err)
	}
	defer devNull.Close()
	if err := syscall.Dup3(int(devNull.Fd()), 0, 0); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("taking standard input: %w", err)
	}
	return os.NewFile(uintptr(fd), "stdin"), nil
}
