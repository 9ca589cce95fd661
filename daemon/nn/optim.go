package nn

import (
	"fmt"
	"math"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/native"
)

// Optimizer applies one update per step to every parameter: the dense
// optimiser to dense parameters and the sparse one (the dense one when the
// model names none) to the touched rows of embedding tables. It owns the
// step counter, the learning-rate schedule and global-norm clipping.
type Optimizer struct {
	Dense, Sparse config.Optimizer
	Step          int64       // updates applied so far
	TotalSteps    int64       // for the cosine schedule; 0 = unknown
	serial        bool        // update sparse after dense parameters (the reference in tests)
	sideJobs      int         // updates the last Apply ran on a side lane, for tests
	lanes         *laneKeeper // the side lane's, made at the first Apply
}

// NewOptimizer builds the optimiser a model file asks for.
func NewOptimizer(cfg *config.Model, totalSteps int64) *Optimizer {
	o := &Optimizer{Dense: cfg.Optimizer, Sparse: cfg.Optimizer, TotalSteps: totalSteps}
	if cfg.SparseOptimizer != nil {
		o.Sparse = *cfg.SparseOptimizer
	}
	return o
}

// LR returns the learning rate of cfg at step (1-based).
func LR(cfg config.Optimizer, step, total int64) float64 {
	lr := cfg.LR
	if w := int64(cfg.Warmup); w > 0 && step <= w {
		return lr * float64(step) / float64(w)
	}
	if cfg.Schedule == "cosine" && total > 0 {
		w := int64(cfg.Warmup)
		frac := float64(step-w) / float64(max(total-w, 1))
		return lr * 0.5 * (1 + math.Cos(math.Pi*min(frac, 1)))
	}
	return lr
}

// Apply performs one optimiser step on params, using the gradients of the
// last backward pass.
func (o *Optimizer) Apply(b native.Backend, params []*Param) error {
	o.Step++
	scale, err := o.clipScale(b, params)
	if err != nil {
		return err
	}
	main, side, ok := splitLanes(b)
	if !ok || o.serial {
		return o.updateAll(b, params, scale)
	}
	var dense, sparse []*Param
	for _, p := range params {
		if p.Sparse {
			sparse = append(sparse, p)
		} else {
			dense = append(dense, p)
		}
	}
	if len(sparse) == 0 || len(dense) == 0 {
		return o.updateAll(b, params, scale)
	}
	// A sparse table's touched rows are few (one piece, one thread): they
	// update beside the dense parameters instead of after them.
	l := keeperOf(&o.lanes).acquire(side)
	l.submit(func(be native.Backend) error { return o.updateAll(be, sparse, scale) })
	err = o.updateAll(main, dense, scale)
	ran, werr := l.wait()
	if err == nil {
		err = werr
	}
	o.sideJobs = ran
	return err
}

// updateAll updates params one after the other on b.
func (o *Optimizer) updateAll(b native.Backend, params []*Param, scale float32) error {
	for _, p := range params {
		cfg := o.Dense
		if p.Sparse {
			cfg = o.Sparse
		}
		if err := o.update(b, p, cfg, scale); err != nil {
			return fmt.Errorf("optimiser: %s: %w", p.Name, err)
		}
	}
	return nil
}

func (o *Optimizer) update(b native.Backend, p *Param, cfg config.Optimizer, scale float32) error {
	opt := NativeOptim(cfg, o.Step, o.TotalSteps)
	if len(p.State) != opt.StateBuffers() {
		p.State = make([]native.Buffer, opt.StateBuffers())
		for i := range p.State {
			p.State[i] = b.Alloc(p.Len())
		}
	}
	if !p.Sparse {
		if err := scaleBuffer(b, p.Grad, scale); err != nil {
			return err
		}
		return b.Update(opt, p.Value, p.Grad, p.State...)
	}
	g := p.SparseGrad
	if len(g.IDs) == 0 {
		return nil
	}
	if err := scaleBuffer(b, g.Rows, scale); err != nil {
		return err
	}
	return b.UpdateRows(opt, p.Value, p.Rows, p.Cols, g.IDs, g.Rows, p.State...)
}

// updatesEachLayer reports whether a step may update each layer as soon as
// its gradients are final: not when clipping needs the global norm first.
func (o *Optimizer) updatesEachLayer() bool { return o.Dense.ClipNorm <= 0 && !o.serial }

// updateNow applies the current step's update (Step already counted) to p.
func (o *Optimizer) updateNow(b native.Backend, p *Param) error {
	cfg := o.Dense
	if p.Sparse {
		cfg = o.Sparse
	}
	if err := o.update(b, p, cfg, 1); err != nil {
		return fmt.Errorf("optimiser: %s: %w", p.Name, err)
	}
	return nil
}

// optKinds maps config optimiser names to kernel kinds.
var optKinds = map[string]native.OptKind{"sgd": native.SGD, "adagrad": native.Adagrad, "adam": native.Adam}

// NativeOptim turns a config optimiser into the kernel's parameters at step.
func NativeOptim(cfg config.Optimizer, step, total int64) native.Optim {
	return native.Optim{
		Kind: optKinds[cfg.Kind], LR: float32(LR(cfg, step, total)), Momentum: float32(cfg.Momentum),
		Beta1: float32(cfg.Beta1), Beta2: float32(cfg.Beta2), Eps: float32(cfg.Eps),
		WeightDecay: float32(cfg.WeightDecay), Step: step,
	}
}

// clipScale returns the factor that brings the global gradient norm down to
// the dense optimiser's clip_norm (1 when clipping is off or not needed).
func (o *Optimizer) clipScale(b native.Backend, params []*Param) (float32, error) {
	limit := o.Dense.ClipNorm
	if limit <= 0 {
		return 1, nil
	}
	sum := 0.0
	for _, p := range params {
		g := p.Grad
		if p.Sparse {
			g = p.SparseGrad.Rows
		}
		if g == nil {
			continue
		}
		h, err := hostFloats(b, g)
		if err != nil {
			return 0, err
		}
		for _, v := range h {
			sum += float64(v) * float64(v)
		}
	}
	norm := math.Sqrt(sum)
	if norm <= limit {
		return 1, nil
	}
	return float32(limit / norm), nil
}

func scaleBuffer(b native.Backend, buf native.Buffer, scale float32) error {
	if scale == 1 || buf == nil {
		return nil
	}
	h, err := hostFloats(b, buf)
	if err != nil {
		return err
	}
	for i := range h {
		h[i] *= scale
	}
	return putBack(b, buf, h)
}
