package node

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/pipeline"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/native"
)

// runStage runs one stage replica to the job's last step, reporting its
// progress, then holds its links until ctx ends (the task left the
// coordinator's reply): closing a link at once could cut off a partner
// still reading this replica's last messages. It runs on the compute
// thread (compute.go): its goroutine must end when it returns.
func (a *Agent) runStage(ctx context.Context, t *task) {
	a.onComputeThread(t)
	w, in, ready, cleanup, err := a.stageWorker(ctx, t.spec)
	defer cleanup()
	var spent pipeline.Result
	if err == nil {
		err = a.awaitParameterServers(ctx, t.spec)
	}
	if err == nil {
		err = ready(ctx) // the pass over the trained batches, begun before
	}
	if err == nil {
		err = a.attachWorker(t, w, in)
	}
	if err == nil {
		stopSaving := saveDataMarks(ctx, t.spec, a.taskLog(t.spec))
		err = a.train(ctx, t, w, &spent)
		stopSaving()
	}
	switch {
	case ctx.Err() != nil:
	case err != nil:
		a.fail(ctx, t, err)
	default:
		a.setReport(ctx, t, func(r *api.TaskReport) { r.State = api.TaskDone })
		a.taskLog(t.spec).Info("task done", "input", spent.Input, "pull", spent.Pull, "compute", spent.Compute,
			"downstream", spent.Downstream, "push", spent.Push)
	}
	<-ctx.Done()
}

// train runs the job's steps, adding up in spent where their time went; a
// replica dropped from its stage (elastic.go) stops before the first step
// it is no longer a member of.
func (a *Agent) train(ctx context.Context, t *task, w *pipeline.Worker, spent *pipeline.Result) error {
	meter, busy := newMeter(), &busyTime{}
	cpus := max(1, t.spec.Units*a.cfg.Threads)
	for step := t.spec.FirstStep + 1; step <= t.spec.Steps && w.Member(step); step++ {
		cpuBefore := processCPU()
		res, err := w.Step(ctx, step)
		if err != nil {
			return err
		}
		if !finite(res.Loss) {
			return fmt.Errorf("step %d: the loss is %g: training diverged", step, res.Loss)
		}
		slept, ok := a.throttle.afterCompute(ctx, (processCPU()-cpuBefore)/time.Duration(cpus))
		if !ok {
			return fmt.Errorf("step %d: throttled (cpu share): %w", step, ctx.Err())
		}
		res.Compute += slept // the duty cycle stands for slower compute (throttle.go)
		if slept, ok = a.afterTaskCompute(ctx, t, res.Compute); !ok {
			return fmt.Errorf("step %d: throttled (task cpu share): %w", step, ctx.Err())
		}
		res.Compute += slept // the task's share of the node (units.go)
		spent.Input += res.Input
		spent.Pull += res.Pull
		spent.Compute += res.Compute
		spent.Downstream += res.Downstream
		spent.Push += res.Push
		rate, window := meter.add(res.Samples)
		a.obs.stepDone(res.Samples)
		share, _ := a.throttle.state()
		stepSeconds := busy.add(res.Compute, res.Samples, share)
		a.setReport(ctx, t, func(r *api.TaskReport) {
			r.Step, r.Loss, r.SamplesPerS, r.Batch, r.StepSeconds = step, res.Loss, rate, res.Samples, stepSeconds
			r.TimedSeconds = window.Seconds()
		})
	}
	return w.Drain(ctx) // a replica dropped from its stage may have left its last step's pushes under way
}

