package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/internal/errlines"
)

func init() {
	registerStoppable("plan", "schedule a model's layers onto resource types at the lowest cost", runPlan)
}

// planFlags are the options of `heterps plan`.
type planFlags struct {
	problem, model, catalog, profile, saveProblem string
	method, provision, plot                       string
	loadPolicy, savePolicy, trainPolicy           string
	freshPolicy                                   bool
	trainProblems                                 int
	json, compare                                 bool
	opts                                          sched.Options
	spec                                          sched.EstimateSpec
	// sources is where the loaded problem's layer times came from, per
	// type (sched.Plan.Sources): given (--problem), estimated (--catalog),
	// measured (--profile, but for the types its header says it estimated).
	sources map[string]string
	// denseSync is, for a --profile's measured types, the dense_sync
	// whose synchronisation their times include (sched.Plan.DenseSync).
	denseSync map[string]string
}

func parsePlanFlags(args []string, stderr io.Writer) (*planFlags, error) {
	f := &planFlags{spec: sched.DefaultEstimateSpec()}
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.problem, "problem", "", "problem file (TOML: types, prices, per-layer profiles)")
	fs.StringVar(&f.model, "model", "", "instead of --problem: model, zoo name ("+strings.Join(config.ZooNames(), ", ")+") or file")
	fs.StringVar(&f.catalog, "catalog", "", "with --model: resource catalog; layer times are estimated from its device descriptors")
	fs.StringVar(&f.profile, "profile", "", "with --model: a problem `file` written by heterps profile (measured layer times and the profiled catalog's types; not with --catalog)")
	fs.StringVar(&f.saveProblem, "save-problem", "", "with --model: also write the estimated problem to this file")
	fs.IntVar(&f.spec.Batch, "batch", f.spec.Batch, "with --model: batch size B")
	fs.IntVar(&f.spec.ProfileBatch, "profile-batch", f.spec.ProfileBatch, "with --model: batch size B_o of the estimates")
	fs.Float64Var(&f.spec.Limit, "limit", 0, "with --model: throughput limit in samples/s (0: derived from the catalog)")
	fs.Float64Var(&f.spec.Epochs, "epochs", f.spec.Epochs, "with --model: epochs")
	fs.Int64Var(&f.spec.Samples, "samples", f.spec.Samples, "with --model: samples per epoch")
	fs.StringVar(&f.spec.PSType, "ps-type", "", "with --model: type whose price pays parameter-server cores")
	fs.Float64Var(&f.spec.PSRatio, "ps-ratio", 0, "with --model: ps_cores = ceil(ratio * units)")
	fs.StringVar(&f.method, "method", "exact", "scheduling method: "+strings.Join(sched.Methods(), ", "))
	fs.StringVar(&f.provision, "provision", sched.RuleBreakpoints, "provisioning rule: "+strings.Join(sched.Rules(), ", "))
	fs.BoolVar(&f.json, "json", false, "print the plan as JSON (with --compare, an array of plans)")
	fs.BoolVar(&f.compare, "compare", false, "run every method and compare them")
	fs.StringVar(&f.plot, "plot", "", "draw the comparison of every method into this PNG file")
	fs.Uint64Var(&f.opts.Seed, "seed", 1, "seed of the randomised methods")
	fs.IntVar(&f.opts.Budget, "budget", 0, "cost evaluations of bo (at most 400) and genetic, plans sampled by rl (0: their defaults)")
	fs.Int64Var(&f.opts.MaxPlans, "max-plans", sched.DefaultMaxPlans, "bf refuses problems with more assignments")
	fs.StringVar(&f.loadPolicy, "load-policy", "", "rl, rl-rnn: fine-tune the policy in this file (any number of types; same cell)")
	fs.StringVar(&f.savePolicy, "save-policy", "", "rl, rl-rnn: write the trained policy to this file")
	fs.BoolVar(&f.freshPolicy, "fresh-policy", false, "rl: start from a fresh random policy, not the shipped pre-trained one")
	fs.StringVar(&f.trainPolicy, "train-policy", "", "pre-train an rl policy on random problems (seeded by --seed; --budget plans per problem) and write it to this `file`; no problem is planned")
	fs.IntVar(&f.trainProblems, "train-problems", sched.DefaultPretrainProblems, "with --train-policy: random problems to train on")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	f.opts.FreshPolicy = f.freshPolicy
	if f.trainPolicy != "" {
		if f.problem != "" || f.model != "" {
			return nil, errors.New("--train-policy trains on random problems: drop --problem and --model")
		}
		return f, nil
	}
	if (f.problem == "") == (f.model == "") {
		return nil, errors.New("give either --problem FILE or --model M with --catalog C")
	}
	if f.profile != "" && f.catalog != "" {
		return nil, errors.New("--profile and --catalog do not go together: the profile already holds the types and prices of the catalog it was measured on (heterps profile --catalog); drop one")
	}
	if !slices.Contains(sched.Rules(), f.provision) {
		return nil, fmt.Errorf("unknown provisioning rule %q (want one of %s)", f.provision, strings.Join(sched.Rules(), ", "))
	}
	f.opts.Provision = f.provision
	return f, nil
}

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parsePlanFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		errlines.Print(stderr, "heterps plan", err)
		return exitUsage
	}
	if f.trainPolicy != "" {
		return trainPolicy(ctx, f, stderr)
	}
	p, err := f.load(stderr)
	if err != nil {
		errlines.Print(stderr, "heterps plan", err)
		return exitUsage
	}
	if f.compare || f.plot != "" {
		return comparePlans(ctx, f, p, stdout, stderr)
	}
	if err := f.attachPolicy(); err != nil {
		errlines.Print(stderr, "heterps plan", err)
		return exitUsage
	}
	plan, err := sched.Run(ctx, f.method, p, f.opts)
	if err != nil {
		errlines.Print(stderr, "heterps plan", err)
		if errors.Is(err, sched.ErrUnknownMethod) || errors.Is(err, sched.ErrRefused) {
			return exitUsage
		}
		return exitFailure
	}
	plan.Sources, plan.DenseSync = f.sources, f.denseSync
	if err := f.writePolicy(); err != nil {
		errlines.Print(stderr, "heterps plan", err)
		return exitFailure
	}
	if f.json {
		writeJSON(stdout, plan)
	} else {
		printPlan(stdout, p, plan)
	}
	if !plan.Feasible {
		fmt.Fprintln(stderr, "heterps plan: infeasible:", plan.Reason)
		return exitInfeasible
	}
	return exitOK
}

