package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/pipeline"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

// The synchronisation a stage really does, measured by running it. A
// layer's forward and backward (measureCompute) is not all a stage spends
// on a step: it pulls its embedding rows from the parameter servers and
// pushes their gradients, and its dense parameters go through the servers
// (dense_sync = "ps") or a ring allreduce among its replicas. stageRun
// trains the whole model as one data-parallel stage of k replicas for a few
// steps in this process (stageRunProcesses, the default, in k processes:
// profile_replicas.go), on the runtime's own code: pipeline.Worker per
// replica (one unit's threads each), one BSP parameter-server shard
// (ps.Shard behind ps.Service on a loopback wire listener), replica 0
// calling the shard directly as a node hosting its job's shard does and the
// others through ps.Client over the wire, the ring on wire transports, and
// the job's data generator. Its wall time per step, measured after warm-up
// steps, is what a cluster of k one-unit nodes of this machine reaches.

// stageTimes is what stageRun measured for k replicas: the wall time of a
// step and, per replica, the mean of where its steps' time went.
type stageTimes struct {
	k        int
	step     float64 // seconds per step, wall
	replicas []pipeline.Result
	pids     []int // the replicas' processes, when each had its own
	// Where each replica process ran, when --pin pinned it: its CPUs, and
	// the nice of the thread that ran its steps ("" and -1 otherwise).
	cpus  []string
	nices []int
}

// stageSetup is what stageRun needs besides the replica count.
type stageSetup struct {
	model     *config.Model
	data      string
	batch     int // the stage's batch, split over the replicas
	denseSync string
	warmup    int
	steps     int
	// backend opens replica i's unit (cpuUnits, gpuUnits) and the function
	// that releases it.
	backend func(replica int) (native.Backend, func(), error)
	// For replicas in processes of their own (stageRunProcesses): the
	// model as --model names it, and the flags that open the same units.
	modelRef string
	unitArgs []string
	// pinThreads, when not 0, pins each replica process to that many of
	// this machine's CPUs, dealt in turn as `heterps run` deals them to its
	// node daemons (pinOffers).
	pinThreads int
}

// splits checks that the stage's batch gives each of k replicas a row.
func (s stageSetup) splits(k int) error {
	if s.batch < k {
		return fmt.Errorf("profile: batch %d cannot be split over %d replicas", s.batch, k)
	}
	return nil
}

// cpuUnits gives every replica a CPU backend of threads threads.
func cpuUnits(threads int) func(int) (native.Backend, func(), error) {
	return func(int) (native.Backend, func(), error) {
		b, err := native.NewCPU(native.CPUOptions{Threads: threads})
		return b, func() {}, err
	}
}

// gpuUnits gives replica i GPU first+i, as one heterpsd per GPU has it.
func gpuUnits(first int) func(int) (native.Backend, func(), error) {
	return func(i int) (native.Backend, func(), error) {
		b, err := newCUDATrainBackend(first + i)
		if err != nil {
			return nil, nil, fmt.Errorf("GPU %d: %w", first+i, err)
		}
		return b, func() { _ = b.Close() }, nil
	}
}

const profileJob = "profile"

// stageRun runs s on k replicas and times its steps.
func stageRun(ctx context.Context, s stageSetup, k int) (*stageTimes, error) {
	if err := s.splits(k); err != nil {
		return nil, err
	}
	// k node daemons would each schedule goroutines on every CPU: so may
	// the k replicas here, or they would queue behind one another for Ps.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), k*runtime.NumCPU())))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &stageRunner{setup: s, k: k}
	defer r.close()
	if err := r.startShard(ctx); err != nil {
		return nil, fmt.Errorf("profile: %d replicas: parameter server: %w", k, err)
	}
	if err := r.startWorkers(); err != nil {
		return nil, fmt.Errorf("profile: %d replicas: %w", k, err)
	}
	t, err := r.train(ctx)
	if err != nil {
		return nil, fmt.Errorf("profile: %d replicas, dense_sync %s: %w", k, s.denseSync, err)
	}
	return t, nil
}

