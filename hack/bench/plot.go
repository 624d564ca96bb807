package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plotFailover draws, for each clock, every series' p50, p90, p99 and max
// on a logarithmic time axis, one row per series.
func plotFailover(dir string, f failover) error {
	for _, clock := range []struct {
		file, title string
		value       func(sample) float64
	}{
		{"failover-published.png", "Failover: cause to new holder published", func(s sample) float64 { return s.Published }},
		{"failover-knows.png", "Failover: cause to new holder's process knows", func(s sample) float64 { return s.Knows }},
	} {
		p := plot.New()
		p.Title.Text = clock.title
		p.X.Label.Text = fmt.Sprintf("milliseconds (log scale; %d handoffs per row)", f.Handoffs)
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		var names []string
		marks := []struct {
			name  string
			q     float64
			shape draw.GlyphDrawer
		}{{"p50", 0.5, draw.CircleGlyph{}}, {"p90", 0.9, draw.SquareGlyph{}}, {"p99", 0.99, draw.TriangleGlyph{}}, {"max", 1, draw.CrossGlyph{}}}
		pts := make([]plotter.XYs, len(marks))
		for i, s := range f.Series {
			names = append(names, fmt.Sprintf("   %s %s, %s", s.System, s.Config, s.Cause)) // the spaces keep the label inside the image
			v := sortedOf(s.Samples, clock.value)
			for k, m := range marks {
				if len(v) > 0 {
					pts[k] = append(pts[k], plotter.XY{X: max(quantile(v, m.q), 1), Y: float64(i)})
				}
			}
		}
		for k, m := range marks {
			sc, err := plotter.NewScatter(pts[k])
			if err != nil {
				return err
			}
			sc.GlyphStyle = draw.GlyphStyle{Shape: m.shape, Radius: vg.Points(3), Color: plotutil.Color(k)}
			p.Add(sc)
			p.Legend.Add(m.name, sc)
		}
		p.Add(plotter.NewGrid())
		p.NominalY(names...)
		p.X.Min, p.X.Max = 10, 100000 // the legend sits right of the longest failover
		p.Legend.Top = true
		if err := p.Save(9*vg.Inch, vg.Length(1.2+0.3*float64(len(names)))*vg.Inch, filepath.Join(dir, clock.file)); err != nil {
			return fmt.Errorf("save %s: %w", clock.file, err)
		}
	}
	return nil
}

// plotScale draws memory, Lease writes and the time until all are held
// against the number of leases.
func plotScale(dir string, runs []scale) error {
	type line struct {
		name string
		y    func(scale) float64
	}
	restartOf := func(r scale, cache string) *restart {
		for i := range r.Restarts {
			if r.Restarts[i].Cache == cache {
				return &r.Restarts[i]
			}
		}
		return nil
	}
	opt := func(x *restart, f func(*restart) float64) float64 {
		if x == nil {
			return 0
		}
		return f(x)
	}
	if err := plotCold(dir, runs); err != nil {
		return err
	}
	for _, fig := range []struct {
		file, title, ylabel string
		lines               []line
	}{
		{"scale-memory.png", "Operator memory", "MiB", []line{
			{"max RSS, steady state", func(r scale) float64 { return r.Steady.MaxRSSMiB }},
			{"max RSS after restart, slim pods", func(r scale) float64 {
				return opt(restartOf(r, "slim pods"), func(x *restart) float64 { return x.Window.MaxRSSMiB })
			}},
			{"max RSS after restart, whole pods", func(r scale) float64 {
				return opt(restartOf(r, "whole pods"), func(x *restart) float64 { return x.Window.MaxRSSMiB })
			}},
			{"heap in use, steady state", func(r scale) float64 { return r.Steady.HeapInuseMiB }},
			{"heap in use after restart, slim pods", func(r scale) float64 {
				return opt(restartOf(r, "slim pods"), func(x *restart) float64 { return x.Window.HeapInuseMiB })
			}},
			{"heap in use after restart, whole pods", func(r scale) float64 {
				return opt(restartOf(r, "whole pods"), func(x *restart) float64 { return x.Window.HeapInuseMiB })
			}},
		}},
		{"scale-writes.png", "Lease writes per second", "writes/s", []line{
			{"fencedlease (15 s lease, renew 5 s)", func(r scale) float64 { return r.Steady.WritesPerSecond }},
			{"client-go (15 s / 10 s / 2 s), per group measured x leases", func(r scale) float64 { return r.ClientGo.PerGroup * float64(r.Leases) }},
		}},
		{"scale-time.png", "Time until every lease is held", "seconds", []line{
			{"cold start: all held and published", func(r scale) float64 { return r.ColdStart }},
			{"restart: every Lease renewed by the new process", func(r scale) float64 {
				return opt(restartOf(r, "slim pods"), func(x *restart) float64 { return x.AllRenewed })
			}},
		}},
	} {
		p := plot.New()
		p.Title.Text = fig.title
		p.X.Label.Text, p.Y.Label.Text = "FencedLeases (log scale)", fig.ylabel
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		p.Add(plotter.NewGrid())
		drawn := 0
		for i, l := range fig.lines {
			var xy plotter.XYs
			for _, r := range runs {
				if y := l.y(r); y > 0 {
					xy = append(xy, plotter.XY{X: float64(r.Leases), Y: y})
				}
			}
			if len(xy) == 0 {
				continue
			}
			drawn++
			ln, pts, err := plotter.NewLinePoints(xy)
			if err != nil {
				return err
			}
			ln.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
			ln.Dashes = plotutil.Dashes(i)
			pts.Shape = plotutil.Shape(i)
			p.Add(ln, pts)
			p.Legend.Add(l.name, ln, pts)
		}
		if drawn == 0 {
			// Nothing measured (a cold start that did not finish, say): an
			// empty log axis cannot be drawn.
			fmt.Fprintf(os.Stderr, "bench: %s: nothing to plot\n", fig.file)
			continue
		}
		p.Legend.Top, p.Legend.Left = true, true
		p.Y.Min = 0
		p.BackgroundColor = color.White
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, fig.file)); err != nil {
			return fmt.Errorf("save %s: %w", fig.file, err)
		}
	}
	return nil
}

// plotCold draws the share of FencedLeases held and published against the
// time since the first was created, one line per lease count.
func plotCold(dir string, runs []scale) error {
	p := plot.New()
	p.Title.Text = "Cold start: FencedLeases held and published"
	p.X.Label.Text, p.Y.Label.Text = "seconds since the first FencedLease was created", "% held and published"
	p.Add(plotter.NewGrid())
	for i, r := range runs {
		var xy plotter.XYs
		for _, pr := range r.ColdProgress {
			xy = append(xy, plotter.XY{X: pr.Seconds, Y: 100 * float64(max(pr.Held, 0)) / float64(r.Leases)})
		}
		if len(xy) == 0 {
			continue
		}
		ln, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		ln.Color, ln.Dashes = plotutil.Color(i), plotutil.Dashes(i)
		ln.Width = vg.Points(1.5)
		p.Add(ln)
		p.Legend.Add(fmt.Sprintf("%d leases", r.Leases), ln)
	}
	p.Legend.Top = false
	p.Y.Min, p.Y.Max = 0, 100
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, "scale-cold.png")); err != nil {
		return fmt.Errorf("save scale-cold.png: %w", err)
	}
	return nil
}
