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
// steps in this process, on the runtime's own code: pipeline.Worker per
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
	if s.batch < k {
		return nil, fmt.Errorf("profile: batch %d cannot be split over %d replicas", s.batch, k)
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

// startShard declares the model's parameters as a node hosting the job's
// only shard does, and serves the shard on a loopback listener until ctx
// ends.
func (r *stageRunner) startShard(ctx context.Context) error {
	cfg, backend := r.setup.model, native.MustCPU()
	declared, err := pipeline.DeclareModel(backend, cfg, 1)
	if err != nil {
		return err
	}
	r.layers = pipeline.Range{First: 0, Last: declared.NumLayers() - 1}
	tables, blocks, err := pipeline.PSParams(declared, []pipeline.Range{r.layers}, r.totalSteps())
	if err != nil {
		return err
	}
	allreduce := []bool{r.allreduce()}
	pipeline.MirrorBlocks(blocks, 1, allreduce)
	cfgs := pipeline.ShardConfigs(pipeline.ShardSpec{Job: profileJob, Model: cfg.Name, Shards: 1, Mode: ps.BSP,
		Replicas: []int{r.k}, Allreduce: allreduce, WaitTimeout: time.Minute, Backend: backend}, tables, blocks)
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

// startWorkers builds every replica's worker, with its client, data and,
// for allreduce, its ring transport.
func (r *stageRunner) startWorkers() error {
	names := make([]string, r.k)
	for i := range names {
		names[i] = fmt.Sprintf("replica-%d", i)
	}
	trs, err := r.ringTransports(names)
	if err != nil {
		return err
	}
	share := pipeline.Share{Members: make([]int, r.k), Batches: make([]int, r.k)}
	for i := range r.k {
		share.Members[i] = i
		share.Batches[i] = r.setup.batch / r.k
		if i < r.setup.batch%r.k {
			share.Batches[i]++
		}
	}
	for i := range r.k {
		w, err := r.worker(i, share, names, trs)
		if err != nil {
			return fmt.Errorf("replica %d: %w", i, err)
		}
		r.workers = append(r.workers, w)
	}
	return nil
}

// ringTransports are the replicas' wire transports, every pair peered
// (the larger id first: it waits to be dialled), when the stage syncs by
// allreduce; nil otherwise.
func (r *stageRunner) ringTransports(names []string) ([]*wire.TCPTransport, error) {
	if !r.allreduce() || r.k < 2 {
		return nil, nil
	}
	trs := make([]*wire.TCPTransport, r.k)
	for i, n := range names {
		t, err := wire.NewTCPTransport("127.0.0.1:0", quietWire(n))
		if err != nil {
			return nil, err
		}
		r.closers = append(r.closers, func() { t.Close() })
		trs[i] = t
	}
	for hi := range trs {
		for lo := range hi {
			if err := trs[hi].AddPeer(names[lo], trs[lo].Addr().String()); err != nil {
				return nil, err
			}
			if err := trs[lo].AddPeer(names[hi], trs[hi].Addr().String()); err != nil {
				return nil, err
			}
		}
	}
	return trs, nil
}

func (r *stageRunner) worker(i int, share pipeline.Share, names []string, trs []*wire.TCPTransport) (*pipeline.Worker, error) {
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
		wc.Allreduce = &pipeline.Allreduce{Peers: names, TotalSteps: r.totalSteps(), ShardOptimiser: true} // as node daemons run it
		if trs != nil {
			wc.Allreduce.Transport = trs[i]
		}
	}
	return pipeline.NewWorker(wc)
}

// train runs every replica's steps at once; the step time is the wall
// time of the steps after the warm-up over their number, as the slowest
// replica sets it (BSP holds the others to it).
func (r *stageRunner) train(ctx context.Context) (*stageTimes, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	t := &stageTimes{k: r.k, replicas: make([]pipeline.Result, r.k)}
	started := make([]time.Time, r.k)
	ended := make([]time.Time, r.k)
	errs := make([]error, r.k)
	var wg sync.WaitGroup
	for i, w := range r.workers {
		wg.Go(func() {
			for step := int64(1); step <= r.totalSteps(); step++ {
				if step == int64(r.setup.warmup)+1 {
					started[i] = time.Now()
				}
				res, err := w.Step(ctx, step)
				if err != nil {
					errs[i] = err
					cancel() // the others would wait for this replica's pushes
					return
				}
				if step > int64(r.setup.warmup) {
					addResult(&t.replicas[i], res)
				}
			}
			ended[i] = time.Now()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	first, last := slices.MinFunc(started, time.Time.Compare), slices.MaxFunc(ended, time.Time.Compare)
	t.step = last.Sub(first).Seconds() / float64(r.setup.steps)
	for i := range t.replicas {
		scaleResult(&t.replicas[i], r.setup.steps)
	}
	return t, nil
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
		warmup: syncWarmup, steps: f.syncSteps, backend: cpuUnits(f.unitThreads)}
	units := f.units
	if f.device.cuda {
		setup.backend = gpuUnits(f.device.gpu)
		var err error
		if units, err = unitsOnGPUs(f.units, f.device.gpu, cudaGPUCount); err != nil {
			return nil, err
		}
		f.units = units // what the file's header reports
	}
	method, runs, chose, err := syncRuns(f.denseSync, slices.Max(units) > 1, func(method string) ([]*stageTimes, error) {
		setup.denseSync = method
		return stageRounds(units, f.syncRounds, func(k int) (*stageTimes, error) { return stageRun(ctx, setup, k) })
	})
	if err != nil {
		return nil, err
	}
	compute := 0.0
	for _, l := range prob.Layers {
		compute += l.OCT[col]
	}
	extra, alpha := foldSync(prob, col, syncWeights(cfg.Shapes(), f.batch), runs)
	prob.Types[col].DenseSync = method
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
// ps's, else ps; without several replicas, where a job's auto takes ps,
// ps alone is run), its runs and, for auto, the line that says how it
// chose.
func syncRuns(asked string, several bool, rounds func(method string) ([]*stageTimes, error)) (string, []*stageTimes, []string, error) {
	if asked != config.DenseSyncAuto {
		runs, err := rounds(asked)
		return asked, runs, nil, err
	}
	if !several {
		runs, err := rounds(config.DenseSyncPS)
		return config.DenseSyncPS, runs, []string{"dense_sync auto: one replica only, which syncs through the parameter server (a job's auto does so too): folded: ps"}, err
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
// fits the k-replica steps best (least squares, clamped to [0, 1]), since
// synchronisation that grows with the replicas is not parallel work. runs
// must start with k = 1.
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

// fitAlpha is the a minimising sum over runs of (t1((1-a) + a/k) - t_k)^2,
// clamped to [0, 1]; 0 without runs.
func fitAlpha(t1 float64, runs []*stageTimes) float64 {
	var num, den float64
	for _, r := range runs {
		d := 1 - 1/float64(r.k)
		num += (t1 - r.step) * d * t1
		den += d * d * t1 * t1
	}
	if den == 0 {
		return 0
	}
	return math.Min(1, math.Max(0, num/den))
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

// describeFold says what was measured and folded, one line each.
func describeFold(f *profileFlags, method string, runs []*stageTimes, compute, extra, alpha float64) []string {
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 }
	unit := fmt.Sprintf("%d thread(s) each", f.unitThreads)
	if f.device.cuda {
		unit = fmt.Sprintf("one GPU each, replica i on GPU %d+i", f.device.gpu)
	}
	lines := []string{fmt.Sprintf("folded into oct and alpha: the synchronisation of dense_sync = %s, measured by training the whole model as one BSP stage of k one-unit replicas (%s) at batch %d on %s for %d steps after %d (the median of %d rounds over the ks), with one parameter-server shard that replica 0 calls in-process and the others over loopback wire%s",
		method, unit, f.batch, f.data, f.syncSteps, syncWarmup, f.syncRounds, map[bool]string{true: ", dense gradients by ring allreduce among the replicas", false: ", dense blocks pulled and pushed through the shard"}[method == config.DenseSyncAllreduce])}
	for _, r := range runs {
		line := fmt.Sprintf("k = %d: %.2f ms a step", r.k, r.step*1e3)
		for i, x := range r.replicas {
			path := "wire"
			if i == 0 {
				path = "local"
			}
			line += fmt.Sprintf("; replica %d (PS %s): compute %.2f, pull wait %.2f, push %.2f, input wait %.2f ms", i, path,
				ms(x.Compute), ms(x.Pull), ms(x.Push), ms(x.Input))
		}
		lines = append(lines, line)
	}
	fitted := fmt.Sprintf("alpha = %.4f on every layer: the Amdahl fraction that best fits the k-replica steps (sync that grows with k lowers it; the cost model cannot price a stage that more units slow down, so the fit stops at 0)", alpha)
	if len(runs) < 2 {
		fitted = "alpha not fitted to stage runs (only k = 1 was run): as measured from the layers' threads, or estimated"
	}
	lines = append(lines,
		fmt.Sprintf("the layers alone compute in %.2f ms; the %.2f ms more of the 1-replica step are spread over the layers' oct by the floats each synchronises (rows for embeddings, weights for the rest)", compute*1e3, extra*1e3),
		fitted,
		fmt.Sprintf("exact for a job of batch %d (B_o) on this type's one-unit nodes; dense sync does not shrink with a smaller batch, so plan other batches on a profile at their batch", f.batch))
	return lines
}
