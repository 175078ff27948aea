//go:build linux

package main

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestCreateOutputInPlace: -o naming a path that is not a regular file
// (here a named pipe, as /dev/null is a device) is written in place, as a
// shell redirect would, and stays what it was: renaming a finished file
// over it would turn it into a regular file (run as root, `export -o
// /dev/null` once replaced the machine's /dev/null so). An export that
// fails leaves it there too.
func TestCreateOutputInPlace(t *testing.T) {
	for _, commit := range []bool{true, false} {
		fifo := filepath.Join(t.TempDir(), "pipe")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 1)
		go func() {
			r, err := os.Open(fifo) // blocks until the export opens it
			if err != nil {
				got <- "open: " + err.Error()
				return
			}
			defer r.Close()
			b, err := io.ReadAll(r)
			if err != nil {
				got <- "read: " + err.Error()
				return
			}
			got <- string(b)
		}()
		out, err := createOutput(fifo)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := out.f.WriteString("{\"event\":1}\n"); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := out.commit(); err != nil {
				t.Fatalf("commit: %v", err)
			}
		}
		out.abort()
		select {
		case s := <-got:
			if s != "{\"event\":1}\n" {
				t.Errorf("commit %v: the pipe's reader got %q", commit, s)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("commit %v: nothing was written to the pipe", commit)
			if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close() // lets the reader's open return
			}
		}
		fi, err := os.Lstat(fifo)
		if err != nil {
			t.Fatalf("commit %v: the pipe is gone: %v", commit, err)
		}
		if fi.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("commit %v: the pipe became %v", commit, fi.Mode())
		}
		entries, _ := os.ReadDir(filepath.Dir(fifo))
		if len(entries) != 1 {
			t.Errorf("commit %v: %d entries beside the pipe, want none (no temporary file)", commit, len(entries)-1)
		}
	}
}
