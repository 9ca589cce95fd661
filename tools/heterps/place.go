package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"

	"github.com/heterps/heterps/daemon/place"
	"github.com/heterps/heterps/native"
)

func init() {
	register("place", "place the ops of a model's training step on one machine's devices (single, expert, mincut, exact, rl)", func(args []string) int {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		return runPlace(ctx, args, os.Stdout, os.Stderr)
	})
}

type placeFlags struct {
	model, devices, method string
	batch, reps, samples   int
	seed                   uint64
	exactBound             float64
	measure, json          bool
}

func parsePlaceFlags(args []string, stderr io.Writer) (*placeFlags, []string, error) {
	f := &placeFlags{}
	fs := flag.NewFlagSet("place", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.model, "model", "ctrdnn", "model: zoo name, model file, or a synthetic graph ("+place.SyntheticNMT+", "+place.SyntheticInception+")")
	fs.StringVar(&f.devices, "devices", "cpu-gpu", "devices file, or a built-in one (cpu-gpu, cpu-2gpu, cpu-4gpu, local)")
	fs.StringVar(&f.method, "method", "all", "rl, single, expert, mincut, exact, a comma-separated list, or all")
	fs.IntVar(&f.batch, "batch", 512, "samples per step (model graphs)")
	fs.BoolVar(&f.measure, "measure", false, "measure op times with the real kernels on this machine for the devices marked local")
	fs.IntVar(&f.reps, "reps", 3, "with --measure: timed runs per kernel, the fastest kept")
	fs.IntVar(&f.samples, "samples", 0, "rl: placements sampled per restart (0: 1000 per co-location group, 10000 to 50000)")
	fs.Uint64Var(&f.seed, "seed", 1, "rl's seed")
	fs.Float64Var(&f.exactBound, "exact-bound", 0, "exact: most placements to enumerate (0: 2^18)")
	fs.BoolVar(&f.json, "json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if fs.NArg() > 0 {
		return nil, nil, fmt.Errorf("place: unexpected argument %q", fs.Arg(0))
	}
	if f.reps < 1 || f.samples < 0 || f.exactBound < 0 {
		return nil, nil, errors.New("place: --reps must be >= 1, --samples and --exact-bound >= 0")
	}
	names, err := place.ParseMethods(f.method)
	if err != nil {
		return nil, nil, fmt.Errorf("place: --method: %w", err)
	}
	return f, names, nil
}

// placeJSON is `heterps place --json`.
type placeJSON struct {
	Model    string            `json:"model"`
	Devices  []string          `json:"devices"`
	Ops      int               `json:"ops"`
	Groups   int               `json:"groups"`
	Measured int               `json:"measured_ops,omitempty"`
	Methods  []placeMethodJSON `json:"methods"`
}

type placeMethodJSON struct {
	Method          string  `json:"method"`
	Skipped         string  `json:"skipped,omitempty"`
	StepSeconds     float64 `json:"step_s"`
	Cost            float64 `json:"cost_s"` // the step, penalised when it does not fit
	Fits            bool    `json:"fits"`
	SearchSeconds   float64 `json:"search_s"`
	FromBest        float64 `json:"from_best"` // cost / best cost - 1
	Evaluated       int     `json:"evaluated"`
	MovedBytes      int64   `json:"moved_bytes"`
	PolicyCost      float64 `json:"policy_cost_s,omitempty"`
	BestSampledCost float64 `json:"best_sampled_cost_s,omitempty"`
	// Placement is each co-location group's device ("mixed" when its ops
	// are on several).
	Placement map[string]string `json:"placement,omitempty"`
}

func runPlace(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, names, err := parsePlaceFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return failTo(stderr, exitUsage, err)
	}
	g, err := place.LoadGraph(f.model, f.batch)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	devs, err := place.LoadDevices(f.devices)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	s, err := place.NewSimulator(g, devs.Devices)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	measured, err := measureLocal(ctx, f, g, s)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	rows, err := place.Compare(ctx, s, names, place.Options{Seed: f.seed, ExactBound: f.exactBound, RL: place.RLOptions{Samples: f.samples}})
	if err != nil {
		return failTo(stderr, exitFailure, err)
	}
	out := placeReport(g, devs.Devices, rows, measured)
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return failTo(stderr, exitFailure, err)
		}
		return exitOK
	}
	printPlace(stdout, out)
	return exitOK
}

