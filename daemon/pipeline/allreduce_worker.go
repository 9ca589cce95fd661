package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/native"
)

// localDense is an allreduce stage's own optimiser for its dense
// parameters: the schedule PSParams gives the parameter servers and a
// state per parameter, updated with the same kernel (Backend.Update) as
// the servers and nn's Trainer.
type localDense struct {
	cfg   *Allreduce
	optim ps.OptimConfig
	state [][]native.Buffer // per dense parameter
	// loaded: the parameters hold the values the stage started from
	// (pulled once from the parameter servers, which declared them).
	loaded bool
	// everyPeer: the worker was given no Share, so the ring of every step
	// is all of cfg.Peers.
	everyPeer bool
	// shard: each ring member runs the optimiser on its own chunk of each
	// parameter only (ownerUpdate), where shardable allows; Resize keeps
	// such a stage's members as they are, so its state stays with them.
	shard bool
	// kernels is what every step's ring names as its kernels (ring.kernels):
	// the worker's backend and the sum kernel's ISA.
	kernels string
	// buckets are the reductions a step runs (buckets.go).
	buckets []bucket
}

// initAllreduce prepares the local optimiser of a worker whose Config asks
// for Allreduce; nothing otherwise.
func (w *Worker) initAllreduce() error {
	a := w.cfg.Allreduce
	if a == nil {
		return nil
	}
	if w.cfg.Mode == ps.ASP {
		return errors.New("allreduce: needs BSP (asynchronous replicas have no common step to reduce)")
	}
	dense := w.copies[0].dense
	if err := a.check(w.cfg.Stage, w.cfg.Replica, len(dense)); err != nil {
		return err
	}
	d := &localDense{cfg: a, optim: psOptim(w.cfg.Model.Config.Optimizer, a.TotalSteps),
		everyPeer: len(w.cfg.Share.Members) == 0, state: make([][]native.Buffer, len(dense))}
	for i, p := range dense {
		for range d.optim.Hyper.StateBuffers() {
			buf, err := toBuffer(w.cfg.Backend, make([]float32, p.Len()))
			if err != nil {
				return err
			}
			d.state[i] = append(d.state[i], buf)
		}
	}
	d.shard = shardable(d, dense)
	lens := make([]int, len(dense))
	for i, p := range dense {
		lens[i] = p.Len()
	}
	d.buckets = fuseBuckets(lens, w.copies[0].denseLayer)
	d.kernels = w.cfg.Backend.Name() + ", sums " + sumKernels()
	w.local = d
	return nil
}

// loadDense gives the dense parameters their starting values and
// optimiser state, once, as of the step before step (the first): the
// parameter servers hold them as declared or as a checkpoint restored
// them, and later only as the mirror pushes them (Allreduce.Mirror); the
// replicas keep their own. A restored job thus goes on from the
// checkpoint's optimiser state, as it would through the servers.
func (w *Worker) loadDense(ctx context.Context, step int64) error {
	if w.local.loaded {
		return nil
	}
	dense := w.copies[0].dense
	err := each(len(dense), func(i int) error {
		v, version, err := w.cfg.PS.PullBlock(ctx, dense[i].Name, step-1)
		if err != nil {
			return err
		}
		if err := w.uploadDense(i, v); err != nil {
			return err
		}
		return w.loadState(ctx, i, version, v)
	})
	w.local.loaded = err == nil
	return err
}

// loadState pulls dense parameter i's optimiser state at version (that of
// its values) into the local optimiser, through buf.
func (w *Worker) loadState(ctx context.Context, i int, version int64, buf []float32) error {
	name := w.copies[0].dense[i].Name
	for k, st := range w.local.state[i] {
		got, err := w.cfg.PS.PullBlockStateInto(ctx, name, version, ps.BlockValue+1+k, buf)
		switch {
		case err != nil:
			return err
		case got != version:
			return fmt.Errorf("%s: optimiser state %d at version %d, its values at %d: the parameter servers moved on while the replica loaded them", name, k, got, version)
		}
		if err := w.cfg.Backend.Upload(st, buf); err != nil {
			return fmt.Errorf("%s: optimiser state %d: %w", name, k, err)
		}
	}
	return nil
}

// stepRing returns the step's ring, built on first use from the members of
// the step's share (every peer when the worker knows no share).
func (w *Worker) stepRing(st *stepState) (*ring, error) {
	if st.ring != nil {
		return st.ring, nil
	}
	members := st.share.Members
	if w.local.everyPeer {
		members = iotaInts(len(w.local.cfg.Peers))
	}
	r, err := newRing(w.local.cfg, w.job, w.cfg.Stage, st.step, members, w.cfg.Replica)
	if err != nil {
		return nil, err
	}
	r.kernels = w.local.kernels
	st.ring = r
	return r, nil
}

// reduceLayer returns the work of reducing and applying the parameters
// of layer that are reduced alone, for pushLayer to run in the background,
// and starts every fused bucket whose layers backward has now all left
// (startBucket).
func (w *Worker) reduceLayer(st *stepState, layer int) []func() error {
	r, err := w.stepRing(st)
	var work []func() error
	for _, k := range st.bucketsDone(w.local.buckets, layer) {
		b := &w.local.buckets[k]
		if !b.fused() {
			work = append(work, func() error {
				if err != nil {
					return err
				}
				return w.reduceAndApply(st, r, b.params[0])
			})
			continue
		}
		w.startBucket(st, b, func() error {
			if err != nil {
				return err
			}
			return w.reduceBucket(st, r, b)
		})
	}
	return work
}

