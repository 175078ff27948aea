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
// the findings it holds, and how far behind the detectors are.
type soakSample struct {
	At         time.Duration // since the soak began
	RSS        int64         // serve's VmRSS, bytes
	SpoolBytes float64       // auditlens_spool_bytes
	Stored     float64       // auditlens_events_stored_total
	Findings   int           // findings of the soak's cluster, every detector
	Loops      int           // watch-loop findings
	// EvalSeconds is how long one evaluation of every detector took, on
	// average over the minute (auditlens_detector_run_seconds); 0 when
	// none ran in it.
	EvalSeconds float64
	// SinceEval is how long ago the detector that evaluated least
	// recently last succeeded (auditlens_detector_last_success_timestamp_seconds):
	// with EvalSeconds, the bound on how late an event is judged.
	SinceEval float64
}

// soakPause is a stretch in which the host itself stood still: the wall
// clock moved on while the monotonic clock did not (a virtual machine
// suspended or snapshotted). Every process stops, so serve rightly
// reports the silence as an audit-feed gap.
type soakPause struct {
	At       time.Duration // the soak's (monotonic) time of the sample that saw it
	From, To time.Time     // wall clock of the samples around it
	Lost     time.Duration // wall time that passed without monotonic time
}

// soakRecord is a soak's samples, the host's pauses, and its two moments:
// the loop's trigger and the first evaluation that showed its finding
// (zero: not yet).
type soakRecord struct {
	Samples          []soakSample
	Pauses           []soakPause
	Trigger, FoundAt time.Duration
}

// hostPause reports the wall time that passed without monotonic time
// between two readings of time.Now (wall: the difference of their
// Round(0) copies; mono: their plain difference), beyond tolerance.
func hostPause(wall, mono, tolerance time.Duration) (time.Duration, bool) {
	lost := wall - mono
	return lost, lost > tolerance
}