// measureLocal times the graph's ops on this machine's CPU for the local
// devices when asked; it returns how many ops got a measured time.
func measureLocal(ctx context.Context, f *placeFlags, g *place.Graph, s *place.Simulator) (int, error) {
	if !f.measure {
		return 0, nil
	}
	local := false
	for _, d := range s.Devices() {
		local = local || d.Local
	}
	if !local {
		return 0, fmt.Errorf("place: --measure: devices %s has no device marked local = true", f.devices)
	}
	be, err := native.NewCPU(native.CPUOptions{Threads: 1})
	if err != nil {
		return 0, err
	}
	m, err := place.Measure(ctx, g, be, f.reps)
	if err != nil {
		return 0, err
	}
	s.UseMeasured(m)
	return m.Measured, nil
}

func placeReport(g *place.Graph, devs []place.Device, rows []place.Row, measured int) placeJSON {
	out := placeJSON{Model: g.Name, Ops: len(g.Ops), Groups: len(g.Groups), Measured: measured}
	for _, d := range devs {
		out.Devices = append(out.Devices, d.Name)
	}
	for _, r := range rows {
		m := placeMethodJSON{Method: r.Method, Skipped: r.Skipped}
		if o := r.Outcome; o != nil {
			m.StepSeconds, m.Cost, m.Fits = o.Result.Step, o.Result.Cost, o.Result.Fits
			m.SearchSeconds, m.FromBest, m.Evaluated, m.MovedBytes = o.Search.Seconds(), r.FromBest, o.Evaluated, o.Result.Moved
			m.PolicyCost, m.BestSampledCost = o.PolicyCost, o.BestSampledCost
			m.Placement = map[string]string{}
			for grp, d := range place.GroupDevices(g, o.Placement) {
				name := "mixed"
				if d >= 0 {
					name = devs[d].Name
				}
				m.Placement[g.Groups[grp]] = name
			}
		}
		out.Methods = append(out.Methods, m)
	}
	return out
}

func printPlace(w io.Writer, r placeJSON) {
	fmt.Fprintf(w, "%s: %d ops in %d co-location groups on %s", r.Model, r.Ops, r.Groups, strings.Join(r.Devices, ", "))
	if r.Measured > 0 {
		fmt.Fprintf(w, " (%d op times measured on this CPU)", r.Measured)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "method\tstep ms\tfits\tsearch s\tfrom best\tplacements simulated\tgroups per device\t")
	for _, m := range r.Methods {
		if m.Skipped != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\tskipped (below)\t\n", m.Method)
			continue
		}
		fits := "yes"
		if !m.Fits {
			fits = "NO"
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%s\t%.3f\t%+.1f%%\t%d\t%s\t\n", m.Method, m.StepSeconds*1e3, fits, m.SearchSeconds, 100*m.FromBest, m.Evaluated, perDevice(r.Devices, m.Placement))
	}
	tw.Flush()
	for _, m := range r.Methods {
		if m.Skipped != "" {
			fmt.Fprintf(w, "%s skipped: %s\n", m.Method, m.Skipped)
		}
		if m.Method == "rl" && m.Skipped == "" {
			fmt.Fprintf(w, "rl: the trained policy's own placement %.3f ms (reported above); the best it sampled while training %.3f ms\n",
				m.PolicyCost*1e3, m.BestSampledCost*1e3)
		}
	}
}

// perDevice counts groups per device ("cpu:2 gpu0:7").
func perDevice(devs []string, placement map[string]string) string {
	count := map[string]int{}
	for _, d := range placement {
		count[d]++
	}
	var parts []string
	for _, d := range append(devs, "mixed") {
		if count[d] > 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", d, count[d]))
		}
	}
	return strings.Join(parts, " ")
}
