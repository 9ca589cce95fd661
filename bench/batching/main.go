// Command batching measures heterogeneity-aware batching on a live heterps
// cluster, after the Dynamic Batching paper's H-level experiment. Every run
// starts a fresh loopback cluster of real processes built from this tree
// (package bench/internal/loopback): a coordinator and two node daemons of
// one 1-thread CPU unit each (cpu-1t of local.toml), throttled to a pair of
// CPU shares of equal total, (0.5, 0.5) at H-level 1 up to (0.14, 0.86) at
// H-level 6. It submits each model of --models (ctrdnn on synthetic data,
// mlp-digits on the digits CSV, linreg on the regress generator), BSP and
// ASP (--sync), planned as one data-parallel stage on the two units, with
// [batching] mode uniform, variable or dynamic, polls the job's status
// every 100 ms, and reports per run: wall time from the job's start to
// done, mean step time, the final split against the throughput-proportional
// one, the dynamic controller's adjustments and the step at which the split
// first came within 10 % of its final value, the final loss (linreg: the
// MSE), and the step and time at which the loss (an EMA of the noisy
// last-step loss the status shows) first reaches the target: the loss the
// model's H-1 uniform run (BSP when it runs) reaches at 80 % of its steps.
//
// The interference experiment runs the first model's H-1 pair, dynamic and
// uniform, under the first sync mode, and halves one replica's share at 30 %
// of the steps and restores it at 60 % through the throttle API. The resize
// experiment (--resize restart) runs the first model's H-4 dynamic BSP job
// with checkpoints twice, resizing in place and by kill-restart
// ([batching] resize = "restart"), and reports the wall times, the steps
// trained twice and the in-place resizes' estimated cost. The program
// measures and never asserts; it prints a table per experiment and the
// issue's targets, met or missed, records its output in
// bench/results/batching.txt, the loss curves of every run in
// bench/results/batching-curves.csv and, with --plot, draws the time to
// the target loss against the H-level and the top H-level's loss curves.
//
//	go run ./bench/batching [--models ctrdnn,mlp-digits,linreg] [--sync bsp,asp] [--levels 1,2,4,6]
//	    [--modes uniform,variable,dynamic] [--interference=true] [--resize restart|none]
//	    [--steps N] [--batch N] [--interference-steps 200] [--heartbeat 1s] [--plot FILE.png]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/heterps/heterps/bench/internal/header"
	"github.com/heterps/heterps/bench/internal/loopback"
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/native"
)

const (
	unitType = "cpu-1t"
	replicas = 2
)

// sharePairs are the CPU shares of the two nodes at each H-level: equal
// total capacity, the fast one H times the slow one (as the paper).
var sharePairs = map[int][2]float64{1: {0.5, 0.5}, 2: {0.33, 0.67}, 4: {0.2, 0.8}, 6: {0.14, 0.86}}

var allModes = []string{config.BatchingUniform, config.BatchingVariable, config.BatchingDynamic}

// Sync modes of the job file's mode.
const (
	syncBSP = "bsp"
	syncASP = "asp"
)

var allSyncs = []string{syncBSP, syncASP}

// Resize experiment choices (--resize).
const (
	resizeRestart = "restart" // compare in-place with kill-restart resizing
	resizeNone    = "none"
)

// options are the command's flags.
type options struct {
	steps, batch  int // 0: each model's own
	models        []modelSpec
	syncs         []string
	levels        []int
	modes         []string
	interference  bool
	interSteps    int // steps of the interference runs; 0: the model's
	resize        string
	every         int // checkpoint interval of the resize runs; 0: a fifth of the steps
	targetAt      float64
	emaWeight     float64
	out, curves   string
	plot, catalog string
	timeout       time.Duration
	heartbeat     time.Duration
}

// flagLists are the comma-separated flags parseOptions turns into lists.
type flagLists struct {
	models, syncs, levels, modes, digits string
}

