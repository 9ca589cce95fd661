package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// series is a named line of a panel.
type series struct {
	name string
	xys  plotter.XYs
}

// lineName is the legend name of a sync and batching mode.
func lineName(sync, mode string) string { return strings.ToUpper(sync) + " " + mode }

// targetSeries is model's time to its target loss against the H-level,
// one line per sync and batching mode; runs that failed or never reached
// the target are left out.
func targetSeries(res *results, model string, o options) []series {
	target := targetLoss(res, model, o)
	var out []series
	for _, g := range res.groups {
		if g.model.name != model {
			continue
		}
		for _, mode := range g.modes {
			s := series{name: lineName(g.sync, mode)}
			for _, h := range g.levels {
				if t := g.get(h, mode); ok(t) {
					if m := measure(t, o, target); m.targetStep >= 0 {
						s.xys = append(s.xys, plotter.XY{X: float64(h), Y: m.targetTime.Seconds()})
					}
				}
			}
			out = append(out, s)
		}
	}
	return out
}

// curveSeries is the loss EMA against the time of model's runs at its
// top H-level, one line per sync and batching mode.
func curveSeries(res *results, model string, o options) (int, []series) {
	var out []series
	top := 0
	for _, g := range res.groups {
		if g.model.name != model {
			continue
		}
		top = g.levels[len(g.levels)-1]
		for _, mode := range g.modes {
			t := g.get(top, mode)
			if !ok(t) {
				continue
			}
			s := series{name: lineName(g.sync, mode)}
			ema := lossEMA(t.samples, o.emaWeight)
			for i, isNew := range fresh(t.samples) {
				if isNew && !math.IsNaN(ema[i]) {
					s.xys = append(s.xys, plotter.XY{X: t.samples[i].at.Sub(t.started).Seconds(), Y: ema[i]})
				}
			}
			out = append(out, s)
		}
	}
	return top, out
}

// plotModels is the models that have H-level runs, in order.
func plotModels(res *results) []modelSpec {
	var out []modelSpec
	for _, g := range res.groups {
		if !slices.ContainsFunc(out, func(m modelSpec) bool { return m.name == g.model.name }) {
			out = append(out, g.model)
		}
	}
	return out
}

// writePlot draws one row per model into path (PNG): the time to the
// target loss against the H-level, and the top H-level's loss curves.
func writePlot(path string, res *results, o options) error {
	ms := plotModels(res)
	if len(ms) == 0 {
		return fmt.Errorf("--plot %s: no H-level runs to draw", path)
	}
	var rows [][]*plot.Plot
	for _, m := range ms {
		left, err := linePlot(fmt.Sprintf("%s: time to the target loss", m.name), "H-level", "seconds", targetSeries(res, m.name, o))
		if err != nil {
			return err
		}
		top, curves := curveSeries(res, m.name, o)
		right, err := linePlot(fmt.Sprintf("%s: loss at H-%d (EMA)", m.name, top), "seconds from the job's start", m.loss, curves)
		if err != nil {
			return err
		}
		left.X.Min, left.X.Max, left.Y.Min, right.X.Min = 0.5, 6.5, 0, 0
		left.X.Tick.Marker = levelTicks()
		left.Legend.Left = true
		rows = append(rows, []*plot.Plot{left, right})
	}
	const width, rowHeight = 12 * vg.Inch, 4 * vg.Inch
	img := vgimg.New(width, rowHeight*vg.Length(len(rows)))
	dc := draw.New(img)
	canvases := plot.Align(rows, draw.Tiles{Rows: len(rows), Cols: 2, PadX: vg.Centimeter, PadY: vg.Centimeter}, dc)
	for i := range rows {
		for j := range rows[i] {
			rows[i][j].Draw(canvases[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("--plot: write %s: %w", path, err)
	}
	return f.Close()
}

// linePlot is a plot of lines with points, empty lines left out.
func linePlot(title, x, y string, lines []series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	p.Legend.Top = true
	var args []any
	for _, s := range lines {
		if len(s.xys) > 0 {
			args = append(args, s.name, s.xys)
		}
	}
	if len(args) == 0 {
		return p, nil
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return nil, fmt.Errorf("plot %q: %w", title, err)
	}
	return p, nil
}

// levelTicks marks the H-levels.
func levelTicks() plot.ConstantTicks {
	var ticks plot.ConstantTicks
	for _, h := range []int{1, 2, 4, 6} {
		ticks = append(ticks, plot.Tick{Value: float64(h), Label: fmt.Sprint(h)})
	}
	return ticks
}
