// Command run measures distributed training on this machine: ctrdnn on
// synthetic click data, trained by `heterps run` (a coordinator and N
// heterpsd node daemons, each its own OS process, on loopback) beside
// single-process training with nn.Trainer at 1 and 2 threads in the same
// run. It builds heterps and heterpsd from this tree into a temporary
// directory first, so run it from the repository root.
//
// For each batch size and node count it prints the job's throughput and its
// ratio to single-process training run in the same rounds (alternate.go),
// the loss, the wall time of the `heterps run` command (daemon start,
// planning, training and shutdown), and each stage's measured throughput
// beside the cost model's prediction.
//
// Each node offers one unit of --unit, by default a 1-thread CPU unit (the
// catalog's cpu-1t); --unit cpu-2t --nodes 1 is the plan `make run` gets on
// this machine. The job's throughput floor is chosen so that the exact plan
// uses exactly N units: one stage of N data-parallel replicas, synchronised
// (BSP) through one parameter-server shard on a node of the stage.
//
// The single-process lines (single.go) also print the GEMM-bound limit at
// the same thread count and batch (the GEMMs one training step issues,
// timed alone through native.CPU), the share of it reached, and the 2/1
// thread scaling; --single-only runs just those. Each node count's block
// then runs, round after round, single-process training at the faster
// thread count, for two nodes or more the loopback limit (limit.go: as
// many trainers as nodes, each with a unit's threads and its share of the
// batch, training side by side without ever synchronising), and the job
// under each dense-sync method: every job's ratio and share of the limit
// are of runs minutes apart at most, so that a busy spell of this shared
// host does not pass for a gain or a loss.
//
// For each batch size it also trains a 2-stage pipeline (pipeline.go)
// under 1F1B (with the default lookahead, and strict) and fill-drain,
// --pipeline-micro micro-batches a step, and prints each one's samples/s
// and the most micro-batches each stage held live at once;
// --pipeline-only runs just that.
//
// With --in-process it runs the coordinator and the node daemons in this
// process instead (coord.New, node.New): one Go runtime for all of them,
// which is not what `heterps run` does, but lets --cpuprofile see the
// daemons. It measures; it asserts nothing.
//
// --dense-sync runs each node count under each method of synchronising the
// stage's dense parameters (the job file's dense_sync): through the
// parameter server (ps), by ring allreduce among the replicas (allreduce),
// or as the coordinator picks (auto); --repeats rounds, the best run of
// each counting and every run's figure printed.
//
// Unless --make-run-steps is 0 it then measures `make run`'s job shape
// (makerun.go): config/examples/jobs/ctrdnn-local.toml on the local
// catalog, one node with its PS in process, at --make-run-steps steps,
// against `heterps train --model ctrdnn` in the same run, with the ratio;
// --make-run-only runs just that.
//
// With --wire it first runs bench/dist/wirebw and the daemon/ps PushPull
// benchmark, and --also repeats the runs on other units, so that one
// invocation records all of bench/results/dist.txt (--out).
//
//	go run ./bench/dist/run [--steps 300] [--batches 512,2048] [--nodes 2,4] [--dense-sync allreduce,ps] [--repeats 3] [--unit cpu-1t] [--in-process]
//	                        [--pipeline-micro 8] [--pipeline-only] [--single-only] [--make-run-steps 1000] [--make-run-repeats 2] [--make-run-only]
//	    [--wire] [--also cpu-2t:1] [--out bench/results/dist.txt]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/heterps/heterps/bench/internal/header"
	"github.com/heterps/heterps/bench/internal/planlimit"
	"github.com/heterps/heterps/bench/internal/stats"
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/internal/cpuprof"
	// The single-process and loopback-limit trainers in this process are what
	// the jobs are held against: they get the timer slack heterps and
	// heterpsd run with.
	_ "github.com/heterps/heterps/internal/timerslack"
	"github.com/heterps/heterps/native"
)

const (
	modelName  = "ctrdnn"
	dataSpec   = "synthetic:1"
	singleRuns = 3 // single-process runs per thread count
)

// options are the command's flags.
type options struct {
	steps       int
	batches     []int
	nodes       []int
	denseSync   []string // the job file's dense_sync, one run each
	catalogPath string
	unit        string // the catalog type every node offers one unit of
	inProcess   bool
	timeout     time.Duration
	pipeMicro   int  // micro-batches a step of the pipeline runs
	pipeOnly    bool // run only the pipeline
	repeats     int  // rounds of each node count's block (alternate.go); the best run of each arm counts
	singleOnly  bool // run only single-process training
}

