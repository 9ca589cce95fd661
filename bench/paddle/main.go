// Command paddle compares heterps with PaddlePaddle on the same CTR-DNN,
// the same synthetic batches and the same machine, in one run:
//
//   - single process: `heterps train` beside Paddle's dynamic-graph
//     training (paddlepaddle 3.x, ctrdnn_single.py) at each thread count;
//   - parameter servers: `heterps run` on 2 one-thread nodes (a coordinator
//     and one heterpsd per node, one data-parallel stage, BSP, the PS shard
//     on a node) beside Paddle's fleet parameter-server mode (paddlepaddle
//     2.6, async, 1 server and 2 one-thread workers on loopback,
//     ctrdnn_ps.py).
//
// Paddle trains on the batches bench/internal/ctrbench writes (the ones
// bench/pytorch uses), cycled; heterps reads the same generator
// (synthetic:1) as a stream. It prints samples/s of both and the ratios. A
// Paddle side that cannot run (not installed, crashed) is printed as not
// measured, with the reason, instead of a figure. It measures; it asserts
// nothing. Run it from the repository root:
//
//	go run ./bench/paddle -python bench/.venv-paddle/bin/python -python-ps bench/.venv-paddle-ps/bin/python [--out bench/results/paddle.txt]
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

	"github.com/heterps/heterps/bench/internal/ctrbench"
	"github.com/heterps/heterps/bench/internal/header"
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/native"
)

const (
	modelName = "ctrdnn"
	dataSpec  = "synthetic:1"
	psWorkers = 2 // Paddle's workers and heterps' nodes
)

// options are the command's flags.
type options struct {
	python, pythonPS string
	steps, warmup    int
	batch, batches   int
	threads          []int
	catalog          string
	timeout          time.Duration
}

func main() {
	native.FixOpenBLASCore() // the vector GEMM kernels, as heterps and heterpsd run them
	var o options
	flag.StringVar(&o.python, "python", "bench/.venv-paddle/bin/python", "Python with paddlepaddle 3.x (single-process training)")
	flag.StringVar(&o.pythonPS, "python-ps", "bench/.venv-paddle-ps/bin/python", "Python with paddlepaddle 2.6 (parameter-server mode)")
	flag.IntVar(&o.steps, "steps", 200, "timed steps of each run (each PS worker's; heterps run's job steps)")
	flag.IntVar(&o.warmup, "warmup", 20, "untimed Paddle steps before timing")
	flag.IntVar(&o.batch, "batch", 512, "samples per step (per worker for Paddle PS, per job for heterps run)")
	flag.IntVar(&o.batches, "batches", 64, "distinct batches Paddle holds in memory and cycles")
	threads := flag.String("threads", "1,2", "thread counts of the single-process runs")
	flag.StringVar(&o.catalog, "catalog", "config/examples/catalogs/local.toml", "catalog whose cpu-1t type heterps run's nodes offer")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up on one run after this long")
	outPath := flag.String("out", "", header.OutUsage)
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := parseThreads(&o, *threads)
	if err == nil {
		err = run(ctx, o, *outPath)
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/paddle:", err)
		os.Exit(1)
	}
}

func parseThreads(o *options, list string) error {
	for s := range strings.SplitSeq(list, ",") {
		t, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || t < 1 {
			return fmt.Errorf("--threads %q: want a comma-separated list of integers >= 1", list)
		}
		o.threads = append(o.threads, t)
	}
	if o.steps < 1 || o.warmup < 0 || o.batch < 1 || o.batches < psWorkers {
		return fmt.Errorf("--steps %d, --warmup %d, --batch %d, --batches %d: want >= 1, >= 0, >= 1, >= %d",
			o.steps, o.warmup, o.batch, o.batches, psWorkers)
	}
	return nil
}

func run(ctx context.Context, o options, outPath string) error {
	paddle := header.Python{Interpreter: o.python, Packages: []header.Package{{Label: "Paddle", Dist: "paddlepaddle"}}}
	paddlePS := header.Python{Interpreter: o.pythonPS, Packages: []header.Package{{Label: "Paddle (PS)", Dist: "paddlepaddle"}}}
	res, err := header.Begin(outPath, header.Collect("bench/paddle", paddle, paddlePS))
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-paddle-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := writeBatches(dir, o); err != nil {
		return err
	}
	heterps, err := buildHeterps(ctx, dir, o)
	if err != nil {
		return err
	}
	printSetup(res, o)
	var r report
	for _, t := range o.threads {
		r.single = append(r.single, singleRow{threads: t,
			heterps: heterps.train(ctx, o, t),
			paddle:  paddleSingle(ctx, o, dir, t)})
	}
	r.heterpsPS = heterps.run(ctx, o, o.batch)
	r.heterpsPSMatched = heterps.run(ctx, o, psWorkers*o.batch)
	r.heterpsASP = heterps.runAsync(ctx, o, o.batch)
	r.paddlePS = paddlePSRun(ctx, o, dir)
	r.print(res)
	return res.Close()
}

// writeBatches writes the batches Paddle trains on into dir.
func writeBatches(dir string, o options) error {
	cfg, err := config.LoadModel(modelName)
	if err != nil {
		return err
	}
	batches, err := ctrbench.MakeBatches(cfg, o.batches, o.batch)
	if err != nil {
		return fmt.Errorf("batches: %w", err)
	}
	return ctrbench.WriteBatches(dir, cfg, batches)
}

func printSetup(w io.Writer, o options) {
	fmt.Fprintf(w, "CTR-DNN training, heterps vs PaddlePaddle — batch %d, %d timed steps, %d CPUs\n", o.batch, o.steps, runtime.NumCPU())
	fmt.Fprintln(w, "same model (26 one-id slots sum-pooled from one 1,000,001 x 9 table + 13 dense, FC 512-256-128-32-1, BCE), lr 1e-3,")
	fmt.Fprintln(w, "Adam on the dense parameters, lazy sparse Adam on the table (only the rows a batch touches move);")
	fmt.Fprintf(w, "Paddle: the %d batches of synthetic:1 that bench/pytorch also uses, cycled, %d warm-up steps untimed;\n", o.batches, o.warmup)
	fmt.Fprintln(w, "heterps: the synthetic:1 stream itself (the same generator), every step timed (heterps train's and heterps run's own figures)")
	fmt.Fprintf(w, "PS batch: each Paddle worker's step is %d samples (fleet's data parallelism); heterps run splits the job's batch over its %d replicas:\n",
		o.batch, psWorkers)
	fmt.Fprintf(w, "  a job of %d (the same global batch as one worker's, %d a replica) and one of %d (%d a replica, Paddle's per-worker step)\n",
		o.batch, o.batch/psWorkers, psWorkers*o.batch, o.batch)
}
