package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/native"
)

// phaseReps is how many steps each phase is timed over (the fastest counts).
const phaseReps = 30

// phaseTimes are the fastest times of one training step's phases.
type phaseTimes struct {
	names                       []string // "forward fc1", "backward fc1", ... in the order they run
	times                       map[string]time.Duration
	draw                        time.Duration // one batch from the generator (on the prefetching goroutine)
	loss, backward, step        time.Duration
	unfused                     time.Duration // forward, loss, backward, then Apply
	optDense, optSparse, optAll time.Duration
}

// phasesBlock prints each phase of a ctrdnn step at 1 and 2 threads: the
// layers one by one (backward without the side lane, as ProfileLayers
// runs them), the whole backward (with the side lane at 2 threads), the
// optimiser's update after it (dense and sparse alone, and together), the
// step done that way and as nn.Trainer.Step does it (each layer updated as
// soon as its backward is done), and the generator's batch.
func phasesBlock(model *config.Model, batch int, w io.Writer) error {
	var runs [2]*phaseRun
	for i, threads := range []int{1, 2} {
		r, err := newPhaseRun(model, threads, batch)
		if err != nil {
			return fmt.Errorf("phases at %d threads: %w", threads, err)
		}
		runs[i] = r
	}
	for i := range phaseReps { // interleaved, so that both thread counts see the same load
		for _, r := range runs {
			if err := r.rep(i); err != nil {
				return fmt.Errorf("phases at %d threads: %w", r.tr.Backend.(*native.CPU).Threads(), err)
			}
		}
	}
	res := [2]*phaseTimes{runs[0].p, runs[1].p}
	fmt.Fprintf(w, "phases of one step (fastest of %d):       1 thread    2 threads   1t/2t\n", phaseReps)
	row := func(name string, a, b time.Duration) {
		fmt.Fprintf(w, "  %-36s %9.0f us %9.0f us   %.2f\n", name, us(a), us(b), float64(a)/float64(b))
	}
	for _, n := range res[0].names {
		row(n, res[0].times[n], res[1].times[n])
	}
	row("loss", res[0].loss, res[1].loss)
	row("backward, as trained (side lane at 2t)", res[0].backward, res[1].backward)
	row("optimiser: dense parameters alone", res[0].optDense, res[1].optDense)
	row("optimiser: sparse tables alone", res[0].optSparse, res[1].optSparse)
	row("optimiser after backward (Apply)", res[0].optAll, res[1].optAll)
	row("forward, loss, backward, then Apply", res[0].unfused, res[1].unfused)
	row("step as trained (updates in backward)", res[0].step, res[1].step)
	row("generator batch (prefetched, off the step)", res[0].draw, res[1].draw)
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// phaseRun is one thread count's trainer, batches and times.
type phaseRun struct {
	be            native.Backend
	tr            *nn.Trainer
	batches       []*data.Batch
	dense, sparse []*nn.Param
	p             *phaseTimes
}

func newPhaseRun(model *config.Model, threads, batch int) (*phaseRun, error) {
	be, err := native.NewCPU(native.CPUOptions{Threads: threads, Pin: native.PinAuto})
	if err != nil {
		return nil, err
	}
	tr, src, err := benchTrainer(be, model, 1, 1000)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	const never = time.Duration(1<<63 - 1)
	r := &phaseRun{be: be, tr: tr, batches: make([]*data.Batch, phaseReps), p: &phaseTimes{times: map[string]time.Duration{},
		draw: never, loss: never, backward: never, step: never, unfused: never, optDense: never, optSparse: never, optAll: never}}
	for i := range r.batches {
		start := time.Now()
		if r.batches[i], err = src.Next(context.Background(), batch); err != nil {
			return nil, err
		}
		r.p.draw = min(r.p.draw, time.Since(start))
	}
	for _, b := range r.batches[:5] { // warm-up: optimiser state, scratch buffers
		if _, err := tr.Step(b); err != nil {
			return nil, err
		}
	}
	for _, prm := range tr.Model.Params() {
		if prm.Sparse {
			r.sparse = append(r.sparse, prm)
		} else {
			r.dense = append(r.dense, prm)
		}
	}
	return r, nil
}

// rep times the layers one by one, then a step phase by phase and one as
// training runs it, on batch i.
func (r *phaseRun) rep(i int) error {
	defer r.be.(*native.CPU).PinCaller()() // as heterps train runs its steps
	layers, err := r.tr.Model.ProfileLayers(&nn.Step{Backend: r.be, Batch: r.batches[i], Train: true}, 1)
	if err != nil {
		return err
	}
	p := r.p
	if p.names == nil {
		for _, l := range layers {
			p.names = append(p.names, "forward "+l.Name)
		}
		for k := len(layers) - 1; k >= 0; k-- {
			p.names = append(p.names, "backward "+layers[k].Name+" ("+layers[k].Kind+")")
		}
	}
	for k, l := range layers {
		fwd, bwd := p.names[k], p.names[len(p.names)-1-k]
		if old, ok := p.times[fwd]; !ok || l.Forward < old {
			p.times[fwd] = l.Forward
		}
		if old, ok := p.times[bwd]; !ok || l.Backward < old {
			p.times[bwd] = l.Backward
		}
	}
	return timeStep(r.tr, r.be, r.batches[i], p, r.dense, r.sparse)
}

// timeStep runs one training step phase by phase, then one as training
// does, keeping the fastest times in p; the optimiser's parts alone each
// apply one more update, which only moves the weights on.
func timeStep(tr *nn.Trainer, be native.Backend, b *data.Batch, p *phaseTimes, dense, sparse []*nn.Param) error {
	s := &nn.Step{Backend: be, Batch: b, Train: true}
	begin := time.Now()
	out, err := tr.Model.Forward(s)
	if err != nil {
		return err
	}
	start := time.Now()
	_, dout, err := tr.Model.Loss.Forward(s, out)
	if err != nil {
		return err
	}
	p.loss = min(p.loss, time.Since(start))
	start = time.Now()
	if err := tr.Model.Backward(s, dout); err != nil {
		return err
	}
	p.backward = min(p.backward, time.Since(start))
	start = time.Now()
	if err := tr.Opt.Apply(be, tr.Model.Params()); err != nil {
		return err
	}
	p.optAll = min(p.optAll, time.Since(start))
	p.unfused = min(p.unfused, time.Since(begin))
	start = time.Now()
	if _, err := tr.Step(b); err != nil {
		return err
	}
	p.step = min(p.step, time.Since(start))
	for _, part := range []struct {
		params []*nn.Param
		best   *time.Duration
	}{{dense, &p.optDense}, {sparse, &p.optSparse}} {
		start = time.Now()
		if err := tr.Opt.Apply(be, part.params); err != nil {
			return err
		}
		*part.best = min(*part.best, time.Since(start))
	}
	return nil
}
