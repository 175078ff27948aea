//go:build !linux

package store

import (
	"errors"
	"os"
)

// openPipe needs Linux, where a FIFO opens read-write without waiting; the
// embedded engine runs only there.
func openPipe(string) (rd, keeper *os.File, err error) {
	return nil, nil, errors.New("formatted output from the embedded engine is only supported on Linux")
}
