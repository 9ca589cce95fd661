// Command profile checks the cost model against measurement on loopback:
// it profiles this machine with `heterps profile` (layers, activations, and
// the synchronisation of the chosen dense_sync folded in), then runs ctrdnn
// with `heterps run` (a coordinator and one heterpsd process per node, built
// from this tree) on 1, 2 and 4 nodes of one unit each, each job planned
// from the profile (job file `profile = ...`, a throughput floor making
// the exact plan use n units; each job run --runs times, the median kept,
// as the profile keeps the median of its rounds), and prints every stage's
// measured throughput over the profile's prediction (target 0.8-1.2) beside the
// same stage's measured throughput over the prediction of the catalog's
// roofline (what the coordinator plans on without a profile). With auto the
// profile measures both methods and folds the faster, and the jobs
// (dense_sync = "auto") sync as it says; the table shows how each stage
// synced.
//
//	go run ./bench/profile [--steps 200] [--runs 3] [--batch 512] [--nodes 1,2,4] [--dense-sync ps,allreduce,auto] [--out bench/results/profile.txt]
//
// Run it from the repository root.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/heterps/heterps/bench/internal/header"
	"github.com/heterps/heterps/bench/internal/heterpsbin"
	"github.com/heterps/heterps/bench/internal/planlimit"
	"github.com/heterps/heterps/bench/internal/stats"
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/coord"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/native"
)

const (
	modelName = "ctrdnn"
	dataSpec  = "synthetic:1"
)

type options struct {
	steps, batch, syncSteps int
	runs                    int
	nodes                   []int
	denseSync               []string
	catalog, unit           string
	timeout                 time.Duration
}

func main() {
	native.FixOpenBLASCore() // the vector GEMM kernels, as heterps and heterpsd run them
	var o options
	flag.IntVar(&o.steps, "steps", 200, "training steps of every job")
	flag.IntVar(&o.batch, "batch", 512, "the jobs' batch, and the profile's B_o")
	flag.IntVar(&o.syncSteps, "sync-steps", 200, "heterps profile --sync-steps")
	flag.IntVar(&o.runs, "runs", 3, "runs of every job; each stage's median measured throughput is compared")
	nodes := flag.String("nodes", "1,2,4", "comma-separated node counts")
	sync := flag.String("dense-sync", "ps,allreduce,auto", "comma-separated dense_sync methods (ps, allreduce, auto): a profile and a run per node count each")
	flag.StringVar(&o.catalog, "catalog", "config/examples/catalogs/local.toml", "catalog whose --unit type the nodes offer")
	flag.StringVar(&o.unit, "unit", "cpu-1t", "the catalog type each node offers one unit of")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up on a run after this long")
	outPath := flag.String("out", "", header.OutUsage)
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := parseLists(&o, *nodes, *sync)
	var res *header.Results
	if err == nil {
		res, err = header.Begin(*outPath, header.Collect("bench/profile"))
	}
	if err == nil {
		err = run(ctx, o, res)
	}
	if err == nil {
		err = res.Close()
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/profile:", err)
		os.Exit(1)
	}
}

func parseLists(o *options, nodes, sync string) error {
	for s := range strings.SplitSeq(nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("--nodes %q: want a comma-separated list of integers >= 1", nodes)
		}
		o.nodes = append(o.nodes, n)
	}
	for s := range strings.SplitSeq(sync, ",") {
		switch s = strings.TrimSpace(s); s {
		case config.DenseSyncPS, config.DenseSyncAllreduce, config.DenseSyncAuto:
			o.denseSync = append(o.denseSync, s)
		default:
			return fmt.Errorf("--dense-sync %q: %q is not ps, allreduce or auto", sync, s)
		}
	}
	if o.steps < 2 || o.batch < slices.Max(o.nodes) || o.runs < 1 {
		return fmt.Errorf("--steps %d, --batch %d, --runs %d: want >= 2 steps, a row per node and a run", o.steps, o.batch, o.runs)
	}
	return nil
}

func run(ctx context.Context, o options, w io.Writer) error {
	base, err := config.LoadCatalog(o.catalog)
	if err != nil {
		return err
	}
	unit, ok := base.Type(o.unit)
	if !ok {
		return fmt.Errorf("%s has no type %s", o.catalog, o.unit)
	}
	model, err := config.LoadModel(modelName)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-profile-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	t, err := buildTools(ctx, dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "bench/profile: %s on %s, batch %d, %d steps, BSP, one-unit %s nodes (heterps run: a coordinator and one heterpsd process per node); %s\n",
		modelName, dataSpec, o.batch, o.steps, unit.Name, time.Now().UTC().Format(time.RFC3339))
	for _, sync := range o.denseSync {
		if err := syncBlock(ctx, o, t, dir, unit, model, sync, w); err != nil {
			return fmt.Errorf("dense_sync %s: %w", sync, err)
		}
	}
	return nil
}