// load reads the problem file, or estimates a problem from a model and a
// catalog, and sets f.sources.
func (f *planFlags) load(stderr io.Writer) (*sched.Problem, error) {
	if f.problem != "" {
		c, err := config.LoadProblem(f.problem)
		if err != nil {
			return nil, err
		}
		p, err := sched.NewProblem(c)
		if err == nil {
			f.sources = sched.AllSources(p, sched.SourceGiven)
		}
		return p, err
	}
	if f.profile != "" {
		return f.loadProfile()
	}
	if f.catalog == "" {
		return nil, errors.New("--model needs --catalog")
	}
	m, err := config.LoadModel(f.model)
	if err != nil {
		return nil, err
	}
	cat, err := config.LoadCatalog(f.catalog)
	if err != nil {
		return nil, err
	}
	spec := f.spec
	spec.Whole = m.HasTowers()
	c, err := sched.EstimateProblem(m.Shapes(), cat, spec)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "heterps plan: layer times of %s are roofline estimates from the device descriptors of %s, not measurements\n", m.Name, f.catalog)
	if spec.Whole {
		fmt.Fprintf(stderr, "heterps plan: %s has towers, which run only as a whole: its layers are planned as one (as heterps run does)\n", m.Name)
	}
	if f.saveProblem != "" {
		out, err := c.MarshalTOML()
		if err == nil {
			err = writeWhole(f.saveProblem, out)
		}
		if err != nil {
			return nil, fmt.Errorf("--save-problem: %w", err)
		}
	}
	p, err := sched.NewProblem(c)
	if err == nil {
		f.sources = sched.AllSources(p, sched.SourceEstimated)
	}
	return p, err
}

