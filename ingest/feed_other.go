//go:build !linux

package ingest

import (
	"os"

	"github.com/auditlens/auditlens/internal/fifo"
)

// feedSupported is false: the engine reads each file itself, in one
// stream, where named pipes and splice are missing.
const feedSupported = false

func spliceRange(w, src *os.File, off, end int64) error { return fifo.ErrUnsupported }
