package store

import (
	"fmt"
	"os"
	"syscall"
)

// openPipe makes a named pipe at path and opens it twice: rd to read, and
// keeper, a read-write handle (Linux opens a FIFO that way without
// waiting) that keeps a writer on the pipe so that rd sees EOF only once
// keeper is closed, after the engine has opened, written and closed its
// own end. With rd open the engine's open for writing never waits.
func openPipe(path string) (rd, keeper *os.File, err error) {
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return nil, nil, fmt.Errorf("making a pipe for the engine's output: %w", err)
	}
	keeper, err = os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the pipe for the engine's output: %w", err)
	}
	rd, err = os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		keeper.Close()
		return nil, nil, fmt.Errorf("opening the pipe for the engine's output: %w", err)
	}
	return rd, keeper, nil
}
