package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
	"golang.org/x/sync/errgroup"
)

// DefaultStepTimeout bounds a step when Config.StepTimeout is 0.
const DefaultStepTimeout = 5 * time.Minute

// maxReplicas bounds stages and replicas so that EdgeStream is one-to-one.
const maxReplicas = 1 << 10

// MaxMicroBatches bounds Config.MicroBatches.
const MaxMicroBatches = config.MaxMicroBatches

// Config describes one replica of one stage.
type Config struct {
	Job     string
	Stage   int
	Stages  int
	Replica int
	Layers  Range
	// Model is the model built with the job's seed on Backend, best with
	// BuildStageModel (no tables, no other stages' dense parameters); the
	// worker runs Layers of it and keeps only the current batch's rows of
	// its embedding tables.
	Model   *nn.Model
	Backend native.Backend
	// MicroBatches splits each step's batch (at stage 0) into this many
	// micro-batches that flow through the stages one after another; every
	// stage of a job must use the same number. 0 means 1; at most
	// MaxMicroBatches, so that a step's messages fit the wire's per-stream
	// queues (under fill-drain a stage reads its gradients only after all
	// its forwards).
	MicroBatches int
	// Schedule orders the micro-batches' forwards and backwards
	// (schedule.go); "" is OneFOneB. Stages of a job may differ (the
	// messages are the same) as long as no stage but the last runs more
	// warm-up forwards than the stage before it: a backward would wait in
	// a cycle on a forward of its own.
	Schedule Schedule
	// Lookahead is how many forwards beyond the warm-up of strict 1F1B a
	// stage other than the last runs before its first backward (ignored
	// under fill-drain, which runs them all): each holds one micro-batch's
	// forward state more and gives the gradient it waits on one forward's
	// time longer to come back (schedule.go). 0 is strict 1F1B; at most
	// MaxMicroBatches. The stages of a job share it (see Schedule).
	Lookahead int
	// PS holds the stage's parameters; required if Layers have any. Mode
	// is the servers' mode: BSP pulls wait for the previous step's update,
	// ASP pulls take what is there.
	PS   *ps.Client
	Mode ps.Mode
	// Prev and Next are the partners (Partners) in the previous and next
	// stage, ascending by replica; Prev is empty for stage 0, Next for the
	// last stage.
	Prev, Next []Link
	// Batches returns the batch of a step; stage 0 only. Calls come one at
	// a time, in step order, the next while the current step runs.
	Batches func(ctx context.Context, step int64) (*data.Batch, error)
	// Input, if set, replaces Batches: it gets the stage's Share in force
	// at the step (Resize), e.g. ShardedInput.Next.
	Input func(ctx context.Context, step int64, share Share) (*data.Batch, error)
	// Share is the stage's make-up at the start (Resize changes it); if
	// empty, the replica is the only member the worker knows of.
	Share Share
	// Allreduce, if set, keeps the stage's dense parameters on its
	// replicas, synchronised by allreduce (allreduce.go), instead of on the
	// parameter servers.
	Allreduce   *Allreduce
	StepTimeout time.Duration // 0 = DefaultStepTimeout
	// SoleReplica says the stage has this one replica: no other pushes its
	// parameters (until Resize adds members). In BSP stage 0 then pulls
	// the rows of its next batch that the current step does not update
	// while the step runs, rather than after its pushes (ahead.go).
	SoleReplica bool
	// LastStep, if not 0, is the job's last step: nothing is read or
	// pulled ahead for the steps after it (a pull creates rows, and a
	// checkpoint of the last step would hold them).
	LastStep int64
	// OverlapSteps lets a step return before its last pushes and
	// reductions are in, the next step's forward waiting for each layer's
	// (tail.go); single-stage workers of one micro-batch only. Call Drain
	// after the last step when it is not LastStep.
	OverlapSteps bool
}

// Result is what a step reports.
type Result struct {
	Samples int     // rows this replica processed
	Loss    float64 // mean loss of those rows; last stage only
	// Where the step's time went: waiting for input, pulling parameters,
	// forward and backward (with the loss), waiting for the output's
	// gradients, and pushing gradients (with the last sends).
	Input, Pull, Compute, Downstream, Push time.Duration
	// PeakLive is the most micro-batches whose forward state (a layer copy
	// each) the replica held at once during the step: M on a stage that
	// is not the last under fill-drain, min(S-i, M) under 1F1B.
	PeakLive int
}