// stageWorker builds the replica's model, parameter-server client, links
// and data (in, stage 0's only), and greets its partners. A restored stage
// 0 passes over its data's trained batches meanwhile: ready waits for that
// before the first step. cleanup releases what it built, also after an
// error.
func (a *Agent) stageWorker(ctx context.Context, s api.Task) (w *pipeline.Worker, in *pipeline.ShardedInput, ready func(context.Context) error, cleanup func(), err error) {
	var undo []func()
	cleanup = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	fail := func(err error) (*pipeline.Worker, *pipeline.ShardedInput, func(context.Context) error, func(), error) {
		return nil, nil, nil, cleanup, fmt.Errorf("stage %d replica %d: %w", s.Stage, s.Replica, err)
	}
	ranges, replicas := layout(s)
	if err := checkLayout(s, replicas); err != nil {
		return fail(err)
	}
	schedule, err := pipeline.ParseSchedule(s.Schedule)
	if err != nil {
		return fail(permanent(err))
	}
	if err := pipeline.CheckLookahead(s.Lookahead); err != nil {
		return fail(permanent(err))
	}
	cfg, err := config.ParseModel("job "+s.JobID+" model", []byte(s.Model))
	if err != nil {
		return fail(permanent(err))
	}
	backend, release, err := a.stageBackend(s)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, release)
	model, err := pipeline.BuildStageModel(backend, cfg, s.Seed, ranges[s.Stage])
	if err != nil {
		return fail(permanent(err))
	}
	client, err := a.psClient(s)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() { client.Close() })

	prev, next := pipeline.PartnerLinks(a.transport, s.Stage, s.Replica, replicas, func(stage, replica int) string {
		if stage < s.Stage {
			return s.Prev[replica]
		}
		return s.Next[replica]
	})
	links := append(append([]pipeline.Link{}, prev...), next...)
	allreduce, err := a.denseAllreduce(s)
	if err != nil {
		return fail(err)
	}
	if allreduce != nil {
		if allreduce.Mirror != nil {
			undo = append(undo, func() { allreduce.Mirror.Close() })
		}
		links = append(links, pipeline.RingLinks(a.transport, s.Stage, s.Replica, s.Ring)...)
	}
	peers := make([]string, len(links))
	for i, l := range links {
		peers[i] = l.Peer
	}
	if err := a.peers.acquire(peers); err != nil {
		return fail(err)
	}
	undo = append(undo, func() { a.peers.release(peers) })

	wc := pipeline.Config{Job: s.JobID, Stage: s.Stage, Stages: len(ranges), Replica: s.Replica, Layers: ranges[s.Stage],
		Model: model, Backend: backend, PS: client, Mode: psMode(s.Mode), Prev: prev, Next: next, StepTimeout: a.cfg.StepTimeout, LastStep: s.Steps,
		MicroBatches: s.MicroBatches, Schedule: schedule, Lookahead: s.Lookahead, Allreduce: allreduce, SoleReplica: s.Replicas == 1,
		OverlapSteps: a.waitsOnOthers(s)}
	wc.Share = firstShare(s)
	ready = func(context.Context) error { return nil }
	if s.Stage == 0 {
		var pass *dataPass
		if in, pass, err = startStageInput(ctx, s, cfg, a.taskLog(s)); err != nil {
			return fail(permanent(err))
		}
		// in itself is the result, nil when returning an error: close
		// what was opened.
		undo = append(undo, closer(in), pass.stop) // the pass stops first
		wc.Input, ready = in.Next, pass.wait
	}
	if err := greet(ctx, links, s.JobID, a.cfg.ReadyTimeout); err != nil {
		return fail(err)
	}
	if w, err = pipeline.NewWorker(wc); err != nil {
		return fail(err)
	}
	undo = append(undo, closer(w))
	return w, in, ready, cleanup, nil
}

// closer returns a function that closes c, ignoring its error: an undo
// step bound to the value, not to a variable a later return may reset.
func closer(c interface{ Close() error }) func() {
	return func() { _ = c.Close() }
}

// awaitParameterServers waits until every parameter-server shard of task
// s's job is up (ps.Client.AwaitReady), before the first step's clock
// starts: a node restoring a large checkpoint takes as long as reading it.
func (a *Agent) awaitParameterServers(ctx context.Context, s api.Task) error {
	client, err := a.psClient(s)
	if err != nil {
		return err
	}
	defer client.Close()
	return client.AwaitReady(ctx, a.waitingForPS(s))
}

