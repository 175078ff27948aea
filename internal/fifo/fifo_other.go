//go:build !linux

package fifo

import "os"

func Make(string) (*os.File, error) { return nil, ErrUnsupported }

func Grow(*os.File, int) error { return ErrUnsupported }

func Unread(*os.File) (int, error) { return 0, ErrUnsupported }
