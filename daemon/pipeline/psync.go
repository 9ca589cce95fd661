package pipeline

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/ps"
)

// after is the version a pull of step's parameters waits for: step-1 in
// BSP, none in ASP (whatever the servers hold).
func (w *Worker) after(step int64) int64 {
	if w.cfg.Mode == ps.ASP {
		return 0
	}
	return step - 1
}

// pullDense brings the dense parameters, which the model copies share, to
// the state after step-1 when the previous step made no pulls ahead for
// them (the forward takes those, takeLayerAhead).
func (w *Worker) pullDense(ctx context.Context, step int64) error {
	if w.local != nil {
		return w.loadDense(ctx, step)
	}
	dense := w.copies[0].dense
	return each(len(dense), func(i int) error {
		v, _, err := w.cfg.PS.PullBlock(ctx, dense[i].Name, w.after(step))
		if err != nil {
			return err
		}
		return w.uploadDense(i, v)
	})
}

// pullRows fills c's sparse tables for micro-batch in with the rows its
// row plan names (pulled ahead, or now): for an embedding the rows of the
// ids its slots use, for NCE those of the targets and negatives. It returns
// the batch with its ids renumbered into the embedding tables.
func (w *Worker) pullRows(ctx context.Context, step int64, c *modelCopy, in input) (*data.Batch, error) {
	if len(c.tables) == 0 {
		return in.batch, nil
	}
	plan := in.plan
	if plan == nil {
		var err error
		if plan, err = planRows(in.batch, c.tables); err != nil {
			return nil, err
		}
	}
	c.tableIDs = make([][]int64, len(c.tables))
	err := each(len(c.tables), func(i int) error {
		t, tp := c.tables[i], plan.tables[i]
		var table []float32
		if in.tables != nil {
			table = in.tables[i]
		} else {
			var err error
			if table, err = w.fetchTable(ctx, step, t, tp); err != nil {
				return err
			}
		}
		buf, err := toBuffer(w.cfg.Backend, table)
		if err != nil {
			return err
		}
		t.table.Value, t.table.Rows = buf, len(tp.ids)
		c.tableIDs[i] = tp.ids
		if t.nce != nil {
			t.nce.SetLocalRows(tp.ids)
		}
		return nil
	})
	return plan.local, err
}

// fetchTable pulls the rows of table t that a batch uses (tp) and returns
// the batch's local table: len(tp.ids) rows, the used ones filled.
func (w *Worker) fetchTable(ctx context.Context, step int64, t sparseTable, tp tablePlan) ([]float32, error) {
	uniq, rows := tp.ids, tp.used
	ids := make([]int64, len(rows))
	for j, k := range rows {
		ids[j] = uniq[k]
	}
	v, _, err := w.cfg.PS.Pull(ctx, t.table.Name, ids, w.after(step))
	if err != nil {
		return nil, err
	}
	dim := t.table.Cols
	if len(v) != len(ids)*dim {
		return nil, fmt.Errorf("%s: pulled %d floats for %d rows of %d", t.table.Name, len(v), len(ids), dim)
	}
	if len(rows) == len(uniq) { // every row used, in order: v is the table
		return v, nil
	}
	table := make([]float32, len(uniq)*dim)
	for j, k := range rows {
		copy(table[int(k)*dim:int(k+1)*dim], v[j*dim:(j+1)*dim])
	}
	return table, nil
}

// pushLayer starts pushing the gradients of layer's parameters for the
// step, each in the background on st.bg; once a push is in, it pulls the
// parameter ahead for the next step (dense) or counts it towards the gate
// of the next batch's rows (tables). With Config.Allreduce the dense
// gradients are reduced among the stage's replicas and applied locally
// instead (reduceLayer). Call it once the gradients are final:
// after the last micro-batch's backward through the layer.
func (w *Worker) pushLayer(st *stepState, weight, layer int) (inline func()) {
	var work []func() error
	first := w.copies[0]
	if w.local != nil {
		work = w.reduceLayer(st, layer)
	}
	for i, l := range first.denseLayer {
		if l != layer || w.local != nil {
			continue
		}
		work = append(work, func() error {
			g, err := w.denseGradient(i)
			if err != nil {
				return err
			}
			p := first.dense[i]
			if err := w.cfg.PS.PushBlock(st.bgCtx, p.Name, st.step, weight, scaled(g[:p.Len()], st.scale)); err != nil {
				return err
			}
			if w.hasStep(st.next.step) {
				w.pullBlockAhead(st.next, i)
			}
			return nil
		})
	}
	tables := false
	for e, emb := range first.tables {
		if emb.index != layer {
			continue
		}
		tables = true
		work = append(work, func() error {
			ids, rows, err := w.sparseGradient(e)
			if err != nil {
				return err
			}
			if err := w.cfg.PS.PushRows(st.bgCtx, emb.table.Name, st.step, weight, ids, scaled(rows, st.scale), emb.table.Cols); err != nil {
				return err
			}
			st.gate.pushed()
			if st.readAhead != nil && st.gate.isOpen() {
				st.readAhead.finish()
			}
			return nil
		})
	}
	if tables {
		st.tableLayers = append(st.tableLayers, layer)
	}
	st.startLayer(layer, work)
	if !tables && st.readAhead != nil && len(st.inlineWork) > 0 {
		st.inlineWork = append(st.inlineWork, st.readAhead.prepare) // on the side lane when it has one
	}
	return st.takeInline()
}