// waitingForPS logs, every 30 s at most, that task s still waits for a
// parameter-server shard: a node restoring a large checkpoint takes as
// long as reading it, and the wait lasts until the shard is up or the
// coordinator stops the task (a node that died).
func (a *Agent) waitingForPS(s api.Task) func(shard int, err error) {
	var mu sync.Mutex // shards are waited for side by side
	var last time.Time
	return func(shard int, err error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(last) < 30*time.Second {
			return
		}
		last = time.Now()
		a.taskLog(s).Info("waiting for a parameter-server shard to come up (restoring a checkpoint?)", "shard", shard, "node", s.PS[shard], "last", err)
	}
}

// stageBackend is the backend task s runs on (gpus.go): one of the node's
// GPUs for a GPU node, its CPU otherwise. A backend of two lanes (nn.Lanes)
// for a task that waits on other processes comes with a Go P for the
// messages (cpuset.Exchanging) until release, which also closes it and
// frees the GPU.
func (a *Agent) stageBackend(s api.Task) (native.Backend, func(), error) {
	kind, gpu, free := nodeKind(a.cfg.GPUs), -1, func() {}
	if kind == config.KindGPU {
		var err error
		if gpu, free, err = a.gpus.acquire(); err != nil {
			return nil, nil, err
		}
	}
	b, err := stageBackend(kind, gpu, s.Units, a.cfg.Threads)
	if err != nil {
		free()
		return nil, nil, err
	}
	letGo := func() {}
	if lanes := nn.Lanes(b); lanes > 1 && a.waitsOnOthers(s) {
		letGo = cpuset.Exchanging(lanes) // a Go P for its messages (internal/cpuset)
		a.taskLog(s).Info("the stage runs Go on a P more than its lanes, for its messages", "lanes", lanes, "gomaxprocs", runtime.GOMAXPROCS(0))
	}
	return b, func() {
		letGo()
		if err := closeBackend(b); err != nil {
			a.taskLog(s).Warn("closing the backend", "backend", b.Name(), "err", err)
		}
		free()
	}, nil
}

// denseAllreduce is the worker's Allreduce for a task whose stage keeps its
// dense parameters by allreduce among its replicas (their data addresses,
// which are their transport ids, in s.Ring); nil otherwise. A job that
// writes checkpoints (a directory, and an interval or a grid of steps
// where checkpoints asked for may be taken) also gets the client that
// assigns the blocks to the servers at those steps (pipeline.MirrorStage).
func (a *Agent) denseAllreduce(s api.Task) (*pipeline.Allreduce, error) {
	if s.Stage >= len(s.Layout) || s.Layout[s.Stage].DenseSync != api.DenseSyncAllreduce {
		return nil, nil
	}
	// The coordinator changes an allreduce stage's batches, never its
	// members, so its replicas may shard the optimiser over the ring.
	ar := &pipeline.Allreduce{Transport: a.transport, Peers: s.Ring, TotalSteps: s.Steps, ShardOptimiser: true, Relieve: s.RingRelieve}
	if s.CheckpointDir != "" && (s.CheckpointEvery > 0 || s.CheckpointGrid > 0) {
		ar.CheckpointEvery, ar.CheckpointGrid = s.CheckpointEvery, s.CheckpointGrid
		mirror := s
		mirror.Stage, mirror.Replica = pipeline.MirrorStage(s.Stage, len(s.Layout)), 0
		mirror.TaskID += ".mirror"
		var err error
		if ar.Mirror, err = a.psClient(mirror); err != nil {
			return nil, fmt.Errorf("mirror client: %w", err)
		}
	}
	return ar, nil
}