func main() {
	native.FixOpenBLASCore() // the vector GEMM kernels, as heterps and heterpsd run them
	var o options
	flag.IntVar(&o.steps, "steps", 300, "training steps of every run")
	batches := flag.String("batches", "512", "comma-separated batch sizes (each split over a stage's replicas); one block of runs per size")
	nodes := flag.String("nodes", "2,4", "comma-separated node counts of the distributed runs")
	denseSync := flag.String("dense-sync", "auto", "comma-separated dense_sync methods (allreduce, ps, auto), one run each per node count")
	flag.StringVar(&o.catalogPath, "catalog", "config/examples/catalogs/local.toml", "catalog whose --unit type the nodes offer")
	flag.StringVar(&o.unit, "unit", "cpu-1t", "the catalog type each node offers one unit of (cpu-2t with --nodes 1 is what make run plans on this machine)")
	flag.BoolVar(&o.inProcess, "in-process", false, "run the coordinator and node daemons in this process (coord.New, node.New) instead of `heterps run`")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up on a distributed run after this long")
	flag.IntVar(&o.repeats, "repeats", 3, "rounds of each node count's block: the single process, the loopback limit and the job under each dense_sync method in turn (the best of each counts; all are printed)")
	flag.IntVar(&o.pipeMicro, "pipeline-micro", 8, "micro-batches a step of the 2-stage pipeline runs")
	flag.BoolVar(&o.pipeOnly, "pipeline-only", false, "run only the 2-stage pipeline under each schedule")
	flag.BoolVar(&o.singleOnly, "single-only", false, "run only single-process training and its GEMM-bound limit")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of this process to this file (it sees the daemons only with --in-process)")
	wire := flag.Bool("wire", false, "first run bench/dist/wirebw and the daemon/ps PushPull benchmark (child processes) into the output")
	also := flag.String("also", "", "then repeat the runs on other units: semicolon-separated UNIT:NODES, e.g. cpu-2t:1 (the plan make run gets here)")
	var mr makeRunOptions
	flag.IntVar(&mr.steps, "make-run-steps", 1000, "steps of make run's job shape against heterps train, after the other runs (0: skip it)")
	flag.IntVar(&mr.repeats, "make-run-repeats", 2, "runs of each side of the make-run block (the best counts)")
	makeRunOnly := flag.Bool("make-run-only", false, "run only the make-run block")
	outPath := flag.String("out", "", header.OutUsage)
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := parseOptions(&o, *batches, *nodes, *denseSync)
	var passes []pass
	if err == nil {
		passes, err = parsePasses(*also)
	}
	var res *header.Results
	if err == nil {
		res, err = header.Begin(*outPath, header.Collect("bench/dist/run"))
	}
	if err == nil && (mr.steps < 0 || mr.repeats < 1 || (*makeRunOnly && mr.steps == 0)) {
		err = fmt.Errorf("--make-run-steps %d, --make-run-repeats %d: want steps >= 1 (or 0 to skip) and repeats >= 1", mr.steps, mr.repeats)
	}
	if err == nil && *wire && !*makeRunOnly {
		err = runParts(ctx, wireParts, res)
	}
	if err == nil {
		var stop func()
		if stop, err = cpuprof.Start(*cpuProfile); err == nil {
			if !*makeRunOnly {
				err = runPasses(ctx, o, passes, res)
			}
			if err == nil && mr.steps > 0 && !o.singleOnly {
				err = makeRunBlock(ctx, mr, res)
			}
			stop()
		}
	}
	if err == nil {
		err = res.Close()
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/dist/run:", err)
		os.Exit(1)
	}
}

// runPasses runs o, then o on each pass's unit and node counts, a blank
// line between them.
func runPasses(ctx context.Context, o options, passes []pass, w io.Writer) error {
	if err := run(ctx, o, w); err != nil {
		return err
	}
	for _, p := range passes {
		o.unit, o.nodes = p.unit, p.nodes
		fmt.Fprintln(w)
		if err := run(ctx, o, w); err != nil {
			return fmt.Errorf("--also %s: %w", p.unit, err)
		}
	}
	return nil
}

