package main

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// series is one line of a plot.
type series struct {
	name   string
	xys    plotter.XYs
	color  color.Color
	dashed bool
}

var (
	colGateway = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colFloor   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colDirect  = color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
	colNginx   = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	colEpoll   = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
)

func targetColor(t string) color.Color {
	switch t {
	case "gateway":
		return colGateway
	case "floor":
		return colFloor
	case "nginx":
		return colNginx
	case "floor-epoll":
		return colEpoll
	}
	return colDirect
}

// linePlot draws series against concurrency and saves it as a PNG.
// The legend goes top left, where curves that rise with the load leave
// room, or top right (legendRight) for curves that fall.
func linePlot(path, title, ylabel string, ss []series, legendRight bool) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "concurrent streams (closed loop)"
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = !legendRight
	for _, s := range ss {
		if len(s.xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(s.xys)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		l.Color, pts.Color = s.color, s.color
		l.Width = vg.Points(1.5)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			pts.Shape = draw.TriangleGlyph{}
		} else {
			pts.Shape = draw.CircleGlyph{}
		}
		p.Add(l, pts)
		p.Legend.Add(s.name, l, pts)
	}
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}

// writePlots writes the report's plots into dir and returns their file
// names.
func writePlots(res *results, dir string) ([]string, error) {
	var files []string
	levels := res.plan.levels
	curve := func(target string, f func(runResult) float64) plotter.XYs {
		var xys plotter.XYs
		for _, n := range levels {
			runs := res.runs[runKey{target, "closed", n}]
			if len(runs) == 0 {
				continue
			}
			m, _, _ := medianOf(runs, f)
			xys = append(xys, plotter.XY{X: float64(n), Y: m})
		}
		return xys
	}
	msOf := func(sel func(runResult) Dist, q func(Dist) float64) func(runResult) float64 {
		return func(r runResult) float64 { return q(sel(r)) }
	}
	ttft := func(r runResult) Dist { return r.ttft }
	p50 := func(d Dist) float64 { return d.P50.Seconds() * 1000 }
	p99 := func(d Dist) float64 { return d.P99.Seconds() * 1000 }

	var ss []series
	for _, t := range res.targets {
		ss = append(ss,
			series{name: t + " p50", xys: curve(t, msOf(ttft, p50)), color: targetColor(t), dashed: true},
			series{name: t + " p99", xys: curve(t, msOf(ttft, p99)), color: targetColor(t)})
	}
	if err := linePlot(filepath.Join(dir, "added_ttft.png"), "Added TTFT (client receipt − stub emit), median of repetitions", "ms", ss, false); err != nil {
		return nil, err
	}
	files = append(files, "added_ttft.png")

	rss := func(r runResult) float64 { return float64(r.rssMax) / (1 << 20) }
	relays := func(f func(runResult) float64) []series {
		var ss []series
		for _, t := range res.targets {
			if t != "direct" {
				ss = append(ss, series{name: relayName(t), xys: curve(t, f), color: targetColor(t)})
			}
		}
		return ss
	}
	ss = relays(rss)
	if err := linePlot(filepath.Join(dir, "rss.png"), "Relay RSS (largest sample during the run)", "MiB", ss, false); err != nil {
		return nil, err
	}
	files = append(files, "rss.png")

	cpu := func(r runResult) float64 { return float64(r.cpuPerEvt.Nanoseconds()) / 1000 }
	ss = relays(cpu)
	if err := linePlot(filepath.Join(dir, "cpu_per_event.png"), "Relay CPU per relayed event", "µs", ss, true); err != nil {
		return nil, err
	}
	files = append(files, "cpu_per_event.png")
	return files, nil
}

// relayName is a relay's name in a plot legend.
func relayName(t string) string {
	switch t {
	case "floor":
		return "floor (httputil.ReverseProxy)"
	case "nginx":
		return "nginx (proxy_buffering off)"
	case "floor-epoll":
		return "floor, backend leg on epollconn"
	}
	return t
}
