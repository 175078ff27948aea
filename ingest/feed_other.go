//go:build !linux

package ingest

import (
	"errors"
	"os"
)

// feedSupported is false: the engine reads each file itself, in one
// stream, where named pipes and splice are missing.
const feedSupported = false

func openFeedPipe(string) (*os.File, error) {
	return nil, errors.New("feeding the engine through pipes needs Linux")
}

func spliceRange(w, src *os.File, off, end int64) error {
	return errors.New("feeding the engine through pipes needs Linux")
}

func unread(*os.File) (int, error) {
	return 0, errors.New("feeding the engine through pipes needs Linux")
}
