package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

func init() {
	register("profile", "measure per-layer oct/odt/alpha/beta on this machine and write a problem file; forget a coordinator's stored ones", runProfile)
}

type profileFlags struct {
	model, catalog, typ, out string
	into                     string // an earlier profile whose measured types are kept
	batch, unitThreads, reps int
	units                    []int
	// The synchronisation measured by running the stage (profile_sync.go):
	// how dense parameters sync, the data the stage reads, and how many
	// steps are timed (0: none, only the layers and the activations).
	denseSync, data string
	syncSteps       int
	syncRounds      int
	// syncInProcess runs a stage's replicas as goroutines of this process
	// instead of one process each, as node daemons run them.
	syncInProcess bool
	// pin deals the CPUs to the replica processes as `heterps run` deals
	// them to its node daemons.
	pin bool
	// submit sends the measured types to the coordinator coord reaches,
	// which stores them per (model, type) and plans the model's jobs on
	// them (PUT /v1/profiles/{model}).
	submit bool
	coord  coordFlags
	// device is where the layers are timed: this machine's CPU (k units of
	// unit-threads each), or one CUDA GPU (one unit).
	device device
}

func parseProfileFlags(args []string, stderr io.Writer) (*profileFlags, error) {
	f := &profileFlags{}
	fs := flag.NewFlagSet("profile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.model, "model", "ctrdnn", "model: zoo name or TOML file")
	fs.StringVar(&f.catalog, "catalog", "local", "resource catalog: a file, or a built-in one ("+strings.Join(config.ExampleNames(config.ExampleCatalogs), ", ")+")")
	fs.StringVar(&f.typ, "type", "", "catalog type this machine's CPU measures (default: the first cpu type)")
	fs.IntVar(&f.unitThreads, "unit-threads", 1, "threads of one unit of the measured type")
	fs.IntVar(&f.batch, "batch", 256, "profiling batch size B_o")
	fs.IntVar(&f.reps, "reps", 5, "repetitions; the fastest is kept")
	units := fs.String("units", "1,2", "unit counts to time, for fitting alpha (Amdahl)")
	fs.StringVar(&f.into, "into", "", "an earlier profile of the model at the same --batch: keep the types it measured (another --type), replacing only this one")
	fs.StringVar(&f.out, "out", "", "write the problem file here (default: standard output)")
	fs.StringVar(&f.denseSync, "dense-sync", config.DenseSyncAuto, "how the job's data-parallel stages sync dense parameters, whose synchronisation is folded into oct and alpha: ps, allreduce, or auto (both measured, the faster folded and named in the profile, for jobs with dense_sync = \"auto\")")
	fs.StringVar(&f.data, "data", "synthetic:1", "data the measured stage reads (its ids decide the rows pulled and pushed), as the job's data")
	fs.IntVar(&f.syncRounds, "sync-rounds", 3, "rounds of stage runs over the ks; each k keeps its median round")
	fs.IntVar(&f.syncSteps, "sync-steps", 100, "steps of the whole model as one stage of k replicas (k from --units) to time, after 3 warm-up steps; 0 measures no synchronisation")
	fs.BoolVar(&f.pin, "pin", true, "pin each replica process of the synchronisation runs to as many of this machine's CPUs as a unit has threads, dealt in turn, and run its steps on a thread niced as heterpsd's compute thread is (compute_nice) where replicas wait on each other: as `heterps run` runs its node daemons")
	fs.BoolVar(&f.syncInProcess, "sync-in-process", false, "run the k replicas of the synchronisation runs in this process instead of one process each (as k node daemons run them; processes on one machine also share its cores, which goroutines of one process share more cheaply)")
	fs.TextVar(&f.device, "device", device{}, "where the layers are timed: cpu, or cuda[:N] (GPU N is one unit of --type; a CUDA build: make build-cuda)")
	fs.BoolVar(&f.submit, "submit", false, "also send the measured types (this one and those kept by --into) to the coordinator, which plans the model's jobs on them")
	f.coord.add(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("profile: unexpected argument %q", fs.Arg(0))
	}
	for _, s := range strings.Split(*units, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || k < 1 || k > maxLocalDaemons {
			return nil, fmt.Errorf("profile: --units: %q: want a unit count in 1..%d (k units are timed as k replica processes on this machine)", s, maxLocalDaemons)
		}
		f.units = append(f.units, k)
	}
	slices.Sort(f.units)
	if f.units[0] != 1 {
		return nil, fmt.Errorf("profile: --units %v: must include 1 (the layers are measured on one unit)", f.units)
	}
	if f.batch <= 0 || f.unitThreads <= 0 || f.reps <= 0 || f.syncSteps < 0 || f.syncRounds < 1 {
		return nil, errors.New("profile: --batch, --unit-threads, --reps and --sync-rounds must be > 0, --sync-steps >= 0")
	}
	if f.denseSync != config.DenseSyncPS && f.denseSync != config.DenseSyncAllreduce && f.denseSync != config.DenseSyncAuto {
		return nil, fmt.Errorf("profile: --dense-sync %q: want ps, allreduce or auto", f.denseSync)
	}
	if f.device.cuda {
		if err := cudaProfileFlags(f, fs); err != nil {
			return nil, err
		}
	} else if f.unitThreads > runtime.NumCPU() {
		// One unit is the least profiled; a unit wider than the machine
		// would be timed on fewer threads than it has and filed as it.
		return nil, fmt.Errorf("profile: --unit-threads %d: one unit needs %d CPUs, this machine has %d", f.unitThreads, f.unitThreads, runtime.NumCPU())
	}
	return f, nil
}

// cudaProfileFlags checks --device cuda against the rest. One GPU is one
// unit: the layers are timed on GPU N alone, and k units are k replicas on
// GPUs N..N+k-1 — one heterpsd per GPU, as a GPU type's nodes run — in the
// synchronisation runs, which are asked for with --sync-steps (without it
// a GPU profile runs none: that path has not run on a GPU yet) and which
// alone can fit alpha, so unit counts above 1 need them.
func cudaProfileFlags(f *profileFlags, fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["unit-threads"] {
		return fmt.Errorf("profile: --unit-threads is for --device cpu, not %s", f.device)
	}
	if !set["units"] {
		f.units = []int{1}
	}
	if !set["sync-steps"] {
		f.syncSteps = 0
	}
	if len(f.units) > 1 && f.syncSteps == 0 {
		return fmt.Errorf("profile: --units %v with --device %s: k GPUs are timed as k replicas of the whole stage, one GPU each (GPUs %d..%d); give --sync-steps N for those runs", f.units, f.device, f.device.gpu, f.device.gpu+f.units[len(f.units)-1]-1)
	}
	return nil
}

func runProfile(args []string) int {
	if len(args) > 0 && args[0] == "forget" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		return runForgetProfiles(ctx, args[1:], os.Stdout, os.Stderr)
	}
	f, err := parseProfileFlags(args, os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return fail(exitUsage, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	warnOpenBLASCore(os.Stderr)
	if err := profile(ctx, f, os.Stdout, os.Stderr); err != nil {
		return fail(exitFailure, err)
	}
	return exitOK
}

// profile estimates every catalog type from its device descriptor, then
// replaces the measured type's columns with measurements on this machine.
func profile(ctx context.Context, f *profileFlags, stdout, stderr io.Writer) error {
	cfg, err := config.LoadModel(f.model)
	if err != nil {
		return usageError{err}
	}
	if !f.device.cuda {
		if err := checkHostMemory(cfg, f.batch, availableMemory); err != nil {
			return usageError{err}
		}
	}
	cat, err := config.LoadCatalog(f.catalog)
	if err != nil {
		return usageError{err}
	}
	kind := config.KindCPU
	if f.device.cuda {
		kind = config.KindGPU
	}
	col, err := measuredColumn(cat, f.typ, kind)
	if err != nil {
		return usageError{err}
	}
	spec := sched.DefaultEstimateSpec()
	spec.ProfileBatch = f.batch
	prob, err := sched.EstimateProblem(cfg.Shapes(), cat, spec)
	if err != nil {
		return err
	}
	var before []string
	if f.into != "" {
		if before, err = measuredBefore(f.into, prob); err != nil {
			return usageError{err}
		}
	}
	estimate := cloneColumn(prob, col)
	gpu, release, err := profileGPU(f)
	if err != nil {
		return err
	}
	defer release()
	if err := measureCompute(cfg, f, prob, col, gpu); err != nil {
		return err
	}
	if err := measureTransfer(ctx, f, prob, col, gpu); err != nil {
		return err
	}
	var folded []string
	if f.syncSteps > 0 {
		if folded, err = measureSync(ctx, cfg, f, prob, col); err != nil {
			return err
		}
	}
	if err := prob.Validate(); err != nil {
		return fmt.Errorf("profile: measured problem: %w", err)
	}
	printProfile(stderr, prob, col, estimate)
	for _, line := range folded {
		fmt.Fprintln(stderr, line)
	}
	header := append(before, folded...)
	if err := writeProfile(f, cat, col, prob, header, stdout); err != nil {
		return err
	}
	if f.submit {
		return submitProfile(ctx, f, cfg.Name, measuredOnly(prob, measuredTypes(cat, col, header)), stderr)
	}
	return nil
}

// measuredBefore copies into prob the columns an earlier profile (--into)
// measured, and returns that file's header lines, which say how. The file
// must be a profile of the same model (layer count) at the same B_o.
func measuredBefore(path string, prob *config.Problem) ([]string, error) {
	old, err := config.LoadProblem(path)
	if err != nil {
		return nil, fmt.Errorf("profile: --into: %w", err)
	}
	if len(old.Layers) != len(prob.Layers) || old.ProfileBatch != prob.ProfileBatch {
		return nil, fmt.Errorf("profile: --into %s: %d layers at B_o = %d, this profile has %d at %d", path,
			len(old.Layers), old.ProfileBatch, len(prob.Layers), prob.ProfileBatch)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("profile: --into: %w", err)
	}
	var header []string
	for line := range strings.Lines(string(src)) {
		if !strings.HasPrefix(line, "# ") {
			break
		}
		text := strings.TrimSpace(strings.TrimPrefix(line, "# "))
		if !strings.HasPrefix(line, config.ProfileEstimatedPrefix) { // this file says which types are estimated
			header = append(header, "earlier: "+text)
		}
	}
	for t, typ := range prob.Types {
		oc := slices.IndexFunc(old.Types, func(o config.ProblemType) bool { return o.Name == typ.Name })
		if oc < 0 || !measuredIn(header, typ.Name) {
			continue
		}
		for l := range prob.Layers {
			m, p := old.Layers[l], &prob.Layers[l]
			p.OCT[t], p.ODT[t], p.Alpha[t], p.Beta[t] = m.OCT[oc], m.ODT[oc], m.Alpha[oc], m.Beta[oc]
		}
	}
	return header, nil
}

// measuredIn reports whether a profile's header says it measured type.
func measuredIn(header []string, typ string) bool {
	return slices.ContainsFunc(header, func(l string) bool {
		return strings.Contains(l, "measured on this machine: "+typ+" ")
	})
}

// measuredTypes is the catalog types a profile measured: the one at col,
// and those an earlier profile's header lines (--into) say were measured.
func measuredTypes(cat *config.Catalog, col int, header []string) []string {
	var out []string
	for i, t := range cat.Types {
		if i == col || measuredIn(header, t.Name) {
			out = append(out, t.Name)
		}
	}
	return out
}

// measuredColumn is the catalog type --type names, by default the first
// of kind (cpu for --device cpu, gpu for cuda); a named type must be of
// that kind, so that a CPU's times are never filed under a GPU type nor a
// GPU's under a CPU type, unless the catalog emulates its GPU types on
// CPU nodes.
func measuredColumn(cat *config.Catalog, name, kind string) (int, error) {
	for i, t := range cat.Types {
		emulated := cat.EmulateGPUs && kind == config.KindCPU && t.Kind == config.KindGPU
		switch {
		case name == "" && t.Kind == kind:
			return i, nil
		case t.Name == name && t.Kind != kind && !emulated:
			return 0, fmt.Errorf("profile: type %q is a %s type; --device measures a %s", name, t.Kind, kind)
		case t.Name == name:
			return i, nil
		}
	}
	if name == "" {
		return 0, fmt.Errorf("profile: the catalog has no %s type to measure", kind)
	}
	return 0, fmt.Errorf("profile: the catalog has no type %q", name)
}

// cloneColumn keeps the roofline estimate of one type for comparison.
func cloneColumn(p *config.Problem, col int) []config.ProblemLayer {
	out := make([]config.ProblemLayer, len(p.Layers))
	for i, l := range p.Layers {
		out[i] = config.ProblemLayer{Name: l.Name, OCT: []float64{l.OCT[col]}, ODT: []float64{l.ODT[col]},
			Alpha: []float64{l.Alpha[col]}, Beta: []float64{l.Beta[col]}}
	}
	return out
}

// measureCompute times every layer's forward+backward at B_o with k units'
// threads for each k, sets oct from k = 1 and fits alpha to the rest:
// t_k = t_1 ((1-alpha) + alpha/k). With gpu it times the layers on that
// GPU, once: k GPUs are k replicas, which only the synchronisation runs
// measure.
func measureCompute(cfg *config.Model, f *profileFlags, prob *config.Problem, col int, gpu native.Backend) error {
	batch := randomBatch(cfg, f.batch)
	var model *nn.Model
	var t1 []float64
	fits := make([][]float64, len(prob.Layers))
	for _, k := range f.units {
		threads := k * f.unitThreads
		if gpu != nil && k > 1 {
			continue
		}
		if gpu == nil && threads > runtime.NumCPU() {
			fmt.Fprintf(os.Stderr, "profile: skipping %d units: %d threads exceed this machine's %d CPUs\n", k, threads, runtime.NumCPU())
			continue
		}
		b, err := unitBackend(gpu, threads)
		if err != nil {
			return err
		}
		if model == nil {
			if model, err = nn.Build(b, cfg, 1); err != nil {
				return err
			}
		}
		times, err := model.ProfileLayers(&nn.Step{Backend: b, Batch: batch, Train: true}, f.reps)
		if err != nil {
			return err
		}
		for i, lt := range times {
			t := (lt.Forward + lt.Backward).Seconds()
			if k == 1 {
				t1 = append(t1, t)
				continue
			}
			fits[i] = append(fits[i], amdahlAlpha(t1[i], t, k))
		}
	}
	for i := range prob.Layers {
		prob.Layers[i].OCT[col] = round4(t1[i])
		if len(fits[i]) > 0 {
			prob.Layers[i].Alpha[col] = round4(mean(fits[i]))
		}
	}
	return nil
}

// unitBackend is what k units are timed on: the GPU, or the CPU with
// threads threads.
func unitBackend(gpu native.Backend, threads int) (native.Backend, error) {
	if gpu != nil {
		return gpu, nil
	}
	cpu, err := native.NewCPU(native.CPUOptions{Threads: threads})
	if err != nil {
		return nil, err
	}
	return cpu, nil
}

// profileGPU opens the GPU --device names, which both the layers' times
// and the transfers' device copies are measured on; nil for --device cpu.
// A build without CUDA refuses it (exit status 2). release frees it.
func profileGPU(f *profileFlags) (gpu native.Backend, release func(), err error) {
	if !f.device.cuda {
		return nil, func() {}, nil
	}
	b, err := newCUDATrainBackend(f.device.gpu)
	if err != nil {
		return nil, nil, fmt.Errorf("profile: --device %s: %w", f.device, err)
	}
	return b, func() { _ = b.Close() }, nil
}

// amdahlAlpha solves t_k = t_1 ((1-a) + a/k) for a, clamped to [0, 1].
func amdahlAlpha(t1, tk float64, k int) float64 {
	a := (1 - tk/t1) / (1 - 1/float64(k))
	return math.Min(1, math.Max(0, a))
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func round4(v float64) float64 {
	if v == 0 {
		return 0
	}
	scale := math.Pow(10, 4-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*scale) / scale
}

// randomBatch makes a batch shaped like the model's input.
func randomBatch(cfg *config.Model, size int) *data.Batch {
	rng := rand.New(rand.NewPCG(1, 2))
	in := cfg.Input
	b := &data.Batch{Size: size, NumDense: in.Dense, Slots: in.Slots, Offsets: make([]int64, 1, size*in.Slots+1)}
	for range size {
		for range in.Slots {
			b.IDs = append(b.IDs, rng.Int64N(max(in.Vocab, 1)))
			b.Offsets = append(b.Offsets, int64(len(b.IDs)))
		}
		for range in.Dense {
			b.Dense = append(b.Dense, rng.Float32())
		}
		b.Labels = append(b.Labels, float32(rng.IntN(2)))
		if in.Classes > 0 {
			b.Classes = append(b.Classes, rng.Int64N(int64(in.Classes)))
		}
	}
	return b
}

// measureTransfer times, over an authenticated loopback wire connection, a
// round trip of each layer's output activations and their gradients (odt),
// and of a one-float message (the latency that more units do not shrink:
// beta = 1 - latency/odt). With a gpu, odt also holds the fastest copies
// of the output activations from the device and of their gradients to it
// (the stage boundary's host side is where the wire starts).
func measureTransfer(ctx context.Context, f *profileFlags, prob *config.Problem, col int, gpu native.Backend) error {
	pair, err := newLoopbackPair()
	if err != nil {
		return fmt.Errorf("profile: transfer: %w", err)
	}
	defer pair.close()
	latency, err := pair.bestRoundTrip(ctx, 1, f.reps)
	if err != nil {
		return err
	}
	for i := range prob.Layers {
		width := outWidth(prob, i)
		rt, err := pair.bestRoundTrip(ctx, f.batch*width, f.reps)
		if err != nil {
			return err
		}
		if gpu != nil {
			copies, err := bestCrossing(gpu, f.batch*width, f.reps)
			if err != nil {
				return err
			}
			rt += copies
		}
		prob.Layers[i].ODT[col] = round4(rt)
		prob.Layers[i].Beta[col] = round4(math.Max(0, 1-latency/rt))
	}
	return nil
}

// bestCrossing times a download of n floats from b and an upload of n to
// it, reps times after a warm-up, and returns the fastest in seconds.
func bestCrossing(b native.Backend, n, reps int) (float64, error) {
	host := make([]float32, n)
	dev := b.Alloc(n)
	best := math.Inf(1)
	for range reps + 1 {
		start := time.Now()
		if err := b.Download(host, dev); err != nil {
			return 0, fmt.Errorf("profile: device copy: %w", err)
		}
		if err := b.Upload(dev, host); err != nil {
			return 0, fmt.Errorf("profile: device copy: %w", err)
		}
		if err := native.Sync(b); err != nil { // an upload may return before its copy is done
			return 0, fmt.Errorf("profile: device copy: %w", err)
		}
		best = math.Min(best, time.Since(start).Seconds())
	}
	return best, nil
}

// outWidth is the floats per sample layer i sends on: the next layer's
// input size (the last layer sends its output, one value per class).
func outWidth(prob *config.Problem, i int) int {
	if i+1 < len(prob.Layers) && prob.Layers[i+1].InputSize > 0 {
		return int(prob.Layers[i+1].InputSize)
	}
	return 1
}

type loopbackPair struct{ a, b *wire.TCPTransport }

func newLoopbackPair() (*loopbackPair, error) {
	secret := make([]byte, 32)
	for i := range secret {
		secret[i] = byte(rand.Uint32())
	}
	a, b, err := wire.LoopbackPair(secret, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	return &loopbackPair{a: a, b: b}, nil
}

func (p *loopbackPair) close() {
	p.a.Close()
	p.b.Close()
}

// bestRoundTrip sends n floats a -> b and n floats back, reps times, and
// returns the fastest round trip in seconds.
func (p *loopbackPair) bestRoundTrip(ctx context.Context, n, reps int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	msg := &wire.Message{Type: wire.MsgActivation, Tensors: []wire.Tensor{wire.F32Tensor(make([]float32, n), 1, n)}}
	best := math.Inf(1)
	for range reps + 1 { // the first trip warms up the connection
		start := time.Now()
		if err := p.a.Send(ctx, "b", 1, msg); err != nil {
			return 0, err
		}
		in, err := p.b.Recv(ctx, "a", 1)
		if err != nil {
			return 0, err
		}
		in.Release()
		if err := p.b.Send(ctx, "a", 2, msg); err != nil {
			return 0, err
		}
		back, err := p.a.Recv(ctx, "b", 2)
		if err != nil {
			return 0, err
		}
		back.Release()
		best = math.Min(best, time.Since(start).Seconds())
	}
	return best, nil
}

func printProfile(w io.Writer, p *config.Problem, col int, estimate []config.ProblemLayer) {
	fmt.Fprintf(w, "measured type %s at B_o = %d (roofline estimate in brackets)\n", p.Types[col].Name, p.ProfileBatch)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "layer\tkind\toct s\t[est]\talpha\t[est]\todt s\t[est]\tbeta\t[est]\t")
	for i, l := range p.Layers {
		e := estimate[i]
		fmt.Fprintf(tw, "%s\t%s\t%.3g\t%.3g\t%.3f\t%.3f\t%.3g\t%.3g\t%.3f\t%.3f\t\n", l.Name, l.Kind,
			l.OCT[col], e.OCT[0], l.Alpha[col], e.Alpha[0], l.ODT[col], e.ODT[0], l.Beta[col], e.Beta[0])
	}
	tw.Flush()
}

// writeProfile writes the problem file with a header that says which type
// was measured and which are estimated.
func writeProfile(f *profileFlags, cat *config.Catalog, col int, p *config.Problem, folded []string, stdout io.Writer) error {
	body, err := toml.Marshal(p)
	if err != nil {
		return err
	}
	measured := measuredTypes(cat, col, folded)
	var estimated []string
	for _, t := range cat.Types {
		if !slices.Contains(measured, t.Name) {
			estimated = append(estimated, t.Name)
		}
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "# heterps profile --model %s --catalog %s, B_o = %d, %s\n", f.model, f.catalog, f.batch, time.Now().UTC().Format(time.RFC3339))
	if f.device.cuda {
		alpha := "alpha kept from the roofline estimate"
		if len(folded) > 0 && len(f.units) > 1 {
			alpha = "alpha from the stage runs on one GPU a replica"
		}
		fmt.Fprintf(&out, "# measured on this machine: %s (one unit = GPU %s; %s; odt over loopback wire plus the copies to and from the GPU)\n", cat.Types[col].Name, f.device, alpha)
	} else {
		fmt.Fprintf(&out, "# measured on this machine: %s (%d thread(s) per unit, units %v; odt over loopback wire)\n", cat.Types[col].Name, f.unitThreads, f.units)
	}
	if len(estimated) > 0 {
		fmt.Fprintf(&out, "%s%s\n", config.ProfileEstimatedPrefix, strings.Join(estimated, ", "))
	}
	for _, line := range folded {
		fmt.Fprintf(&out, "# %s\n", line)
	}
	out.Write(body)
	if f.out == "" {
		_, err = stdout.Write(out.Bytes())
		return err
	}
	return writeWhole(f.out, out.Bytes()) // --out may be the file --into read
}
