package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// histBins is the number of bins of each latency histogram.
const histBins = 30

// WritePlot draws the run as a PNG: histograms of TTFT, TPOT, ITL and E2EL (with their mean
// and P99 in the titles) and, over time, the output token throughput and the requests in
// flight.
func WritePlot(w io.Writer, title string, res *Result) (err error) {
	// gonum/plot panics on some degenerate inputs; report them as errors instead.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("plot: %v", r)
		}
	}()
	var ttft, tpot, itl, e2el plotter.Values
	for _, o := range res.Outputs {
		if !o.Success {
			continue
		}
		ttft = append(ttft, ms(o.TTFT))
		e2el = append(e2el, ms(o.Latency))
		if o.OutputTokens > 1 {
			tpot = append(tpot, TPOT(o))
		}
		for _, d := range o.ITL {
			itl = append(itl, ms(d))
		}
	}
	bucket := timelineBucket(res.Duration)
	tl := NewTimeline(res.Outputs, bucket)

	panels := make([]*plot.Plot, 0, 6)
	for _, h := range []struct {
		name string
		vs   plotter.Values
		c    color.RGBA
	}{
		{"TTFT", ttft, color.RGBA{R: 31, G: 119, B: 180, A: 255}},
		{"TPOT", tpot, color.RGBA{R: 255, G: 127, B: 14, A: 255}},
		{"ITL", itl, color.RGBA{R: 44, G: 160, B: 44, A: 255}},
		{"E2EL", e2el, color.RGBA{R: 214, G: 39, B: 40, A: 255}},
	} {
		p, err := histogram(h.name, h.vs, h.c)
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	label := fmt.Sprintf("time since the first request (s; %v buckets)", bucket)
	tput, err := series("Output throughput (tok/s)", label, "tokens/s", tl.Tokens, bucket, color.RGBA{R: 148, G: 103, B: 189, A: 255})
	if err != nil {
		return err
	}
	conc, err := series("Requests in flight (mean per bucket)", label, "requests", tl.Concurrent, bucket, color.RGBA{R: 140, G: 86, B: 75, A: 255})
	if err != nil {
		return err
	}
	panels = append(panels, tput, conc)

	const cols, rows = 2, 3
	img := vgimg.NewWith(vgimg.UseWH(12*vg.Inch, 13*vg.Inch), vgimg.UseDPI(96))
	dc := draw.New(img)
	top := dc
	top.Min.Y = top.Max.Y - vg.Inch/2
	heading := draw.TextStyle{Color: color.Black, Font: plot.DefaultFont, XAlign: draw.XCenter, YAlign: draw.YCenter, Handler: plot.DefaultTextHandler}
	heading.Font.Size = vg.Points(16)
	top.FillText(heading, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: (top.Min.Y + top.Max.Y) / 2}, title)
	body := dc
	body.Max.Y -= vg.Inch / 2
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Inch / 4, PadY: vg.Inch / 4, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 4, PadBottom: vg.Inch / 8}
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = panels[r*cols : (r+1)*cols]
	}
	canvases := plot.Align(grid, tiles, body)
	for r := range grid {
		for c := range grid[r] {
			grid[r][c].Draw(canvases[r][c])
		}
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// histogram makes one latency panel; without values it shows an empty plot saying so.
func histogram(name string, vs plotter.Values, c color.RGBA) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = name + " (ms)"
	p.Y.Label.Text = "requests"
	if name == "ITL" {
		p.Y.Label.Text = "chunk gaps"
	}
	if len(vs) == 0 {
		p.Title.Text = name + ": no samples"
		return p, nil
	}
	st := Summarize(vs, []float64{99})
	p.Title.Text = fmt.Sprintf("%s  mean %.2f  median %.2f  P99 %.2f ms", name, st.Mean, st.Median, st.Percentiles[0].Value)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		lo, hi = min(lo, v), max(hi, v)
	}
	bins := histBins
	if hi-lo < 1e-9 {
		// One value: widen the range so that the bin has a width.
		vs = append(vs, lo-0.5, lo+0.5)
		bins = 3
	}
	h, err := plotter.NewHist(vs, bins)
	if err != nil {
		return nil, fmt.Errorf("plot %s: %w", name, err)
	}
	h.FillColor = c
	h.LineStyle.Width = vg.Points(0.5)
	p.Add(h)
	return p, nil
}

// series makes a panel of one value per time bucket.
func series(title, xLabel, yLabel string, ys []float64, bucket time.Duration, c color.RGBA) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	if len(ys) == 0 {
		p.Title.Text += ": no samples"
		return p, nil
	}
	pts := make(plotter.XYs, len(ys))
	for i, y := range ys {
		pts[i] = plotter.XY{X: (float64(i) + 0.5) * bucket.Seconds(), Y: y}
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, fmt.Errorf("plot %s: %w", title, err)
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	p.Add(l)
	p.Y.Min = 0
	return p, nil
}

// timelineBucket picks a bucket that gives about 60 points over the run, at least 10 ms.
func timelineBucket(d time.Duration) time.Duration {
	b := d / 60
	switch {
	case b < 10*time.Millisecond:
		return 10 * time.Millisecond
	case b < time.Second:
		return b.Round(10 * time.Millisecond)
	}
	return b.Round(time.Second)
}