// loadProfile reads a problem file written by `heterps profile` and checks
// that it profiles the model's layers.
func (f *planFlags) loadProfile() (*sched.Problem, error) {
	c, estimated, err := config.LoadProfile(f.profile)
	if err != nil {
		return nil, err
	}
	if f.model != "" {
		m, err := config.LoadModel(f.model)
		if err != nil {
			return nil, err
		}
		shapes := m.Shapes()
		if len(shapes) != len(c.Layers) {
			return nil, fmt.Errorf("--profile %s has %d layers, model %s has %d", f.profile, len(c.Layers), m.Name, len(shapes))
		}
		for i, s := range shapes {
			if c.Layers[i].Name != s.Name {
				return nil, fmt.Errorf("--profile %s: layer %d is %q, model %s has %q", f.profile, i, c.Layers[i].Name, m.Name, s.Name)
			}
		}
	}
	p, err := sched.NewProblem(c)
	if err != nil {
		return nil, err
	}
	f.sources = sched.AllSources(p, sched.SourceMeasured)
	for _, t := range estimated {
		if _, ok := f.sources[t]; ok {
			f.sources[t] = sched.SourceEstimated
		}
	}
	f.denseSync = sched.MeasuredDenseSync(c, f.sources)
	return p, nil
}

// attachPolicy gives rl a policy to start from and to leave its trained
// policy in, as the flags ask.
func (f *planFlags) attachPolicy() error {
	if f.loadPolicy == "" && f.savePolicy == "" {
		return nil
	}
	if f.compare || !strings.HasPrefix(f.method, "rl") {
		return errors.New("--load-policy and --save-policy apply to a single rl or rl-rnn run")
	}
	f.opts.Policy = &sched.Policy{}
	if f.loadPolicy == "" {
		return nil
	}
	src, err := config.ReadFile(f.loadPolicy) // a regular file of at most 1 MiB (the shipped policy is 104 KB)
	if err != nil {
		return fmt.Errorf("--load-policy: %w", err)
	}
	pol, err := sched.LoadPolicy(bytes.NewReader(src))
	if err != nil {
		return fmt.Errorf("--load-policy %s: %w", f.loadPolicy, err)
	}
	f.opts.Policy = pol
	return nil
}

