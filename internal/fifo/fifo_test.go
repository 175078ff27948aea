package fifo

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestPipe: the maker's handle keeps what the pipe holds, counts what no
// reader has read, and a reader sees EOF once that handle is closed.
func TestPipe(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("named pipes to the engine need Linux")
	}
	path := filepath.Join(t.TempDir(), "p")
	w, err := Make(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := Grow(w, 1<<20); err != nil {
		t.Errorf("Grow: %v", err)
	}
	if _, err := w.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if n, err := Unread(w); err != nil || n != 6 {
		t.Errorf("Unread = %d, %v; want 6", n, err)
	}
	r, err := os.Open(path) // a writer holds it: no wait
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "hello\n" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if n, err := Unread(w); err != nil || n != 0 {
		t.Errorf("Unread after the read = %d, %v; want 0", n, err)
	}
	w.Close()
	if n, err := r.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("read after close = %d, %v; want EOF", n, err)
	}
	if _, err := Make(path); err == nil {
		t.Error("Make over an existing name succeeded")
	}
}
