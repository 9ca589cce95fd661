package pipeline

import (
	"context"
	"fmt"
	"sync"
)

// Pulls ahead. In BSP a step's parameters are those after the previous
// step's update, which the servers apply once every replica has pushed.
// Rather than ask for them when the next step starts, a worker asks as soon
// as its own push of a parameter is in: the servers answer when the update
// is applied, while the worker still runs the rest of its backward pass and
// the pushes below. Stage 0 pulls the next batch's rows the same way, once
// the step's tables are pushed, since it has read and planned that batch
// already. The next step then finds its parameters waiting.

// pulled is the outcome of one pull ahead.
type pulled struct {
	v   []float32
	err error
}

// denseAhead holds the pulls ahead of the dense parameters for one step:
// one channel per dense parameter, each filled once, and the buffers the
// pulls write into (bufs[i] nil: allocate one).
type denseAhead struct {
	step int64
	vals []chan pulled
	bufs [][]float32
}

// newDenseAhead makes the pulls ahead of n dense parameters for step,
// into bufs if not nil (one per parameter, from a denseAhead taken whole).
func newDenseAhead(step int64, n int, bufs [][]float32) *denseAhead {
	a := &denseAhead{step: step, vals: make([]chan pulled, n), bufs: bufs}
	if len(a.bufs) != n {
		a.bufs = make([][]float32, n)
	}
	for i := range a.vals {
		a.vals[i] = make(chan pulled, 1)
	}
	return a
}

// pullBlockAhead pulls dense parameter i for a.step in the background,
// bounded by the worker's life rather than the current step's, into the
// ahead's buffer for it.
func (w *Worker) pullBlockAhead(a *denseAhead, i int) {
	p := w.copies[0].dense[i]
	buf := a.bufs[i]
	if len(buf) != p.Len() {
		buf = make([]float32, p.Len())
	}
	w.wg.Go(func() {
		_, err := w.cfg.PS.PullBlockInto(w.ctx, p.Name, w.after(a.step), buf)
		a.vals[i] <- pulled{buf, err}
	})
}

// Buffer reuse: the dense values pulled ahead for step s+1 are uploaded
// into the model at the start of s+1, after which their buffers are free;
// takeDenseAhead hands them (w.spare) to the pulls ahead for s+2, made when
// s+1 starts. Two sets of buffers thus alternate instead of a fresh one per
// parameter per step (ctrdnn: 1.2 MB a step). Buffers of an ahead that
// failed or was not taken are never reused: a pull may still write them.

// takeSpare returns the buffers free for the next pulls ahead, if any, and
// forgets them.
func (w *Worker) takeSpare() [][]float32 {
	s := w.spare
	w.spare = nil
	return s
}

// takeDenseAhead uploads the dense parameters pulled ahead for step, if
// there are such pulls, and reports whether there were.
func (w *Worker) takeDenseAhead(ctx context.Context, step int64) (bool, error) {
	a := w.ahead
	w.ahead = nil
	if a == nil || a.step != step {
		return false, nil
	}
	for i, ch := range a.vals {
		var got pulled
		select {
		case got = <-ch:
		case <-ctx.Done():
			return true, ctx.Err()
		}
		if got.err != nil {
			return true, got.err
		}
		if err := w.uploadDense(i, got.v); err != nil {
			return true, err
		}
		a.bufs[i] = got.v
	}
	w.spare = a.bufs
	return true, nil
}

func (w *Worker) uploadDense(i int, v []float32) error {
	p := w.copies[0].dense[i]
	if len(v) != p.Len() {
		return fmt.Errorf("%s: pulled %d floats, want %d", p.Name, len(v), p.Len())
	}
	return w.cfg.Backend.Upload(p.Value, v)
}

// gate opens once a step's table pushes are all in (ok) or the step has
// failed (not ok); stage 0's prefetch waits on it before pulling the next
// batch's rows.
type gate struct {
	once sync.Once
	done chan struct{}
	ok   bool
	left int // table pushes still out; under mu
	mu   sync.Mutex
}

func newGate(pushes int) *gate {
	g := &gate{done: make(chan struct{}), left: pushes}
	if pushes == 0 {
		g.open(true)
	}
	return g
}

func (g *gate) open(ok bool) {
	g.once.Do(func() {
		g.ok = ok
		close(g.done)
	})
}

// pushed records one table push in; the last one opens the gate.
func (g *gate) pushed() {
	g.mu.Lock()
	g.left--
	last := g.left == 0
	g.mu.Unlock()
	if last {
		g.open(true)
	}
}

// wait reports whether the gate opened ok, false if ctx ended first.
func (g *gate) wait(ctx context.Context) bool {
	select {
	case <-g.done:
		return g.ok
	case <-ctx.Done():
		return false
	}
}

// pullRowsAhead pulls the rows of stage 0's next micro-batches once g
// opens ok, into each input's tables; on any failure it leaves them for
// the step to pull itself.
func (w *Worker) pullRowsAhead(g *gate, step int64, ins []input) {
	if g == nil || !g.wait(w.ctx) {
		return
	}
	for m := range ins {
		sparse := w.copies[0].tables
		tables := make([][]float32, len(sparse))
		err := each(len(sparse), func(e int) (err error) {
			tables[e], err = w.fetchTable(w.ctx, step, sparse[e], ins[m].plan.tables[e])
			return err
		})
		if err != nil {
			return
		}
		ins[m].tables = tables
	}
}
