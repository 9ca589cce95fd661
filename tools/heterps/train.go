package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shirou/gopsutil/v4/mem"
	"golang.org/x/term"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/internal/cpuprof"
	"github.com/heterps/heterps/native"
)

func init() {
	register("train", "train a model on this machine (one process)", runTrain)
}

// trainFlags are the options of `heterps train`.
type trainFlags struct {
	model, data, checkpoint, isa string
	device                       device // --device: cpu or cuda[:N]
	pin                          native.Pinning
	cpuProfile, trace            string
	steps, batch, threads        int
	evalSamples, checkpointEvery int
	seed                         uint64
	json, skipBad                bool
}

// trainResult is what `heterps train --json` prints.
type trainResult struct {
	Model       string  `json:"model"`
	Data        string  `json:"data"`
	Backend     string  `json:"backend"`
	OpenBLAS    string  `json:"openblas_core"` // the GEMM kernels OpenBLAS runs (native.FixOpenBLASCore)
	Steps       int64   `json:"steps"`
	Batch       int     `json:"batch"`
	Threads     int     `json:"threads"`
	PinnedCPUs  []int   `json:"pinned_cpus,omitempty"` // thread k's CPU when --pin bound them
	Samples     int64   `json:"samples"`
	Loss        float64 `json:"loss"`
	EvalLoss    float64 `json:"eval_loss"`
	EvalSamples int     `json:"eval_samples"`
	EvalSkipped string  `json:"eval_skipped,omitempty"` // why nothing was evaluated
	AUC         float64 `json:"auc,omitempty"`
	BayesAUC    float64 `json:"bayes_auc,omitempty"`
	Accuracy    float64 `json:"accuracy,omitempty"`
	*Regression
	SamplesPerS float64 `json:"samples_per_s"`
	Seconds     float64 `json:"seconds"`
	BadLines    int64   `json:"bad_lines"`
	Checkpoint  string  `json:"checkpoint,omitempty"`
	ResumedFrom int64   `json:"resumed_from,omitempty"`
	// Epochs is the pass over a data file that the last step read from
	// (1 for the first); absent for generators, which do not end.
	Epochs int `json:"epochs,omitempty"`
}

// Regression is the held-out fit of a regression model (MSE loss): in
// trainResult, its fields are present exactly when it is.
type Regression struct {
	MSE float64 `json:"mse"`
	R2  float64 `json:"r2"`
	*Optimum
}

// Optimum is the best fit any model can expect on the data, for generators
// that know it (regress): present exactly when known.
type Optimum struct {
	OptimalMSE float64 `json:"optimal_mse"`
	OptimalR2  float64 `json:"optimal_r2"`
}

func parseTrainFlags(args []string, stderr io.Writer) (*trainFlags, error) {
	f := &trainFlags{}
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.model, "model", "ctrdnn", "model: zoo name ("+fmt.Sprint(config.ZooNames())+") or TOML file")
	fs.StringVar(&f.data, "data", "synthetic", "data: synthetic[:seed], pairs[:seed], words[:seed], regress[:seed], criteo:PATH, avazu:PATH, libsvm[,dense=N]:PATH (indices 1..N dense), digits:PATH")
	fs.IntVar(&f.steps, "steps", 1000, "training steps")
	fs.IntVar(&f.batch, "batch", 512, "samples per step")
	fs.IntVar(&f.threads, "threads", runtime.NumCPU(), "threads for the kernels")
	fs.IntVar(&f.evalSamples, "eval-samples", 20000, "held-out samples to evaluate at the end")
	fs.StringVar(&f.checkpoint, "checkpoint", "", "checkpoint file: resumed from when it exists, written at the end")
	fs.IntVar(&f.checkpointEvery, "checkpoint-every", 0, "also write the checkpoint every N steps")
	fs.Uint64Var(&f.seed, "seed", 1, "seed for initialisation")
	fs.StringVar(&f.isa, "isa", "", "force the kernel ISA: scalar, avx2 or avx512")
	fs.TextVar(&f.pin, "pin", native.PinAuto, "bind each kernel thread to a CPU of its own: auto (when --threads is every CPU this process may use), always, or never")
	fs.TextVar(&f.device, "device", device{}, "where the kernels run: cpu, or cuda[:N] (GPU N, 0 by default; needs a CUDA build: make build-cuda)")
	fs.BoolVar(&f.json, "json", false, "print one JSON object at the end")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the run to this file")
	fs.StringVar(&f.trace, "trace", "", "write the run's (time, step, loss, units, step seconds) as JSON lines to this file, for `heterps sim --trace-dir`")
	fs.BoolVar(&f.skipBad, "skip-bad-lines", false, "skip malformed input lines (counted) instead of stopping")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("train: unexpected argument %q", fs.Arg(0))
	}
	if f.steps < 0 || f.batch <= 0 || f.threads <= 0 || f.evalSamples < 0 || f.checkpointEvery < 0 {
		return nil, errors.New("train: --steps, --eval-samples and --checkpoint-every must be >= 0; --batch and --threads > 0")
	}
	if f.threads > native.MaxThreads {
		return nil, fmt.Errorf("train: --threads %d: at most %d (the most one process's kernels split across)", f.threads, native.MaxThreads)
	}
	if f.device.cuda && f.isa != "" {
		return nil, fmt.Errorf("train: --isa %s is for --device cpu, not %s", f.isa, f.device)
	}
	if f.device.cuda && flagSet(fs, "pin") {
		return nil, fmt.Errorf("train: --pin %s is for --device cpu, not %s", f.pin, f.device)
	}
	return f, nil
}

