package e2e

import (
	"bufio"
	"encoding/csv"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// What the soak (TestSoak) records each minute, and how it draws it.

// soakSample is one minute of a soak: serve's resident memory and spool,
// the findings it holds, and the watch loop's detection latency once the
// loop was triggered.
type soakSample struct {
	At         time.Duration // since the soak began
	RSS        int64         // serve's VmRSS, bytes
	SpoolBytes float64       // auditlens_spool_bytes
	Stored     float64       // auditlens_events_stored_total
	Findings   int           // findings of the soak's cluster, every detector
	Loops      int           // watch-loop findings
}

// soakRecord is a soak's samples and its two moments: the loop's trigger
// and the first evaluation that showed its finding (zero: not yet).
type soakRecord struct {
	Samples          []soakSample
	Trigger, FoundAt time.Duration
}

// rssOf reads a process's resident set size from /proc.
func rssOf(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS of %d: %w", pid, err)
			}
			return kb * 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}

// writeCSV writes the samples, one line a minute.
func (r soakRecord) writeCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"minute", "rss_mib", "spool_kib", "events_stored", "findings", "watch_loop_findings"})
	for _, s := range r.Samples {
		_ = w.Write([]string{strconv.FormatFloat(s.At.Minutes(), 'f', 1, 64), strconv.FormatFloat(float64(s.RSS)/(1<<20), 'f', 1, 64),
			strconv.FormatFloat(s.SpoolBytes/1024, 'f', 1, 64), strconv.FormatFloat(s.Stored, 'f', 0, 64),
			strconv.Itoa(s.Findings), strconv.Itoa(s.Loops)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// rssGrowth is how much serve's memory grew after the first hour: the
// highest sample after it against the median of the samples of its last
// ten minutes (0 when the soak is shorter than an hour).
func (r soakRecord) rssGrowth() (base, peak int64, growth float64) {
	var settle []int64
	for _, s := range r.Samples {
		switch {
		case s.At > 50*time.Minute && s.At <= time.Hour:
			settle = append(settle, s.RSS)
		case s.At > time.Hour:
			peak = max(peak, s.RSS)
		}
	}
	if len(settle) == 0 || peak == 0 {
		return 0, 0, 0
	}
	base = median(settle)
	return base, peak, float64(peak-base) / float64(base)
}

func median(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// svg draws the record as three panels over one time axis: serve's
// memory, its spool, and the findings it holds, with the loop's trigger
// and its detection marked.
func (r soakRecord) svg(title string) string {
	const (
		width, left, right = 760.0, 64.0, 16.0
		panelH, gap, top   = 120.0, 34.0, 40.0
	)
	plotW := width - left - right
	var end time.Duration
	for _, s := range r.Samples {
		end = max(end, s.At)
	}
	end = max(end, time.Minute)
	x := func(d time.Duration) float64 { return left + plotW*d.Seconds()/end.Seconds() }
	panels := []struct {
		name, unit string
		value      func(soakSample) float64
		class      string
	}{
		{"serve resident memory", "MiB", func(s soakSample) float64 { return float64(s.RSS) / (1 << 20) }, "rss"},
		{"spool (acknowledged, not yet stored)", "KiB", func(s soakSample) float64 { return s.SpoolBytes / 1024 }, "spool"},
		{"findings held (all detectors; watch-loop dashed)", "", func(s soakSample) float64 { return float64(s.Findings) }, "findings"},
	}
	height := top + float64(len(panels))*(panelH+gap) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	b.WriteString(`<style>.axis{stroke:#888;stroke-width:1}.grid{stroke:#ddd;stroke-width:1}.rss{stroke:#1f6feb}.spool{stroke:#8250df}` +
		`.findings{stroke:#1a7f37}.loops{stroke:#cf222e;stroke-dasharray:4 3}polyline{fill:none;stroke-width:1.6}` +
		`.mark{stroke:#cf222e;stroke-width:1;stroke-dasharray:2 2}text{fill:#333}</style>` + "\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="18" font-size="13" font-weight="bold">%s</text>`+"\n", left, xmlEscape(title))
	for i, p := range panels {
		y0 := top + float64(i)*(panelH+gap)
		hi := 0.0
		for _, s := range r.Samples {
			hi = max(hi, p.value(s))
		}
		hi = niceCeil(hi)
		y := func(v float64) float64 { return y0 + panelH - panelH*v/hi }
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text>`+"\n", left, y0-6, xmlEscape(p.name))
		for _, f := range []float64{0, 0.5, 1} {
			fmt.Fprintf(&b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>`, left, left+plotW, y(hi*f), y(hi*f))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s %s</text>`+"\n", left-4, y(hi*f)+4, trimFloat(hi*f), p.unit)
		}
		fmt.Fprintf(&b, `<line class="axis" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>`+"\n", left, left+plotW, y0+panelH, y0+panelH)
		b.WriteString(polyline(r.Samples, x, func(s soakSample) float64 { return y(p.value(s)) }, p.class))
		if p.class == "findings" {
			b.WriteString(polyline(r.Samples, x, func(s soakSample) float64 { return y(float64(s.Loops)) }, "loops"))
		}
		for _, m := range []struct {
			at    time.Duration
			label string
		}{{r.Trigger, "loop triggered"}, {r.FoundAt, "watch-loop found"}} {
			if m.at <= 0 {
				continue
			}
			fmt.Fprintf(&b, `<line class="mark" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>`, x(m.at), x(m.at), y0, y0+panelH)
			if i == 0 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#cf222e">%s</text>`, x(m.at)+3, y0+12+float64(len(m.label)%2)*12, m.label)
			}
			b.WriteString("\n")
		}
	}
	axisY := top + float64(len(panels))*(panelH+gap) - gap + 16
	step := time.Duration(math.Max(1, math.Round(end.Minutes()/6))) * time.Minute
	for d := time.Duration(0); d <= end; d += step {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, x(d), axisY, fmtMinutes(d))
	}
	b.WriteString("\n</svg>\n")
	return b.String()
}