func main() {
	native.FixOpenBLASCore() // the header then names the kernels the daemons it starts run
	var o options
	var l flagLists
	flag.IntVar(&o.steps, "steps", 0, "training steps of every job (0: each model's default: "+modelDefaults("steps")+")")
	flag.IntVar(&o.batch, "batch", 0, "global batch, split over the two replicas (0: each model's default: "+modelDefaults("batch")+")")
	flag.StringVar(&l.models, "models", strings.Join(modelNames, ","), "models to run (some of "+strings.Join(modelNames, ",")+")")
	flag.StringVar(&l.digits, "digits", "daemon/data/testdata/digits.csv.gz", "the digits CSV mlp-digits trains on")
	flag.StringVar(&l.syncs, "sync", strings.Join(allSyncs, ","), "job modes to run (some of bsp,asp)")
	flag.StringVar(&l.levels, "levels", "1,2,4,6", "H-levels to run (some of 1,2,4,6); 1 is always run: it sets the target loss")
	flag.StringVar(&l.modes, "modes", strings.Join(allModes, ","), "batching modes to compare at every H-level")
	flag.BoolVar(&o.interference, "interference", true, "run the interference experiment (the first model's H-1 pair, dynamic and uniform)")
	flag.IntVar(&o.interSteps, "interference-steps", 200, "steps of the interference runs, long enough for adjustments between the throttles (0: the model's steps)")
	flag.StringVar(&o.resize, "resize", resizeRestart, "restart: compare in-place with kill-restart resizing (the first model, H-4 dynamic BSP); none: skip")
	flag.IntVar(&o.every, "checkpoint-every", 0, "checkpoint interval of the resize runs in steps (0: a fifth of the steps)")
	flag.Float64Var(&o.targetAt, "target-at", 0.8, "the target loss is the H-1 uniform run's at this fraction of its steps")
	flag.Float64Var(&o.emaWeight, "ema", 0.1, "weight of each newly reported step's loss in the loss EMA")
	flag.StringVar(&o.out, "out", "bench/results/batching.txt", "also write the output to this file (empty: stdout only)")
	flag.StringVar(&o.curves, "curves", "", "write the loss curves as CSV to this file (default: --out's name with -curves.csv; none without --out)")
	flag.StringVar(&o.plot, "plot", "", "draw the time to the target loss per H-level and the top H-level's loss curves into this PNG")
	flag.StringVar(&o.catalog, "catalog", "config/examples/catalogs/local.toml", "catalog whose "+unitType+" type the nodes offer")
	flag.DurationVar(&o.heartbeat, "heartbeat", loopback.Heartbeat, "the coordinator's heartbeat: nodes report steps, losses and step times once one (finer curves, and an adjustment every 3 reports)")
	flag.DurationVar(&o.timeout, "timeout", 4*time.Minute, "give up on a run's job after this long")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := parseOptions(&o, l)
	if err == nil {
		err = run(ctx, o)
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/batching:", err)
		os.Exit(1)
	}
}

// parseOptions checks the flags and fills in the lists.
func parseOptions(o *options, l flagLists) error {
	var err error
	if o.levels, err = parseLevels(l.levels); err != nil {
		return err
	}
	if o.modes, err = oneOf("--modes", l.modes, allModes); err != nil {
		return err
	}
	if o.syncs, err = oneOf("--sync", l.syncs, allSyncs); err != nil {
		return err
	}
	names, err := oneOf("--models", l.models, modelNames)
	if err != nil {
		return err
	}
	if o.models, err = pickModels(names, l.digits, o.steps, o.batch); err != nil {
		return err
	}
	if o.curves == "" && o.out != "" {
		o.curves = strings.TrimSuffix(o.out, filepath.Ext(o.out)) + "-curves.csv"
	}
	return checkNumbers(o)
}

// parseLevels is the H-levels of list, 1 first and always.
func parseLevels(list string) ([]int, error) {
	levels := []int{1}
	for f := range strings.SplitSeq(list, ",") {
		h, err := strconv.Atoi(strings.TrimSpace(f))
		if _, ok := sharePairs[h]; err != nil || !ok {
			return nil, fmt.Errorf("--levels: %q is not an H-level (want some of 1,2,4,6)", f)
		}
		if h != 1 {
			levels = append(levels, h)
		}
	}
	return levels, nil
}

// oneOf splits list and checks every entry is one of want.
func oneOf(flagName, list string, want []string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(list, ",") {
		v := strings.TrimSpace(f)
		found := false
		for _, w := range want {
			found = found || v == w
		}
		if !found {
			return nil, fmt.Errorf("%s: unknown %q (want some of %s)", flagName, v, strings.Join(want, ","))
		}
		out = append(out, v)
	}
	return out, nil
}

func checkNumbers(o *options) error {
	for _, m := range o.models {
		switch {
		case m.steps < 20:
			return fmt.Errorf("%s: --steps %d: want at least 20", m.name, m.steps)
		case m.batch < 2*replicas:
			return fmt.Errorf("%s: --batch %d: want at least %d", m.name, m.batch, 2*replicas)
		}
	}
	switch {
	case o.targetAt <= 0 || o.targetAt > 1:
		return fmt.Errorf("--target-at %g: want a fraction in (0, 1]", o.targetAt)
	case o.emaWeight <= 0 || o.emaWeight > 1:
		return fmt.Errorf("--ema %g: want a weight in (0, 1]", o.emaWeight)
	case o.resize != resizeRestart && o.resize != resizeNone:
		return fmt.Errorf("--resize %q: want %s or %s", o.resize, resizeRestart, resizeNone)
	case o.interSteps != 0 && o.interSteps < 20:
		return fmt.Errorf("--interference-steps %d: want 0 or at least 20", o.interSteps)
	case o.heartbeat < 100*time.Millisecond:
		return fmt.Errorf("--heartbeat %v: want at least 100ms", o.heartbeat)
	case o.every < 0:
		return fmt.Errorf("--checkpoint-every %d: want >= 0", o.every)
	}
	return nil
}

