package ingest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCutLines: every part but the last ends just past a newline, the
// parts cover the file, and a file that cannot be cut gives one part.
func TestCutLines(t *testing.T) {
	long := strings.Repeat("x", 200<<10) // longer than cutLines reads at once
	tests := []struct {
		name  string
		text  string
		parts int
		want  []int64
	}{
		{"halves", "aaaa\nbbbb\n", 2, []int64{0, 5, 10}},
		{"cut just past the middle's newline", "aa\nbbbbbb\ncc\n", 2, []int64{0, 10, 13}},
		{"one line", "aaaaaaaa\n", 2, []int64{0, 9}},
		{"no newline", "aaaaaaaa", 3, []int64{0, 8}},
		{"more parts than lines", "a\nb\n", 4, []int64{0, 2, 4}},
		{"a line longer than a read", "a\n" + long + "\nb\n", 2, []int64{0, int64(2 + len(long) + 1), int64(2 + len(long) + 3)}},
		{"three parts", "aaa\nbbb\nccc\nddd\neee\nfff\n", 3, []int64{0, 8, 16, 24}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text := tc.text
			path := filepath.Join(t.TempDir(), "log")
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := cutLines(f, int64(len(text)), tc.parts)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("cutLines = %v, want %v", got, tc.want)
			}
			for _, c := range got[1 : len(got)-1] {
				if text[c-1] != '\n' {
					t.Errorf("the cut at %d does not follow a newline", c)
				}
			}
		})
	}
}

// TestFeedParts: the pipes hold the file's parts, whole, in order, and a
// feed nobody read to its end is an error, its pipes gone all the same.
func TestFeedParts(t *testing.T) {
	if !feedSupported {
		t.Skip("feeds need Linux")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var text bytes.Buffer
	for i := range 5000 {
		text.WriteString(strings.Repeat(string(rune('a'+i%26)), i%300) + "\n")
	}
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, text.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("read whole", func(t *testing.T) {
		fd, err := startFeed(path, int64(text.Len()), 3)
		if err != nil || fd == nil {
			t.Fatalf("startFeed = %v, %v", fd, err)
		}
		var got bytes.Buffer
		for i := range fd.pipes {
			b, err := os.ReadFile(filepath.Join(fd.dir, "part-"+string(rune('0'+i))))
			if err != nil {
				t.Fatal(err)
			}
			if len(b) == 0 || b[len(b)-1] != '\n' {
				t.Errorf("part %d does not end a line", i)
			}
			got.Write(b)
		}
		if err := fd.Stop(); err != nil {
			t.Errorf("Stop = %v", err)
		}
		if !bytes.Equal(got.Bytes(), text.Bytes()) {
			t.Errorf("the parts hold %d bytes, not the file's %d", got.Len(), text.Len())
		}
	})
	t.Run("not read", func(t *testing.T) {
		fd, err := startFeed(path, int64(text.Len()), 2)
		if err != nil || fd == nil {
			t.Fatalf("startFeed = %v, %v", fd, err)
		}
		if err := fd.Stop(); !errors.Is(err, errPartsUnread) || !strings.Contains(err.Error(), "read only: 0 of the 2 parts") {
			t.Errorf("Stop = %v, want that the engine read no part", err)
		}
	})
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("a feed left %s behind", left[0].Name())
	}
}