// trainPolicy pre-trains a policy as --train-policy asks and writes it.
func trainPolicy(ctx context.Context, f *planFlags, stderr io.Writer) int {
	pol, err := sched.Pretrain(ctx, sched.PretrainOptions{Seed: f.opts.Seed, Problems: f.trainProblems, Budget: f.opts.Budget, Progress: stderr})
	if err != nil {
		errlines.Print(stderr, "heterps plan", err)
		return exitFailure
	}
	if err := savePolicyFile(pol, f.trainPolicy); err != nil {
		fmt.Fprintf(stderr, "heterps plan: --train-policy: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// savePolicyFile writes pol to path whole (writeWhole): the file it
// replaces may be the shipped policy.
func savePolicyFile(pol *sched.Policy, path string) error {
	return ckpt.WriteAtomic(path, pol.Save)
}

func (f *planFlags) writePolicy() error {
	if f.savePolicy == "" {
		return nil
	}
	if err := savePolicyFile(f.opts.Policy, f.savePolicy); err != nil {
		return fmt.Errorf("--save-policy: %w", err)
	}
	return nil
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // plans hold only finite numbers and strings
}

// printPlan prints a plan as a table of stages, then how the other
// provisioning rules would equip the same assignment.
func printPlan(w io.Writer, p *sched.Problem, plan *sched.Plan) {
	fmt.Fprintf(w, "method %s: ", plan.Method)
	if !plan.Feasible {
		fmt.Fprintf(w, "infeasible: %s\n", plan.Reason)
		return
	}
	fmt.Fprintf(w, "cost %.6g, throughput %.6g samples/s (limit %.6g), time %.6g s, scheduled in %.3g s\n",
		plan.Cost, plan.Throughput, p.ThroughputLimit, plan.TimeS, plan.SchedSeconds)
	if line := sourcesLine(plan.Sources, plan.DenseSync); strings.Contains(line, sched.SourceMeasured) {
		fmt.Fprintf(w, "layer times: %s\n", line)
	}
	printDecision(w, plan)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tlayers\ttype\tunits\tthroughput\tcost share\t")
	hourly, units := hourlyPrice(p, plan), 0
	for i, s := range plan.Stages {
		share := costShare(price(p, s.Type)*float64(s.Units), hourly)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%.6g\t%s\t\n", i, layerRange(p, s), s.Type, s.Units, s.Throughput, share)
		units += s.Units
	}
	if plan.PSCores > 0 {
		share := costShare(price(p, plan.PSType)*float64(plan.PSCores), hourly)
		fmt.Fprintf(tw, "ps\t\t%s\t%d\t\t%s\t\n", plan.PSType, plan.PSCores, share)
	}
	fmt.Fprintf(tw, "total\t\t\t%d\t%.6g\t%s\t\n", units+plan.PSCores, plan.Throughput, totalShare(hourly))
	tw.Flush()
	printProvisionings(w, p, plan)
}

// printDecision says, for a learned method, what the trained policy itself
// decided and what the best plan it sampled cost, and which one the plan is.
func printDecision(w io.Writer, plan *sched.Plan) {
	if plan.Decision == "" {
		return
	}
	fmt.Fprintf(w, "the policy's own decision costs %s, the best plan sampled in training %s; this plan is the %s\n",
		costOrInfeasible(plan.PolicyCost), costOrInfeasible(plan.BestSampledCost), plan.Decision)
}

func costOrInfeasible(c float64) string {
	if c == 0 {
		return "infeasible"
	}
	return fmt.Sprintf("%.6g", c)
}

// printProvisionings compares the provisioning rules on the plan's assignment.
func printProvisionings(w io.Writer, p *sched.Problem, plan *sched.Plan) {
	assign := make([]int, len(plan.Assign))
	for l, name := range plan.Assign {
		assign[l], _ = p.TypeIndex(name)
	}
	all, err := p.ProvisionAll(assign)
	if err != nil {
		return
	}
	fmt.Fprintln(w, "\nprovisioning rules on this assignment:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rule\tcost\tvs plan\tthroughput\tunits per stage\tps cores")
	for _, pr := range all {
		if !pr.Feasible {
			fmt.Fprintf(tw, "%s\tinfeasible: %s\n", pr.Rule, pr.Reason)
			continue
		}
		units := make([]string, len(pr.Segments))
		for i, s := range pr.Segments {
			units[i] = fmt.Sprint(s.Units)
		}
		fmt.Fprintf(tw, "%s\t%.6g\t%s\t%.6g\t%s\t%d\n", pr.Rule, pr.Cost, ratio(pr.Cost, plan.Cost), pr.Throughput, strings.Join(units, ","), pr.PSCores)
	}
	tw.Flush()
}

func layerRange(p *sched.Problem, s sched.Stage) string {
	if s.First == s.Last {
		return fmt.Sprintf("%d %s", s.First, p.Layers[s.First].Name)
	}
	return fmt.Sprintf("%d-%d %s..%s", s.First, s.Last, p.Layers[s.First].Name, p.Layers[s.Last].Name)
}

// costShare is part's share of the hourly price as a percentage, or "-"
// when everything is free (price = 0), where a share means nothing.
func costShare(part, hourly float64) string {
	if hourly <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*part/hourly)
}

// ratio is a/b to 4 decimals, or "-" when b is 0 (free resources).
func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.4f", a/b)
}

// relCost is cost/best for the plot, 1 when every plan is free.
func relCost(cost, best float64) float64 {
	if best == 0 {
		return 1
	}
	return cost / best
}

func totalShare(hourly float64) string {
	if hourly <= 0 {
		return "-"
	}
	return "100%"
}

func price(p *sched.Problem, typ string) float64 {
	t, _ := p.TypeIndex(typ)
	return p.Types[t].Price
}

func hourlyPrice(p *sched.Problem, plan *sched.Plan) float64 {
	h := 0.0
	for _, s := range plan.Stages {
		h += price(p, s.Type) * float64(s.Units)
	}
	if plan.PSCores > 0 {
		h += price(p, plan.PSType) * float64(plan.PSCores)
	}
	return h
}

// methodOrder lists the methods in the order comparisons show them; methods
// registered later (rl, rl-rnn) follow.
var methodOrder = []string{"exact", "bf", "rl", "rl-rnn", "bo", "genetic", "greedy", "heuristic", "gpu", "cpu"}

func comparedMethods() []string {
	var names []string
	for _, m := range methodOrder {
		if slices.Contains(sched.Methods(), m) {
			names = append(names, m)
		}
	}
	for _, m := range sched.Methods() {
		if !slices.Contains(names, m) {
			names = append(names, m)
		}
	}
	return names
}

// comparePlans runs every method, prints one row each and draws them.
func comparePlans(ctx context.Context, f *planFlags, p *sched.Problem, stdout, stderr io.Writer) int {
	var plans []*sched.Plan
	for _, m := range comparedMethods() {
		plan, err := sched.Run(ctx, m, p, f.opts)
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "heterps plan:", ctx.Err())
			return exitFailure
		}
		if err != nil {
			plan = &sched.Plan{Method: m, Reason: err.Error(), Assign: []string{}, Stages: []sched.Stage{}}
		}
		plan.Sources, plan.DenseSync = f.sources, f.denseSync
		plans = append(plans, plan)
	}
	best := math.Inf(1)
	for _, pl := range plans {
		if pl.Feasible {
			best = math.Min(best, pl.Cost)
		}
	}
	if f.json {
		writeJSON(stdout, plans)
	} else {
		printComparison(stdout, p, plans, best)
	}
	if f.plot != "" {
		if err := plotComparison(f.plot, f.problemName(), plans, best); err != nil {
			fmt.Fprintln(stderr, "heterps plan: --plot:", err)
			return exitFailure
		}
	}
	if math.IsInf(best, 1) {
		fmt.Fprintln(stderr, "heterps plan: infeasible: no method found a feasible plan")
		return exitInfeasible
	}
	return exitOK
}

