package pipeline

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/native"
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

// Buffer reuse: the dense values pulled ahead for step s+1 become the
// model's at the start of s+1 — adopted as they are when the backend holds
// values in host memory (the CPU), freeing the buffers the values of s were
// in, or uploaded, freeing the pulled buffers; takeLayerAhead hands the
// free ones (w.spare) to the pulls ahead for s+2, made when s+1 starts.
// Three sets of buffers thus rotate (the model's values, those being
// pulled into, and those held for the next pulls) instead of a fresh one
// per parameter per step (ctrdnn: 1.2 MB a step), and on the CPU the
// values are never copied a second time. Buffers of an ahead that failed
// or was not taken are never reused: a pull may still write them.

// takeSpare returns the buffers free for the next pulls ahead, if any, and
// forgets them.
func (w *Worker) takeSpare() [][]float32 {
	s := w.spare
	w.spare = nil
	return s
}

// takeAhead returns the dense pulls ahead made for step, if any, and
// forgets them: the step's forward takes their values layer by layer
// (takeLayerAhead).
func (w *Worker) takeAhead(step int64) *denseAhead {
	a := w.ahead
	w.ahead = nil
	if a == nil || a.step != step {
		return nil
	}
	return a
}

// takeLayerAhead makes the dense parameters of layer (every one left, for
// layer -1) that were pulled ahead for the step the model's, waiting for
// their pulls; once all are taken, the buffers they free are the spares
// of the next pulls ahead.
func (w *Worker) takeLayerAhead(st *stepState, layer int) error {
	a := st.ahead
	if a == nil {
		return nil
	}
	for i, l := range w.copies[0].denseLayer {
		if st.taken[i] || (layer >= 0 && l != layer) {
			continue
		}
		var got pulled
		select {
		case got = <-a.vals[i]:
		case <-st.ctx.Done():
			return st.ctx.Err()
		}
		if got.err != nil {
			return got.err
		}
		st.taken[i] = true
		if old, ok := w.adoptDense(i, got.v); ok {
			a.bufs[i] = old
		} else if err := w.uploadDense(i, got.v); err != nil {
			return err
		} else {
			a.bufs[i] = got.v
		}
	}
	if !slices.Contains(st.taken, false) {
		w.spare, st.ahead = a.bufs, nil
	}
	return nil
}