// Worker runs one replica of one stage, a step at a time. It is owned by
// one goroutine.
type Worker struct {
	cfg    Config
	job    uint64
	last   bool
	copies []*modelCopy // the layer copies, liveBound of them
	grads  []microGrad  // one per micro-batch
	warm   int          // forwards before the first backward (warmup)

	ctx      context.Context // ends at Close; bounds prefetches
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	prefetch chan prefetched // holds the next step's batch, once asked for
	next     int64           // the step prefetch is fetching, 0 if none
	ahead    *denseAhead     // the dense pulls ahead for the next step, if any
	spare    [][]float32     // buffers free for the next pulls ahead (ahead.go)
	local    *localDense     // the dense optimiser of an allreduce stage; nil otherwise
	tail     *stepTail       // the last step's work still under way (OverlapSteps), if any

	shareMu sync.Mutex    // guards shares and asked: Resize comes from other goroutines
	shares  []shareChange // ascending by from; shares[0].from is 0
	asked   int64         // the last step whose input was asked for
}

// prefetched is stage 0's input for a step: the micro-batches, with
// their row plans.
type prefetched struct {
	ins []input
	err error
}

// NewWorker checks cfg and prepares the stage's layers, a copy of them for
// each micro-batch (rebuilt from cfg.Model's config and seed).
func NewWorker(cfg Config) (*Worker, error) {
	fail := func(err error) (*Worker, error) {
		return nil, fmt.Errorf("pipeline: job %s stage %d replica %d: %w", cfg.Job, cfg.Stage, cfg.Replica, err)
	}
	if err := cfg.check(); err != nil {
		return fail(err)
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = DefaultStepTimeout
	}
	cfg.MicroBatches = max(cfg.MicroBatches, 1)
	if cfg.Schedule == "" {
		cfg.Schedule = OneFOneB
	}
	w := &Worker{cfg: cfg, job: ps.JobKey(cfg.Job), last: cfg.Stage == cfg.Stages-1, prefetch: make(chan prefetched, 1)}
	w.cfg.Prev, w.cfg.Next = slices.Clone(cfg.Prev), slices.Clone(cfg.Next)
	w.shares = []shareChange{{from: 0, share: firstShare(&cfg)}}
	for _, links := range [][]Link{w.cfg.Prev, w.cfg.Next} {
		for i := range links {
			links[i].job = w.job
		}
	}
	w.warm = warmup(cfg.Schedule, cfg.Stage, cfg.Stages, cfg.MicroBatches, cfg.Lookahead)
	for m := range liveBound(cfg.Schedule, cfg.Stage, cfg.Stages, cfg.MicroBatches, cfg.Lookahead) {
		model := cfg.Model
		var shared []*nn.Param
		if m > 0 {
			var err error
			if model, err = nn.BuildWith(cfg.Backend, cfg.Model.Config, cfg.Model.Seed, cfg.Model.Options); err != nil {
				return fail(err)
			}
			shared = w.copies[0].dense
		}
		c, err := newCopy(model, cfg.Layers, &cfg, shared)
		if err != nil {
			return fail(err)
		}
		c.micro = -1
		w.copies = append(w.copies, c)
	}
	w.grads = newMicroGrads(cfg.Backend, w.copies, cfg.MicroBatches)
	if cfg.PS == nil && len(w.copies[0].dense)+len(w.copies[0].tables) > 0 {
		return fail(errors.New("the stage has parameters and no parameter-server client"))
	}
	if err := w.initAllreduce(); err != nil {
		return fail(err)
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	return w, nil
}

func (c *Config) check() error {
	n := 0
	if c.Model != nil {
		n = c.Model.NumLayers()
	}
	switch {
	case c.Model == nil || c.Backend == nil:
		return errors.New("no model or backend")
	case c.Layers.First < 0 || c.Layers.Last < c.Layers.First || c.Layers.Last >= n:
		return fmt.Errorf("layers [%d, %d] outside the model's [0, %d]", c.Layers.First, c.Layers.Last, n-1)
	case c.Stages < 1 || c.Stage < 0 || c.Stage >= c.Stages || c.Stages > maxReplicas || c.Replica < 0 || c.Replica >= maxReplicas:
		return fmt.Errorf("stage %d of %d, replica %d", c.Stage, c.Stages, c.Replica)
	case (c.Stage == 0) != (len(c.Prev) == 0):
		return fmt.Errorf("stage %d with %d upstream partners", c.Stage, len(c.Prev))
	case (c.Stage == c.Stages-1) != (len(c.Next) == 0):
		return fmt.Errorf("stage %d of %d with %d downstream partners", c.Stage, c.Stages, len(c.Next))
	case c.Stage == 0 && c.Batches == nil && c.Input == nil:
		return errors.New("stage 0 needs Batches or Input")
	case c.Input != nil && len(c.Share.Members) == 0:
		return errors.New("Input needs the stage's Share")
	case c.MicroBatches < 0 || c.MicroBatches > MaxMicroBatches:
		return fmt.Errorf("%d micro-batches, want at most %d", c.MicroBatches, MaxMicroBatches)
	}
	if err := CheckLookahead(c.Lookahead); err != nil {
		return err
	}
	if _, err := ParseSchedule(string(c.Schedule)); err != nil {
		return err
	}
	return nil
}

// Close lets the last step's background work end (bounded by two step
// timeouts from that step's start; Drain to bound it otherwise), then
// stops a prefetch in flight and waits for it.
func (w *Worker) Close() error {
	if t := w.tail; t != nil {
		<-t.done
	}
	w.cancel()
	w.wg.Wait()
	return nil
}

// Step runs step (1-based; steps go in order). It starts pulling the dense
// parameters, then, in the order of Config.Schedule, for each micro-batch
// takes its input, pulls its rows and runs forward (after the dense pull is
// in), sending the output downstream in the background, and gets the
// output's gradient (the loss on the last stage, else from downstream),
// runs backward and sends the input's gradient upstream in the background.
// During the last
// micro-batch's backward each layer's gradients, micro-batches weighted by
// their rows, go to the parameter servers as soon as they are final, while
// the layers below still run; the step ends when every push and send has.
func (w *Worker) Step(ctx context.Context, step int64) (Result, error) {
	if !w.Member(step) {
		return Result{}, fmt.Errorf("pipeline: job %s stage %d replica %d step %d: %w",
			w.cfg.Job, w.cfg.Stage, w.cfg.Replica, step, ErrNotMember)
	}
	prev := w.tail
	w.tail = nil
	ctx, cancel := context.WithTimeout(ctx, w.cfg.StepTimeout)
	defer cancel()
	snd := startSender(ctx, cancel)
	// The background pulls, pushes and reductions run on bg's context,
	// the worker's, so that they may outlive the call as the step's tail;
	// until the call returns, the step's ending (its timeout included)
	// ends them too. Their own bound is two step timeouts from the start,
	// one more for the tail: were it one, its timer could fire before the
	// step's. The phases run on fg, the step's: the first failed
	// background call cancels it too, so that they stop waiting — unless
	// the step itself has ended, which ends fg with its own reason (a
	// silent peer's step times out rather than ends cancelled). The sender
	// keeps the step's: bg's Wait cancels bgCtx, and sends queued by then
	// must still go.
	bctx, bcancel := context.WithTimeout(w.ctx, 2*w.cfg.StepTimeout)
	unlink := context.AfterFunc(ctx, bcancel)
	bg, bgCtx := errgroup.WithContext(bctx)
	fg, fgCancel := context.WithCancel(ctx)
	defer fgCancel()
	context.AfterFunc(bgCtx, func() {
		if ctx.Err() == nil {
			fgCancel()
		}
	})
	st := w.newStepState(fg, step, snd, bg)
	st.bgCtx, st.prev = bgCtx, prev
	st.inline = w.pushesInline(st)
	err := w.step(st)
	if err != nil {
		cancel()
	}
	err = withConsequences(err, prev.finish(err != nil), nil)
	err = withConsequences(err, nil, snd.wait())
	linked := unlink()
	if err == nil && linked && w.overlaps(step) {
		w.tail = w.keepTail(st, bg, bcancel)
	} else {
		if err != nil {
			bcancel()
		}
		err = withConsequences(err, bg.Wait(), nil)
		bcancel()
		st.gate.open(err == nil)
	}
	st.clk.lap(&st.res.Push)
	w.ahead = nil
	if err == nil && w.local == nil && w.hasStep(step+1) { // an allreduce stage pulls nothing ahead
		w.ahead = st.next
	}
	if err != nil {
		return Result{}, fmt.Errorf("pipeline: job %s stage %d replica %d step %d: %w",
			w.cfg.Job, w.cfg.Stage, w.cfg.Replica, step, err)
	}
	return st.res, nil
}

// withConsequences joins a step's error with those of its background pulls
// and pushes (bg) and sends (snd), the step's own first: it is the cause.
// Once the step has failed, the background work it cancelled reports
// context.Canceled, which says nothing and is dropped, and a background
// error that the step already returned (its Wait) is not repeated.
func withConsequences(err, bg, snd error) error {
	if snd != nil {
		snd = fmt.Errorf("send: %w", snd)
	}
	if err == nil {
		return errors.Join(bg, snd)
	}
	for _, e := range []error{bg, snd} {
		if e != nil && !errors.Is(e, context.Canceled) && !errors.Is(err, e) {
			err = errors.Join(err, e)
		}
	}
	return err
}

// clock charges the time since its last lap to a Result field.
type clock struct{ at time.Time }

func (c *clock) lap(d *time.Duration) {
	now := time.Now()
	*d += now.Sub(c.at)
	c.at = now
}

// stepState is what one step's phases share.
type stepState struct {
	ctx   context.Context // the phases'; bgCtx the background work's
	bgCtx context.Context
	step  int64
	snd   *sender
	bg    *errgroup.Group // the dense pull and the pushes
	clk   clock
	res   Result
	dense chan error // the dense pull's outcome, once
	outs  []nn.Activation
	ins   []input
	next  *denseAhead // the next step's dense pulls, started as pushes land
	gate  *gate       // opens when the step's tables are pushed
	scale float32     // ASP: what the step's gradients are multiplied by (aspScale)
	share Share       // the stage's make-up for the step
	split *rowSplit   // splits the micro-batches among several downstream partners by Share.Next
	ring  *ring       // allreduce: the step's ring, once built
	// layers holds, per layer whose gradients the step pushes or reduces,
	// a channel closed once that is all in (tail.go); tableLayers lists
	// those that push tables.
	layers      map[int]chan struct{}
	tableLayers []int
	// covers holds, per layer, the channels of the fused reductions that
	// include its parameters (startBucket); bucketLeft counts, per bucket,
	// the layers whose gradients backward has yet to finish.
	covers     map[int][]chan struct{}
	bucketLeft []int
	prev       *stepTail   // the previous step's work still under way, if any
	ahead      *denseAhead // the dense pulls ahead for this step that the forward takes
	taken      []bool      // per dense parameter: taken from ahead
	readyWait  time.Duration
	// pieces[m] bounds the rows of micro-batch m's output sent to each
	// downstream partner (their gradients come back in the same pieces).
	pieces [][]int
	live   int // micro-batches holding a layer copy (acquire, release)
	// inline: the step runs its pushes and reductions itself (pushesInline).
	inline bool
	// inlineWork, on an inline step, is what a layer's done call queued
	// for its func to run (queueInline).
	inlineWork []func()
	// readAhead, set on an inline step, reads the next step's batch and
	// pulls its rows, in the step (see inlineRead).
	readAhead *inlineRead
}

func (w *Worker) newStepState(ctx context.Context, step int64, snd *sender, bg *errgroup.Group) *stepState {
	return &stepState{ctx: ctx, step: step, snd: snd, bg: bg, clk: clock{time.Now()}, dense: make(chan error, 1),
		outs: make([]nn.Activation, len(w.grads)), ins: make([]input, len(w.grads)),
		next: newDenseAhead(step+1, len(w.copies[0].dense), w.takeSpare()), gate: newGate(len(w.copies[0].tables)), scale: 1,
		share: w.askFor(step), pieces: make([][]int, len(w.grads)), layers: map[int]chan struct{}{},
		covers: map[int][]chan struct{}{}}
}

// step runs the step's phases into st.res; the pulls and pushes they
// start on st.bg may still run when it returns.
func (w *Worker) step(st *stepState) error {
	step, bg := st.step, st.bg
	bgCtx := st.bgCtx
	if a := w.takeAhead(step); a != nil {
		st.ahead, st.taken = a, make([]bool, len(a.vals))
		st.dense <- nil
	} else if w.local != nil && w.local.loaded {
		// An allreduce stage's dense parameters are already here: a
		// goroutine to say so cost the forward 0.5 ms a step waiting to
		// be scheduled (make run's job, 2 pinned threads on 2 cores).
		st.dense <- nil
	} else {
		bg.Go(func() error {
			err := w.pullDense(bgCtx, step)
			if err != nil {
				err = fmt.Errorf("pull dense parameters: %w", err)
			}
			st.dense <- err
			return err
		})
	}
	stage0, err := w.stage0Input(st)
	if err != nil {
		return fmt.Errorf("input: %w", err)
	}
	for _, c := range w.copies { // a failed step may have left some held
		c.micro = -1
	}
	lossSum, err := w.runSchedule(st, stage0)
	if err != nil {
		return err
	}
	if w.last {
		st.res.Loss = lossSum / float64(st.res.Samples)
	}
	return nil
}

// forward takes micro-batch m's input, pulls its rows and runs forward;
// on the last stage also the loss and backward (returning the summed
// loss), elsewhere it queues the output for downstream.
func (w *Worker) forward(st *stepState, m int, stage0 []input) (float64, error) {
	in, err := w.input(st.ctx, st.step, m, stage0)
	if err != nil {
		return 0, fmt.Errorf("input: %w", err)
	}
	// The previous step's table pushes read the gradients and rows that
	// begin and pullRows replace.
	if err := st.prev.waitTables(st.ctx); err != nil {
		return 0, err
	}
	c, err := w.acquire(st, m)
	if err != nil {
		return 0, err
	}
	st.ins[m] = in
	w.grads[m].begin(c, in.batch.Size)
	st.res.Samples += in.batch.Size
	st.clk.lap(&st.res.Input)
	local, err := w.pullRows(st.ctx, st.step, c, in)
	if err != nil {
		return 0, fmt.Errorf("pull rows: %w", err)
	}
	if m == 0 {
		if err := <-st.dense; err != nil {
			return 0, err
		}
	}
	st.clk.lap(&st.res.Pull)
	c.step = &nn.Step{Backend: w.cfg.Backend, Batch: local, Train: true, Source: in.batch,
		Ready: func(layer int) error { return w.layerReady(st, layer) }}
	r := w.cfg.Layers
	if st.outs[m], err = c.model.ForwardRange(c.step, r.First, r.Last, in.act); err != nil {
		return 0, fmt.Errorf("forward: %w", err)
	}
	if err := w.readyAll(st); err != nil {
		return 0, fmt.Errorf("forward: %w", err)
	}
	sum := 0.0
	if w.last {
		sum, err = w.lossAndBackward(st, m)
	} else {
		err = w.sendActivations(st, m, st.outs[m], in.batch)
	}
	st.clk.lap(&st.res.Compute)
	st.res.Compute -= st.readyWait // waiting for parameters
	st.res.Pull += st.readyWait
	st.readyWait = 0
	return sum, err
}

// backwardFromDownstream takes micro-batch m's output gradient from
// downstream, runs backward and queues the input's gradient.
func (w *Worker) backwardFromDownstream(st *stepState, m int) error {
	dout, err := w.recvGradients(st.ctx, st.step, m, st.outs[m], st.pieces[m])
	if err != nil {
		return fmt.Errorf("gradient of micro-batch %d: %w", m, err)
	}
	st.clk.lap(&st.res.Downstream)
	if err := w.backward(st, m, dout); err != nil {
		return fmt.Errorf("backward of micro-batch %d: %w", m, err)
	}
	st.clk.lap(&st.res.Compute)
	return nil
}

// lossAndBackward runs the loss and backward of micro-batch m on the last
// stage and returns the summed loss.
func (w *Worker) lossAndBackward(st *stepState, m int) (float64, error) {
	c := w.grads[m].copy
	sum, dout, err := c.model.Loss.Forward(c.step, st.outs[m])
	if err != nil {
		return 0, err
	}
	if math.IsNaN(sum) || math.IsInf(sum, 0) {
		return 0, fmt.Errorf("loss is %v (diverged; lower the learning rate)", sum)
	}
	if err := w.backward(st, m, dout); err != nil {
		return 0, fmt.Errorf("backward: %w", err)
	}
	return sum, nil
}

// backward runs micro-batch m's backward from dout, queues the input's
// gradient upstream and releases its layer copy; on the last micro-batch
// it pushes each layer's gradients as soon as the layer is done.
func (w *Worker) backward(st *stepState, m int, dout nn.Activation) error {
	var done nn.Then
	if m == len(w.grads)-1 {
		weight := w.weight(st.res.Samples)
		st.scale = w.aspScale(st.share, st.res.Samples)
		done = func(layer int) func() { return w.pushLayer(st, weight, layer) }
	}
	r, c := w.cfg.Layers, w.grads[m].copy
	w.grads[m].useDense(c)
	din, err := c.model.BackwardRangeThen(c.step, r.First, r.Last, dout, done)
	if err != nil {
		return err
	}
	if w.reusedBeforeSent() {
		if din, err = cloneActivation(w.cfg.Backend, din); err != nil {
			return fmt.Errorf("keep the input gradient for its send: %w", err)
		}
	}
	w.sendGradients(st.snd, st.step, m, din, st.ins[m].rows)
	return w.release(st, m)
}

// reusedBeforeSent reports whether a layer copy may run its next backward,
// overwriting the input gradient it holds, before the sender has sent it.
// On the last stage it may: its next forward needs only the next
// activation, which upstream sends before it waits for this gradient.
// Elsewhere it may not: the copy's next backward needs a gradient that
// downstream sends only after the activation the sender queued after this
// gradient.
func (w *Worker) reusedBeforeSent() bool {
	return w.last && w.cfg.Stage > 0 && len(w.copies) < len(w.grads)
}

// cloneActivation returns a copy of a's buffers.
func cloneActivation(be native.Backend, a nn.Activation) (nn.Activation, error) {
	out := nn.Activation{Rows: a.Rows, Parts: slices.Clone(a.Parts)}
	for j, p := range out.Parts {
		if p.Buf == nil {
			continue
		}
		h, err := hostFloats(be, p.Buf)
		if err != nil {
			return nn.Activation{}, err
		}
		if out.Parts[j].Buf, err = toBuffer(be, slices.Clone(h)); err != nil {
			return nn.Activation{}, err
		}
	}
	return out, nil
}

// weight is the push weight of a step of rows rows: b_k in BSP, 1 in ASP
// (where the servers multiply the gradient by it; aspScale has already
// done so).
func (w *Worker) weight(rows int) int {
	if w.cfg.Mode == ps.ASP {
		return 1
	}
	return rows
}

// aspScale is the factor an ASP push's gradient counts with: b_k/mean(b)
// over the stage's share of the step, b_k being the step's rows, so that
// every sample counts alike whatever replica trained on it. Equal batches
// give exactly 1 (the gradient is pushed as it is, bit for bit as plain
// asynchronous SGD); so do BSP, whose servers weigh by b_k/sum(b), and a
// share whose batches are not known.
func (w *Worker) aspScale(share Share, rows int) float32 {
	if w.cfg.Mode != ps.ASP {
		return 1
	}
	total := 0
	for _, b := range share.Batches {
		if b < 1 {
			return 1
		}
		total += b
	}
	if total == 0 || rows*len(share.Batches) == total {
		return 1
	}
	return float32(float64(rows*len(share.Batches)) / float64(total))
}

// scaled returns g times f: g itself when f is 1, else a copy (g may be a
// layer's own gradient buffer).
func scaled(g []float32, f float32) []float32 {
	if f == 1 {
		return g
	}
	out := make([]float32, len(g))
	for i, v := range g {
		out[i] = v * f
	}
	return out
}

// stage0Input returns stage 0's micro-batches for the step (nil
// elsewhere) and reads the next step's, whose rows it pulls once the
// step's tables are pushed: in the background from now on, or in line
// (readAheadInline) by the step once they are.
func (w *Worker) stage0Input(st *stepState) ([]input, error) {
	if w.cfg.Stage != 0 {
		return nil, nil
	}
	ins, err := w.batch(st.ctx, st.step)
	if err != nil {
		return nil, err
	}
	switch {
	case !w.hasStep(st.step + 1):
	case st.inline && len(w.copies[0].tables) > 0:
		st.readAhead = &inlineRead{w: w, ctx: st.ctx, gate: st.gate, step: st.step + 1, touched: w.touchedRows(st.step, ins)}
	default:
		w.startPrefetch(st.step+1, st.gate, w.touchedRows(st.step, ins))
	}
	return ins, nil
}

// hasStep reports whether the job has step and the replica is a member
// for it.
func (w *Worker) hasStep(step int64) bool {
	return (w.cfg.LastStep == 0 || step <= w.cfg.LastStep) && w.Member(step)
}

// input returns micro-batch m: stage 0's, or the activations and batches
// of the upstream partners, stacked in replica order.
func (w *Worker) input(ctx context.Context, step int64, m int, stage0 []input) (input, error) {
	if stage0 != nil {
		return stage0[m], nil
	}
	acts := make([]nn.Activation, len(w.cfg.Prev))
	batches := make([]*data.Batch, len(w.cfg.Prev))
	in := input{rows: make([]int, len(w.cfg.Prev))}
	for i, l := range w.cfg.Prev {
		msg, err := l.recv(ctx, wire.MsgActivation, step, m)
		if err != nil {
			return input{}, err
		}
		acts[i], batches[i], err = decodeActivation(w.cfg.Backend, msg)
		msg.Release()
		if err != nil {
			return input{}, fmt.Errorf("from %s: %w", l.Peer, err)
		}
		in.rows[i] = acts[i].Rows
	}
	var err error
	if in.act, err = concatActivations(w.cfg.Backend, acts); err != nil {
		return input{}, err
	}
	if in.batch, err = concatBatches(batches); err != nil {
		return input{}, err
	}
	return in, nil
}

// batch returns stage 0's micro-batches of step, from the prefetch if it
// fetched that step.
func (w *Worker) batch(ctx context.Context, step int64) ([]input, error) {
	if w.next == 0 {
		return w.microInputs(ctx, step)
	}
	var fetched prefetched
	select {
	case fetched = <-w.prefetch:
	case <-ctx.Done():
		// The prefetch may wait on the servers for as long as the worker
		// lives; it stays w.next, for the next call to take or drop.
		return nil, fmt.Errorf("waiting for the batch read ahead: %w", ctx.Err())
	}
	want := w.next
	w.next = 0
	if want != step {
		return w.microInputs(ctx, step)
	}
	return fetched.ins, fetched.err
}

// startPrefetch reads step's batch and plans its rows in the background,
// overlapping the current step, then pulls the rows ahead: at once those
// that touched (touchedRows) does not list, the others once g opens.
func (w *Worker) startPrefetch(step int64, g *gate, touched [][]int64) {
	w.next = step
	w.wg.Go(func() {
		ins, err := w.microInputs(w.ctx, step)
		if err == nil {
			w.pullRowsAhead(g, step, ins, touched)
		}
		w.prefetch <- prefetched{ins, err}
	})
}

// An inlineRead reads step's batch and pulls its rows within the step
// before it, for the next call of batch to take: prepare reads and plans
// the batch and pulls the rows the current step does not touch, on
// whichever of the step's goroutines calls it first (the others wait for
// it); finish, once gate is open, prepares if nobody has and pulls the
// rest. See Pushes in line (psync.go).
type inlineRead struct {
	w        *Worker
	ctx      context.Context
	gate     *gate
	step     int64
	touched  [][]int64 // the current step's rows (touchedRows), or nil
	prepared sync.Once
	finished sync.Once
	ins      []input
	err      error
	early    []rowsAhead // the untouched rows, pulled by prepare
	pulled   bool        // early is good (nil early: pull every row)
}

func (r *inlineRead) prepare() {
	r.prepared.Do(func() {
		if r.ins, r.err = r.w.microInputs(r.ctx, r.step); r.err == nil {
			early, err := r.w.pullUntouchedAhead(r.step, r.ins, r.touched)
			r.early, r.pulled = early, err == nil
		}
	})
}

func (r *inlineRead) finish() {
	r.finished.Do(func() {
		r.prepare()
		if r.err == nil && r.pulled {
			r.w.pullRestAhead(r.ctx, r.step, r.ins, r.early)
		}
		if r.err != nil && r.ctx.Err() != nil {
			return // the step is ending: the next reads its own batch
		}
		r.w.next = r.step
		r.w.prefetch <- prefetched{r.ins, r.err}
	})
}

// microInputs reads step's batch and splits it into micro-batches, each
// with its row plan.
func (w *Worker) microInputs(ctx context.Context, step int64) ([]input, error) {
	share := w.askFor(step)
	var b *data.Batch
	var err error
	if w.cfg.Input != nil {
		b, err = w.cfg.Input(ctx, step, share)
	} else {
		b, err = w.cfg.Batches(ctx, step)
	}
	if err != nil {
		return nil, err
	}
	if b == nil || b.Size < 1 {
		return nil, errors.New("empty batch")
	}
	bounds, err := microBounds(b.Size, len(w.grads))
	if err != nil {
		return nil, err
	}
	ins := make([]input, len(w.grads))
	for m := range ins {
		mb := sliceBatch(b, bounds[m], bounds[m+1])
		plan, err := planRows(mb, w.copies[0].tables)
		if err != nil {
			return nil, fmt.Errorf("micro-batch %d: %w", m, err)
		}
		ins[m] = input{batch: mb, rows: []int{mb.Size}, plan: plan}
	}
	return ins, nil
}

func (w *Worker) meta(step int64, m int) wire.Meta {
	return wire.Meta{Job: w.job, Stage: uint64(w.cfg.Stage), Replica: uint64(w.cfg.Replica),
		Step: uint64(step), Micro: uint64(m)}
}

// sendActivations queues, for each downstream partner, its rows of
// micro-batch m's output and batch, and records the pieces in st.pieces.
func (w *Worker) sendActivations(st *stepState, m int, out nn.Activation, b *data.Batch) error {
	bounds, err := w.pieceBounds(st, out.Rows)
	if err != nil {
		return fmt.Errorf("split for downstream: %w", err)
	}
	st.pieces[m] = bounds
	snd, step := st.snd, st.step
	snd.send(func() error {
		return each(len(w.cfg.Next), func(i int) error {
			msg, err := activationMessage(w.cfg.Backend, w.meta(step, m), out, b, bounds[i], bounds[i+1])
			if err != nil {
				return err
			}
			return w.cfg.Next[i].send(snd.ctx, msg)
		})
	})
	return nil
}

// pieceBounds returns the bounds of each downstream partner's rows of a
// micro-batch of rows rows: by the share's Next batches when it names one
// per partner, else near-equal pieces.
func (w *Worker) pieceBounds(st *stepState, rows int) ([]int, error) {
	n := len(w.cfg.Next)
	if n > 1 && len(st.share.Next) == n {
		if st.split == nil {
			st.split = newRowSplit(st.share.Next, len(w.grads))
		}
		return st.split.next(rows)
	}
	bounds := chunks(rows, n)
	if bounds[1] == 0 {
		return nil, fmt.Errorf("%d rows for %d downstream replicas", rows, n)
	}
	return bounds, nil
}

// recvGradients returns the gradient of micro-batch m's output, stacked
// from the downstream partners' pieces (bounds, as sendActivations cut them).
func (w *Worker) recvGradients(ctx context.Context, step int64, m int, out nn.Activation, bounds []int) (nn.Activation, error) {
	grads := make([]nn.Activation, len(w.cfg.Next))
	for i, l := range w.cfg.Next {
		msg, err := l.recv(ctx, wire.MsgGradient, step, m)
		if err != nil {
			return nn.Activation{}, err
		}
		grads[i], err = decodeGradient(w.cfg.Backend, msg, out.Parts, bounds[i+1]-bounds[i], out.Rows)
		msg.Release()
		if err != nil {
			return nn.Activation{}, fmt.Errorf("from %s: %w", l.Peer, err)
		}
	}
	return concatGradients(w.cfg.Backend, grads, out.Parts)
}

// sendGradients queues, for each upstream partner, the gradient of the rows
// of micro-batch m it sent.
func (w *Worker) sendGradients(snd *sender, step int64, m int, din nn.Activation, rows []int) {
	if w.cfg.Stage == 0 {
		return
	}
	bounds := []int{0}
	for i, n := range rows {
		bounds = append(bounds, bounds[i]+n)
	}
	snd.send(func() error {
		return each(len(w.cfg.Prev), func(i int) error {
			msg, err := gradientMessage(w.cfg.Backend, w.meta(step, m), din, bounds[i], bounds[i+1])
			if err != nil {
				return err
			}
			return w.cfg.Prev[i].send(snd.ctx, msg)
		})
	})
}

// concatGradients stacks the downstream partners' gradients row-wise.
func concatGradients(be native.Backend, grads []nn.Activation, parts []nn.Part) (nn.Activation, error) {
	if len(grads) == 1 {
		return grads[0], nil
	}
	out := nn.Activation{}
	for _, g := range grads {
		out.Rows += g.Rows
	}
	for j, p := range parts {
		part := nn.Part{Width: p.Width, NeedGrad: p.NeedGrad}
		if grads[0].Parts[j].Buf != nil {
			var h []float32
			for i, g := range grads {
				if g.Parts[j].Buf == nil {
					return nn.Activation{}, fmt.Errorf("gradient %d lacks part %d", i, j)
				}
				hp, err := hostFloats(be, g.Parts[j].Buf)
				if err != nil {
					return nn.Activation{}, err
				}
				h = append(h, hp...)
			}
			buf, err := toBuffer(be, h)
			if err != nil {
				return nn.Activation{}, err
			}
			part.Buf = buf
		}
		out.Parts = append(out.Parts, part)
	}
	return out, nil
}
