package pipeline

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
)

// Overlapping steps. A step's backward hands each layer's gradients to the
// parameter servers or the ring as soon as they are final, but the last
// layers' pushes and reductions are still under way when the compute ends,
// and BSP used to wait for all of them before the next step began. With
// Config.OverlapSteps the step returns once its compute and sends are
// done, leaving that work (its tail) to finish in the background; the next
// step's forward waits, layer by layer, for the tail's work on the layer
// (Step.Ready): its gradients pushed or reduced and applied, its values
// pulled ahead. Every layer thus still runs on the parameters after the
// previous step's update, the same values bit for bit, while the last
// layers' synchronisation runs beside the first layers' forward. Before
// its first layer the next step waits for the tail's table pushes, which
// read the gradients and rows that the next batch's rows replace; by the
// end of its first forward it has waited for every layer, so its backward
// never writes a gradient the tail still reads. A failed tail fails the
// next step, naming the step it belongs to; Drain waits for the last one.
// A tail's work is bounded by two step timeouts from its step's start.
//
// Only single-stage workers of one micro-batch overlap (data-parallel
// stages, the shape whose step the tail lengthens most): a pipeline
// stage's tail would also hold its links' sends and its micro-batches'
// gradient buffers.

// stepTail is the background work a step left to finish.
type stepTail struct {
	step   int64
	layers map[int]chan struct{}   // per layer with tail work: closed once it is all in
	covers map[int][]chan struct{} // per layer, the fused reductions holding its parameters (stepState.covers)
	tables []int                   // the layers whose work pushes tables
	done   chan struct{}           // closed when all of the tail's work has ended
	err    error                   // valid once done is closed: failure() wrapping the first error
	cancel context.CancelFunc      // ends the tail's work
}

// OverlapsSteps reports whether the worker's steps may return before
// their last pushes and reductions are in (Config.OverlapSteps).
func (w *Worker) OverlapsSteps() bool { return w.cfg.OverlapSteps }

// overlaps reports whether step may leave its tail to the next step.
func (w *Worker) overlaps(step int64) bool {
	return w.cfg.OverlapSteps && w.cfg.Stages == 1 && len(w.grads) == 1 && w.hasStep(step+1)
}

// keepTail makes the step's background work (bg, on a context that cancel
// ends) its tail, finished by a goroutine of the worker's: it opens the
// step's gate when the work ends, so that the next batch's prefetch never
// waits on a failed step.
func (w *Worker) keepTail(st *stepState, bg *errgroup.Group, cancel context.CancelFunc) *stepTail {
	t := &stepTail{step: st.step, layers: st.layers, covers: st.covers, tables: st.tableLayers, done: make(chan struct{}), cancel: cancel}
	w.wg.Go(func() {
		err := bg.Wait()
		if err != nil {
			t.err = fmt.Errorf("step %d, still synchronising: %w", t.step, err)
		}
		cancel()
		st.gate.open(err == nil)
		close(t.done)
	})
	return t
}

// waitLayer waits until the tail's work on layer is in, fused reductions
// of its parameters included; a layer without such work, or no tail, need
// not wait.
func (t *stepTail) waitLayer(ctx context.Context, layer int) error {
	if t == nil {
		return nil
	}
	chans := t.covers[layer]
	if ch, ok := t.layers[layer]; ok {
		chans = append([]chan struct{}{ch}, chans...)
	}
	for _, ch := range chans {
		if err := t.wait(ctx, ch); err != nil {
			return err
		}
	}
	return nil
}

// wait waits until ch is closed, or the tail has failed without closing
// it, or ctx ends.
func (t *stepTail) wait(ctx context.Context, ch chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-t.done:
		select {
		case <-ch:
			return nil
		default:
			return t.err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitTables waits for the tail's table pushes.
func (t *stepTail) waitTables(ctx context.Context) error {
	if t == nil {
		return nil
	}
	for _, l := range t.tables {
		if err := t.waitLayer(ctx, l); err != nil {
			return err
		}
	}
	return nil
}

// finish waits for all of the tail's work and returns its failure, if
// any; nil for no tail. The step after it, if it has failed (abandon),
// cancels the tail first (the job restarts from a checkpoint either way);
// the cancellation that the tail then reports is dropped as a consequence.
func (t *stepTail) finish(abandon bool) error {
	if t == nil {
		return nil
	}
	if abandon {
		t.cancel()
	}
	<-t.done
	return t.err
}

// Drain waits until the last step's background work is in, or ctx ends,
// and returns its failure: call it after the last step a worker runs when
// it ends early (a replica dropped from its stage), before another takes
// its place. A worker's last step of the job (Config.LastStep) leaves no
// such work.
func (w *Worker) Drain(ctx context.Context) error {
	t := w.tail
	if t == nil {
		return nil
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		return fmt.Errorf("pipeline: job %s stage %d replica %d: waiting for step %d's synchronisation: %w",
			w.cfg.Job, w.cfg.Stage, w.cfg.Replica, t.step, ctx.Err())
	}
	w.tail = nil
	if t.err != nil {
		return fmt.Errorf("pipeline: job %s stage %d replica %d: %w", w.cfg.Job, w.cfg.Stage, w.cfg.Replica, t.err)
	}
	return nil
}

// layerReady is the forward's Step.Ready: it waits for the previous
// step's tail on layer and takes the layer's dense values pulled ahead,
// charging the wait to the step's pulls.
func (w *Worker) layerReady(st *stepState, layer int) error {
	start := time.Now()
	defer func() { st.readyWait += time.Since(start) }()
	if err := st.prev.waitLayer(st.ctx, layer); err != nil {
		return err
	}
	return w.takeLayerAhead(st, layer)
}

// readyAll waits for the rest of the previous step's tail and takes the
// rest of the dense values pulled ahead: after the first forward, before
// any backward writes a gradient.
func (w *Worker) readyAll(st *stepState) error {
	start := time.Now()
	defer func() { st.readyWait += time.Since(start) }()
	if t := st.prev; t != nil {
		for _, l := range slices.Concat(slices.Collect(maps.Keys(t.layers)), slices.Collect(maps.Keys(t.covers))) {
			if err := t.waitLayer(st.ctx, l); err != nil {
				return err
			}
		}
	}
	return w.takeLayerAhead(st, -1)
}