func polyline(samples []soakSample, x func(time.Duration) float64, y func(soakSample) float64, class string) string {
	var pts []string
	for _, s := range samples {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.At), y(s)))
	}
	return fmt.Sprintf(`<polyline class="%s" points="%s"/>`+"\n", class, strings.Join(pts, " "))
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func fmtMinutes(d time.Duration) string {
	if d >= time.Hour {
		return fmt.Sprintf("%dh%02d", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dm", int(d.Minutes()))
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// saveSoak writes the record's CSV and SVG into dir.
func (r soakRecord) save(dir, title string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := r.writeCSV(filepath.Join(dir, "soak.csv")); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "soak.svg"), []byte(r.svg(title)), 0o644)
}

// TestSoakRecord checks the soak's bookkeeping without a cluster: the
// memory growth after the first hour, and a drawing that parses as XML
// with one point per sample in each line. Runs with -short.
func TestSoakRecord(t *testing.T) {
	var r soakRecord
	for m := range 181 {
		rss := int64(200 << 20)
		if m > 60 {
			rss += int64(m-60) << 17 // +15 MiB over the last two hours
		}
		r.Samples = append(r.Samples, soakSample{At: time.Duration(m) * time.Minute, RSS: rss, SpoolBytes: float64(m % 7 * 1024),
			Findings: m / 120, Loops: m / 125})
	}
	r.Trigger, r.FoundAt = 120*time.Minute, 123*time.Minute
	base, peak, g := r.rssGrowth()
	if base != 200<<20 || peak != 215<<20 || math.Abs(g-0.075) > 1e-9 {
		t.Errorf("growth: base %d, peak %d, %.4f; want 200 MiB, 215 MiB, 0.075", base, peak, g)
	}
	svg := r.svg("soak <test> & more")
	dec := xml.NewDecoder(strings.NewReader(svg))
	lines := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("the drawing is not XML: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
			for _, a := range se.Attr {
				if a.Name.Local == "points" {
					if n := len(strings.Fields(a.Value)); n != len(r.Samples) {
						t.Errorf("a line of %d points, want %d", n, len(r.Samples))
					}
				}
			}
		}
	}
	if lines != 4 {
		t.Errorf("%d lines drawn, want 4 (memory, spool, findings, watch-loop findings)", lines)
	}
	if !strings.Contains(svg, "loop triggered") || !strings.Contains(svg, "watch-loop found") {
		t.Error("the drawing does not mark the trigger and the detection")
	}
	dir := t.TempDir()
	if err := r.save(dir, "x"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "soak.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != len(r.Samples)+1 {
		t.Errorf("%d CSV lines, want %d", n, len(r.Samples)+1)
	}
}