// syncBlock profiles for one dense_sync method and runs the jobs planned
// on that profile.
func syncBlock(ctx context.Context, o options, t tools, dir string, unit config.CatalogType, model *config.Model, sync string, w io.Writer) error {
	units := slices.Clone(o.nodes)
	if !slices.Contains(units, 1) {
		units = append(units, 1)
	}
	slices.Sort(units)
	profCat, err := catalogFile(dir, "profile", benchCatalog(unit, slices.Max(units)))
	if err != nil {
		return err
	}
	prof := filepath.Join(dir, "profile-"+sync+".toml")
	fmt.Fprintf(w, "\n== dense_sync %s\n", sync)
	args := []string{"profile", "--model", modelName, "--catalog", profCat, "--type", unit.Name, "--unit-threads", "1",
		"--units", joinInts(units), "--batch", strconv.Itoa(o.batch), "--dense-sync", sync, "--data", dataSpec,
		"--sync-steps", strconv.Itoa(o.syncSteps), "--out", prof}
	fmt.Fprintf(w, "heterps %s\n", strings.Join(args, " "))
	out, err := exec.CommandContext(ctx, t.Heterps, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("heterps profile: %w\n%s", err, out)
	}
	w.Write(out)
	fmt.Fprintf(w, "samples/s of each stage, measured over the job (the median of %d runs, all listed), and predicted by the profile and by the catalog's roofline for the same stage\n", o.runs)
	fmt.Fprintf(w, "(* the profile's plan would take fewer units, none faster: the run is pinned to n units by the catalog's plan)\n")
	fmt.Fprintf(w, "%5s  %-5s  %5s  %7s  %9s  %10s  %11s  %6s  %10s  %6s\n", "nodes", "stage", "units", "type", "synced", "measured", "profile", "m/p", "catalog", "m/p")
	for _, n := range o.nodes {
		if err := nodesRun(ctx, o, t, dir, unit, model, sync, prof, n, w); err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
	}
	return nil
}

// nodesRun runs the job on n nodes planned from the profile and prints
// its stages' ratios against the profile and the catalog. When no
// throughput floor makes the profile's exact plan use n units (the profile
// says more units are no faster, so the planner rightly takes fewer), the
// job is pinned to n units by the catalog's floor instead, without the
// profile, and the profile's prediction for the placed stages is computed
// here from the profile's problem; such lines are marked *.
func nodesRun(ctx context.Context, o options, t tools, dir string, unit config.CatalogType, model *config.Model, sync, prof string, n int, w io.Writer) error {
	cat := benchCatalog(unit, n)
	planProf, mark := prof, ""
	limit, err := floorFor(ctx, cat, model, jobTOML(n, o.batch, o.steps, 0, sync, prof), n)
	if errors.Is(err, planlimit.ErrNoFloor) {
		planProf, mark = "", "*"
		// Planned without the profile, auto would not sync as the profile
		// folded: the job is told the profile's method instead.
		if sync, err = foldedSync(prof, unit.Name, sync); err != nil {
			return err
		}
		limit, err = floorFor(ctx, cat, model, jobTOML(n, o.batch, o.steps, 0, sync, ""), n)
	}
	if err != nil {
		return err
	}
	catPath, err := catalogFile(dir, fmt.Sprintf("run-%d", n), cat)
	if err != nil {
		return err
	}
	jobPath := filepath.Join(dir, fmt.Sprintf("job-%s-%d.toml", sync, n))
	r, runs, err := t.runMedian(ctx, o, catPath, jobPath, jobTOML(n, o.batch, o.steps, limit, sync, planProf))
	if err != nil {
		return err
	}
	roofline, err := problemOf(cat, model, jobTOML(n, o.batch, o.steps, limit, sync, ""))
	if err != nil {
		return err
	}
	measured, err := problemOf(cat, model, jobTOML(n, o.batch, o.steps, 1, sync, prof))
	if err != nil {
		return err
	}
	for i, st := range r.Stages {
		seg := func(p *sched.Problem) sched.Segment {
			ty, _ := p.TypeIndex(st.Type)
			return sched.Segment{First: st.FirstLayer, Last: st.LastLayer, Type: ty, Units: st.Units}
		}
		catX, profX := roofline.StageThroughput(seg(roofline)), measured.StageThroughput(seg(measured))
		fmt.Fprintf(w, "%5d  %-5d  %5d  %7s  %9s  %10.0f  %10.0f%1s  %6.3f  %10.0f  %6.3f  runs %s\n", n, st.Stage, st.Units, st.Type,
			st.DenseSync, st.MeasuredThroughput, profX, mark, st.MeasuredThroughput/profX, catX, st.MeasuredThroughput/catX, runs[i])
		if mark == "" && math.Abs(profX-st.PredictedThroughput) > 1e-6*profX {
			return fmt.Errorf("stage %d: the coordinator predicted %g samples/s, the profile gives %g", st.Stage, st.PredictedThroughput, profX)
		}
	}
	return nil
}

