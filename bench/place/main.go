// Command place benchmarks op-level device placement (daemon/place): every
// method on the zoo models and on the NMT- and Inception-like synthetic
// graphs, on built-in device sets of 2 to 5 devices, in the simulator. On
// the "local" set (this machine's two cores; zoo models only) the CPU op
// times are measured with the real kernels, and rl's, mincut's and single's
// placements are also executed for real on the two cores (place.Execute).
// It prints per graph and device set each method's simulated step, its
// distance from the best found and its search time, then the simulator's
// step of each zoo model on one core against the real trainer's, and the
// issue's targets computed from this run. Nothing is asserted.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heterps/heterps/bench/internal/header"
	"github.com/heterps/heterps/daemon/place"
	"github.com/heterps/heterps/native"
)

var deviceSets = []string{"local", "cpu-gpu", "cpu-2gpu", "cpu-3gpu-small", "cpu-4gpu"}

// output is where the results go: standard output and, with --out, the
// results file (written whole at the end).
var output io.Writer = os.Stdout

func main() {
	native.FixOpenBLASCore() // measured CPU op times on the kernels heterps runs
	seed := flag.Uint64("seed", 1, "rl's seed")
	samples := flag.Int("samples", 0, "rl: placements sampled (0: the default)")
	batch := flag.Int("batch", 512, "batch of the zoo models' graphs")
	check := flag.Bool("check-sim", true, "compare the simulator's one-core step of the zoo models with the real trainer's")
	only := flag.String("graphs", "", "comma-separated graphs (default: the zoo and both synthetic graphs)")
	outPath := flag.String("out", "", header.OutUsage)
	flag.Parse()
	res, err := header.Begin(*outPath, header.Collect("bench/place"))
	if err != nil {
		fail(err)
	}
	output = res
	start := time.Now()
	fmt.Fprintf(output, "heterps placement benchmark: Go %s, %d CPUs, seed %d, zoo batch %d\n", runtime.Version(), runtime.NumCPU(), *seed, *batch)
	fmt.Fprintln(output, "Step times are simulated (roofline per op on the device; on \"local\" the CPU op times are measured with the")
	fmt.Fprintln(output, "real kernels inside a step run on one core, one thread, and transfers between the cores take the measured")
	fmt.Fprintln(output, "hand-off latency and copy bandwidth); \"from best\" is against the best placement any method found for that graph and")
	fmt.Fprintln(output, "device set; rl is the trained policy's own most likely placement, \"rl sampled\" the best it sampled.")
	graphs := place.GraphNames()
	if *only != "" {
		graphs = strings.Split(*only, ",")
	}
	be, err := native.NewCPU(native.CPUOptions{Threads: 1})
	if err != nil {
		fail(err)
	}
	b := &bench{o: place.Options{Seed: *seed, RL: place.RLOptions{Samples: *samples}}, be: be}
	for _, name := range graphs {
		if err := b.graph(name, *batch); err != nil {
			fail(err)
		}
	}
	if *check {
		if err := b.simulatorVsMeasured(*batch, 10, graphs); err != nil {
			fail(err)
		}
	}
	b.targets()
	fmt.Fprintf(output, "\ntotal %.1f s\n", time.Since(start).Seconds())
	if err := res.Close(); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/place:", err)
	os.Exit(1)
}

type bench struct {
	o  place.Options
	be native.Backend
	// per graph: the worst rl distance from the best, and NMT's figures
	rlWorst     map[string]float64
	nmt         []string
	rlSearchMax map[string]time.Duration
	rlExecuted  map[string][2]float64 // per graph: rl's placement on local, simulated and executed step
}