// flagSet reports whether the command line gave flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// device is --device: the CPU, or the CUDA GPU of ordinal gpu.
type device struct {
	cuda bool
	gpu  int
}

func (d device) String() string {
	if d.cuda {
		return fmt.Sprintf("cuda:%d", d.gpu)
	}
	return "cpu"
}

// UnmarshalText parses "cpu", "cuda" (GPU 0) or "cuda:N".
func (d *device) UnmarshalText(b []byte) error {
	s := string(b)
	if s == "cpu" {
		*d = device{}
		return nil
	}
	rest, ok := strings.CutPrefix(s, "cuda")
	if !ok {
		return fmt.Errorf("%q: want cpu, cuda or cuda:N", s)
	}
	gpu := 0
	if rest != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(rest, ":"))
		if !strings.HasPrefix(rest, ":") || err != nil || n < 0 {
			return fmt.Errorf("%q: want cuda:N with N a GPU ordinal >= 0", s)
		}
		gpu = n
	}
	*d = device{cuda: true, gpu: gpu}
	return nil
}

// MarshalText formats d as --device takes it.
func (d device) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// errNoCUDA: --device cuda in a build without the CUDA backend.
var errNoCUDA = errors.New("built without CUDA (make build-cuda / -tags cuda)")

// closingBackend is a backend that holds resources to release (CUDA's
// stream and cuBLAS handle).
type closingBackend interface {
	native.Backend
	Close() error
}

// trainBackend is the backend --device names: the CPU one (with --isa and
// --threads), or the CUDA one (train_cuda.go; a build without CUDA
// refuses it, exit status 2). close releases it.
func trainBackend(f *trainFlags) (b native.Backend, close func(), err error) {
	if !f.device.cuda {
		cpu, err := newBackend(f.isa, f.threads, f.pin)
		if err != nil {
			return nil, nil, usageError{err}
		}
		return cpu, func() {}, nil
	}
	cuda, err := newCUDATrainBackend(f.device.gpu)
	if err != nil {
		return nil, nil, fmt.Errorf("--device %s: %w", f.device, err)
	}
	return cuda, func() { _ = cuda.Close() }, nil
}

func runTrain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop) // a second signal kills at once, even while the checkpoint is written
	return trainCommand(ctx, args, os.Stdout, os.Stderr)
}

// trainCommand is `heterps train` with its output streams and context
// given, so tests can run it in-process.
func trainCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseTrainFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return failTo(stderr, exitUsage, err)
	}
	stopProfile, err := cpuprof.Start(f.cpuProfile)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	defer stopProfile()
	warnOpenBLASCore(stderr)
	if cpus := runtime.NumCPU(); !f.device.cuda && f.threads > cpus {
		fmt.Fprintf(stderr, "heterps: warning: --threads %d is more than this machine's %d CPUs: the threads take turns on them, and a step waits for its slowest piece\n", f.threads, cpus)
	}
	res, err := train(ctx, f, stderr)
	if err != nil {
		return failTo(stderr, exitFailure, err)
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
		return exitOK
	}
	printTrainSummary(stdout, res)
	return exitOK
}

