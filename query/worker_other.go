//go:build !linux

package query

import (
	"os"
	"syscall"
)

// workerSysProcAttr is nil: a worker whose parent dies ends when its
// stdin closes (after the event in progress, which the worker's own
// timeout bounds).
func workerSysProcAttr() *syscall.SysProcAttr { return nil }

// selfExecutable is the file this process runs.
func selfExecutable() (string, error) { return os.Executable() }