func parseOptions(o *options, batches, nodes, denseSync string) error {
	var err error
	if o.denseSync, err = denseSyncs(denseSync); err != nil {
		return err
	}
	if o.batches, err = positiveInts("--batches", batches); err != nil {
		return err
	}
	if o.nodes, err = positiveInts("--nodes", nodes); err != nil {
		return err
	}
	if o.steps < 2 {
		return fmt.Errorf("--steps %d: want >= 2 (the first step is not timed)", o.steps)
	}
	if o.repeats < 1 {
		return fmt.Errorf("--repeats %d: want >= 1", o.repeats)
	}
	if o.pipeMicro < 1 || o.pipeMicro > config.MaxMicroBatches {
		return fmt.Errorf("--pipeline-micro %d: want 1..%d", o.pipeMicro, config.MaxMicroBatches)
	}
	for _, b := range o.batches {
		if b < o.pipeMicro {
			return fmt.Errorf("--batches %d: below --pipeline-micro %d (each micro-batch needs a row)", b, o.pipeMicro)
		}
	}
	return nil
}

// positiveInts parses a comma-separated list of integers >= 1.
func positiveInts(name, list string) ([]int, error) {
	var out []int
	for s := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s %q: want a comma-separated list of integers >= 1", name, list)
		}
		out = append(out, n)
	}
	return out, nil
}

// denseSyncs parses --dense-sync.
func denseSyncs(list string) ([]string, error) {
	var out []string
	for s := range strings.SplitSeq(list, ",") {
		switch s = strings.TrimSpace(s); s {
		case config.DenseSyncAllreduce, config.DenseSyncPS, config.DenseSyncAuto:
			out = append(out, s)
		default:
			return nil, fmt.Errorf("--dense-sync %q: %q is not allreduce, ps or auto", list, s)
		}
	}
	return out, nil
}

// outcome is what one distributed run measured.
type outcome struct {
	limit       float64 // the job's throughput floor
	samplesPerS float64 // the slowest stage's measured throughput
	steps       int64   // steps completed
	jobSeconds  float64 // from the job's start to its finish, as the coordinator timed it
	wallSeconds float64 // of the whole run: daemons started, job planned and run, daemons stopped
	loss        float64
	stages      []api.StageStatus
}

// distributor runs the job on n nodes offering one unit each of cat's only
// type.
type distributor func(ctx context.Context, cat *config.Catalog, job []byte, n int) (*outcome, error)

func run(ctx context.Context, o options, w io.Writer) error {
	base, err := config.LoadCatalog(o.catalogPath)
	if err != nil {
		return err
	}
	unit, ok := base.Type(o.unit)
	if !ok {
		return fmt.Errorf("%s has no type %s", o.catalogPath, o.unit)
	}
	model, err := config.LoadModel(modelName)
	if err != nil {
		return err
	}
	distribute, mode := distributor(inProcess), fmt.Sprintf("in-process: coordinator and node daemons in this one process, GOMAXPROCS=%d", runtime.GOMAXPROCS(0))
	if o.pipeOnly {
		mode = "pipeline only: the stages' workers in this process"
	} else if !o.inProcess {
		dir, err := os.MkdirTemp("", "bench-dist-run-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		t, err := buildTools(ctx, dir)
		if err != nil {
			return err
		}
		distribute, mode = t.heterpsRun(dir), "heterps run: a coordinator and one heterpsd process per node, built from this tree"
	}
	fmt.Fprintf(w, "bench/dist/run: %s on %s, %d steps, BSP; %d CPUs; %s\nmode: %s\n", modelName, dataSpec, o.steps,
		runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339), mode)
	for _, batch := range o.batches {
		if err := runBatch(ctx, o, unit, model, batch, distribute, w); err != nil {
			return fmt.Errorf("batch %d: %w", batch, err)
		}
	}
	return nil
}

// runBatch prints one block: single-process training at 1 and 2 threads,
// then the distributed runs and their stages, then the 2-stage pipeline
// under each schedule.
func runBatch(ctx context.Context, o options, unit config.CatalogType, model *config.Model, batch int, distribute distributor, w io.Writer) error {
	fmt.Fprintf(w, "\n== batch %d\n", batch)
	if o.pipeOnly {
		return pipelineBlock(ctx, model, batch, o.steps, o.pipeMicro, o.repeats, w)
	}
	refThreads, err := singleBlock(ctx, model, batch, o.steps, w)
	if err != nil || o.singleOnly {
		return err
	}
	var stageLines []string
	for _, n := range o.nodes {
		cat := benchCatalog(unit, n)
		limit, err := planlimit.For(ctx, cat, model, modelName, dataSpec, n, batch, o.steps)
		if err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		lines, err := nodesBlock(ctx, o, nodeArms(o, model, unit, cat, n, batch, limit, refThreads, distribute), n, batch, unit.Name, limit, w)
		if err != nil {
			return fmt.Errorf("%d nodes, %w", n, err)
		}
		stageLines = append(stageLines, lines...)
	}
	fmt.Fprintln(w, "per stage: measured throughput against the cost model's prediction (roofline estimates from the catalog)")
	fmt.Fprintln(w, "nodes  asked      synced     stage  type    units   predicted    measured   ratio")
	for _, l := range stageLines {
		fmt.Fprintln(w, l)
	}
	return pipelineBlock(ctx, model, batch, o.steps, o.pipeMicro, o.repeats, w)
}

