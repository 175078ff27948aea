//go:build !linux || !(amd64 || arm64)

package chdb

func snapshotSignals() {}