// stageRunner owns what one stageRun builds; close releases it all.
type stageRunner struct {
	setup   stageSetup
	k       int
	layers  pipeline.Range
	shard   *ps.Shard
	psAddr  string
	serving sync.WaitGroup
	closers []func()
	workers []*pipeline.Worker
	// A replica process's CPUs, when pinned, and how much runStepsNiced
	// lowers its steps' thread.
	pinned      []int
	computeNice int
}

func (r *stageRunner) close() {
	for _, w := range r.workers {
		w.Close()
	}
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
	r.serving.Wait()
}

func (r *stageRunner) allreduce() bool { return r.setup.denseSync == config.DenseSyncAllreduce }

func (r *stageRunner) totalSteps() int64 { return int64(r.setup.warmup + r.setup.steps) }

func quietWire(node string) wire.Config {
	return wire.Config{NodeID: node, Plain: true, Logger: slog.New(slog.DiscardHandler), DialTimeout: 5 * time.Second}
}

// declare declares the model's parameters as a node hosting the job's
// only shard does: the stage's layers, and the tables and blocks of its
// shard.
func (r *stageRunner) declare() ([]ps.TableSpec, []ps.BlockSpec, error) {
	declared, err := pipeline.DeclareModel(native.MustCPU(), r.setup.model, 1)
	if err != nil {
		return nil, nil, err
	}
	r.layers = pipeline.Range{First: 0, Last: declared.NumLayers() - 1}
	return pipeline.PSParams(declared, []pipeline.Range{r.layers}, r.totalSteps())
}

// startShard serves the job's only shard on a loopback listener until ctx
// ends.
func (r *stageRunner) startShard(ctx context.Context) error {
	tables, blocks, err := r.declare()
	if err != nil {
		return err
	}
	allreduce := []bool{r.allreduce()}
	pipeline.MirrorBlocks(blocks, 1, allreduce)
	cfgs := pipeline.ShardConfigs(pipeline.ShardSpec{Job: profileJob, Model: r.setup.model.Name, Shards: 1, Mode: ps.BSP,
		Replicas: []int{r.k}, Allreduce: allreduce, WaitTimeout: time.Minute, Backend: native.MustCPU()}, tables, blocks)
	if r.shard, err = ps.NewShard(cfgs[0]); err != nil {
		return err
	}
	r.closers = append(r.closers, func() { r.shard.Close() })
	svc, err := ps.NewService(ps.ServiceOptions{Logger: slog.New(slog.DiscardHandler)}, r.shard)
	if err != nil {
		return err
	}
	ln, err := wire.Listen("127.0.0.1:0", quietWire("ps"))
	if err != nil {
		return err
	}
	r.closers = append(r.closers, func() { ln.Close() })
	r.psAddr = ln.Addr().String()
	r.serving.Go(func() { svc.Serve(ctx, ln) })
	return nil
}

// replicaNames are the replicas' node names, which the ring peers by.
func replicaNames(k int) []string {
	names := make([]string, k)
	for i := range names {
		names[i] = fmt.Sprintf("replica-%d", i)
	}
	return names
}

// shareOf splits a batch over k replicas, the first ones a row more when
// it does not divide.
func shareOf(batch, k int) pipeline.Share {
	share := pipeline.Share{Members: make([]int, k), Batches: make([]int, k)}
	for i := range k {
		share.Members[i] = i
		share.Batches[i] = batch / k
		if i < batch%k {
			share.Batches[i]++
		}
	}
	return share
}

// startWorkers builds every replica's worker, with its client, data and,
// for allreduce, its ring transport.
func (r *stageRunner) startWorkers() error {
	names := replicaNames(r.k)
	trs, err := r.ringTransports(names)
	if err != nil {
		return err
	}
	share := shareOf(r.setup.batch, r.k)
	for i := range r.k {
		var tr *wire.TCPTransport
		if trs != nil {
			tr = trs[i]
		}
		w, err := r.worker(i, share, names, tr)
		if err != nil {
			return fmt.Errorf("replica %d: %w", i, err)
		}
		r.workers = append(r.workers, w)
	}
	return nil
}

// ringTransports are the replicas' wire transports, every pair peered,
// when the stage syncs by allreduce; nil otherwise.
func (r *stageRunner) ringTransports(names []string) ([]*wire.TCPTransport, error) {
	if !r.ringed() {
		return nil, nil
	}
	trs := make([]*wire.TCPTransport, r.k)
	addrs := make([]string, r.k)
	for i, n := range names {
		t, err := r.ringTransport(n)
		if err != nil {
			return nil, err
		}
		trs[i], addrs[i] = t, t.Addr().String()
	}
	for i, t := range trs {
		if err := peerRing(t, i, names, addrs); err != nil {
			return nil, err
		}
	}
	return trs, nil
}

