package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"time"
)

//go:embed report.html.tmpl
var htmlText string

var htmlTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"stamp":    stamp,
	"dur":      func(d Duration) string { return time.Duration(d).String() },
	"sub":      func(a, b time.Time) string { return a.Sub(b).String() },
	"none":     orNone,
	"subjects": subjectPairs,
}).Parse(htmlText))

// palette colours the verbs of the volume chart, in order of volume.
var palette = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

// Chart geometry, in SVG user units.
const (
	chartW, chartH = 720, 200
	timelineW      = 480
	timelineH      = 18
)

// r2 rounds an SVG coordinate to hundredths, keeping the markup short.
func r2(v float64) float64 { return math.Round(v*100) / 100 }

type rect struct {
	X, Y, W, H float64
	Fill       string
	Title      string
}

type legend struct {
	Verb, Fill string
	Total      int64
}

type volumeChart struct {
	W, H   int
	Bars   []rect
	Legend []legend
	Max    int64
}

// chart lays out the volume as stacked bars, one per bucket.
func chart(r Report) volumeChart {
	c := volumeChart{W: chartW, H: chartH}
	verbs, starts, counts := volumeTable(r)
	if len(starts) == 0 {
		return c
	}
	for _, s := range starts {
		var sum int64
		for _, v := range verbs {
			sum += counts[s][v]
		}
		c.Max = max(c.Max, sum)
	}
	for i, v := range verbs {
		var total int64
		for _, s := range starts {
			total += counts[s][v]
		}
		c.Legend = append(c.Legend, legend{Verb: v, Fill: palette[i%len(palette)], Total: total})
	}
	if c.Max == 0 {
		return c
	}
	bw := float64(chartW) / float64(len(starts))
	for i, s := range starts {
		y := float64(chartH)
		for j, v := range verbs {
			n := counts[s][v]
			if n == 0 {
				continue
			}
			h := float64(n) / float64(c.Max) * chartH
			y -= h
			c.Bars = append(c.Bars, rect{X: r2(float64(i)*bw + 1), Y: r2(y), W: r2(max(bw-2, 1)), H: r2(h),
				Fill: palette[j%len(palette)], Title: fmt.Sprintf("%s %s: %d", stamp(s), v, n)})
		}
	}
	return c
}

type timeline struct {
	W, H  int
	Span  rect
	Ticks []rect
}

// timelineOf places a finding on the window: its span from first to last
// seen and a tick per evidence event.
func timelineOf(r Report, first, last time.Time, evidence []time.Time) timeline {
	t := timeline{W: timelineW, H: timelineH}
	win := r.WindowEnd.Sub(r.WindowStart)
	if win <= 0 {
		return t
	}
	x := func(at time.Time) float64 {
		if at.Before(r.WindowStart) {
			at = r.WindowStart
		}
		if at.After(r.WindowEnd) {
			at = r.WindowEnd
		}
		return float64(at.Sub(r.WindowStart)) / float64(win) * timelineW
	}
	x1, x2 := x(first), x(last)
	t.Span = rect{X: r2(x1), Y: 6, W: r2(max(x2-x1, 2)), H: 6, Fill: "#e15759", Title: stamp(first) + " to " + stamp(last)}
	for _, e := range evidence {
		t.Ticks = append(t.Ticks, rect{X: r2(x(e)), Y: 2, W: 1, H: 14, Fill: "#333", Title: stamp(e)})
	}
	return t
}

func renderHTML(w io.Writer, r Report) error {
	tl := map[string]timeline{}
	for _, g := range r.Findings {
		for _, f := range g.Findings {
			var ev []time.Time
			for _, e := range f.Evidence {
				ev = append(ev, e.Time)
			}
			tl[f.ID] = timelineOf(r, f.FirstSeen, f.LastSeen, ev)
		}
	}
	return htmlTmpl.Execute(w, struct {
		R         Report
		Chart     volumeChart
		Timelines map[string]timeline
		Talkers   []talkerList
	}{r, chart(r), tl, talkerLists(r)})
}