func newBackend(isaName string, threads int, pin native.Pinning) (*native.CPU, error) {
	opts := native.CPUOptions{Threads: threads, Pin: pin}
	if isaName != "" {
		isa, err := native.ParseISA(isaName)
		if err != nil {
			return nil, err
		}
		opts.ISA = &isa
	}
	return native.NewCPU(opts)
}

// availableMemory is the memory this machine can give a new process now
// without swapping; ok is false where it cannot be told.
func availableMemory() (bytes int64, ok bool) {
	vm, err := mem.VirtualMemory()
	if err != nil {
		return 0, false
	}
	return int64(min(vm.Available, math.MaxInt64)), true
}

// checkHostMemory refuses, before anything is allocated, a run that needs
// more memory than this machine has available (nn.EstimateProcess): its
// tables whole, or with them its parameters, optimiser state, a step's
// activations and the batch. It would otherwise swap, or die in the middle
// of its first step when an allocation fails.
func checkHostMemory(cfg *config.Model, batch int, available func() (int64, bool)) error {
	tables, stage, err := nn.EstimateProcess(cfg, batch)
	if err != nil {
		return fmt.Errorf("--batch %d: %w", batch, err)
	}
	have, ok := available()
	need := tables + stage
	if need < 0 {
		need = math.MaxInt64 // both saturate at it
	}
	switch {
	case !ok || need <= have:
		return nil
	case tables > have:
		return fmt.Errorf("model %s: its embedding and NCE tables need about %d bytes (%s) with their optimiser state in one process, more than the %d bytes (%s) this machine has available; "+
			"the parameter servers of distributed training (heterps run) create rows only as batches use them", cfg.Name, tables, nn.HumanBytes(tables), have, nn.HumanBytes(have))
	default:
		return fmt.Errorf("--batch %d: model %s needs about %d bytes (%s) in one process, %s of them for the step at this batch (activations, the batch, parameters and their optimiser state), more than the %d bytes (%s) this machine has available; lower --batch",
			batch, cfg.Name, need, nn.HumanBytes(need), nn.HumanBytes(stage), have, nn.HumanBytes(have))
	}
}

// train runs the whole job: build, optionally resume, train with a
// prefetching reader, checkpoint, evaluate.
func train(ctx context.Context, f *trainFlags, progressOut io.Writer) (*trainResult, error) {
	cfg, err := config.LoadModel(f.model)
	if err != nil {
		return nil, usageError{err}
	}
	if !f.device.cuda {
		if err := checkHostMemory(cfg, f.batch, availableMemory); err != nil {
			return nil, usageError{err}
		}
	}
	backend, closeBackend, err := trainBackend(f)
	if err != nil {
		return nil, err
	}
	defer closeBackend()
	tr, err := nn.NewTrainer(backend, cfg, f.seed, int64(f.steps))
	if err != nil {
		return nil, err
	}
	res := &trainResult{Model: cfg.Name, Data: f.data, Backend: backend.Name(), OpenBLAS: native.OpenBLASCore(), Batch: f.batch, Threads: f.threads}
	if cpu, ok := backend.(*native.CPU); ok {
		res.PinnedCPUs = cpu.Pinned()
	}
	if f.checkpoint != "" {
		if res.ResumedFrom, err = resumeIfPresent(tr, f.checkpoint, f.batch); err != nil {
			return nil, err
		}
		if res.ResumedFrom > 0 {
			fmt.Fprintf(progressOut, "resumed from step %d (%s)\n", res.ResumedFrom, f.checkpoint)
			loadMarks(f, progressOut)
		}
	}
	opts := data.Options{Vocab: cfg.Input.Vocab, SkipBadLines: f.skipBad, Split: data.SplitTrain}
	src, epoch, err := openEpochs(f.data, opts, res.ResumedFrom*int64(f.batch))
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if err := nn.CheckData(cfg, src.Schema()); err != nil {
		return nil, usageError{fmt.Errorf("--data %s: %w", f.data, err)}
	}
	if sk, ok := src.(data.BatchSkipper); ok { // a file: passed over to where the trained steps reached
		if err := sk.SkipBatches(ctx, res.ResumedFrom, f.batch); err != nil {
			return nil, fmt.Errorf("resume: skipping trained batches: %w", err)
		}
	}
	trace, err := createTrace(f.trace, f.threads)
	if err != nil {
		return nil, usageError{err}
	}
	if res.ResumedFrom >= int64(f.steps) {
		fmt.Fprintf(progressOut, "nothing to train: the checkpoint is at step %d, --steps is %d\n", res.ResumedFrom, f.steps)
		res.Steps = res.ResumedFrom
	} else {
		err = trainLoop(ctx, f, tr, src, epoch, res, newProgress(progressOut, f.steps), trace)
	}
	if cerr := trace.close(); err == nil {
		err = cerr
	}
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil, interrupted(tr, f, res.ResumedFrom)
	}
	if err != nil {
		return nil, err
	}
	res.BadLines = src.BadLines()
	if f.checkpoint != "" {
		if err := f.save(tr); err != nil {
			return nil, err
		}
		res.Checkpoint = f.checkpoint
	}
	return res, evaluate(ctx, f, tr, opts, res)
}

