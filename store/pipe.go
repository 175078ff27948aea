package store

import (
	"fmt"
	"os"

	"github.com/auditlens/auditlens/internal/fifo"
)

// openPipe makes a named pipe at path for the engine's output and opens
// it twice: keeper, the read-write handle fifo.Make opens, keeps a writer
// on the pipe so that rd sees EOF only once keeper is closed, after the
// engine has opened, written and closed its own end; with rd open the
// engine's open for writing never waits.
func openPipe(path string) (rd, keeper *os.File, err error) {
	keeper, err = fifo.Make(path)
	if err != nil {
		return nil, nil, fmt.Errorf("the engine's output: %w", err)
	}
	rd, err = os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		keeper.Close()
		return nil, nil, fmt.Errorf("the engine's output: opening the pipe: %w", err)
	}
	return rd, keeper, nil
}