// startStageInput opens stage 0's data: the task's shard, past the batches
// of the steps a restored job has trained, or, for a task that starts with
// a membership (elastic.go), its shard of the segment that starts at
// DataStart. A generator's shard is opened at the record the trained steps
// reached (the segment's reader jumps there: data.Options.Start); a file,
// whose data wraps around at its end, is passed over up to it
// (skipBatches) on a goroutine of its own (pass), so that the pass
// overlaps greeting the partners and waiting for the parameter servers:
// the caller waits for it before the first step, and stops it before
// closing the input.
func startStageInput(ctx context.Context, s api.Task, cfg *config.Model, log *slog.Logger) (*pipeline.ShardedInput, *dataPass, error) {
	loadDataMarks(s, log)
	src, err := openData(s, cfg, epochLogger(log, s.Data))
	if err != nil {
		return nil, nil, err
	}
	steps := s.FirstStep
	if len(s.Members) > 0 || (s.FirstStep > 0 && generated(s.Data)) {
		src.Close() // opened to check the data; the segment opens its own
		src, steps = nil, 0
	}
	return shardedInput(s, data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain}, src), passOver(ctx, src, steps, s.Batch), nil
}

// dataPass passes over the batches a restored stage has trained, on a
// goroutine of its own.
type dataPass struct {
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

// passOver starts passing over steps batches of size of src (skipBatches);
// none when steps is 0.
func passOver(ctx context.Context, src data.Source, steps int64, size int) *dataPass {
	p := &dataPass{done: make(chan struct{}), cancel: func() {}}
	if steps == 0 || src == nil {
		close(p.done)
		return p
	}
	ctx, p.cancel = context.WithCancel(ctx)
	go func() {
		defer close(p.done)
		p.err = skipBatches(ctx, src, steps, size)
	}()
	return p
}

// wait waits for the pass, or for ctx, and returns the pass's error:
// permanent, bad data failing every restart alike.
func (p *dataPass) wait(ctx context.Context) error {
	select {
	case <-p.done:
		if p.err != nil {
			return permanent(p.err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop ends the pass and waits for its goroutine: before its source is
// closed.
func (p *dataPass) stop() {
	p.cancel()
	<-p.done
}

// generated reports whether a data spec names a generator, whose records
// can be reached by index without reading those before.
func generated(spec string) bool {
	sp, err := data.ParseSpec(spec)
	return err == nil && sp.Path == ""
}

// skipBatches passes over the batches of the steps a restored job has
// trained already (data.SkipBatches: a file is read twice at most, its
// lines not decoded), so that its data order is that of an uninterrupted
// run.
func skipBatches(ctx context.Context, src data.Source, steps int64, batch int) error {
	if err := skipTrained(ctx, src, steps, batch); err != nil {
		return fmt.Errorf("skipping the %d trained steps' batches: %w", steps, err)
	}
	return nil
}

// skipTrained is data.SkipBatches, a variable so that tests can stand a
// large data file in for it.
var skipTrained = data.SkipBatches

// checkLayout checks that the task's own fields agree with its layout.
func checkLayout(s api.Task, replicas []int) error {
	n := len(replicas)
	switch {
	case s.Stage < 0 || s.Stage >= n:
		return fmt.Errorf("stage %d of a %d-stage layout", s.Stage, n)
	case replicas[s.Stage] != s.Replicas:
		return fmt.Errorf("%d replicas, the layout says %d", s.Replicas, replicas[s.Stage])
	case s.Stage > 0 && len(s.Prev) != replicas[s.Stage-1]:
		return fmt.Errorf("%d previous partners for %d replicas", len(s.Prev), replicas[s.Stage-1])
	case s.Stage+1 < n && len(s.Next) != replicas[s.Stage+1]:
		return fmt.Errorf("%d next partners for %d replicas", len(s.Next), replicas[s.Stage+1])
	}
	return nil
}

// psClient reaches the job's shards; its node id names the job, by which
// the serving node routes it (psHost).
func (a *Agent) psClient(s api.Task) (*ps.Client, error) {
	wc := a.wireConfig(psClientID(s))
	return ps.NewClient(ps.ClientConfig{Job: s.JobID, Stage: s.Stage, Replica: s.Replica, Shards: len(s.PS),
		Timeout: a.cfg.StepTimeout, Metrics: a.obs.ps,
		Dial: func(ctx context.Context, shard int) (*wire.Conn, error) {
			return wire.Dial(ctx, s.PS[shard], wc, "")
		},
		Local: func(shard int) *ps.Shard { return a.ps.local(s.JobID, shard) }})
}

// openData opens the replica's shard of the job's training split, read
// again from the start whenever it ends, calling onEpoch (unless nil) as
// each pass after the first begins.
func openData(s api.Task, cfg *config.Model, onEpoch func(epoch int)) (data.Source, error) {
	opts := data.Options{Vocab: cfg.Input.Vocab, Shard: s.DataShard, Shards: s.DataShards, Split: data.SplitTrain}
	src, err := data.RepeatEpochs(func() (data.Source, error) { return data.Open(s.Data, opts) }, onEpoch)
	if err != nil {
		return nil, fmt.Errorf("data %q: %w", s.Data, err)
	}
	if err := nn.CheckData(cfg, src.Schema()); err != nil {
		src.Close()
		return nil, fmt.Errorf("data %q: %w", s.Data, err)
	}
	return src, nil
}

// epochLogger says "epoch N" on log when a pass over the data file spec
// begins again from its start, so that a job that trains on more samples
// than its file holds says so: the first time, then at most every
// epochLogEvery, so that a small file read thousands of times over a long
// run does not fill the log.
func epochLogger(log *slog.Logger, spec string) func(epoch int) {
	var mu sync.Mutex
	var last time.Time
	return func(epoch int) {
		mu.Lock()
		defer mu.Unlock()
		if !last.IsZero() && time.Since(last) < epochLogEvery {
			return
		}
		last = time.Now()
		log.Info(fmt.Sprintf("epoch %d", epoch), "data", spec, "epoch", epoch)
	}
}

// epochLogEvery is the least time between two "epoch N" lines of a stage;
// a variable so that tests can see every pass.
var epochLogEvery = 30 * time.Second

// busyTime is a replica's compute time per step (forward, backward and
// the loss, with the CPU-share throttle's sleep), as the batch controller
// balances it: a mean over the last busyWindow steps run at the current
// batch and CPU share (a new batch or share starts the window again, so
// that neither a resize nor a throttle is judged by the steps before it). Input is left out: stage 0's read-ahead
// also pulls the next rows, which waits for the parameter servers'
// barrier, that is for the slowest replica.
type busyTime struct {
	last  [busyWindow]time.Duration
	n     int
	batch int
	share float64
}

const busyWindow = 8

// add records the busy time of a step of batch rows run at CPU share
// share and returns the window's mean, in seconds.
func (b *busyTime) add(d time.Duration, batch int, share float64) float64 {
	if batch != b.batch || share != b.share {
		b.n, b.batch, b.share = 0, batch, share
	}
	b.last[b.n%busyWindow] = d
	b.n++
	var sum time.Duration
	k := min(b.n, busyWindow)
	for _, v := range b.last[:k] {
		sum += v
	}
	return sum.Seconds() / float64(k)
}

// meter measures a replica's throughput: samples per second since the end
// of its first step (which includes connecting), or over the first step
// until there is a second.
type meter struct {
	start, first time.Time
	samples      int64
	steps        int
}

func newMeter() *meter { return &meter{start: time.Now()} }

// add counts a step of samples and returns the rate and the window it is
// measured over: the steps after the first (the first alone, from the
// meter's start, until there are more).
func (m *meter) add(samples int) (rate float64, window time.Duration) {
	now := time.Now()
	m.steps++
	if m.steps == 1 {
		m.first = now
		window = now.Sub(m.start)
		return rateOf(samples, window), window
	}
	m.samples += int64(samples)
	window = now.Sub(m.first)
	return rateOf(int(m.samples), window), window
}

func rateOf(samples int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(samples) / d.Seconds()
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
