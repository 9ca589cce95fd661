package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

// DefaultStepTimeout bounds a step when Config.StepTimeout is 0.
const DefaultStepTimeout = 5 * time.Minute

// maxReplicas bounds stages and replicas so that EdgeStream is one-to-one.
const maxReplicas = 1 << 10

// MaxMicroBatches bounds Config.MicroBatches.
const MaxMicroBatches = 32

// Config describes one replica of one stage.
type Config struct {
	Job     string
	Stage   int
	Stages  int
	Replica int
	Layers  Range
	// Model is the whole model, built with the job's seed on Backend; the
	// worker runs Layers of it and keeps only the current batch's rows of
	// its embedding tables.
	Model   *nn.Model
	Backend native.Backend
	// MicroBatches splits each step's batch (at stage 0) into this many
	// micro-batches that flow through the stages one after another; every
	// stage of a job must use the same number. 0 means 1; at most
	// MaxMicroBatches, so that a step's messages fit the wire's per-stream
	// queues (a stage reads its gradients only after all its forwards).
	MicroBatches int
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
	Batches     func(ctx context.Context, step int64) (*data.Batch, error)
	StepTimeout time.Duration // 0 = DefaultStepTimeout
}

// Result is what a step reports.
type Result struct {
	Samples int     // rows this replica processed
	Loss    float64 // mean loss of those rows; last stage only
	// Where the step's time went: waiting for input, pulling parameters,
	// forward and backward (with the loss), waiting for the output's
	// gradients, and pushing gradients (with the last sends).
	Input, Pull, Compute, Downstream, Push time.Duration
}

// Worker runs one replica of one stage, a step at a time. It is owned by
// one goroutine.
type Worker struct {
	cfg    Config
	job    uint64
	last   bool
	copies []*modelCopy // one per micro-batch

	ctx      context.Context // ends at Close; bounds prefetches
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	prefetch chan prefetched // holds the next step's batch, once asked for
	next     int64           // the step prefetch is fetching, 0 if none
}

type prefetched struct {
	batch *data.Batch
	err   error
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
	w := &Worker{cfg: cfg, job: ps.JobKey(cfg.Job), last: cfg.Stage == cfg.Stages-1, prefetch: make(chan prefetched, 1)}
	for m := range cfg.MicroBatches {
		model := cfg.Model
		var shared []*nn.Param
		if m > 0 {
			var err error
			if model, err = nn.Build(cfg.Backend, cfg.Model.Config, cfg.Model.Seed); err != nil {
				return fail(err)
			}
			shared = w.copies[0].dense
		}
		c, err := newCopy(model, cfg.Layers, &cfg, shared)
		if err != nil {
			return fail(err)
		}
		w.copies = append(w.copies, c)
	}
	if cfg.PS == nil && len(w.copies[0].dense)+len(w.copies[0].embeddings) > 0 {
		return fail(errors.New("the stage has parameters and no parameter-server client"))
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
	case c.Stage == 0 && c.Batches == nil:
		return errors.New("stage 0 needs Batches")
	case c.MicroBatches < 0 || c.MicroBatches > MaxMicroBatches:
		return fmt.Errorf("%d micro-batches, want at most %d", c.MicroBatches, MaxMicroBatches)
	}
	return nil
}

// Close stops a prefetch in flight and waits for it.
func (w *Worker) Close() error {
	w.cancel()
	w.wg.Wait()
	return nil
}

// Step runs step (1-based; steps go in order). It pulls the dense
// parameters, then for each micro-batch takes its input, pulls its rows and
// runs forward, sending the output downstream in the background; then for
// each micro-batch gets the output's gradient (the loss on the last stage,
// else from downstream), runs backward and sends the input's gradient
// upstream in the background; finally it pushes the step's gradients,
// micro-batches weighted by their rows, while the last sends finish.
func (w *Worker) Step(ctx context.Context, step int64) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.StepTimeout)
	defer cancel()
	snd := startSender(ctx, cancel)
	res, err := w.step(ctx, step, snd)
	if serr := snd.wait(); serr != nil {
		err = errors.Join(fmt.Errorf("send: %w", serr), err)
	}
	if err != nil {
		return Result{}, fmt.Errorf("pipeline: job %s stage %d replica %d step %d: %w",
			w.cfg.Job, w.cfg.Stage, w.cfg.Replica, step, err)
	}
	return res, nil
}

