// Package docs holds the documentation pages; its test keeps their links
// between each other, to the repository's files and to their headings
// whole.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// pages are the documents checked: the README and every page under docs/.
func pages(t *testing.T) []string {
	t.Helper()
	out := []string{"../README.md"}
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`(?m)^#{1,6} +(.+?)\s*$`)
	fenceRE   = regexp.MustCompile("(?ms)^```.*?^```")
)

// slug is the anchor GitHub gives a heading: lower case, letters, digits,
// spaces as hyphens, hyphens and underscores kept, the rest dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors lists the headings' anchors of a Markdown text.
func anchors(text string) map[string]bool {
	text = fenceRE.ReplaceAllString(text, "")
	out := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(text, -1) {
		s := slug(m[1])
		for n := 1; out[s]; n++ { // a repeated heading gets -1, -2, …
			s = slug(m[1]) + "-" + strconv.Itoa(n)
		}
		out[s] = true
	}
	return out
}

func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"What a relist is":                         "what-a-relist-is",
		"`watch-loop`: a reflector's loop (1.7)":   "watch-loop-a-reflectors-loop-17",
		"Ship the audit log with an OpenTelemetry": "ship-the-audit-log-with-an-opentelemetry",
		"UI ↔ API contract":                        "ui--api-contract",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}

// TestLinks: every relative link of every page names a file that exists,
// and every #anchor a heading of its target.
func TestLinks(t *testing.T) {
	checked := 0
	for _, page := range pages(t) {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := fenceRE.ReplaceAllString(string(raw), "")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(link, "#")
			target := page
			if file != "" {
				target = filepath.Join(filepath.Dir(page), file)
			}
			fi, err := os.Stat(target)
			if err != nil {
				t.Errorf("%s: link %q: %v", page, link, err)
				continue
			}
			checked++
			if anchor == "" || fi.IsDir() {
				continue
			}
			body, err := os.ReadFile(target)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(body))[anchor] {
				t.Errorf("%s: link %q: %s has no heading with that anchor", page, link, target)
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d links checked: is the link pattern still right?", checked)
	}
}
