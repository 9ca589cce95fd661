// Command batching measures heterogeneity-aware batching on a live heterps
// cluster, after the Dynamic Batching paper's H-level experiment. Every run
// starts a fresh loopback cluster of real processes built from this tree
// (package bench/internal/loopback): a coordinator and two node daemons of
// one 1-thread CPU unit each (cpu-1t of local.toml), throttled to a pair of
// CPU shares of equal total, (0.5, 0.5) at H-level 1 up to (0.14, 0.86) at
// H-level 6. It submits ctrdnn on synthetic data, BSP, planned as one
// data-parallel stage on the two units, with [batching] mode uniform,
// variable or dynamic, polls the job's status every 100 ms, and reports per
// run: wall time from the job's start to done, mean step time, the final
// split against the throughput-proportional one, the dynamic controller's
// adjustments and the step at which the split first came within 10 % of
// its final value, the final loss, and the step and time at which the
// loss (an EMA of the noisy last-step loss the status shows) first reaches
// the target: the loss the H-1 uniform run reaches at 80 % of its steps.
//
// The interference experiment runs the H-1 pair, dynamic and uniform, and
// halves one replica's share at 30 % of the steps and restores it at 60 %
// through the throttle API. Kill-restart resizing is not built, so it is
// not compared. The program measures and never asserts; it prints a table
// per experiment and the targets, met or missed, and records its
// output in bench/results/batching.txt.
//
//	go run ./bench/batching [--steps 200] [--batch 1024] [--levels 1,2,4] [--modes uniform,variable,dynamic] [--interference=true]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/heterps/heterps/bench/internal/loopback"
	"github.com/heterps/heterps/config"
)

const (
	modelName = "ctrdnn"
	dataSpec  = "synthetic:1"
	unitType  = "cpu-1t"
	replicas  = 2
)

// sharePairs are the CPU shares of the two nodes at each H-level: equal
// total capacity, the fast one H times the slow one (as the paper).
var sharePairs = map[int][2]float64{1: {0.5, 0.5}, 2: {0.33, 0.67}, 4: {0.2, 0.8}, 6: {0.14, 0.86}}

var allModes = []string{config.BatchingUniform, config.BatchingVariable, config.BatchingDynamic}

// options are the command's flags.
type options struct {
	steps, batch int
	levels       []int
	modes        []string
	interference bool
	targetAt     float64
	emaWeight    float64
	out, catalog string
	timeout      time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.steps, "steps", 200, "training steps of every job")
	flag.IntVar(&o.batch, "batch", 1024, "global batch (split over the two replicas)")
	levels := flag.String("levels", "1,2,4", "H-levels to run (some of 1,2,4,6); 1 is always run: it sets the target loss")
	modes := flag.String("modes", strings.Join(allModes, ","), "batching modes to compare at every H-level")
	flag.BoolVar(&o.interference, "interference", true, "run the interference experiment (H-1, dynamic and uniform)")
	flag.Float64Var(&o.targetAt, "target-at", 0.8, "the target loss is the H-1 uniform run's at this fraction of its steps")
	flag.Float64Var(&o.emaWeight, "ema", 0.1, "weight of each newly reported step's loss in the loss EMA")
	flag.StringVar(&o.out, "out", "bench/results/batching.txt", "also write the output to this file (empty: stdout only)")
	flag.StringVar(&o.catalog, "catalog", "config/examples/catalogs/local.toml", "catalog whose "+unitType+" type the nodes offer")
	flag.DurationVar(&o.timeout, "timeout", 4*time.Minute, "give up on a run's job after this long")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := parseOptions(&o, *levels, *modes)
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
func parseOptions(o *options, levels, modes string) error {
	o.levels = []int{1}
	for f := range strings.SplitSeq(levels, ",") {
		h, err := strconv.Atoi(strings.TrimSpace(f))
		if _, ok := sharePairs[h]; err != nil || !ok {
			return fmt.Errorf("--levels: %q is not an H-level (want some of 1,2,4,6)", f)
		}
		if h != 1 {
			o.levels = append(o.levels, h)
		}
	}
	for f := range strings.SplitSeq(modes, ",") {
		m := strings.TrimSpace(f)
		switch m {
		case config.BatchingUniform, config.BatchingVariable, config.BatchingDynamic:
			o.modes = append(o.modes, m)
		default:
			return fmt.Errorf("--modes: unknown mode %q (want some of %s)", m, strings.Join(allModes, ","))
		}
	}
	switch {
	case o.steps < 20:
		return fmt.Errorf("--steps %d: want at least 20", o.steps)
	case o.batch < 2*replicas:
		return fmt.Errorf("--batch %d: want at least %d", o.batch, 2*replicas)
	case o.targetAt <= 0 || o.targetAt > 1:
		return fmt.Errorf("--target-at %g: want a fraction in (0, 1]", o.targetAt)
	case o.emaWeight <= 0 || o.emaWeight > 1:
		return fmt.Errorf("--ema %g: want a weight in (0, 1]", o.emaWeight)
	}
	return nil
}