// clock charges the time since its last lap to a Result field.
type clock struct{ at time.Time }

func (c *clock) lap(d *time.Duration) {
	now := time.Now()
	*d += now.Sub(c.at)
	c.at = now
}

func (w *Worker) step(ctx context.Context, step int64, snd *sender) (Result, error) {
	var res Result
	clk := clock{time.Now()}
	if err := w.pullDense(ctx, step); err != nil {
		return res, fmt.Errorf("pull dense parameters: %w", err)
	}
	clk.lap(&res.Pull)
	stacked, err := w.stage0Input(ctx, step)
	if err != nil {
		return res, fmt.Errorf("input: %w", err)
	}
	lossSum := 0.0
	outs := make([]nn.Activation, len(w.copies))
	ins := make([]input, len(w.copies))
	for m, c := range w.copies {
		if ins[m], err = w.input(ctx, step, m, stacked); err != nil {
			return res, fmt.Errorf("input of micro-batch %d: %w", m, err)
		}
		c.rows = ins[m].batch.Size
		res.Samples += c.rows
		clk.lap(&res.Input)
		local, err := w.pullRows(ctx, step, c, ins[m].batch)
		if err != nil {
			return res, fmt.Errorf("pull rows of micro-batch %d: %w", m, err)
		}
		clk.lap(&res.Pull)
		c.step = &nn.Step{Backend: w.cfg.Backend, Batch: local, Train: true}
		r := w.cfg.Layers
		if outs[m], err = c.model.ForwardRange(c.step, r.First, r.Last, ins[m].act); err != nil {
			return res, fmt.Errorf("forward of micro-batch %d: %w", m, err)
		}
		if w.last {
			sum, err := w.lossAndBackward(c, outs[m], ins[m], snd, step, m)
			if err != nil {
				return res, fmt.Errorf("micro-batch %d: %w", m, err)
			}
			lossSum += sum
		} else {
			w.sendActivations(snd, step, m, outs[m], ins[m].batch)
		}
		clk.lap(&res.Compute)
	}
	if w.last {
		res.Loss = lossSum / float64(res.Samples)
	}
	if !w.last {
		if err := w.backwards(ctx, step, snd, outs, ins, &clk, &res); err != nil {
			return res, err
		}
	}
	if err := w.push(ctx, step, w.weight(res.Samples)); err != nil {
		return res, fmt.Errorf("push: %w", err)
	}
	clk.lap(&res.Push)
	return res, nil
}

// backwards takes each micro-batch's output gradient from downstream, in
// order, runs backward and queues the input's gradient.
func (w *Worker) backwards(ctx context.Context, step int64, snd *sender, outs []nn.Activation, ins []input, clk *clock, res *Result) error {
	r := w.cfg.Layers
	for m, c := range w.copies {
		dout, err := w.recvGradients(ctx, step, m, outs[m])
		if err != nil {
			return fmt.Errorf("gradient of micro-batch %d: %w", m, err)
		}
		clk.lap(&res.Downstream)
		din, err := c.model.BackwardRange(c.step, r.First, r.Last, dout)
		if err != nil {
			return fmt.Errorf("backward of micro-batch %d: %w", m, err)
		}
		w.sendGradients(snd, step, m, din, ins[m].rows)
		clk.lap(&res.Compute)
	}
	return nil
}