func (f *planFlags) problemName() string {
	if f.problem != "" {
		return f.problem
	}
	return f.model + " on " + f.catalog
}

func printComparison(w io.Writer, p *sched.Problem, plans []*sched.Plan, best float64) {
	fmt.Fprintf(w, "%d layers, %d types, throughput limit %.6g samples/s\n\n", len(p.Layers), len(p.Types), p.ThroughputLimit)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "method\tcost\tvs best\tthroughput\tstages\tsched s\tnote")
	for _, pl := range plans {
		if !pl.Feasible {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%.3g\t%s\n", pl.Method, pl.SchedSeconds, pl.Reason)
			continue
		}
		fmt.Fprintf(tw, "%s\t%.6g\t%s\t%.6g\t%d\t%.3g\t\n", pl.Method, pl.Cost, ratio(pl.Cost, best), pl.Throughput, len(pl.Stages), pl.SchedSeconds)
	}
	tw.Flush()
}

// plotComparison draws two bar charts into a PNG: each feasible method's
// cost relative to the best, and its scheduling time.
func plotComparison(path, title string, plans []*sched.Plan, best float64) error {
	var names []string
	var rel, secs plotter.Values
	for _, pl := range plans {
		if pl.Feasible {
			names = append(names, pl.Method)
			rel = append(rel, relCost(pl.Cost, best))
			secs = append(secs, math.Max(pl.SchedSeconds, 1e-6))
		}
	}
	if len(names) == 0 {
		return errors.New("no feasible plan to draw")
	}
	costPlot, err := barChart(title, "cost / best", names, rel, false)
	if err != nil {
		return err
	}
	timePlot, err := barChart("", "scheduling time (s)", names, secs, true)
	if err != nil {
		return err
	}
	const width, height = 8 * vg.Inch, 7 * vg.Inch
	img := vgimg.New(width, height)
	dc := draw.New(img)
	plots := [][]*plot.Plot{{costPlot}, {timePlot}}
	canvases := plot.Align(plots, draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Centimeter}, dc)
	for row := range plots {
		plots[row][0].Draw(canvases[row][0])
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	png := vgimg.PngCanvas{Canvas: img}
	if _, err := png.WriteTo(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func barChart(title, ylabel string, names []string, values plotter.Values, logScale bool) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = title
	pl.Y.Label.Text = ylabel
	var floor *plotter.BarChart
	if logScale { // bars must start above zero: stack them on an unseen floor
		lowest := slices.Min(values) / 2
		floorValues := make(plotter.Values, len(values))
		shifted := make(plotter.Values, len(values))
		for i, v := range values {
			floorValues[i], shifted[i] = lowest, v-lowest
		}
		f, err := plotter.NewBarChart(floorValues, vg.Points(18))
		if err != nil {
			return nil, err
		}
		floor, values = f, shifted
	}
	bars, err := plotter.NewBarChart(values, vg.Points(18))
	if err != nil {
		return nil, err
	}
	if floor != nil {
		bars.StackOn(floor)
	}
	bars.Color = plotter.DefaultLineStyle.Color
	pl.Add(bars)
	pl.NominalX(names...)
	if logScale {
		pl.Y.Scale = plot.LogScale{}
		pl.Y.Tick.Marker = plot.LogTicks{Prec: 1}
	} else {
		pl.Y.Min = 0
	}
	return pl, nil
}