// bench is what every run shares.
type bench struct {
	o        options
	dir      string // temporary: binaries and a directory per run
	heterpsd string
	catalog  []byte
	limit    float64
	w        io.Writer
	runs     int
}

func run(ctx context.Context, o options) error {
	var out bytes.Buffer
	w := io.MultiWriter(os.Stdout, &out)
	dir, err := os.MkdirTemp("", "bench-batching-")
	if err != nil {
		return err
	}
	b := &bench{o: o, dir: dir, w: w}
	if err := b.prepare(ctx); err != nil {
		os.RemoveAll(dir)
		return err
	}
	b.header()
	hl := b.runLevels(ctx)
	printLevels(w, hl, o)
	var inter []*trace
	if o.interference && ctx.Err() == nil {
		inter = b.runInterference(ctx)
		printInterference(w, inter, o)
	}
	printTargets(w, hl, inter, o)
	fmt.Fprintln(w, "\nin-place vs kill-restart resizing: not measured; kill-restart resizing (checkpoint, restart with new sizes) is not built.")
	if failed(hl, inter) {
		fmt.Fprintf(os.Stderr, "bench/batching: a run failed; the daemons' logs are in %s\n", dir)
	} else {
		os.RemoveAll(dir)
	}
	if o.out != "" && ctx.Err() == nil {
		if err := os.WriteFile(o.out, out.Bytes(), 0o644); err != nil {
			return fmt.Errorf("record the output in %s: %w", o.out, err)
		}
	}
	return ctx.Err()
}

func failed(hl *levelResults, inter []*trace) bool {
	for _, t := range append(hl.all(), inter...) {
		if t.err != nil {
			return true
		}
	}
	return false
}

// prepare builds heterpsd, makes the catalog and finds the throughput
// floor that plans the job on both units.
func (b *bench) prepare(ctx context.Context) error {
	setup, err := loopback.Prepare(ctx, b.dir, b.o.catalog, unitType, "batching", modelName, dataSpec, replicas, replicas, b.o.batch, b.o.steps)
	b.heterpsd, b.catalog, b.limit = setup.Heterpsd, setup.Catalog, setup.Limit
	return err
}

// header says what runs where: machine, load, versions and the setup.
func (b *bench) header() {
	fmt.Fprintf(b.w, "bench/batching: %s\n", loopback.Machine())
	fmt.Fprintf(b.w, "job: %s on %s, BSP, %d steps of global batch %d, plan limit %.0f samples/s -> one data-parallel stage on %d units (PS on one of the nodes)\n",
		modelName, dataSpec, b.o.steps, b.o.batch, b.limit, replicas)
	fmt.Fprintf(b.w, "cluster per run: heterpsd coordinator (--heartbeat %v) + %d node daemons of 1x %s (1 thread), plain loopback, each node's cpu_share from the H-level's pair\n",
		loopback.Heartbeat, replicas, unitType)
	fmt.Fprintln(b.w, "cpu_share is a duty-cycle throttle (the worker sleeps (1/share-1) x its compute each step); the two cores are shared with other work, see the load")
	fmt.Fprintln(b.w, "[batching]: the job file's defaults for dynamic (interval 3 reports, smoothing 0.5, deadband 0.05, min_batch 1); variable splits by units x cpu_share at placement")
	fmt.Fprintf(b.w, "status polled every %v; step and loss arrive with node heartbeats (about 1 s), so step times are per heartbeat, not per step\n", pollEvery)
	fmt.Fprintf(b.w, "loss: the status's loss is the last step's (mean over the replicas, unweighted), noisy: an EMA over newly reported steps, weight %.2f;\n", b.o.emaWeight)
	fmt.Fprintf(b.w, "target loss = the H-1 uniform run's EMA at %.0f %% of its steps; time to target from the job's start\n\n", 100*b.o.targetAt)
}
