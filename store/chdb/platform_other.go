//go:build !linux || !(amd64 || arm64)

package chdb

import (
	"errors"
	"runtime"
	"syscall"
)

// errPlatform is returned by Open on systems where the handler save/restore
// around libchdb (rt_sigaction) is not implemented.
var errPlatform = errors.New("chdb: the embedded engine is only supported on linux/amd64 and linux/arm64, not " + runtime.GOOS + "/" + runtime.GOARCH)

func dlopen(string) (uintptr, error) { return 0, errPlatform }

func bind(uintptr, string, any) error { return errPlatform }

type signalSet struct{}

func saveSignals() *signalSet { return &signalSet{} }

func (*signalSet) restore() (restored, adopted []syscall.Signal) { return nil, nil }