// ringed says whether the replicas reduce among themselves.
func (r *stageRunner) ringed() bool { return r.allreduce() && r.k > 1 }

// ringTransport is one replica's ring transport on a loopback port, closed
// with the runner.
func (r *stageRunner) ringTransport(name string) (*wire.TCPTransport, error) {
	t, err := wire.NewTCPTransport("127.0.0.1:0", quietWire(name))
	if err != nil {
		return nil, err
	}
	r.closers = append(r.closers, func() { t.Close() })
	return t, nil
}

// peerRing tells replica self's transport where every other replica's is.
func peerRing(t *wire.TCPTransport, self int, names, addrs []string) error {
	for j, n := range names {
		if j == self {
			continue
		}
		if err := t.AddPeer(n, addrs[j]); err != nil {
			return err
		}
	}
	return nil
}

func (r *stageRunner) worker(i int, share pipeline.Share, names []string, tr *wire.TCPTransport) (*pipeline.Worker, error) {
	cfg := r.setup.model
	backend, release, err := r.setup.backend(i)
	if err != nil {
		return nil, err
	}
	r.closers = append(r.closers, release)
	model, err := pipeline.BuildStageModel(backend, cfg, 1, r.layers)
	if err != nil {
		return nil, err
	}
	client, err := ps.NewClient(ps.ClientConfig{Job: profileJob, Stage: 0, Replica: i, Shards: 1, Timeout: time.Minute,
		Dial: func(ctx context.Context, _ int) (*wire.Conn, error) {
			return wire.Dial(ctx, r.psAddr, quietWire(names[i]+"-ps"), "ps")
		},
		Local: func(int) *ps.Shard {
			if i == 0 {
				return r.shard
			}
			return nil
		}})
	if err != nil {
		return nil, err
	}
	r.closers = append(r.closers, func() { client.Close() })
	src, err := data.Open(r.setup.data, data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain})
	if err != nil {
		return nil, err
	}
	r.closers = append(r.closers, func() { src.Close() })
	batch := share.Batches[i]
	wc := pipeline.Config{Job: profileJob, Stage: 0, Stages: 1, Replica: i, Layers: r.layers, Model: model, Backend: backend,
		PS: client, Mode: ps.BSP, Share: share, LastStep: r.totalSteps(), StepTimeout: time.Minute,
		// As node daemons run them: a sole replica whose server is in its
		// process waits on no other and does not overlap (node/compute.go).
		OverlapSteps: r.k > 1,
		Batches:      func(ctx context.Context, _ int64) (*data.Batch, error) { return src.Next(ctx, batch) }}
	if r.allreduce() {
		// As node daemons run it, replica 0 relieved as the coordinator
		// relieves a replica whose node hosts a shard.
		wc.Allreduce = &pipeline.Allreduce{Peers: names, TotalSteps: r.totalSteps(), ShardOptimiser: true, Relieve: []int{0}}
		if tr != nil {
			wc.Allreduce.Transport = tr
		}
	}
	return pipeline.NewWorker(wc)
}

// replicaRun is what one replica's timed steps took: when the first began
// and the last returned, and where their time went, summed.
type replicaRun struct {
	Started, Ended time.Time
	Sum            pipeline.Result
}

// runSteps runs w's warm-up and timed steps.
func (r *stageRunner) runSteps(ctx context.Context, w *pipeline.Worker) (replicaRun, error) {
	var run replicaRun
	for step := int64(1); step <= r.totalSteps(); step++ {
		if step == int64(r.setup.warmup)+1 {
			run.Started = time.Now()
		}
		res, err := w.Step(ctx, step)
		if err != nil {
			return run, err
		}
		if step > int64(r.setup.warmup) {
			addResult(&run.Sum, res)
		}
	}
	run.Ended = time.Now()
	return run, nil
}