// bench is what every run shares.
type bench struct {
	o        options
	dir      string // temporary: binaries and a directory per run
	heterpsd string
	catalog  []byte
	limits   map[string]float64 // plan limit by model name
	w        io.Writer
	runs     int
}

func run(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "bench-batching-")
	if err != nil {
		return err
	}
	w, err := header.Begin(o.out, header.Collect("bench/batching"))
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	b := &bench{o: o, dir: dir, w: w}
	if err := b.prepare(ctx); err != nil {
		os.RemoveAll(dir)
		return err
	}
	b.header()
	res := b.runAll(ctx)
	printAll(w, res, o)
	if b.failed(res) {
		fmt.Fprintf(os.Stderr, "bench/batching: a run failed; the daemons' logs are in %s\n", dir)
	} else {
		os.RemoveAll(dir)
	}
	if ctx.Err() != nil {
		header.WriteLoadAfter(w) // shown; the results file is left as it was
		return ctx.Err()
	}
	if err := w.Close(); err != nil { // the load average after, and the results file written whole
		return fmt.Errorf("record the output: %w", err)
	}
	return writeOutputs(res, o)
}

// runAll runs the parts the options select.
func (b *bench) runAll(ctx context.Context) *results {
	res := &results{}
	for _, m := range b.o.models {
		for _, s := range b.o.syncs {
			res.groups = append(res.groups, b.runLevels(ctx, m, s))
		}
	}
	if b.o.interference && ctx.Err() == nil {
		res.interference = b.runInterference(ctx, b.o.models[0], b.o.syncs[0])
	}
	if b.o.resize == resizeRestart && ctx.Err() == nil {
		res.resize = b.runResize(ctx, b.o.models[0])
	}
	return res
}

// writeOutputs writes the loss curves and the plot the options ask for.
func writeOutputs(res *results, o options) error {
	if o.curves != "" {
		if err := writeCurvesFile(o.curves, res.all(), o); err != nil {
			return err
		}
	}
	if o.plot != "" {
		if err := writePlot(o.plot, res, o); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) failed(res *results) bool {
	for _, t := range res.all() {
		if t.err != nil {
			return true
		}
	}
	return false
}

// prepare builds heterpsd, makes the catalog and finds, per model, the
// throughput floor that plans the job on both units.
func (b *bench) prepare(ctx context.Context) error {
	var err error
	if b.heterpsd, err = loopback.Build(ctx, b.dir); err != nil {
		return err
	}
	cat, err := loopback.TypeCatalog(b.o.catalog, unitType, "batching", replicas)
	if err != nil {
		return err
	}
	if b.catalog, err = cat.MarshalTOML(); err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	b.limits = map[string]float64{}
	for _, m := range b.o.models {
		if b.limits[m.name], err = loopback.Limit(ctx, cat, m.name, m.data, replicas, m.batch, m.steps); err != nil {
			return err
		}
	}
	return nil
}

// header says what runs where: machine, load, versions and the setup.
func (b *bench) header() {
	for _, m := range b.o.models {
		fmt.Fprintf(b.w, "job: %s on %s, %s, %d steps of global batch %d, plan limit %.0f samples/s -> one data-parallel stage on %d units (PS on one of the nodes); loss: %s\n",
			m.name, m.data, strings.ToUpper(strings.Join(b.o.syncs, " and ")), m.steps, m.batch, b.limits[m.name], replicas, m.loss)
	}
	fmt.Fprintf(b.w, "cluster per run: heterpsd coordinator (--heartbeat %v) + %d node daemons of 1x %s (1 thread), plain loopback, each node's cpu_share from the H-level's pair\n",
		b.o.heartbeat, replicas, unitType)
	fmt.Fprintln(b.w, "cpu_share is a duty-cycle throttle (the worker sleeps (1/share-1) x its compute each step); the two cores are shared with other work, see the load")
	fmt.Fprintln(b.w, "[batching]: the job file's defaults for dynamic (interval 3 reports, smoothing 0.5, deadband 0.05, min_batch 1); variable splits by units x cpu_share at placement")
	fmt.Fprintln(b.w, "ASP: the controller balances ASP replicas too; each switches to a new split at its own next step, and a push counts b_k/mean(b)")
	fmt.Fprintf(b.w, "status polled every %v; step and loss arrive with node heartbeats (every %v), so step times and times to target are per heartbeat, not per step\n", pollEvery, b.o.heartbeat)
	fmt.Fprintf(b.w, "loss: the status's loss is the last step's (mean over the replicas, unweighted), noisy: an EMA over newly reported steps, weight %.2f;\n", b.o.emaWeight)
	fmt.Fprintf(b.w, "target loss per model = its H-1 uniform %s run's EMA at %.0f %% of its steps, for every sync mode; time to target from the job's start\n\n",
		strings.ToUpper(b.o.syncs[0]), 100*b.o.targetAt)
}