// openEpochs opens the training data. A file is read again from the
// start whenever it ends (as node stages read it), so --steps may exceed
// one pass; epoch is the pass the last Next read from, 0 for a generator.
// A generator starts at the record that trained records of a resumed run
// reach (it jumps there); a file starts at its start, and the caller
// passes over the trained batches (data.BatchSkipper).
func openEpochs(spec string, opts data.Options, trained int64) (data.Source, *atomic.Int64, error) {
	s, err := data.ParseSpec(spec)
	if err != nil {
		return nil, nil, err
	}
	epoch := new(atomic.Int64)
	if s.Path == "" {
		if opts.Start, err = opts.After(trained); err != nil {
			return nil, nil, err
		}
		src, err := s.Open(opts)
		return src, epoch, err
	}
	epoch.Store(1)
	src, err := data.RepeatEpochs(func() (data.Source, error) { return s.Open(opts) },
		func(n int) { epoch.Store(int64(n)) })
	return src, epoch, err
}

// trainLoop runs steps until --steps or the end of the data, reading the
// next batch on another goroutine while the current one trains, and says
// "epoch N" when a step is the first of a new pass over a data file.
func trainLoop(ctx context.Context, f *trainFlags, tr *nn.Trainer, src data.Source, epoch *atomic.Int64, res *trainResult, prog *progress,
	trace *trainTrace) error {
	batches, err := prefetchEpochs(ctx, src, epoch, f.batch, f.steps-int(tr.Opt.Step))
	if err != nil {
		return err
	}
	defer batches.Close() // before the caller closes src
	if cpu, ok := tr.Backend.(*native.CPU); ok {
		defer cpu.PinCaller()() // the steps' thread on the backend's first CPU, when pinned
	}
	start := time.Now()
	var lossEMA float64
	for {
		next, err := batches.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if next.epoch > int64(res.Epochs) && res.Epochs > 0 {
			prog.line(fmt.Sprintf("epoch %d", next.epoch))
		}
		res.Epochs = int(next.epoch)
		loss, err := tr.Step(next.batch)
		if err != nil {
			return err
		}
		if err := trace.add(tr.Opt.Step, loss); err != nil {
			return err
		}
		lossEMA = ema(lossEMA, loss, tr.Opt.Step == res.ResumedFrom+1)
		res.Steps, res.Samples = tr.Opt.Step, res.Samples+int64(next.batch.Size)
		res.Loss = lossEMA
		elapsed := time.Since(start).Seconds()
		prog.update(tr.Opt.Step, lossEMA, float64(res.Samples)/elapsed)
		if f.checkpointEvery > 0 && f.checkpoint != "" && tr.Opt.Step%int64(f.checkpointEvery) == 0 {
			if err := f.save(tr); err != nil {
				return err
			}
		}
	}
	prog.done()
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.SamplesPerS = float64(res.Samples) / res.Seconds
	}
	return ctx.Err()
}

func ema(prev, v float64, first bool) float64 {
	if first {
		return v
	}
	return 0.98*prev + 0.02*v
}

type epochBatch struct {
	batch *data.Batch
	epoch int64 // the pass over the data it came from, 0 for a generator
}