// explains reports whether one of the host's pauses covers the span
// [from, to] of a finding, give or take slack.
func (r soakRecord) explains(from, to time.Time, slack time.Duration) bool {
	for _, p := range r.Pauses {
		if !from.Before(p.From.Add(-slack)) && !to.After(p.To.Add(slack)) {
			return true
		}
	}
	return false
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
	_ = w.Write([]string{"minute", "rss_mib", "spool_kib", "events_stored", "findings", "watch_loop_findings", "eval_seconds", "since_eval_seconds"})
	for _, s := range r.Samples {
		_ = w.Write([]string{strconv.FormatFloat(s.At.Minutes(), 'f', 1, 64), strconv.FormatFloat(float64(s.RSS)/(1<<20), 'f', 1, 64),
			strconv.FormatFloat(s.SpoolBytes/1024, 'f', 1, 64), strconv.FormatFloat(s.Stored, 'f', 0, 64),
			strconv.Itoa(s.Findings), strconv.Itoa(s.Loops),
			strconv.FormatFloat(s.EvalSeconds, 'f', 2, 64), strconv.FormatFloat(s.SinceEval, 'f', 0, 64)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// rssGrowth is how much serve's resident memory grew after the first
// hour: the median of each later half-hour (level: the highest of them)
// against the median of the first hour's second half (base). Medians,
// because serve's RSS rises by up to a third for a sample every few
// minutes and falls back (in the soak, about as often as a 64 MiB spool
// segment is retired): a peak held against a median reads those spikes as
// growth, while a leak raises the level they fall back to.
// peak is the highest sample after the first hour, for sizing. All zero
// when the soak is shorter than an hour.
func (r soakRecord) rssGrowth() (base, level, peak int64, growth float64) {
	var settle []int64
	windows := map[int][]int64{}
	for _, s := range r.Samples {
		switch {
		case s.At > 30*time.Minute && s.At <= time.Hour:
			settle = append(settle, s.RSS)
		case s.At > time.Hour:
			peak = max(peak, s.RSS)
			k := int((s.At - time.Hour - 1) / (30 * time.Minute))
			windows[k] = append(windows[k], s.RSS)
		}
	}
	if len(settle) == 0 || peak == 0 {
		return 0, 0, 0, 0
	}
	base = median(settle)
	for _, w := range windows {
		level = max(level, median(w))
	}
	return base, level, peak, float64(level-base) / float64(base)
}

func median(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// svg draws the record as four panels over one time axis: serve's
// memory, its spool, the findings it holds, and how far behind the
// detectors are, with the loop's trigger, its detection and the host's
// pauses marked.
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
		{"detection: seconds since the last evaluation (one evaluation's time dashed)", "s", func(s soakSample) float64 { return max(s.SinceEval, s.EvalSeconds) }, "lag"},
	}
	height := top + float64(len(panels))*(panelH+gap) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	b.WriteString(`<style>.axis{stroke:#888;stroke-width:1}.grid{stroke:#ddd;stroke-width:1}.rss{stroke:#1f6feb}.spool{stroke:#8250df}` +
		`.findings{stroke:#1a7f37}.loops{stroke:#cf222e;stroke-dasharray:4 3}.lag{stroke:#9a6700}.eval{stroke:#9a6700;stroke-dasharray:4 3}` +
		`.pause{fill:#888;fill-opacity:0.25}polyline{fill:none;stroke-width:1.6}` +
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
		if p.class == "lag" {
			b.WriteString(polyline(r.Samples, x, func(s soakSample) float64 { return y(s.SinceEval) }, p.class))
			b.WriteString(polyline(r.Samples, x, func(s soakSample) float64 { return y(s.EvalSeconds) }, "eval"))
		} else {
			b.WriteString(polyline(r.Samples, x, func(s soakSample) float64 { return y(p.value(s)) }, p.class))
		}
		if p.class == "findings" {
			b.WriteString(polyline(r.Samples, x, func(s soakSample) float64 { return y(float64(s.Loops)) }, "loops"))
		}
		for _, ps := range r.Pauses {
			// The pause lies between the sample that saw it and the one
			// before: a band a minute wide, labelled with the wall time lost.
			x0, x1 := x(max(0, ps.At-time.Minute)), x(ps.At)
			fmt.Fprintf(&b, `<rect class="pause" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`, x0, y0, max(x1-x0, 2), panelH)
			if i == 0 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#555">host paused %s</text>`, x1+3, y0+panelH-4, ps.Lost.Round(time.Second))
			}
			b.WriteString("\n")
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
			Findings: m / 120, Loops: m / 125, EvalSeconds: 2 + float64(m%3), SinceEval: float64(m % 61)})
	}
	r.Trigger, r.FoundAt = 120*time.Minute, 123*time.Minute
	wall := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	r.Pauses = []soakPause{{At: 40 * time.Minute, From: wall, To: wall.Add(4 * time.Minute), Lost: 3 * time.Minute}}
	for _, c := range []struct {
		from, to time.Time
		want     bool
	}{
		{wall.Add(30 * time.Second), wall.Add(3 * time.Minute), true},
		{wall.Add(-20 * time.Second), wall.Add(4*time.Minute + 20*time.Second), true},
		{wall.Add(-2 * time.Minute), wall.Add(3 * time.Minute), false},
		{wall.Add(time.Hour), wall.Add(time.Hour + 3*time.Minute), false},
	} {
		if got := r.explains(c.from, c.to, 30*time.Second); got != c.want {
			t.Errorf("a finding over [%s, %s] explained by the pause over [%s, %s]: %v, want %v",
				c.from.Format(time.TimeOnly), c.to.Format(time.TimeOnly), wall.Format(time.TimeOnly), wall.Add(4*time.Minute).Format(time.TimeOnly), got, c.want)
		}
	}
	for _, c := range []struct {
		wall, mono time.Duration
		paused     bool
	}{
		{time.Minute, time.Minute, false},
		{time.Minute + 5*time.Second, time.Minute, false}, // a clock slewed by NTP
		{4 * time.Minute, time.Minute, true},
		{time.Minute, 2 * time.Minute, false}, // the wall clock stepped back
	} {
		if lost, paused := hostPause(c.wall, c.mono, 15*time.Second); paused != c.paused || (paused && lost != c.wall-c.mono) {
			t.Errorf("wall %s, monotonic %s: paused %v (%s lost), want %v", c.wall, c.mono, paused, lost, c.paused)
		}
	}

	// A one-sample spike after the first hour is a peak, not growth.
	r.Samples[100].RSS = 300 << 20
	base, level, peak, g := r.rssGrowth()
	// The last half-hour, minutes 151–180, is the highest; its median
	// (the upper one of 30) is minute 166's.
	wantLevel := int64(200<<20) + int64(166-60)<<17
	if base != 200<<20 || level != wantLevel || peak != 300<<20 || math.Abs(g-float64(wantLevel-base)/float64(base)) > 1e-9 {
		t.Errorf("growth: base %d, level %d, peak %d, %.4f; want 200 MiB, %d, 300 MiB, %.4f",
			base, level, peak, g, wantLevel, float64(wantLevel-base)/float64(base))
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
	if lines != 6 {
		t.Errorf("%d lines drawn, want 6 (memory, spool, findings, watch-loop findings, time since and of an evaluation)", lines)
	}
	if !strings.Contains(svg, "host paused 3m0s") {
		t.Error("the drawing does not mark the host's pause")
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