// adoptDense makes v, pulled ahead, dense parameter i's values in every
// layer copy instead of copying it in, when the backend keeps the values
// in host memory, and returns the values' old memory (free now: the step
// that read them is over) for the next pulls ahead.
func (w *Worker) adoptDense(i int, v []float32) ([]float32, bool) {
	p := w.copies[0].dense[i]
	old, ok := native.Host(p.Value)
	if !ok || len(v) != p.Len() || len(old) != len(v) {
		return nil, false
	}
	for _, c := range w.copies {
		c.dense[i].Value = native.HostBuffer(v)
	}
	return old, true
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

// isOpen reports whether the gate has opened ok, without waiting.
func (g *gate) isOpen() bool {
	select {
	case <-g.done:
		return g.ok
	default:
		return false
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

// pullRowsAhead pulls the rows of stage 0's next micro-batches into each
// input's tables: those of touched[e] (the rows the current step updates)
// once g opens ok, the others at once; with touched nil, all once g opens.
// On any failure it leaves them for the step to pull itself.
func (w *Worker) pullRowsAhead(g *gate, step int64, ins []input, touched [][]int64) {
	early, err := w.pullUntouchedAhead(step, ins, touched)
	if err != nil {
		return
	}
	ctx := w.ctx
	if early == nil && w.asksBeforePushing(g, len(ins)) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(w.ctx)
		defer cancel()
		go func() {
			if !g.wait(ctx) { // the step failed: its version may never come
				cancel()
			}
		}()
	} else if g == nil || !g.wait(w.ctx) {
		return
	}
	w.pullRestAhead(ctx, step, ins, early)
}

// pullUntouchedAhead pulls at once the rows of ins that touched does not
// list, per micro-batch and table (m*len(tables)+e), or nothing when
// touched is nil.
func (w *Worker) pullUntouchedAhead(step int64, ins []input, touched [][]int64) ([]rowsAhead, error) {
	if touched == nil {
		return nil, nil
	}
	sparse := w.copies[0].tables
	early := make([]rowsAhead, len(ins)*len(sparse))
	for m := range ins {
		err := each(len(sparse), func(e int) (err error) {
			early[m*len(sparse)+e], err = w.pullUntouched(w.ctx, step, sparse[e], ins[m].plan.tables[e], touched[e])
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return early, nil
}

// pullRestAhead fills each input's tables with what pullUntouchedAhead
// left (early), or, with early nil, pulls them whole; on a failure it
// leaves them for the step to pull itself.
func (w *Worker) pullRestAhead(ctx context.Context, step int64, ins []input, early []rowsAhead) {
	sparse := w.copies[0].tables
	for m := range ins {
		tables := make([][]float32, len(sparse))
		err := each(len(sparse), func(e int) (err error) {
			if early == nil {
				tables[e], err = w.fetchTable(ctx, step, sparse[e], ins[m].plan.tables[e])
				return err
			}
			a := early[m*len(sparse)+e]
			tables[e] = a.table
			return w.pullInto(ctx, w.after(step), sparse[e], a.table, a.lateIDs, a.lateRows)
		})
		if err != nil {
			return
		}
		ins[m].tables = tables
	}
}

// Asking before pushing. With several replicas in BSP, the next batch's
// rows wait for the current step's update, which needs every replica's
// push. A replica that waits for its own table pushes before it asks for
// those rows adds, when it is the last to push, a round trip after the
// update: its push's answer, then its pull. asksBeforePushing lets it ask
// at once instead: the servers hold the pull until the update is applied
// and answer it then, as they answer the replicas that pushed first. The
// pull waits on a lane of its own while the pushes take others, so it
// asks early only when the step's waiting pulls (one a micro-batch and
// table, the dense blocks' pulls ahead) leave a lane free for the pushes;
// and a step that fails cancels it, since its version may never come.

// asksBeforePushing reports whether stage 0 pulls the rows of a batch of
// m micro-batches before the current step's table pushes are in.
func (w *Worker) asksBeforePushing(g *gate, m int) bool {
	waiting := m*len(w.copies[0].tables) + len(w.copies[0].dense)
	return g != nil && w.cfg.Mode == ps.BSP && !w.cfg.SoleReplica && waiting < w.cfg.PS.Lanes()
}

// Untouched rows. In BSP a step's rows are those after the previous step's
// update; when the stage has one replica, that update touches only the
// rows of the previous step's batch. The others hold the same values at
// both versions, so stage 0 pulls them as soon as it has planned the next
// batch, during the current step, and only the rows both batches use wait
// for the step's pushes (touchedRows).

// rowsAhead is a micro-batch's local table of one sparse table, its
// untouched rows filled, and the rows still to pull once the step's pushes
// are in: global ids and their local rows.
type rowsAhead struct {
	table             []float32
	lateIDs, lateRows []int64
}

// pullUntouched makes the local table for tp and pulls into it, at the
// version before step's, the rows that touched (ascending) does not list.
func (w *Worker) pullUntouched(ctx context.Context, step int64, t sparseTable, tp tablePlan, touched []int64) (rowsAhead, error) {
	a := rowsAhead{table: make([]float32, len(tp.ids)*t.table.Cols)}
	late := min(len(touched), len(tp.used))
	a.lateIDs, a.lateRows = make([]int64, 0, late), make([]int64, 0, late)
	ids, rows := make([]int64, 0, len(tp.used)), make([]int64, 0, len(tp.used))
	j := 0 // tp.used and touched both ascend: one walk splits them
	for _, k := range tp.used {
		id := tp.ids[k]
		for j < len(touched) && touched[j] < id {
			j++
		}
		if j < len(touched) && touched[j] == id {
			a.lateIDs, a.lateRows = append(a.lateIDs, id), append(a.lateRows, k)
		} else {
			ids, rows = append(ids, id), append(rows, k)
		}
	}
	return a, w.pullInto(ctx, w.after(step-1), t, a.table, ids, rows)
}

// pullInto pulls the rows of ids of table t at version after into the
// local table at rows.
func (w *Worker) pullInto(ctx context.Context, after int64, t sparseTable, table []float32, ids, rows []int64) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := w.cfg.PS.PullInto(ctx, t.table.Name, ids, after, table, t.table.Cols, rows)
	return err
}

// touchedRows returns, per sparse table, the ids (ascending) whose rows
// step's update may change, when the rows of step+1's batch that it does
// not list may be pulled before that update lands: BSP, and the replica
// alone in its stage at step (Config.SoleReplica, and no member added
// since). Otherwise nil: every row waits for the update.
func (w *Worker) touchedRows(step int64, ins []input) [][]int64 {
	if w.cfg.Mode != ps.BSP || !w.cfg.SoleReplica || len(w.askFor(step).Members) != 1 {
		return nil
	}
	touched := make([][]int64, len(w.copies[0].tables))
	for e := range touched {
		for _, in := range ins {
			touched[e] = append(touched[e], in.plan.tables[e].ids...)
		}
		if len(ins) > 1 {
			slices.Sort(touched[e])
			touched[e] = slices.Compact(touched[e])
		}
	}
	return touched
}
