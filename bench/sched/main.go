// Command sched benchmarks the scheduling methods on synthetic problems:
// ctrdnn-like models (8 to 20 layers) on catalogs of 1 to 64 resource types,
// CPU cores plus one reference GPU at different speeds and prices, with
// layer times estimated from the device descriptors (roofline).
//
// Table 1 gives each method's cost relative to exact and its scheduling
// time (for rl and rl-rnn also the trained policy's own decision and the best
// plan sampled in training, of which the plan is the cheaper); Table 2 sets brute force against exact on the sizes brute force can
// finish, as in Table 2 of the HeterPS paper; Table 3 compares the
// provisioning rules on the exact plan's assignment. Nothing is asserted:
// the numbers are measured in this run.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heterps/heterps/bench/internal/header"
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/native"
)

var (
	typeCounts  = []int{1, 2, 4, 8, 16, 32, 64}
	layerCounts = []int{8, 12, 16, 20}
	// methodsCompared are the Table 1 columns besides exact; learned methods
	// join when registered.
	methodsCompared = []string{"rl", "rl-rnn", "bo", "genetic", "greedy", "heuristic", "gpu", "cpu"}
)

func main() {
	native.FixOpenBLASCore() // the vector GEMM kernels, as heterps and heterpsd run them
	seed := flag.Uint64("seed", 1, "seed of the catalogs and of the randomised methods")
	psRatio := flag.Float64("ps-ratio", 0.1, "parameter-server cores per unit (priced as CPU cores)")
	outPath := flag.String("out", "", header.OutUsage)
	only := flag.String("methods", "", "comma-separated methods of Tables 1 and 1b (default: all); exact always runs")
	tables := flag.String("tables", "1,1b,2,3", "comma-separated tables to run")
	flag.Parse()
	if *only != "" {
		methodsCompared = strings.Split(*only, ",")
	}
	run := func(name string) bool { return slices.Contains(strings.Split(*tables, ","), name) }
	res, err := header.Begin(*outPath, header.Collect("bench/sched"))
	if err != nil {
		fail(err)
	}
	output = res
	start := time.Now()
	fmt.Fprintf(output, "heterps scheduling benchmark: Go %s, %d CPUs, seed %d, ps_ratio %g\n", runtime.Version(), runtime.NumCPU(), *seed, *psRatio)
	fmt.Fprintln(output, "Problems: ctrdnn-like models on synthetic catalogs, those of `heterps catalog synth --types N --seed S --problem")
	fmt.Fprintln(output, "--layers L` with ps_type = \"cpu\" and the ps_ratio above; layer times estimated from device descriptors, not")
	fmt.Fprintln(output, "measured. Costs are relative to exact (1.000 = optimal).")
	if *only != "" || *tables != "1,1b,2,3" {
		fmt.Fprintf(output, "A partial run: tables %s, methods %s.\n", *tables, strings.Join(registered(), ","))
	}
	b := bench{seed: *seed, psRatio: *psRatio}
	for _, t := range []struct {
		name string
		run  func() error
	}{{"1", b.table1}, {"1b", b.zooTable}, {"2", b.table2}, {"3", b.table3}} {
		if !run(t.name) {
			continue
		}
		if err := t.run(); err != nil {
			fail(err)
		}
	}
	fmt.Fprintf(output, "\ntotal %.1f s\n", time.Since(start).Seconds())
	if err := res.Close(); err != nil {
		fail(err)
	}
}

// output is where the tables go: stdout, and the results file with --out.
var output io.Writer = os.Stdout

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/sched:", err)
	os.Exit(1)
}

type bench struct {
	seed    uint64
	psRatio float64
}

func (b bench) problem(types, layers int) (*sched.Problem, error) {
	shapes, err := sched.CTRDNNShapes(layers)
	if err != nil {
		return nil, err
	}
	return b.problemOf(types, shapes)
}

func (b bench) problemOf(types int, shapes []config.LayerShape) (*sched.Problem, error) {
	cat, err := sched.SynthCatalog(types, b.seed)
	if err != nil {
		return nil, err
	}
	spec := sched.DefaultEstimateSpec()
	spec.PSType, spec.PSRatio = "cpu", b.psRatio
	c, err := sched.EstimateProblem(shapes, cat, spec)
	if err != nil {
		return nil, err
	}
	return sched.NewProblem(c)
}

