// Command pytorch compares heterps' single-machine CTR-DNN training with
// PyTorch's on the same batches, with the same thread counts, in one run.
// It also reports the GEMM-bound limit: the FC FLOPs per sample against
// OpenBLAS sgemm's rate on the layer shapes, measured in the same run, and
// data-parallel training on loopback: `heterps run` on one-thread nodes
// beside PyTorch DistributedDataParallel (gloo) with as many one-thread
// ranks (dataparallel.go).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/heterps/heterps/bench/internal/ctrbench"
	"github.com/heterps/heterps/bench/internal/header"
	"github.com/heterps/heterps/bench/internal/heterpsrun"
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/internal/tether"
	"github.com/heterps/heterps/native"
)

var (
	python    = flag.String("python", "python3", "Python interpreter with torch installed")
	steps     = flag.Int("steps", 300, "timed training steps per run")
	warmup    = flag.Int("warmup", 20, "untimed steps before timing")
	batch     = flag.Int("batch", 512, "samples per step")
	nbatch    = flag.Int("batches", 64, "distinct batches held in memory and cycled")
	threads   = flag.String("threads", "1,2", "thread counts to compare")
	ddp       = flag.Int("ddp-procs", 2, "processes of the data-parallel comparison (heterps run nodes, DDP ranks), one thread each; 0 skips it")
	dpRepeats = flag.Int("dp-repeats", 2, "runs of each side of the data-parallel comparison, alternating (the best counts)")
	catalog   = flag.String("catalog", "config/examples/catalogs/local.toml", "catalog whose cpu-1t type heterps run's nodes offer")
	timeout   = flag.Duration("timeout", 10*time.Minute, "give up on one run of either side after this long")
	outPath   = flag.String("out", "", header.OutUsage)
)

// output is where the table goes: stdout, and the results file with --out.
var output io.Writer = os.Stdout

func main() {
	native.FixOpenBLASCore() // the vector GEMM kernels, as heterps and heterpsd run them
	flag.Parse()
	torch := header.Python{Interpreter: *python, Packages: []header.Package{{Label: "PyTorch", Dist: "torch"}}}
	res, err := header.Begin(*outPath, header.Collect("bench/pytorch", torch))
	check(err)
	output = res
	cfg, err := config.LoadModel("ctrdnn")
	check(err)
	batches, err := ctrbench.MakeBatches(cfg, *nbatch, *batch)
	check(err)
	dir, err := os.MkdirTemp("", "heterps-ctr-bench")
	check(err)
	defer os.RemoveAll(dir)
	check(ctrbench.WriteBatches(dir, cfg, batches))

	fmt.Fprintf(output, "CTR-DNN training, heterps vs PyTorch — batch %d, %d timed steps after %d warm-up, %d CPUs\n",
		*batch, *steps, *warmup, runtime.NumCPU())
	fmt.Fprintln(output, "same model (26x9 embedding of a 1,000,001-row table, FC 512-256-128-32-1), same synthetic batches,")
	fmt.Fprintln(output, "Adam on dense parameters, sparse-row Adam on the embedding (PyTorch: SparseAdam), lr 1e-3")
	w := tabwriter.NewWriter(output, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "threads\theterps samples/s\tPyTorch samples/s\theterps/PyTorch\tsgemm GFLOP/s\tGEMM-bound limit\tof limit\theterps loss\tPyTorch loss\t")
	var torchVersion string
	var last singleResult // the most threads' pair, against which data parallelism is weighed
	for _, f := range strings.Split(*threads, ",") {
		t, err := strconv.Atoi(strings.TrimSpace(f))
		check(err)
		ours, ourLoss := runOurs(cfg, batches, t)
		theirs := runTorch(dir, t)
		torchVersion = theirs.Torch
		limit, gflops := gemmLimit(cfg, t)
		if t >= last.threads {
			last = singleResult{threads: t, ours: ours, theirs: theirs.SamplesPerS}
		}
		fmt.Fprintf(w, "%d\t%.0f\t%.0f\t%.2fx\t%.1f\t%.0f\t%.0f%%\t%.4f\t%.4f\t\n", t, ours, theirs.SamplesPerS,
			ours/theirs.SamplesPerS, gflops, limit, 100*ours/limit, ourLoss, theirs.Loss)
	}
	w.Flush()
	fmt.Fprintf(output, "PyTorch %s (PyPI wheel, MKL/oneDNN CPU kernels); heterps %s with OpenBLAS sgemm\n", torchVersion, backendName())
	fmt.Fprintln(output, "targets: heterps/PyTorch >= 2.5x at 1 and 2 threads; GEMM-bound limit = FC FLOPs per sample / sgemm FLOP/s on the same shapes")
	if *ddp > 0 {
		check(dataParallel(dir, *ddp, last))
	}
	check(res.Close())
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmark:", err)
		os.Exit(1)
	}
}

func backendName() string { return native.MustCPU().Name() }

// runOurs trains on the batches with t kernel threads, pinned as heterps
// train pins them (native.PinAuto), and GOMAXPROCS t, so that Go's own
// work gets no extra core, and returns samples/s and the mean loss of the
// last 50 steps.
func runOurs(cfg *config.Model, batches []*data.Batch, t int) (float64, float64) {
	old := runtime.GOMAXPROCS(t)
	defer runtime.GOMAXPROCS(old)
	b, err := native.NewCPU(native.CPUOptions{Threads: t, Pin: native.PinAuto})
	check(err)
	defer b.PinCaller()()
	runtime.GC()
	r, err := ctrbench.Train(b, cfg, batches, *warmup, *steps)
	check(err)
	return r.SamplesPerS, r.Loss
}

type torchResult struct {
	Torch       string  `json:"torch"`
	SamplesPerS float64 `json:"samples_per_s"`
	Loss        float64 `json:"loss_last50"`
}

func runTorch(dir string, t int) torchResult {
	var r torchResult
	check(runPython("ctrdnn.py", t, &r, "--data", dir, "--threads", strconv.Itoa(t),
		"--steps", strconv.Itoa(*steps), "--warmup", strconv.Itoa(*warmup)))
	return r
}

// runPython runs script from bench/pytorch with threads OpenMP and MKL
// threads (a process's, each rank's for DDP) and decodes the JSON object
// on the last line it prints into out. Past --timeout its whole process
// group (DDP's ranks too) is killed.
func runPython(script string, threads int, out any, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, *python, append([]string{filepath.Join(sourceDir(), script)}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS="+strconv.Itoa(threads), "MKL_NUM_THREADS="+strconv.Itoa(threads))
	var stdoutBuf, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdoutBuf, &stderr
	// Through tether, PyTorch runs with the timer slack this process
	// inherited, as from a shell, not with heterps' (package timerslack).
	if err := tether.Run(cmd); err != nil {
		return fmt.Errorf("%s: %v\n%s", script, err, heterpsrun.Tail(stderr.Bytes()))
	}
	stdout := bytes.TrimSpace(stdoutBuf.Bytes())
	if err := json.Unmarshal(stdout[bytes.LastIndexByte(stdout, '\n')+1:], out); err != nil {
		return fmt.Errorf("%s printed no result (%w): %s", script, err, heterpsrun.Tail(stderr.Bytes()))
	}
	return nil
}

// sourceDir finds bench/pytorch from the working directory (make bench runs
// from the repository root).
func sourceDir() string {
	for _, d := range []string{"bench/pytorch", "."} {
		if _, err := os.Stat(filepath.Join(d, "ctrdnn.py")); err == nil {
			return d
		}
	}
	check(fmt.Errorf("cannot find ctrdnn.py; run from the repository root"))
	return ""
}