func (b *bench) graph(name string, batch int) error {
	g, err := place.LoadGraph(name, batch)
	if err != nil {
		return err
	}
	fmt.Fprintf(output, "\n== %s: %d ops in %d co-location groups\n", g.Name, len(g.Ops), len(g.Groups))
	var measured *place.Measured
	var executed string
	tw := tabwriter.NewWriter(output, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "devices\tn\tsingle ms\texpert ms\tmincut ms\texact ms\trl ms\trl sampled ms\tbest ms\tsingle\texpert\tmincut\texact\trl\trl search s\t")
	for _, set := range deviceSets {
		if set == "local" && (name == place.SyntheticNMT || name == place.SyntheticInception) {
			continue // GPU-sized graphs: tens of seconds a step on one core
		}
		devs, err := place.LoadDevices(set)
		if err != nil {
			return err
		}
		s, err := place.NewSimulator(g, devs.Devices)
		if err != nil {
			return err
		}
		if set == "local" {
			if measured == nil {
				if measured, err = place.MeasureLocal(context.Background(), g, 1, measureReps); err != nil {
					return err
				}
			}
			s.UseMeasured(measured)
		}
		rows, err := place.Compare(context.Background(), s, place.Methods(), b.o)
		if err != nil {
			return err
		}
		b.row(tw, g.Name, set, len(devs.Devices), rows)
		if set == "local" {
			if executed, err = b.execute(g, devs.Devices, rows); err != nil {
				return err
			}
		}
	}
	tw.Flush()
	if measured != nil {
		fmt.Fprintf(output, "local: %d of %d op times measured %s (fastest of %d)", measured.Measured, len(g.Ops), measured.How, measureReps)
		if l := measured.Link; l != nil {
			fmt.Fprintf(output, "; link between the cores measured: %.1f us + %.1f GB/s", l.Latency*1e6, l.Bandwidth/1e9)
		}
		fmt.Fprintln(output)
	}
	if executed != "" {
		fmt.Fprintf(output, "local, placements executed for real (a 1-thread CPU backend pinned to each core, the fastest of at least %d steps and 1 s, in turn with\n"+
			"  each core running the step alone for the simulator's op times): %s\n", executeReps, executed)
	}
	return nil
}

// executeReps is how many steps of a placement the bench runs for real,
// and measureReps how many the local op times are the fastest of: this
// machine is shared, and only the fastest steps are free of other
// processes' time.
const (
	executeReps = 30
	measureReps = 20
)

// execute holds the simulator against rl's, mincut's and single's
// placements run for real on this machine's cores (place.CheckPlacement:
// op times measured on each core alone in the same rounds as the
// placement's steps, on the same buffers) and returns each one's figures;
// it keeps rl's for the targets.
func (b *bench) execute(g *place.Graph, devs []place.Device, rows []place.Row) (string, error) {
	var parts []string
	for _, r := range rows {
		if r.Outcome == nil || (r.Method != "rl" && r.Method != "mincut" && r.Method != "single") {
			continue
		}
		c, err := place.CheckPlacement(context.Background(), g, devs, r.Outcome.Placement, executeReps)
		if err != nil {
			return "", fmt.Errorf("%s: executing %s's placement: %w", g.Name, r.Method, err)
		}
		ex := c.Executed
		parts = append(parts, fmt.Sprintf("%s %.3f ms simulated, %.3f measured (%.2f; %.3f of it without the kernels; %.3f simulated in the search)",
			r.Method, c.Simulated*1e3, ex.Step*1e3, c.Simulated/ex.Step, ex.Overhead*1e3, r.Outcome.Result.Step*1e3))
		if r.Method == "rl" {
			if b.rlExecuted == nil {
				b.rlExecuted = map[string][2]float64{}
			}
			b.rlExecuted[g.Name] = [2]float64{c.Simulated, ex.Step}
		}
	}
	return strings.Join(parts, "; "), nil
}