func (b bench) run(method string, p *sched.Problem) (*sched.Plan, error) {
	return sched.Run(context.Background(), method, p, sched.Options{Seed: b.seed})
}

func registered() []string {
	var ms []string
	for _, m := range methodsCompared {
		if slices.Contains(sched.Methods(), m) {
			ms = append(ms, m)
		}
	}
	return ms
}

// table1: every method against exact, per number of types and layers.
func (b bench) table1() error {
	methods := registered()
	fmt.Fprintf(output, "\nTable 1: cost relative to exact / scheduling time, per method (inf: no feasible plan)\n\n")
	w := tabwriter.NewWriter(output, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "types\tlayers\texact cost\texact time\t")
	methodHeader(w, methods)
	rows := [][2]int{}
	for _, t := range typeCounts {
		for _, l := range layerCounts {
			rows = append(rows, [2]int{t, l})
		}
	}
	rows = append(rows, [2]int{64, 64})
	for _, row := range rows {
		p, err := b.problem(row[0], row[1])
		if err != nil {
			return err
		}
		skip := func(m string) bool { return row[1] == 64 && m == "rl-rnn" } // bounds the run time
		if err := b.methodRow(w, fmt.Sprintf("%d\t%d", row[0], row[1]), p, methods, skip); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(output, "(rl-rnn is left out of the 64 x 64 row to bound the benchmark's run time)")
	return nil
}

// learned methods report their policy's own decision and their best sample.
func learned(m string) bool { return m == "rl" || m == "rl-rnn" }

func methodHeader(w *tabwriter.Writer, methods []string) {
	for _, m := range methods {
		if learned(m) {
			fmt.Fprintf(w, "%s\t%s policy\t%s sampled\t\t", m, m, m)
			continue
		}
		fmt.Fprintf(w, "%s\t\t", m)
	}
	fmt.Fprintln(w)
}

// decision is a learned plan's policy and best-sample costs relative to ref.
func decision(p, ref *sched.Plan) string {
	rel := func(c float64) string {
		switch {
		case c == 0:
			return "inf"
		case !ref.Feasible:
			return "-"
		}
		return fmt.Sprintf("%.3f", c/ref.Cost)
	}
	return rel(p.PolicyCost) + "\t" + rel(p.BestSampledCost)
}

// methodRow prints exact's cost and time, then every method's cost
// relative to exact and its time (skipped methods print "-").
func (b bench) methodRow(w *tabwriter.Writer, label string, p *sched.Problem, methods []string, skip func(string) bool) error {
	ex, err := b.run("exact", p)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t", label, cost(ex), seconds(ex.SchedSeconds))
	for _, m := range methods {
		if skip(m) {
			fmt.Fprint(w, "-\t-\t")
			if learned(m) {
				fmt.Fprint(w, "-\t-\t")
			}
			continue
		}
		pl, err := b.run(m, p)
		if err != nil {
			return err
		}
		if learned(m) {
			fmt.Fprintf(w, "%s\t%s\t%s\t", relative(pl, ex), decision(pl, ex), seconds(pl.SchedSeconds))
			continue
		}
		fmt.Fprintf(w, "%s\t%s\t", relative(pl, ex), seconds(pl.SchedSeconds))
	}
	fmt.Fprintln(w)
	return nil
}

// zooTable: every method against exact on the zoo models' own layers.
func (b bench) zooTable() error {
	methods := registered()
	fmt.Fprintf(output, "\nTable 1b: the zoo models' layers (config/examples/models), cost relative to exact / scheduling time\n")
	fmt.Fprintf(output, "(rl-rnn left out to bound the run time; matchnet's towers are scheduled as one layer sequence)\n\n")
	w := tabwriter.NewWriter(output, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "model\ttypes\texact cost\texact time\t")
	methodHeader(w, methods)
	for _, name := range []string{"ctrdnn", "matchnet", "2emb", "nce"} {
		m, err := config.LoadModel(name)
		if err != nil {
			return err
		}
		for _, t := range typeCounts {
			p, err := b.problemOf(t, m.Shapes())
			if err != nil {
				return err
			}
			skip := func(m string) bool { return m == "rl-rnn" }
			if err := b.methodRow(w, fmt.Sprintf("%s\t%d", name, t), p, methods, skip); err != nil {
				return err
			}
		}
	}
	return w.Flush()
}

// table2: brute force against rl and exact where brute force finishes.
func (b bench) table2() error {
	fmt.Fprintf(output, "\nTable 2: brute force vs rl and exact on ctrdnn-like models (costs relative to bf). bf enumerates every\n")
	fmt.Fprintf(output, "assignment and provisions it by the breakpoint rule, cutting an assignment's unit walk short once a lower\n")
	fmt.Fprintf(output, "bound shows it cannot beat the best so far.\n\n")
	w := tabwriter.NewWriter(output, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "types\tlayers\tassignments\tbf time\tbf cost\trl time\trl cost\trl policy\trl sampled\texact time\texact cost\tbf/exact time\t")
	for _, row := range [][2]int{{2, 8}, {2, 12}, {2, 16}, {2, 20}, {3, 8}, {3, 12}, {4, 8}, {4, 12}} {
		p, err := b.problem(row[0], row[1])
		if err != nil {
			return err
		}
		bf, err := sched.Run(context.Background(), "bf", p, sched.Options{MaxPlans: 1 << 25})
		if err != nil {
			return err
		}
		ex, err := b.run("exact", p)
		if err != nil {
			return err
		}
		rl := &sched.Plan{}
		if slices.Contains(sched.Methods(), "rl") {
			if rl, err = b.run("rl", p); err != nil {
				return err
			}
		}
		fmt.Fprintf(w, "%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0fx\t\n", row[0], row[1], bf.Evaluations,
			seconds(bf.SchedSeconds), cost(bf), seconds(rl.SchedSeconds), relative(rl, bf), decision(rl, bf),
			seconds(ex.SchedSeconds), relative(ex, bf), bf.SchedSeconds/ex.SchedSeconds)
	}
	return w.Flush()
}

// table3: the provisioning rules on the exact plan's assignment.
func (b bench) table3() error {
	fmt.Fprintf(output, "\nTable 3: provisioning rules on exact's assignment, cost relative to the breakpoint rule (optimal for it)\n\n")
	w := tabwriter.NewWriter(output, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "types\tlayers\tstages\t")
	for _, r := range sched.Rules() {
		fmt.Fprintf(w, "%s\t", r)
	}
	fmt.Fprintln(w)
	for _, t := range []int{2, 8, 64} {
		for _, l := range []int{8, 20} {
			p, err := b.problem(t, l)
			if err != nil {
				return err
			}
			ex, err := b.run("exact", p)
			if err != nil || !ex.Feasible {
				return fmt.Errorf("exact on %d types x %d layers: %v %s", t, l, err, ex.Reason)
			}
			assign := make([]int, len(ex.Assign))
			for i, name := range ex.Assign {
				assign[i], _ = p.TypeIndex(name)
			}
			all, err := p.ProvisionAll(assign)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%d\t%d\t%d\t", t, l, len(ex.Stages))
			for _, pr := range all {
				if pr.Feasible {
					fmt.Fprintf(w, "%.3f\t", pr.Cost/all[0].Cost)
				} else {
					fmt.Fprint(w, "inf\t")
				}
			}
			fmt.Fprintln(w)
		}
	}
	return w.Flush()
}

func cost(p *sched.Plan) string {
	if !p.Feasible {
		return "inf"
	}
	return fmt.Sprintf("%.4g", p.Cost)
}

func relative(p, ref *sched.Plan) string {
	switch {
	case !p.Feasible:
		return "inf"
	case !ref.Feasible:
		return "-"
	}
	return fmt.Sprintf("%.3f", p.Cost/ref.Cost)
}

func seconds(s float64) string {
	switch {
	case s < 1e-3:
		return fmt.Sprintf("%.0fus", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.1fms", s*1e3)
	}
	return fmt.Sprintf("%.2fs", s)
}