// prefetchEpochs reads up to steps batches of size on another goroutine,
// two ahead of the step, each with the epoch it came from.
func prefetchEpochs(ctx context.Context, src data.Source, epoch *atomic.Int64, size, steps int) (*data.Prefetcher[epochBatch], error) {
	if steps <= 0 {
		return data.Prefetch(ctx, 1, 0, func(context.Context) (epochBatch, error) { return epochBatch{}, io.EOF })
	}
	return data.Prefetch(ctx, 2, steps, func(ctx context.Context) (epochBatch, error) {
		b, err := src.Next(ctx, size)
		return epochBatch{b, epoch.Load()}, err
	})
}

// evaluate scores the model on the held-out split.
func evaluate(ctx context.Context, f *trainFlags, tr *nn.Trainer, opts data.Options, res *trainResult) error {
	if f.evalSamples == 0 {
		res.EvalSkipped = "--eval-samples 0"
		return nil
	}
	if sp, err := data.ParseSpec(f.data); err == nil && sp.FIFO() {
		res.EvalSkipped = "the data is a FIFO, whose held-out records went by with the training ones"
		return nil
	}
	opts.Split = data.SplitEval
	src, err := data.Open(f.data, opts)
	if err != nil {
		return err
	}
	defer src.Close()
	m, err := tr.Evaluate(ctx, src, f.batch, f.evalSamples)
	if err != nil {
		return fmt.Errorf("evaluate: %w", err)
	}
	res.EvalLoss, res.EvalSamples, res.AUC, res.Accuracy = m.Loss, m.Samples, m.AUC, m.Accuracy
	if bayes, ok := src.(interface{ BayesAUC(n int) (float64, error) }); ok && m.AUC > 0 {
		if res.BayesAUC, err = bayes.BayesAUC(m.Samples); err != nil {
			return fmt.Errorf("evaluate: %w", err)
		}
	}
	if m.Fit != nil {
		res.Regression = &Regression{MSE: m.Fit.MSE, R2: m.Fit.R2, Optimum: optimumOf(src)}
	}
	return nil
}

// optimumOf returns the optimal fit of a generator that knows it, else nil.
func optimumOf(src data.Source) *Optimum {
	g, ok := src.(interface {
		OptimalMSE() float64
		OptimalR2() float64
	})
	if !ok {
		return nil
	}
	return &Optimum{OptimalMSE: g.OptimalMSE(), OptimalR2: g.OptimalR2()}
}

func printTrainSummary(w io.Writer, r *trainResult) {
	pinned := ""
	if r.PinnedCPUs != nil {
		pinned = fmt.Sprintf(" pinned to CPUs %v", r.PinnedCPUs)
	}
	fmt.Fprintf(w, "model %s on %s, %s, %d threads%s, batch %d\n", r.Model, r.Data, r.Backend, r.Threads, pinned, r.Batch)
	if r.Samples == 0 {
		fmt.Fprintf(w, "steps %d  no training steps run\n", r.Steps)
	} else {
		fmt.Fprintf(w, "steps %d  samples %d  train loss %.4f  %.0f samples/s  (%.1f s)", r.Steps, r.Samples, r.Loss, r.SamplesPerS, r.Seconds)
		if r.Epochs > 1 {
			fmt.Fprintf(w, "  epoch %d of the data", r.Epochs)
		}
		fmt.Fprintln(w)
	}
	printHeldOut(w, r)
	if r.BadLines > 0 {
		fmt.Fprintf(w, "skipped %d malformed lines\n", r.BadLines)
	}
	if r.Checkpoint != "" {
		fmt.Fprintf(w, "checkpoint %s\n", r.Checkpoint)
	}
}

// printHeldOut prints the evaluation's line, or why there was none.
func printHeldOut(w io.Writer, r *trainResult) {
	if r.EvalSkipped != "" {
		fmt.Fprintf(w, "held-out: not evaluated: %s\n", r.EvalSkipped)
		return
	}
	fmt.Fprintf(w, "held-out: %d samples  loss %.4f", r.EvalSamples, r.EvalLoss)
	if r.AUC > 0 {
		fmt.Fprintf(w, "  AUC %.4f", r.AUC)
		if r.BayesAUC > 0 {
			fmt.Fprintf(w, " (Bayes-optimal %.4f)", r.BayesAUC)
		}
	}
	if r.Accuracy > 0 {
		fmt.Fprintf(w, "  accuracy %.4f", r.Accuracy)
	}
	if r.Regression != nil {
		printRegression(w, r.Regression)
	}
	fmt.Fprintln(w)
}

