//go:build !linux

package main

import (
	"io"
	"os"
)

// takeStdin returns standard input; the embedded engine, which would read
// it (stdin_linux.go), runs on Linux only.
func takeStdin() (io.Reader, error) { return os.Stdin, nil }