func (b *bench) row(tw *tabwriter.Writer, graph, set string, n int, rows []place.Row) {
	ms := map[string]string{}
	rel := map[string]string{}
	best := math.Inf(1)
	var rl *place.Outcome
	for _, r := range rows {
		if r.Outcome == nil {
			ms[r.Method], rel[r.Method] = "-", "-"
			continue
		}
		c := r.Outcome.Result.Cost
		best = math.Min(best, c)
		ms[r.Method] = fmt.Sprintf("%.3f", c*1e3)
		if !r.Outcome.Result.Fits {
			ms[r.Method] += "*"
		}
		rel[r.Method] = fmt.Sprintf("%+.1f%%", 100*r.FromBest)
		if r.Method == "rl" {
			rl = r.Outcome
			b.note(graph, set, r, rows)
		}
	}
	sampled, search := "-", "-"
	if rl != nil {
		sampled, search = fmt.Sprintf("%.3f", rl.BestSampledCost*1e3), fmt.Sprintf("%.1f", rl.Search.Seconds())
	}
	fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.3f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", set, n,
		ms["single"], ms["expert"], ms["mincut"], ms["exact"], ms["rl"], sampled, best*1e3,
		rel["single"], rel["expert"], rel["mincut"], rel["exact"], rel["rl"], search)
}

// note keeps what the targets need.
func (b *bench) note(graph, set string, rl place.Row, rows []place.Row) {
	if b.rlWorst == nil {
		b.rlWorst, b.rlSearchMax = map[string]float64{}, map[string]time.Duration{}
	}
	b.rlWorst[graph] = math.Max(b.rlWorst[graph], rl.FromBest)
	b.rlSearchMax[graph] = max(b.rlSearchMax[graph], rl.Outcome.Search)
	if graph != place.SyntheticNMT {
		return
	}
	cost := map[string]float64{}
	for _, r := range rows {
		if r.Outcome != nil {
			cost[r.Method] = r.Outcome.Result.Cost
		}
	}
	verdict := func(m string) string {
		if cost["rl"] < cost[m] {
			return fmt.Sprintf("better than %s by %.1f%%", m, 100*(1-cost["rl"]/cost[m]))
		}
		return fmt.Sprintf("NOT better than %s (%+.1f%%)", m, 100*(cost["rl"]/cost[m]-1))
	}
	b.nmt = append(b.nmt, fmt.Sprintf("  %s: rl %s, %s", set, verdict("expert"), verdict("mincut")))
}

func (b *bench) targets() {
	fmt.Fprintln(output, "\n== targets (issue 16, part 3), from this run")
	fmt.Fprintln(output, "rl within 5% of the best method on every graph (worst device set per graph):")
	met := 0
	for _, name := range place.GraphNames() {
		w, ok := b.rlWorst[name]
		if !ok {
			continue
		}
		mark := "met"
		if w > 0.05 {
			mark = "NOT met"
		} else {
			met++
		}
		fmt.Fprintf(output, "  %-15s rl %+.1f%% from the best, search at most %.1f s: %s\n", name, 100*w, b.rlSearchMax[name].Seconds(), mark)
	}
	fmt.Fprintf(output, "  %d of %d graphs\n", met, len(b.rlWorst))
	if len(b.nmt) > 0 {
		fmt.Fprintln(output, "rl better than expert and mincut on the NMT-like graph:")
		for _, l := range b.nmt {
			fmt.Fprintln(output, l)
		}
		fmt.Fprintf(output, "rl search on the NMT-like graph (%s): at most %.1f s (target < 600 s on 2 cores)\n",
			"~300 ops", b.rlSearchMax[place.SyntheticNMT].Seconds())
	}
	if len(b.rlExecuted) > 0 {
		fmt.Fprintln(output, "rl's final placement on this machine's two cores, executed for real against the simulator on op times measured in the same\n  rounds (place.CheckPlacement; target within 15%):")
		worst, met := 0.0, 0
		for _, name := range place.GraphNames() {
			e, ok := b.rlExecuted[name]
			if !ok {
				continue
			}
			gap := math.Abs(e[0]/e[1] - 1)
			worst = math.Max(worst, gap)
			mark := "met"
			if gap > 0.15 {
				mark = "NOT met"
			} else {
				met++
			}
			fmt.Fprintf(output, "  %-15s simulated %.3f ms, measured %.3f ms (%.2f): %s\n", name, e[0]*1e3, e[1]*1e3, e[0]/e[1], mark)
		}
		fmt.Fprintf(output, "  %d of %d graphs, largest gap %.1f%%\n", met, len(b.rlExecuted), 100*worst)
	}
}
