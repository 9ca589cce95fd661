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

// Link reaches one partner replica of a neighbouring stage.
type Link struct {
	Transport wire.Transport
	Peer      string // the partner's node id
	Stream    uint32 // EdgeStream of the pair
}

// Partners returns the replicas of a neighbouring stage with n replicas
// that replica j of a stage with r replicas exchanges with: every k in
// [0, n) with k ≡ j (mod min(r, n)), ascending.
func Partners(j, r, n int) []int {
	m := min(r, n)
	var out []int
	for k := j % m; k < n; k += m {
		out = append(out, k)
	}
	return out
}

// EdgeStream is the stream replica up of stage and replica down of stage+1
// exchange activations and gradients on (each direction has its own
// queue). Stages and replicas are below 1024.
func EdgeStream(stage, up, down int) uint32 {
	return 1<<30 | uint32(stage)<<20 | uint32(up)<<10 | uint32(down)
}

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
	// Where the step's time went: waiting for the input, pulling
	// parameters, forward and backward (with the loss), waiting for the
	// output's gradient, and sending gradients and pushing them.
	Input, Pull, Compute, Downstream, Push time.Duration
}

// Worker runs one replica of one stage, a step at a time. It is owned by
// one goroutine.
type Worker struct {
	cfg        Config
	job        uint64
	last       bool
	embeddings []embedding
	dense      []*nn.Param
	uniq       []int64 // the current batch's distinct ids, ascending

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

// NewWorker checks cfg and prepares the stage's parameters.
func NewWorker(cfg Config) (*Worker, error) {
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("pipeline: job %s stage %d replica %d: %w", cfg.Job, cfg.Stage, cfg.Replica, err)
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = DefaultStepTimeout
	}
	w := &Worker{cfg: cfg, job: ps.JobKey(cfg.Job), last: cfg.Stage == cfg.Stages-1, prefetch: make(chan prefetched, 1)}
	for i := cfg.Layers.First; i <= cfg.Layers.Last; i++ {
		for _, p := range cfg.Model.LayerParams(i) {
			if !p.Sparse {
				w.dense = append(w.dense, p)
				continue
			}
			e, ok := cfg.Model.Layer(i).(*nn.Embedding)
			if !ok {
				return nil, fmt.Errorf("pipeline: sparse parameter %s: %w", p.Name, ErrUnsupported)
			}
			// The parameter server holds the table; drop the local copy.
			p.Value, p.Rows = cfg.Backend.Alloc(0), 0
			w.embeddings = append(w.embeddings, embedding{layer: e, table: p})
		}
	}
	if cfg.PS == nil && len(w.dense)+len(w.embeddings) > 0 {
		return nil, fmt.Errorf("pipeline: stage %d has parameters and no parameter-server client", cfg.Stage)
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
	}
	return nil
}

// Close stops a prefetch in flight and waits for it.
func (w *Worker) Close() error {
	w.cancel()
	w.wg.Wait()
	return nil
}

// Step runs step (1-based; steps go in order): input, parameter pulls,
// forward, the output's gradient (the loss, or from the next stage),
// backward, then the input's gradient upstream and the parameters'
// gradients to the parameter servers, together.
func (w *Worker) Step(ctx context.Context, step int64) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.StepTimeout)
	defer cancel()
	fail := func(what string, err error) (Result, error) {
		return Result{}, fmt.Errorf("pipeline: job %s stage %d replica %d step %d: %s: %w",
			w.cfg.Job, w.cfg.Stage, w.cfg.Replica, step, what, err)
	}
	var res Result
	clock := time.Now()
	lap := func(d *time.Duration) {
		now := time.Now()
		*d += now.Sub(clock)
		clock = now
	}
	in, err := w.input(ctx, step)
	if err != nil {
		return fail("input", err)
	}
	lap(&res.Input)
	local, err := w.pull(ctx, step, in.batch)
	if err != nil {
		return fail("pull parameters", err)
	}
	lap(&res.Pull)
	s := &nn.Step{Backend: w.cfg.Backend, Batch: local, Train: true}
	r := w.cfg.Layers
	out, err := w.cfg.Model.ForwardRange(s, r.First, r.Last, in.act)
	if err != nil {
		return fail("forward", err)
	}
	lap(&res.Compute)
	dout, err := w.outputGradient(ctx, step, s, out, in.batch, &res)
	if err != nil {
		return fail("output gradient", err)
	}
	if w.last {
		lap(&res.Compute) // the loss
	} else {
		lap(&res.Downstream)
	}
	din, err := w.cfg.Model.BackwardRange(s, r.First, r.Last, dout)
	if err != nil {
		return fail("backward", err)
	}
	lap(&res.Compute)
	err = together(
		func() error { return w.sendGradients(ctx, step, din, in.rows) },
		func() error { return w.push(ctx, step, w.weight(in.batch.Size)) })
	if err != nil {
		return fail("send gradients", err)
	}
	lap(&res.Push)
	res.Samples = in.batch.Size
	return res, nil
}

// weight is the push weight of a step of rows rows: b_k in BSP, 1 in ASP
// (where the servers multiply the gradient by it).
func (w *Worker) weight(rows int) int {
	if w.cfg.Mode == ps.ASP {
		return 1
	}
	return rows
}