// repeated is one distributed configuration's runs: the fastest, and
// every run's samples/s in the order they ran.
type repeated struct {
	best *outcome
	all  []float64
}

// rates lists the runs' samples/s, e.g. "3: 61200 58100 63050".
func (r repeated) rates() string {
	return fmt.Sprint(len(r.all), ": ", stats.Rates(r.all))
}

// roundsRatio is the median over rounds of num's run over den's run of
// the same round: runs of one round are minutes apart, so a slow stretch
// of the shared host lowers both sides of a ratio, where a ratio of two
// bests may pair a lucky run with an unlucky one. It is 0 without a
// round.
func roundsRatio(num, den []float64) float64 {
	n := min(len(num), len(den))
	ratios := make([]float64, n)
	for i := range n {
		ratios[i] = num[i] / den[i]
	}
	return stats.Median(ratios)
}

// ofLimit is ", R of the loopback limit" for a rate against limit, or ""
// without one.
func ofLimit(rate, limit float64) string {
	if limit <= 0 {
		return ""
	}
	return fmt.Sprintf(", %.2f of the loopback limit", rate/limit)
}

// benchCatalog is a catalog of one type, unit, with n units on n nodes of
// one unit each. The nodes' addresses are only validated: `heterps run`
// starts every node daemon on 127.0.0.1:0 whatever they say.
func benchCatalog(unit config.CatalogType, n int) *config.Catalog {
	unit.MaxUnits = n
	cat := &config.Catalog{Version: 1, Name: "bench", Types: []config.CatalogType{unit}}
	for i := range n {
		cat.Nodes = append(cat.Nodes, config.CatalogNode{Name: fmt.Sprintf("n%d", i),
			Address: fmt.Sprintf("127.0.0.1:%d", 7100+i), Units: map[string]int{unit.Name: 1}})
	}
	return cat
}

// jobTOML is the job file of a run on n nodes with dense_sync sync.
func jobTOML(n, batch, steps int, limit float64, sync string) []byte {
	return fmt.Appendf(nil, "version = 1\nname = \"bench-%d\"\nmodel = %q\ndata = %q\nbatch = %d\nsteps = %d\nthroughput_limit = %g\nmethod = \"exact\"\nmode = \"bsp\"\nseed = 1\ndense_sync = %q\n",
		n, modelName, dataSpec, batch, steps, limit, sync)
}

// trainingData opens the training split of the bench's data (dataSpec)
// for model, as every job of the bench reads it.
func trainingData(model *config.Model) (data.Source, error) {
	return data.Open(dataSpec, data.Options{Vocab: model.Input.Vocab, Split: data.SplitTrain})
}

// singleProcess trains with nn.Trainer, reading the next batch while a
// step runs, and returns samples/s after the first step. The caller runs
// it on threads CPUs (onCPUs).
func singleProcess(ctx context.Context, model *config.Model, threads, batch, steps int) (float64, error) {
	ends, err := trainTimed(ctx, model, 1, threads, batch, steps)
	if err != nil {
		return 0, err
	}
	if len(ends) < 2 {
		return 0, fmt.Errorf("%d steps, want 2 or more", len(ends))
	}
	return float64((len(ends)-1)*batch) / ends[len(ends)-1].Sub(ends[0]).Seconds(), nil
}

// benchTrainer is a trainer of model on backend, with the bench's training
// data (the caller closes it).
func benchTrainer(backend native.Backend, model *config.Model, seed uint64, steps int64) (*nn.Trainer, data.Source, error) {
	tr, err := nn.NewTrainer(backend, model, seed, steps)
	if err != nil {
		return nil, nil, err
	}
	src, err := trainingData(model)
	if err != nil {
		return nil, nil, err
	}
	return tr, src, nil
}