// train runs every replica's steps at once and times them (stageTimesOf).
func (r *stageRunner) train(ctx context.Context) (*stageTimes, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	runs := make([]replicaRun, r.k)
	errs := make([]error, r.k)
	var wg sync.WaitGroup
	for i, w := range r.workers {
		wg.Go(func() {
			if runs[i], errs[i] = r.runSteps(ctx, w); errs[i] != nil {
				cancel() // the others would wait for this replica's pushes
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return stageTimesOf(runs, r.setup.steps), nil
}

// stageTimesOf is the stage's step time, the wall time of the timed steps
// over their number as the slowest replica sets it (BSP holds the others
// to it), and each replica's mean step.
func stageTimesOf(runs []replicaRun, steps int) *stageTimes {
	t := &stageTimes{k: len(runs), replicas: make([]pipeline.Result, len(runs))}
	first := slices.MinFunc(runs, func(a, b replicaRun) int { return a.Started.Compare(b.Started) }).Started
	last := slices.MaxFunc(runs, func(a, b replicaRun) int { return a.Ended.Compare(b.Ended) }).Ended
	t.step = last.Sub(first).Seconds() / float64(steps)
	for i, run := range runs {
		t.replicas[i] = run.Sum
		scaleResult(&t.replicas[i], steps)
	}
	return t
}

func addResult(sum *pipeline.Result, r pipeline.Result) {
	sum.Samples += r.Samples
	sum.Input += r.Input
	sum.Pull += r.Pull
	sum.Compute += r.Compute
	sum.Push += r.Push
}

func scaleResult(r *pipeline.Result, steps int) {
	n := time.Duration(steps)
	r.Samples /= steps
	r.Input /= n
	r.Pull /= n
	r.Compute /= n
	r.Push /= n
}

// syncWarmup is the steps a stage run trains before timing: connections
// come up and the first batches' rows are created.
const syncWarmup = 3

// measureSync runs the whole model as one stage of k replicas for every k
// of --units at the profiling batch, and folds what the steps took beyond
// the layers' compute into the measured type's oct and alpha. It returns
// the lines that say what was folded, for the file's header.
func measureSync(ctx context.Context, cfg *config.Model, f *profileFlags, prob *config.Problem, col int) ([]string, error) {
	setup := stageSetup{model: cfg, data: f.data, batch: f.batch, denseSync: config.DenseSyncPS,
		warmup: syncWarmup, steps: f.syncSteps, backend: cpuUnits(f.unitThreads),
		modelRef: f.model, unitArgs: []string{"--unit-threads", strconv.Itoa(f.unitThreads)}}
	if f.pin {
		setup.pinThreads = f.unitThreads
	}
	units := f.units
	if f.device.cuda {
		setup.backend, setup.unitArgs = gpuUnits(f.device.gpu), []string{"--gpu", strconv.Itoa(f.device.gpu)}
		setup.pinThreads = 0
		var err error
		if units, err = unitsOnGPUs(f.units, f.device.gpu, cudaGPUCount); err != nil {
			return nil, err
		}
		f.units = units // what the file's header reports
	}
	method, runs, chose, err := syncRuns(f.denseSync, slices.Max(units) > 1, func(method string) ([]*stageTimes, error) {
		setup.denseSync = method
		run := stageRunProcesses
		if f.syncInProcess {
			run = stageRun
		}
		return stageRounds(units, f.syncRounds, func(k int) (*stageTimes, error) { return run(ctx, setup, k) })
	})
	if err != nil {
		return nil, err
	}
	compute := 0.0
	for _, l := range prob.Layers {
		compute += l.OCT[col]
	}
	extra, alpha := foldSync(prob, col, syncWeights(cfg.Shapes(), f.batch), runs)
	if slices.Max(units) > 1 || f.denseSync != config.DenseSyncAuto {
		prob.Types[col].DenseSync = method
	}
	return append(describeFold(f, method, runs, compute, extra, alpha), chose...), nil
}

// allreduceMargin is how much shorter allreduce's step must be for auto
// to fold it: within it the two are a coin toss on a shared machine, and
// ps keeps what allreduce lacks (a stage that shrinks in place when a
// replica's node dies).
const allreduceMargin = 0.05

// syncRuns runs the stage rounds of the dense_sync method asked for, or
// for auto of both, and returns the method to fold (auto: allreduce when
// its step at the most replicas measured is allreduceMargin shorter than
// ps's, else ps; without several replicas allreduce alone is run, a ring
// of one, as a job's stage of one replica syncs), its runs and, for auto,
// the line that says how it chose.
func syncRuns(asked string, several bool, rounds func(method string) ([]*stageTimes, error)) (string, []*stageTimes, []string, error) {
	if asked != config.DenseSyncAuto {
		runs, err := rounds(asked)
		return asked, runs, nil, err
	}
	if !several {
		runs, err := rounds(config.DenseSyncAllreduce)
		return config.DenseSyncAllreduce, runs, []string{"dense_sync auto: one replica only, which keeps its dense parameters to itself (a ring of one), as a job's stage of one replica does unless its file names ps: folded: allreduce (the type names no method: one replica cannot tell which syncs several the faster)"}, err
	}
	ps, err := rounds(config.DenseSyncPS)
	if err != nil {
		return "", nil, nil, err
	}
	ar, err := rounds(config.DenseSyncAllreduce)
	if err != nil {
		return "", nil, nil, err
	}
	most := len(ps) - 1
	method, runs := config.DenseSyncPS, ps
	if ar[most].step < (1-allreduceMargin)*ps[most].step {
		method, runs = config.DenseSyncAllreduce, ar
	}
	line := fmt.Sprintf("dense_sync auto: at k = %d a step took %.2f ms through the parameter server and %.2f ms by allreduce (allreduce is taken %.0f %% faster or more); folded: %s (jobs with dense_sync = \"auto\" planned on this type sync that way)",
		ps[most].k, ps[most].step*1e3, ar[most].step*1e3, 100*allreduceMargin, method)
	return method, runs, []string{line}, nil
}

// unitsOnGPUs is the unit counts whose replicas, one a GPU from GPU first
// on, the machine has GPUs for (count says how many); the others are
// skipped, saying so.
func unitsOnGPUs(units []int, first int, count func() (int, error)) ([]int, error) {
	n, err := count()
	if err != nil {
		return nil, fmt.Errorf("profile: listing the GPUs: %w", err)
	}
	var out []int
	for _, k := range units {
		if first+k > n {
			fmt.Fprintf(os.Stderr, "profile: skipping %d units: GPUs %d..%d, and the machine has %d\n", k, first, first+k-1, n)
			continue
		}
		out = append(out, k)
	}
	if len(out) == 0 || out[0] != 1 {
		return nil, fmt.Errorf("profile: GPU %d is not on this machine (it has %d)", first, n)
	}
	return out, nil
}

// stageRounds runs the stage on each k of units, round after round, and
// keeps for each k the round of the median step time: on a machine shared
// with other work a burst of load hits one round, not all, and going round
// the ks spreads slow spells over them alike.
func stageRounds(units []int, rounds int, run func(k int) (*stageTimes, error)) ([]*stageTimes, error) {
	byK := make([][]*stageTimes, len(units))
	for range rounds {
		for i, k := range units {
			t, err := run(k)
			if err != nil {
				return nil, err
			}
			byK[i] = append(byK[i], t)
		}
	}
	out := make([]*stageTimes, len(units))
	for i, ts := range byK {
		slices.SortFunc(ts, func(a, b *stageTimes) int { return cmp.Compare(a.step, b.step) })
		out[i] = ts[len(ts)/2]
	}
	return out, nil
}

// foldSync makes the measured type's column reproduce the stage runs: the
// layers' oct add up to the one-replica step (the time beyond their
// compute, extra, spread over the layers by weight: the bytes each one
// synchronises), and every layer's alpha is the one Amdahl fraction that
// fits the k-replica steps best (fitAlpha, within [MinAlpha, 1]):
// synchronisation that grows with the replicas is not parallel work, and
// where it outgrows the work they share, alpha falls below 0 and the cost
// model prices the stage slower on more units, as it ran. runs must start
// with k = 1.
func foldSync(prob *config.Problem, col int, weights []float64, runs []*stageTimes) (extra, alpha float64) {
	t1 := runs[0].step
	compute, total := 0.0, 0.0
	for i, l := range prob.Layers {
		compute += l.OCT[col]
		total += weights[i]
	}
	extra = t1 - compute
	for i := range prob.Layers {
		l := &prob.Layers[i]
		switch {
		case extra < 0: // the runtime computes faster than the layers timed alone: scale them
			l.OCT[col] = round4(l.OCT[col] * t1 / compute)
		case total > 0:
			l.OCT[col] = round4(l.OCT[col] + extra*weights[i]/total)
		default:
			l.OCT[col] = round4(l.OCT[col] * t1 / compute)
		}
	}
	alpha = fitAlpha(t1, runs[1:])
	if len(runs) > 1 {
		for i := range prob.Layers {
			prob.Layers[i].Alpha[col] = round4(alpha)
		}
	}
	return extra, alpha
}

// fitAlpha is the a in [config.MinAlpha, 1] whose predicted steps,
// t1((1-a) + a/k), are off the measured t_k by the least relative error at
// the worst k (0 without runs): the cost model is held to a band of
// measured over predicted, so its fit minimises the largest ratio's
// distance from 1 rather than a sum of squares, which the longest steps
// (the most replicas) would dominate. Each relative error is linear in a,
// e_k(a) = p_k - a q_k, so the optimum is where one is 0 or two are equal
// and opposite; those candidates are all tried.
func fitAlpha(t1 float64, runs []*stageTimes) float64 {
	if len(runs) == 0 {
		return 0
	}
	p, q := make([]float64, len(runs)), make([]float64, len(runs))
	for i, r := range runs {
		p[i] = t1/r.step - 1
		q[i] = (1 - 1/float64(r.k)) * t1 / r.step
	}
	worst := func(a float64) float64 {
		w := 0.0
		for i := range p {
			w = math.Max(w, math.Abs(p[i]-a*q[i]))
		}
		return w
	}
	best, bestWorst := 0.0, math.Inf(1)
	try := func(a float64) {
		if math.IsNaN(a) || math.IsInf(a, 0) {
			return
		}
		a = math.Min(1, math.Max(config.MinAlpha, a))
		if w := worst(a); w < bestWorst {
			best, bestWorst = a, w
		}
	}
	try(config.MinAlpha)
	try(1)
	for i := range p {
		try(p[i] / q[i])
		for j := range i {
			try((p[i] + p[j]) / (q[i] + q[j]))
		}
	}
	return best
}

// syncWeights is the floats each layer moves to and from the parameter
// servers or the ring per step at batch b: an embedding's gathered rows
// and their gradients, a dense layer's weights and their gradients.
func syncWeights(shapes []config.LayerShape, b int) []float64 {
	out := make([]float64, len(shapes))
	for i, s := range shapes {
		switch s.Kind {
		case "embedding":
			out[i] = 2 * float64(b) * float64(s.Out-s.In)
		default:
			out[i] = 2 * float64(s.Weights)
		}
	}
	return out
}

// fitBand is how far measured/predicted may stray from 1 before the
// profile says its fit does not hold (the cost model's target band).
const fitBand = 0.2

// describeFit says how the fitted alpha predicts each measured k, as the
// ratio the cost model is held to (measured over predicted samples/s: the
// predicted step over the measured one), which k's replicas time-shared
// this machine's cpus (threads CPU threads each; 0: they use none), and,
// when no alpha could put every k within fitBand, why: Amdahl's steps
// only fall with k (or, below 0, only rise), so steps that fall and then
// rise again are out of its reach, and plans on those units will be off
// by as much.
func describeFit(runs []*stageTimes, alpha float64, threads, cpus int) []string {
	t1 := runs[0].step
	line, worst := "the fit: ", 0.0
	var shared []string
	for i, r := range runs[1:] {
		predicted := t1 * ((1 - alpha) + alpha/float64(r.k))
		ratio := predicted / r.step
		worst = math.Max(worst, math.Abs(ratio-1))
		if i > 0 {
			line += "; "
		}
		line += fmt.Sprintf("k = %d: predicted %.2f ms a step, measured %.2f (measured/predicted samples/s %.2f)", r.k, predicted*1e3, r.step*1e3, ratio)
		if threads > 0 && r.k*threads > cpus {
			shared = append(shared, strconv.Itoa(r.k))
		}
	}
	lines := []string{line}
	if len(shared) > 0 {
		lines = append(lines, fmt.Sprintf("k = %s: the replicas' %d thread(s) each exceed this machine's %d CPUs, so they time-shared them, as a job's one-unit nodes do only where they share a machine like this one (one-unit nodes on machines of their own would not)", strings.Join(shared, ", "), threads, cpus))
	}
	if worst > fitBand {
		lines = append(lines, fmt.Sprintf("no alpha puts every k within %.1f-%.1f of measured/predicted: the cost model's steps follow t1((1 - alpha) + alpha/k), which only falls with k (or, below 0, only rises), and the measured ones do not%s; plans on these units will miss by as much", 1-fitBand, 1+fitBand, turn(runs)))
	}
	return lines
}

// turn names where measured steps that fell with k rise again, "" if
// they never do.
func turn(runs []*stageTimes) string {
	fell := false
	for i := 1; i < len(runs); i++ {
		prev, r := runs[i-1], runs[i]
		switch {
		case r.step < prev.step:
			fell = true
		case fell && r.step > prev.step:
			return fmt.Sprintf(" (they fall to k = %d and rise again: k = %d's step is %.0f %% longer)", prev.k, r.k, (r.step/prev.step-1)*100)
		}
	}
	return ""
}

// describeFold says what was measured and folded, one line each.
func describeFold(f *profileFlags, method string, runs []*stageTimes, compute, extra, alpha float64) []string {
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 }
	unit := fmt.Sprintf("%d thread(s) each", f.unitThreads)
	if f.device.cuda {
		unit = fmt.Sprintf("one GPU each, replica i on GPU %d+i", f.device.gpu)
	}
	where := "each in a process of its own, as k node daemons run them"
	if f.syncInProcess {
		where = "as goroutines of one process (--sync-in-process)"
	}
	lines := []string{fmt.Sprintf("folded into oct and alpha: the synchronisation of dense_sync = %s, measured by training the whole model as one BSP stage of k one-unit replicas (%s; %s) at batch %d on %s for %d steps after %d (the median of %d rounds over the ks), with one parameter-server shard that replica 0 calls in-process and the others over loopback wire%s",
		method, unit, where, f.batch, f.data, f.syncSteps, syncWarmup, f.syncRounds, map[bool]string{true: ", dense gradients by allreduce among the replicas (a ring; halving and doubling for small gradients on 4, 8 … replicas)", false: ", dense blocks pulled and pushed through the shard"}[method == config.DenseSyncAllreduce])}
	for _, r := range runs {
		line := fmt.Sprintf("k = %d: %.2f ms a step", r.k, r.step*1e3)
		for i, x := range r.replicas {
			path := "wire"
			if i == 0 {
				path = "local"
			}
			if i < len(r.cpus) && r.cpus[i] != "" {
				path += ", CPUs " + r.cpus[i]
			}
			if i < len(r.nices) && r.nices[i] > 0 {
				path += fmt.Sprintf(", steps at nice %d", r.nices[i])
			}
			line += fmt.Sprintf("; replica %d (PS %s): compute %.2f, pull wait %.2f, push %.2f, input wait %.2f ms", i, path,
				ms(x.Compute), ms(x.Pull), ms(x.Push), ms(x.Input))
		}
		lines = append(lines, line)
	}
	fitted := fmt.Sprintf("alpha = %.4f on every layer: the Amdahl fraction whose predicted k-replica steps are off the measured ones by the least relative error at the worst k (sync that grows with k lowers it; below 0, more units slow the stage down and a plan gives it one)", alpha)
	if len(runs) < 2 {
		fitted = "alpha not fitted to stage runs (only k = 1 was run): as measured from the layers' threads, or estimated"
	}
	lines = append(lines,
		fmt.Sprintf("the layers alone compute in %.2f ms; the %.2f ms more of the 1-replica step are spread over the layers' oct by the floats each synchronises (rows for embeddings, weights for the rest)", compute*1e3, extra*1e3),
		fitted)
	if len(runs) > 1 {
		threads := f.unitThreads
		if f.device.cuda {
			threads = 0
		}
		lines = append(lines, describeFit(runs, alpha, threads, runtime.NumCPU())...)
	}
	lines = append(lines,
		fmt.Sprintf("exact for a job of batch %d (B_o) on this type's one-unit nodes; dense sync does not shrink with a smaller batch, so plan other batches on a profile at their batch", f.batch))
	return lines
}
