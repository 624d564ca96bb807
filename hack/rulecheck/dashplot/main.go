// Command dashplot draws panels of the Grafana dashboard
// (charts/fencedlease/files/monitoring/dashboard.json) as a PNG, without
// Grafana: it loads a recording of the operator's metrics endpoint into a
// Prometheus TSDB, evaluates each panel's own queries with the Prometheus
// query engine, and plots the results with gonum/plot. The recording comes
// from test/metrics, which scrapes a real operator through a lock-service
// and webhook scenario:
//
//	FENCEDLEASE_SCRAPE_LOG=/tmp/scrapes.txt go test -run TestMetricsAfterLockServiceAndWebhook ./test/metrics
//	cd hack/rulecheck && go run ./dashplot -scrapes /tmp/scrapes.txt -out ../../docs/images/dashboard.png
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"log"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/tsdb"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// panels are the dashboard panels drawn, by title.
var panels = []string{"Holder", "Fence", "Eligible candidates", "Age of the last renewal", "Grants and handoffs", "Webhook decisions"}

// variables replace Grafana's: the recording is scraped every 250ms.
var variables = strings.NewReplacer("$__rate_interval", "2s", "$__interval", "1s", "$namespace", ".*", "$name", ".*")

func main() {
	scrapes := flag.String("scrapes", "", "recording written by test/metrics (FENCEDLEASE_SCRAPE_LOG)")
	dashboard := flag.String("dashboard", filepath.Join("..", "..", "charts", "fencedlease", "files", "monitoring", "dashboard.json"), "dashboard JSON")
	out := flag.String("out", "dashboard.png", "PNG to write")
	flag.Parse()
	if err := run(*scrapes, *dashboard, *out); err != nil {
		log.Fatal(err)
	}
}

type target struct{ Expr, LegendFormat string }

type panel struct {
	Title       string
	FieldConfig struct {
		Defaults struct{ Unit string }
	}
	Targets []target
}