func (w *Worker) reduceAndApply(st *stepState, r *ring, i int) error {
	p := w.copies[0].dense[i]
	g, err := w.denseGradient(i)
	if err != nil {
		return err
	}
	g = g[:p.Len()]
	optim := w.local.optim.At(st.step)
	u := w.ownerUpdate(r, i, g, optim, w.local.assigns(st.step))
	if err := r.reduce(st.bgCtx, i, g, st.res.Samples, u); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	return w.finishDense(st, r, i, g, optim, u != nil)
}

// finishDense ends dense parameter i's step once its reduced gradient g is
// in: the optimiser update, unless the ring's owners ran it (updated), and
// at a checkpoint step the first member's assignment to the mirror.
func (w *Worker) finishDense(st *stepState, r *ring, i int, g []float32, optim native.Optim, updated bool) error {
	p := w.copies[0].dense[i]
	if !updated {
		gb, err := toBuffer(w.cfg.Backend, g)
		if err != nil {
			return err
		}
		if err := w.cfg.Backend.Update(optim, p.Value, gb, w.local.state[i]...); err != nil {
			return fmt.Errorf("%s: update: %w", p.Name, err)
		}
	}
	if w.local.assigns(st.step) && r.members[0] == w.cfg.Replica {
		if err := w.assignDense(st.bgCtx, i, st.step); err != nil {
			return fmt.Errorf("%s: mirror on the parameter servers: %w", p.Name, err)
		}
	}
	return nil
}

// assigns reports whether the stage hands its dense parameters to the
// mirror after step: a step a checkpoint may be taken at (Allreduce.Mirror).
func (d *localDense) assigns(step int64) bool {
	return d.cfg.Mirror != nil && d.cfg.MirrorsAt(step)
}

// MirrorsAt reports whether step is one the Mirror assigns the stage's
// dense parameters at, were there a Mirror: a multiple of CheckpointEvery
// or of CheckpointGrid, or the last. Only at those can the parameter
// servers take a checkpoint of a job with allreduce stages.
func (a *Allreduce) MirrorsAt(step int64) bool {
	return multipleOf(step, a.CheckpointEvery) || multipleOf(step, a.CheckpointGrid) || step == a.TotalSteps
}

// NextMirrorStep is the first step from step on that MirrorsAt: where a
// checkpoint asked for can be taken (at most TotalSteps).
func (a *Allreduce) NextMirrorStep(step int64) int64 {
	next := a.TotalSteps
	for _, every := range []int64{a.CheckpointEvery, a.CheckpointGrid} {
		if every >= 1 {
			next = min(next, (step+every-1)/every*every)
		}
	}
	return next
}

// multipleOf reports whether step is a multiple of every >= 1.
func multipleOf(step, every int64) bool { return every >= 1 && step%every == 0 }

// assignDense assigns dense parameter i's block on the mirror its values
// and optimiser state after step.
func (w *Worker) assignDense(ctx context.Context, i int, step int64) error {
	p := w.copies[0].dense[i]
	parts := append([]native.Buffer{p.Value}, w.local.state[i]...)
	for part, buf := range parts {
		v, err := hostFloats(w.cfg.Backend, buf)
		if err != nil {
			return err
		}
		if err := w.local.cfg.Mirror.AssignBlock(ctx, p.Name, step, ps.BlockValue+part, v[:p.Len()]); err != nil {
			return err
		}
	}
	return nil
}

// ownerUpdate is how r shards dense parameter i's optimiser step over its
// members (localDense.shard), or nil where every member applies the whole
// step; with snapshot the first member collects the others' state.
func (w *Worker) ownerUpdate(r *ring, i int, g []float32, optim native.Optim, snapshot bool) *ownerUpdate {
	if !w.local.shard || len(r.members) == 1 {
		return nil
	}
	val := w.copies[0].dense[i].Value.(native.HostBuffer)
	state := make([]native.HostBuffer, len(w.local.state[i]))
	for k, s := range w.local.state[i] {
		state[k] = s.(native.HostBuffer) // shardable checked them
	}
	return w.shardedUpdate(val, state, g, optim, snapshot)
}

// shardedUpdate is the ownerUpdate of values val with optimiser state
// state and reduced gradient g, all as long: a member updates the
// elements it owns as their chunk finishes.
func (w *Worker) shardedUpdate(val native.HostBuffer, state []native.HostBuffer, g []float32, optim native.Optim, snapshot bool) *ownerUpdate {
	part := make([]native.Buffer, len(state))
	return &ownerUpdate{w: val, state: state, snapshot: snapshot, apply: func(lo, hi int) error {
		for k, s := range state {
			part[k] = s[lo:hi]
		}
		if err := w.cfg.Backend.Update(optim, val[lo:hi], native.HostBuffer(g[lo:hi]), part...); err != nil {
			return fmt.Errorf("update: %w", err)
		}
		return nil
	}}
}

// shardable reports whether the optimiser of d's dense parameters is
// sharded over the ring: where asked (ShardOptimiser), unless the
// parameters or their state live outside host memory. At a mirror's steps
// the ring's first member collects the whole state for it
// (ownerUpdate.snapshot).
func shardable(d *localDense, dense []*nn.Param) bool {
	if !d.cfg.ShardOptimiser {
		return false
	}
	for i, p := range dense {
		if _, ok := p.Value.(native.HostBuffer); !ok {
			return false
		}
		for _, b := range d.state[i] {
			if _, ok := b.(native.HostBuffer); !ok {
				return false
			}
		}
	}
	return true
}

func iotaInts(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