// input returns the step's batch (stage 0) or the activations and batches
// of the upstream partners, stacked in replica order.
func (w *Worker) input(ctx context.Context, step int64) (input, error) {
	if w.cfg.Stage == 0 {
		b, err := w.batch(ctx, step)
		if err != nil {
			return input{}, err
		}
		if b == nil || b.Size < 1 {
			return input{}, errors.New("empty batch")
		}
		w.startPrefetch(step + 1)
		return input{batch: b, rows: []int{b.Size}}, nil
	}
	acts := make([]nn.Activation, len(w.cfg.Prev))
	batches := make([]*data.Batch, len(w.cfg.Prev))
	in := input{rows: make([]int, len(w.cfg.Prev))}
	for i, l := range w.cfg.Prev {
		m, err := l.recv(ctx, wire.MsgActivation, step)
		if err != nil {
			return input{}, err
		}
		acts[i], batches[i], err = decodeActivation(w.cfg.Backend, m)
		m.Release()
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

// outputGradient returns the gradient of the loss with respect to out: from
// the loss on the last stage (setting res.Loss to the batch's mean loss),
// else from the next stage after sending it out.
func (w *Worker) outputGradient(ctx context.Context, step int64, s *nn.Step, out nn.Activation, b *data.Batch, res *Result) (nn.Activation, error) {
	if w.last {
		sum, dout, err := w.cfg.Model.Loss.Forward(s, out)
		if err != nil {
			return nn.Activation{}, err
		}
		if math.IsNaN(sum) || math.IsInf(sum, 0) {
			return nn.Activation{}, fmt.Errorf("loss is %v (diverged; lower the learning rate)", sum)
		}
		res.Loss = sum / float64(b.Size)
		return dout, nil
	}
	if err := w.sendActivations(ctx, step, out, b); err != nil {
		return nn.Activation{}, err
	}
	bounds := chunks(out.Rows, len(w.cfg.Next))
	grads := make([]nn.Activation, len(w.cfg.Next))
	for i, l := range w.cfg.Next {
		m, err := l.recv(ctx, wire.MsgGradient, step)
		if err != nil {
			return nn.Activation{}, err
		}
		grads[i], err = decodeGradient(w.cfg.Backend, m, out.Parts, bounds[i+1]-bounds[i], out.Rows)
		m.Release()
		if err != nil {
			return nn.Activation{}, fmt.Errorf("from %s: %w", l.Peer, err)
		}
	}
	return concatGradients(w.cfg.Backend, grads, out.Parts)
}

func (w *Worker) meta(step int64) wire.Meta {
	return wire.Meta{Job: w.job, Stage: uint64(w.cfg.Stage), Replica: uint64(w.cfg.Replica), Step: uint64(step)}
}

// sendActivations sends each downstream partner its rows of out and b, in
// parallel.
func (w *Worker) sendActivations(ctx context.Context, step int64, out nn.Activation, b *data.Batch) error {
	bounds := chunks(out.Rows, len(w.cfg.Next))
	if bounds[1] == 0 {
		return fmt.Errorf("%d rows for %d downstream replicas", out.Rows, len(w.cfg.Next))
	}
	return each(len(w.cfg.Next), func(i int) error {
		m, err := activationMessage(w.cfg.Backend, w.meta(step), out, b, bounds[i], bounds[i+1])
		if err != nil {
			return err
		}
		return w.cfg.Next[i].send(ctx, m)
	})
}

// sendGradients sends each upstream partner the gradient of the rows it
// sent.
func (w *Worker) sendGradients(ctx context.Context, step int64, din nn.Activation, rows []int) error {
	if w.cfg.Stage == 0 {
		return nil
	}
	bounds := []int{0}
	for i, n := range rows {
		bounds = append(bounds, bounds[i]+n)
	}
	return each(len(w.cfg.Prev), func(i int) error {
		m, err := gradientMessage(w.cfg.Backend, w.meta(step), din, bounds[i], bounds[i+1])
		if err != nil {
			return err
		}
		return w.cfg.Prev[i].send(ctx, m)
	})
}

func (l Link) send(ctx context.Context, m *wire.Message) error {
	if err := l.Transport.Send(ctx, l.Peer, l.Stream, m); err != nil {
		return fmt.Errorf("send %v to %s: %w", m.Type, l.Peer, err)
	}
	return nil
}

// recv returns the next message from l, which must be of type want for step.
func (l Link) recv(ctx context.Context, want wire.MsgType, step int64) (*wire.MessageView, error) {
	m, err := l.Transport.Recv(ctx, l.Peer, l.Stream)
	if err != nil {
		return nil, fmt.Errorf("receive %v from %s: %w", want, l.Peer, err)
	}
	if m.Type != want || m.Meta.Step != uint64(step) {
		m.Release()
		return nil, fmt.Errorf("from %s: got %v for step %d, want %v for step %d", l.Peer, m.Type, m.Meta.Step, want, step)
	}
	return m, nil
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

// together runs fs in parallel and joins their errors.
func together(fs ...func() error) error {
	return each(len(fs), func(i int) error { return fs[i]() })
}

// each runs f(0..n-1) in parallel (inline when n is 1) and joins the errors.
func each(n int, f func(i int) error) error {
	if n == 1 {
		return f(0)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
