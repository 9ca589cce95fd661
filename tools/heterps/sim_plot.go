package main

import (
	"fmt"
	"image/color"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/heterps/heterps/daemon/alloc"
)

// policyColors tells the policies apart in --plot.
var policyColors = map[string]color.RGBA{
	string(alloc.Quality):        {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	string(alloc.MaxMin):         {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	string(alloc.Priority):       {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	string(alloc.Fair):           {R: 0x33, G: 0x33, B: 0x33, A: 0xff},
	string(alloc.QualityPerCost): {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// plotQuality draws each policy's mean quality of the running jobs over
// time to a PNG file.
func plotQuality(path string, c simConfig, results []simResult) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%d jobs on %d cores, arrivals every %g s", c.Jobs, c.Cores, c.ArrivalMean)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "mean normalised quality of running jobs"
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = false, false
	for _, r := range results {
		pts := make(plotter.XYs, len(r.quality))
		for i, q := range r.quality {
			pts[i].X, pts[i].Y = q.t, q.q
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("--plot: %s: %w", r.Policy, err)
		}
		line.Color = policyColors[r.Policy]
		line.Width = vg.Points(1)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s (avg %.3f)", r.Policy, r.AvgQuality), line)
	}
	if err := p.Save(9*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}

// parseCores parses --sweep-cores.
func parseCores(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxSimCores {
			return nil, fmt.Errorf("--sweep-cores: %q: want core counts from 1 to %d", f, maxSimCores)
		}
		out = append(out, n)
	}
	return out, nil
}

// gainVanishes is the quality/fair ratio of average quality below which
// the gain counts as gone.
const gainVanishes = 1.01

// sweepRow is one core count of a sweep.
type sweepRow struct {
	cores         int
	quality, fair simResult
}

// runSweep compares quality with fair at each core count of --sweep-cores.
func runSweep(f *simFlags, stdout, stderr io.Writer) int {
	var rows []sweepRow
	for _, cores := range slices.Sorted(slices.Values(f.sweep)) {
		c := f.simConfig
		c.Cores = cores
		q, err := simulate(c, alloc.Quality)
		if err != nil {
			return failTo(stderr, exitFailure, err)
		}
		fair, err := simulate(c, alloc.Fair)
		if err != nil {
			return failTo(stderr, exitFailure, err)
		}
		rows = append(rows, sweepRow{cores: cores, quality: q, fair: fair})
	}
	printSweep(stdout, f.simConfig, rows)
	return exitOK
}

func printSweep(w io.Writer, c simConfig, rows []sweepRow) {
	fmt.Fprintf(w, "%d jobs, arrivals every %g s on average, %.0f s epochs, seed %d: quality against fair by cluster size\n\n",
		c.Jobs, c.ArrivalMean, c.Epoch, c.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cores\tquality avg q\tfair avg q\tq gain x\tt90 quality s\tt90 fair s\tt90 x\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%.3f\t%.3f\t%.2f\t%.0f\t%.0f\t%.2f\t\n", r.cores, r.quality.AvgQuality, r.fair.AvgQuality, r.gain(),
			r.quality.MeanTimeTo90, r.fair.MeanTimeTo90, r.quality.MeanTimeTo90/r.fair.MeanTimeTo90)
	}
	tw.Flush()
	if at := vanishesAt(rows); at > 0 {
		fmt.Fprintf(w, "\nthe gain in average quality is below %.0f%% from %d cores on\n", 100*(gainVanishes-1), at)
	} else {
		fmt.Fprintf(w, "\nthe gain in average quality is still above %.0f%% at the largest size swept\n", 100*(gainVanishes-1))
	}
}

func (r sweepRow) gain() float64 { return r.quality.AvgQuality / r.fair.AvgQuality }

// vanishesAt is the smallest core count from which on (rows ascending)
// the gain stays below gainVanishes; 0 if it does not.
func vanishesAt(rows []sweepRow) int {
	at := 0
	for i := len(rows) - 1; i >= 0 && rows[i].gain() < gainVanishes; i-- {
		at = rows[i].cores
	}
	return at
}