func printRegression(w io.Writer, r *Regression) {
	if r.Optimum == nil {
		fmt.Fprintf(w, "  MSE %.4f  R² %.4f", r.MSE, r.R2)
		return
	}
	fmt.Fprintf(w, "  MSE %.4f (optimal %.4f)  R² %.4f (optimal %.4f)", r.MSE, r.OptimalMSE, r.R2, r.OptimalR2)
}

// save writes the checkpoint and, beside it (data.MarksDir), the record
// marks this run noted in its data file, so that a run resuming from it
// moves to its data position instead of reading the file up to there.
func (f *trainFlags) save(tr *nn.Trainer) error {
	if err := saveCheckpoint(tr, f.checkpoint, f.batch); err != nil {
		return err
	}
	data.SaveMarks(f.data, filepath.Dir(f.checkpoint)) // at worst a resume reads the file as without them
	return nil
}

// loadMarks takes the record marks saved beside the checkpoint a run
// resumes from (save), saying so on w.
func loadMarks(f *trainFlags, w io.Writer) {
	n, err := data.LoadMarks(f.data, filepath.Dir(f.checkpoint))
	switch {
	case err != nil:
		fmt.Fprintf(w, "record marks beside the checkpoint not used (the data is read up to its position instead): %v\n", err)
	case n > 0:
		fmt.Fprintf(w, "data position found by %d record marks saved beside the checkpoint\n", n)
	}
}

// interrupted is what a run stopped by a signal returns, after writing the
// checkpoint (with --checkpoint) at the step it reached: a step always runs
// to its end, so that is a step boundary, and the same command resumes
// from it as from --checkpoint-every's.
func interrupted(tr *nn.Trainer, f *trainFlags, resumedFrom int64) error {
	step := tr.Opt.Step
	at := fmt.Sprintf("interrupted at step %d of %d", step, f.steps)
	switch {
	case f.checkpoint == "":
		return interruptError{fmt.Errorf("%s: nothing saved (no --checkpoint)", at)}
	case step == resumedFrom:
		return interruptError{fmt.Errorf("%s before a step was trained: %s left as it was", at, f.checkpoint)}
	}
	if err := f.save(tr); err != nil {
		return interruptError{fmt.Errorf("%s, and writing the checkpoint failed: %w", at, err)}
	}
	return interruptError{fmt.Errorf("%s: checkpoint of step %d written to %s; the same command resumes from it", at, step, f.checkpoint)}
}

// interruptError marks a run stopped by a signal (exit status 130).
type interruptError struct{ error }

func (interruptError) ExitStatus() int { return exitInterrupt }
func (e interruptError) Unwrap() error { return e.error }

// usageError marks errors in what the user gave us (exit status 2).
type usageError struct{ error }

func (usageError) ExitStatus() int { return exitUsage }
func (u usageError) Unwrap() error { return u.error }

// progress shows training progress: a redrawn bar on a terminal, a plain
// line every few seconds otherwise.
type progress struct {
	w        io.Writer
	total    int
	terminal bool
	last     time.Time
}

func newProgress(w io.Writer, total int) *progress {
	p := &progress{w: w, total: total}
	if f, ok := w.(*os.File); ok {
		p.terminal = term.IsTerminal(int(f.Fd()))
	}
	return p
}

func (p *progress) update(step int64, loss, rate float64) {
	every := 5 * time.Second
	if p.terminal {
		every = 100 * time.Millisecond
	}
	if time.Since(p.last) < every && int(step) != p.total {
		return
	}
	p.last = time.Now()
	if !p.terminal {
		fmt.Fprintf(p.w, "step %d/%d  loss %.4f  %.0f samples/s\n", step, p.total, loss, rate)
		return
	}
	const width = 30
	filled := width * int(step) / max(p.total, 1)
	bar := make([]byte, width)
	for i := range bar {
		bar[i] = '.'
		if i < filled {
			bar[i] = '#'
		}
	}
	fmt.Fprintf(p.w, "\r[%s] %d/%d  loss %.4f  %.0f samples/s ", bar, step, p.total, loss, rate)
}

// line prints a message of its own, below a terminal's bar.
func (p *progress) line(msg string) {
	if p.terminal {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintln(p.w, msg)
}

func (p *progress) done() {
	if p.terminal {
		fmt.Fprintln(p.w)
	}
}