// runMedian runs the job o.runs times and returns the first run's result
// with each stage's measured throughput replaced by its median over the
// runs, and each stage's runs, listed.
func (t tools) runMedian(ctx context.Context, o options, catPath, jobPath string, job []byte) (*heterpsbin.Result, []string, error) {
	var results []*heterpsbin.Result
	for range o.runs {
		rctx, cancel := context.WithTimeout(ctx, o.timeout)
		r, err := t.run(rctx, catPath, jobPath, job)
		cancel()
		if err != nil {
			return nil, nil, err
		}
		if len(results) > 0 && len(r.Stages) != len(results[0].Stages) {
			return nil, nil, fmt.Errorf("%s: run %d has %d stages, run 1 %d", jobPath, len(results)+1, len(r.Stages), len(results[0].Stages))
		}
		results = append(results, r)
	}
	r, runs := medianStages(results)
	return r, runs, nil
}

// medianStages is results[0] with each stage's measured throughput the
// median over results, and each stage's throughputs in run order.
func medianStages(results []*heterpsbin.Result) (*heterpsbin.Result, []string) {
	first := *results[0]
	first.Stages = slices.Clone(first.Stages)
	runs := make([]string, len(first.Stages))
	for i := range first.Stages {
		var xs []float64
		for _, r := range results {
			xs = append(xs, r.Stages[i].MeasuredThroughput)
		}
		runs[i] = stats.Rates(xs)
		first.Stages[i].MeasuredThroughput = stats.Median(xs)
	}
	return &first, runs
}

// foldedSync is the dense_sync the profile at path folded for type typ
// when asked is auto, else asked.
func foldedSync(path, typ, asked string) (string, error) {
	if asked != config.DenseSyncAuto {
		return asked, nil
	}
	p, err := config.LoadProblem(path)
	if err != nil {
		return "", err
	}
	for _, t := range p.Types {
		if t.Name == typ && t.DenseSync != "" {
			return t.DenseSync, nil
		}
	}
	return "", fmt.Errorf("%s: type %s has no folded dense_sync", path, typ)
}

// problemOf is the problem the coordinator plans the job on.
func problemOf(cat *config.Catalog, model *config.Model, job []byte) (*sched.Problem, error) {
	jf, err := config.ParseJob("bench.toml", job)
	if err != nil {
		return nil, err
	}
	return coord.JobProblem(jf, model, cat)
}

// floorFor finds a throughput floor at which the exact plan of job uses
// exactly n units of cat (bisection on a log scale), as
// bench/internal/planlimit does for jobs without a profile.
func floorFor(ctx context.Context, cat *config.Catalog, model *config.Model, job []byte, n int) (float64, error) {
	p, err := problemOf(cat, model, job)
	if err != nil {
		return 0, err
	}
	units := func(limit float64) (int, error) {
		p.ThroughputLimit = limit
		plan, err := sched.Run(ctx, "exact", p, sched.Options{Seed: 1})
		if err != nil || !plan.Feasible {
			return math.MaxInt, err
		}
		total := 0
		for _, s := range plan.Stages {
			total += s.Units
		}
		return total, nil
	}
	return planlimit.Bisect(n, units)
}

func benchCatalog(unit config.CatalogType, n int) *config.Catalog {
	unit.MaxUnits = n
	cat := &config.Catalog{Version: 1, Name: "bench", Types: []config.CatalogType{unit}}
	for i := range n {
		cat.Nodes = append(cat.Nodes, config.CatalogNode{Name: fmt.Sprintf("n%d", i),
			Address: fmt.Sprintf("127.0.0.1:%d", 7100+i), Units: map[string]int{unit.Name: 1}})
	}
	return cat
}

// catalogFile writes cat into dir and returns the path.
func catalogFile(dir, name string, cat *config.Catalog) (string, error) {
	src, err := cat.MarshalTOML()
	if err != nil {
		return "", fmt.Errorf("catalog %s: %w", name, err)
	}
	path := filepath.Join(dir, "catalog-"+name+".toml")
	return path, os.WriteFile(path, src, 0o600)
}

func jobTOML(n, batch, steps int, limit float64, sync, profile string) []byte {
	job := fmt.Appendf(nil, "version = 1\nname = \"profile-%d\"\nmodel = %q\ndata = %q\nbatch = %d\nsteps = %d\nthroughput_limit = %g\nmethod = \"exact\"\nmode = \"bsp\"\nseed = 1\ndense_sync = %q\n",
		n, modelName, dataSpec, batch, steps, limit, sync)
	if profile != "" {
		job = fmt.Appendf(job, "profile = %q\n", profile)
	}
	return job
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// tools are the binaries the benchmark runs.
type tools struct{ heterpsbin.Tools }

// buildTools builds heterps and heterpsd from this tree into dir.
func buildTools(ctx context.Context, dir string) (tools, error) {
	t, err := heterpsbin.Build(ctx, dir)
	return tools{t}, err
}

// run runs the job with `heterps run` on the catalog's nodes.
func (t tools) run(ctx context.Context, catPath, jobPath string, job []byte) (*heterpsbin.Result, error) {
	if err := os.WriteFile(jobPath, job, 0o600); err != nil {
		return nil, err
	}
	return t.Run(ctx, catPath, jobPath)
}