func run(scrapes, dashboard, out string) error {
	data, err := os.ReadFile(dashboard)
	if err != nil {
		return err
	}
	var dash struct{ Panels []panel }
	if err := json.Unmarshal(data, &dash); err != nil {
		return fmt.Errorf("%s: %w", dashboard, err)
	}
	dir, err := os.MkdirTemp("", "dashplot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := tsdb.Open(dir, nil, nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		return err
	}
	defer db.Close()
	start, end, err := load(db, scrapes)
	if err != nil {
		return err
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: time.Second})
	var plots []*plot.Plot
	for _, title := range panels {
		p, err := draw1(engine, db, find(dash.Panels, title), start, end)
		if err != nil {
			return fmt.Errorf("panel %q: %w", title, err)
		}
		plots = append(plots, p)
	}
	const cols = 2
	rows := (len(plots) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
		for j := range grid[i] {
			if k := i*cols + j; k < len(plots) {
				grid[i][j] = plots[k]
			}
		}
	}
	img := vgimg.New(vg.Points(1100), vg.Points(float64(rows)*260))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j := range grid[i] {
			if grid[i][j] != nil {
				grid[i][j].Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func find(ps []panel, title string) panel {
	for _, p := range ps {
		if p.Title == title {
			return p
		}
	}
	log.Fatalf("the dashboard has no panel %q", title)
	return panel{}
}

// load appends every scrape of the recording to the TSDB, histograms as
// their _bucket, _sum and _count series, and returns the time range.
func load(db *tsdb.DB, file string) (time.Time, time.Time, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	var start, end time.Time
	app := db.Appender(context.Background())
	head := regexp.MustCompile(`(?m)^# scrape (\d+)\n`)
	idx := head.FindAllSubmatchIndex(data, -1)
	for i, m := range idx {
		ms, _ := strconv.ParseInt(string(data[m[2]:m[3]]), 10, 64)
		bodyEnd := len(data)
		if i+1 < len(idx) {
			bodyEnd = idx[i+1][0]
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(bufio.NewReader(bytes.NewReader(data[m[1]:bodyEnd])))
		if err != nil {
			return start, end, fmt.Errorf("scrape at %d: %w", ms, err)
		}
		for name, mf := range fams {
			if !strings.HasPrefix(name, "fencedlease_") {
				continue
			}
			for _, s := range mf.GetMetric() {
				for _, smp := range samples(name, s) {
					if _, err := app.Append(0, smp.l, ms, smp.v); err != nil {
						return start, end, fmt.Errorf("append %s: %w", smp.l, err)
					}
				}
			}
		}
		t := time.UnixMilli(ms)
		if start.IsZero() {
			start = t
		}
		end = t
	}
	if len(idx) == 0 {
		return start, end, fmt.Errorf("%s holds no scrape", file)
	}
	return start, end, app.Commit()
}

type sample struct {
	l labels.Labels
	v float64
}

func samples(name string, m *dto.Metric) []sample {
	base := map[string]string{}
	for _, lp := range m.GetLabel() {
		base[lp.GetName()] = lp.GetValue()
	}
	with := func(n string, extra ...string) labels.Labels {
		mm := map[string]string{model.MetricNameLabel: n}
		for k, v := range base {
			mm[k] = v
		}
		for i := 0; i+1 < len(extra); i += 2 {
			mm[extra[i]] = extra[i+1]
		}
		return labels.FromMap(mm)
	}
	switch {
	case m.Counter != nil:
		return []sample{{with(name), m.GetCounter().GetValue()}}
	case m.Gauge != nil:
		return []sample{{with(name), m.GetGauge().GetValue()}}
	case m.Histogram != nil:
		h := m.GetHistogram()
		out := []sample{{with(name + "_sum"), h.GetSampleSum()}, {with(name + "_count"), float64(h.GetSampleCount())}}
		for _, b := range h.GetBucket() {
			out = append(out, sample{with(name+"_bucket", "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)), float64(b.GetCumulativeCount())})
		}
		return append(out, sample{with(name+"_bucket", "le", "+Inf"), float64(h.GetSampleCount())})
	}
	return nil
}

var palette = []color.Color{
	color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{44, 160, 44, 255}, color.RGBA{214, 39, 40, 255},
	color.RGBA{148, 103, 189, 255}, color.RGBA{140, 86, 75, 255}, color.RGBA{227, 119, 194, 255}, color.RGBA{127, 127, 127, 255},
}

// draw1 evaluates a panel's queries over the recording and plots every
// series that is not zero throughout.
func draw1(engine *promql.Engine, db *tsdb.DB, p panel, start, end time.Time) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = p.Title
	pl.X.Label.Text = "seconds into the test"
	if u := p.FieldConfig.Defaults.Unit; u != "" && u != "short" && u != "none" {
		pl.Y.Label.Text = u
	}
	pl.Legend.Top = true
	pl.Legend.Left = true
	pl.Add(plotter.NewGrid())
	n := 0
	for _, t := range p.Targets {
		q, err := engine.NewRangeQuery(context.Background(), db, nil, variables.Replace(t.Expr), start, end, 250*time.Millisecond)
		if err != nil {
			return nil, err
		}
		res := q.Exec(context.Background())
		if res.Err != nil {
			return nil, res.Err
		}
		matrix, err := res.Matrix()
		if err != nil {
			return nil, err
		}
		for _, s := range matrix {
			pts := plotter.XYs{}
			nonzero := false
			for _, f := range s.Floats {
				if math.IsNaN(f.F) || math.IsInf(f.F, 0) {
					continue
				}
				pts = append(pts, plotter.XY{X: float64(f.T-start.UnixMilli()) / 1000, Y: f.F})
				nonzero = nonzero || f.F != 0
			}
			if !nonzero || len(pts) == 0 {
				continue
			}
			line, err := plotter.NewLine(pts)
			if err != nil {
				return nil, err
			}
			line.Color = palette[n%len(palette)]
			line.Width = vg.Points(1.5)
			n++
			pl.Add(line)
			pl.Legend.Add(legend(t.LegendFormat, s.Metric), line)
		}
		q.Close()
	}
	return pl, nil
}

var legendVar = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

func legend(format string, l labels.Labels) string {
	s := legendVar.ReplaceAllStringFunc(format, func(m string) string {
		return l.Get(legendVar.FindStringSubmatch(m)[1])
	})
	// The test's namespaces are random: keep the lease's name.
	return regexp.MustCompile(`metrics-[a-z0-9]+/`).ReplaceAllString(s, "")
}
