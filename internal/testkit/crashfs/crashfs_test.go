package crashfs

import (
	"os"
	"path/filepath"
	"testing"
)

// mount mounts a crashfs over a fresh backing directory, or skips where
// FUSE cannot mount (make test requires it: AUDITLENS_REQUIRE_FUSE=1).
func mount(t *testing.T, prepare func(backing string)) *FS {
	t.Helper()
	backing, mnt := t.TempDir(), t.TempDir()
	if prepare != nil {
		prepare(backing)
	}
	c, err := Mount(backing, mnt)
	if err != nil {
		if os.Getenv("AUDITLENS_REQUIRE_FUSE") == "1" {
			t.Fatal(err)
		}
		t.Skipf("no FUSE here (root and /dev/fuse are needed): %v", err)
	}
	t.Cleanup(func() { _ = c.Unmount() })
	return c
}

func write(t *testing.T, path string, flag int, data string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// content is a file's content after the crash, or "<gone>".
func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return "<gone>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCrashDropsWhatWasNotSynced(t *testing.T) {
	c := mount(t, func(backing string) {
		if err := os.WriteFile(filepath.Join(backing, "old"), []byte("from before"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	d := c.Dir()
	p := func(name string) string { return filepath.Join(d, name) }
	const create = os.O_CREATE | os.O_WRONLY

	write(t, p("synced"), create, "hello", true)
	write(t, p("synced"), os.O_WRONLY|os.O_APPEND, " world", false) // appended, not synced
	write(t, p("synced"), os.O_WRONLY, "J", false)                  // over synced bytes
	write(t, p("never-synced"), create, "lost", false)
	write(t, p("in-synced-dir"), create, "data lost, name kept", false)
	write(t, p("old"), os.O_WRONLY, "FROM", false)
	write(t, p("cut"), create, "0123456789", true)
	if err := os.Truncate(p("cut"), 3); err != nil {
		t.Fatal(err)
	}
	write(t, p("renamed-from"), create, "moved", true)
	if err := os.Rename(p("renamed-from"), p("renamed-to")); err != nil {
		t.Fatal(err)
	}
	write(t, p("resynced"), create, "one", true)
	write(t, p("resynced"), os.O_WRONLY|os.O_TRUNC, "two", true)
	if err := os.Mkdir(p("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(d, "sub", "f"), create, "in a subdirectory", true)
	if err := os.Rename(p("sub"), p("sub2")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(d, "sub2", "f"), os.O_WRONLY|os.O_APPEND, " and more", false)
	// fsync the directory: the names in it are durable, not their data.
	dir, err := os.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil {
		t.Fatal(err)
	}
	dir.Close()
	write(t, p("after-dir-sync"), create, "lost too", false)

	if err := c.Crash(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"synced":         "hello",
		"never-synced":   "",
		"in-synced-dir":  "",
		"old":            "from before",
		"cut":            "0123456789",
		"renamed-from":   "<gone>",
		"renamed-to":     "moved",
		"resynced":       "two",
		"sub2/f":         "in a subdirectory",
		"after-dir-sync": "<gone>",
	} {
		if got := content(t, p(name)); got != want {
			t.Errorf("%s after the crash: %q, want %q", name, got, want)
		}
	}
	st := c.Stats()
	if st.Crashes != 1 || st.FilesRemoved != 1 || st.BytesLost == 0 {
		t.Errorf("stats %+v", st)
	}
	// What survived is durable: a second crash changes nothing.
	if err := c.Crash(); err != nil {
		t.Fatal(err)
	}
	if got := content(t, p("synced")); got != "hello" {
		t.Errorf("after a second crash: %q", got)
	}
}