// startLayer runs layer's pushes and reductions on st.bg, each on its
// own goroutine (the first to fail cancels the others), and marks the
// layer in once they all are (tail.go).
func (st *stepState) startLayer(layer int, work []func() error) {
	if len(work) == 0 {
		return
	}
	in := make(chan struct{})
	st.layers[layer] = in
	if st.inline {
		st.queueInline(work, func() { close(in) })
		return
	}
	var left atomic.Int32
	left.Store(int32(len(work)))
	for _, f := range work {
		st.bg.Go(func() error {
			if err := f(); err != nil {
				return err
			}
			if left.Add(-1) == 0 {
				close(in)
			}
			return nil
		})
	}
}

// Pushes in line. A one-stage job's sole replica whose parameter-server
// shards all live in its own process waits on nobody in its pushes and
// reductions: they are CPU work only (the servers' optimiser, the ring of
// one's), and run beside the backward pass on goroutines of their own they
// take a core from its split kernels — whose caller then spins while a
// preempted helper holds the last piece (0.44 ms a step of make run's
// stage, against 0.20 in nn.Trainer, which updates after its backward).
// Such a step runs each layer's pushes and reductions itself, as the
// layer's gradients become final, with the split kernels' helpers:
// BenchmarkLocalPSAlternating's stage went from a median 0.906 to 0.941 of
// the trainer over 8 alternated runs each (7 of the 8 pairs faster; Zen 4
// VM, 2 cores), the loss the same bits; make run's job, whose runs spread
// more than that, came out a median 1.00x over 16 alternated pairs.
//
// The next step's batch and rows are read in line too (stage0Input): once
// the step's tables are pushed, the step reads them itself, where its own
// goroutine would otherwise wait for the side lane's weight gradients,
// rather than on a prefetch goroutine that took a core from the backward's
// split kernels. BenchmarkLocalPSAlternating: a median 0.923 -> 0.967 of
// the trainer (8 alternated runs each, all 8 pairs faster; Zen 4 VM), the
// loss the same bits; make run's job a median 54.0k -> 56.8k samples/s
// over 10 alternated pairs (7 faster, the median pair 1.03x). The batch is
// read and planned (inlineRead.prepare) behind the first dense layer's
// push, which runs on the side lane of a backend that has one, where the
// lane has time to spare; the pass's goroutine, the longer path, pulls the
// rows once the tables are pushed.

// pushesInline reports whether the step runs its pushes and reductions on
// its own goroutine (see above).
func (w *Worker) pushesInline(st *stepState) bool {
	return w.cfg.Stages == 1 && w.cfg.SoleReplica && len(st.share.Members) == 1 && !w.overlaps(st.step) &&
		w.cfg.PS != nil && w.cfg.PS.AllLocal()
}

// queueInline queues work and then done to run in line, when the layer's
// done call returns (takeInline); the first failure skips the rest and
// goes to st.bg, as a background one would. They run outside the
// exclusion of the pass's done calls (nn.Then), so that the table push and
// read ahead on the pass's goroutine do not hold up a dense layer's
// optimiser step on the side lane: make run's job spent 0.5-0.9 ms a step
// with the side lane waiting on them so, and its main lane waiting on the
// side lane after.
func (st *stepState) queueInline(work []func() error, done func()) {
	st.inlineWork = append(st.inlineWork, func() {
		for _, f := range work {
			if err := f(); err != nil {
				st.bg.Go(func() error { return err })
				return
			}
		}
		done()
	})
}

// takeInline returns what queueInline queued since it was last called, as
// one func, or nil.
func (st *stepState) takeInline() func() {
	queued := st.inlineWork
	st.inlineWork = nil
	if len(queued) == 0 {
		return nil
	}
	return func() {
		for _, f := range queued {
			f()
		}
	}
}