// lossAndBackward runs the loss and backward of a micro-batch on the last
// stage and queues the input's gradient; it returns the summed loss.
func (w *Worker) lossAndBackward(c *modelCopy, out nn.Activation, in input, snd *sender, step int64, m int) (float64, error) {
	sum, dout, err := c.model.Loss.Forward(c.step, out)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(sum) || math.IsInf(sum, 0) {
		return 0, fmt.Errorf("loss is %v (diverged; lower the learning rate)", sum)
	}
	r := w.cfg.Layers
	din, err := c.model.BackwardRange(c.step, r.First, r.Last, dout)
	if err != nil {
		return 0, fmt.Errorf("backward: %w", err)
	}
	w.sendGradients(snd, step, m, din, in.rows)
	return sum, nil
}

// weight is the push weight of a step of rows rows: b_k in BSP, 1 in ASP
// (where the servers multiply the gradient by it).
func (w *Worker) weight(rows int) int {
	if w.cfg.Mode == ps.ASP {
		return 1
	}
	return rows
}

// stage0Input returns stage 0's batch for the step (nil elsewhere) and
// starts reading the next one.
func (w *Worker) stage0Input(ctx context.Context, step int64) (*data.Batch, error) {
	if w.cfg.Stage != 0 {
		return nil, nil
	}
	b, err := w.batch(ctx, step)
	if err != nil {
		return nil, err
	}
	if b == nil || b.Size < 1 {
		return nil, errors.New("empty batch")
	}
	w.startPrefetch(step + 1)
	return b, nil
}

// input returns micro-batch m: stage 0's rows of it, or the activations and
// batches of the upstream partners, stacked in replica order.
func (w *Worker) input(ctx context.Context, step int64, m int, stacked *data.Batch) (input, error) {
	if stacked != nil {
		bounds, err := microBounds(stacked.Size, len(w.copies))
		if err != nil {
			return input{}, err
		}
		b := sliceBatch(stacked, bounds[m], bounds[m+1])
		return input{batch: b, rows: []int{b.Size}}, nil
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

// batch returns step's batch, from the prefetch if it fetched that step.
func (w *Worker) batch(ctx context.Context, step int64) (*data.Batch, error) {
	if w.next == 0 {
		return w.cfg.Batches(ctx, step)
	}
	fetched, want := <-w.prefetch, w.next
	w.next = 0
	if want != step {
		return w.cfg.Batches(ctx, step)
	}
	return fetched.batch, fetched.err
}

// startPrefetch reads step's batch in the background, overlapping the
// current step.
func (w *Worker) startPrefetch(step int64) {
	w.next = step
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		b, err := w.cfg.Batches(w.ctx, step)
		w.prefetch <- prefetched{b, err}
	}()
}

func (w *Worker) meta(step int64, m int) wire.Meta {
	return wire.Meta{Job: w.job, Stage: uint64(w.cfg.Stage), Replica: uint64(w.cfg.Replica),
		Step: uint64(step), Micro: uint64(m)}
}

// sendActivations queues, for each downstream partner, its rows of
// micro-batch m's output and batch.
func (w *Worker) sendActivations(snd *sender, step int64, m int, out nn.Activation, b *data.Batch) {
	bounds := chunks(out.Rows, len(w.cfg.Next))
	snd.send(func() error {
		if bounds[1] == 0 {
			return fmt.Errorf("%d rows for %d downstream replicas", out.Rows, len(w.cfg.Next))
		}
		return each(len(w.cfg.Next), func(i int) error {
			msg, err := activationMessage(w.cfg.Backend, w.meta(step, m), out, b, bounds[i], bounds[i+1])
			if err != nil {
				return err
			}
			return w.cfg.Next[i].send(snd.ctx, msg)
		})
	})
}

// recvGradients returns the gradient of micro-batch m's output, stacked
// from the downstream partners' pieces.
func (w *Worker) recvGradients(ctx context.Context, step int64, m int, out nn.Activation) (nn.Activation, error) {
	bounds := chunks(out.Rows, len(w.cfg.Next))
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
