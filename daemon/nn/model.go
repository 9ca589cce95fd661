package nn

import (
	"errors"
	"fmt"
	"sync"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/native"
)

// errNotBuilt marks model features that this version does not implement.
var errNotBuilt = errors.New("not implemented in this version of heterps")

// DefaultEmbeddingScale bounds the uniform initialisation of embedding rows.
const DefaultEmbeddingScale = 0.05

// Model is a built model: its layers in order, grouped into towers where
// the model file says so, and its loss.
type Model struct {
	Config *config.Model
	Seed   uint64
	// Options are what BuildWith was given; a copy built with them has
	// the same parameters.
	Options BuildOptions
	entries []entry
	towers  []string
	Loss    Loss
	// serial runs backward without a side lane (the reference in tests).
	serial   bool
	sideJobs int         // jobs the last backward ran on its side lane, for tests
	distinct int8        // paramsDistinct: 0 not known yet, 1 yes, -1 no
	lanes    *laneKeeper // the side lane's, made at the first backward
}

type entry struct {
	layer Layer  // every layer but joins
	join  Joiner // cosine/dot
	tower string
}

// Build creates the layers of cfg on backend b, initialised from seed,
// with every table whole, for single-process training. See BuildWith.
func Build(b native.Backend, cfg *config.Model, seed uint64) (*Model, error) {
	return BuildWith(b, cfg, seed, BuildOptions{})
}

// BuildWith creates the layers of cfg on backend b, initialised from seed,
// allocating what opts says. Without RemoteTables it refuses a model whose
// tables need more than opts.MaxTableBytes, naming the bytes, before
// allocating anything.
func BuildWith(b native.Backend, cfg *config.Model, seed uint64, opts BuildOptions) (*Model, error) {
	if cfg.Init != nil && cfg.Init.Seed != 0 && seed == 0 {
		seed = cfg.Init.Seed
	}
	scale := DefaultEmbeddingScale
	if cfg.Init != nil && cfg.Init.EmbeddingScale > 0 {
		scale = cfg.Init.EmbeddingScale
	}
	shapes := cfg.Shapes()
	if err := opts.checkTables(cfg, shapes); err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, Seed: seed, Options: opts}
	for i, sh := range shapes {
		e, err := buildLayer(b, cfg, i, sh, seed, scale, opts)
		if err != nil {
			return nil, fmt.Errorf("model %s: layer %d (%s): %w", cfg.Name, i, sh.Name, err)
		}
		if sh.Tower != "" && !contains(m.towers, sh.Tower) {
			m.towers = append(m.towers, sh.Tower)
		}
		m.entries = append(m.entries, e)
	}
	loss, err := NewLoss(cfg.Loss)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", cfg.Name, err)
	}
	m.Loss = loss
	return m, nil
}

func buildLayer(b native.Backend, cfg *config.Model, i int, sh config.LayerShape, seed uint64, scale float64, opts BuildOptions) (entry, error) {
	lc := cfg.Layers[i]
	e := entry{tower: sh.Tower}
	switch sh.Kind {
	case "embedding":
		first, end := 0, cfg.Input.Slots
		if len(lc.Slots) == 2 {
			first, end = lc.Slots[0], lc.Slots[1]
		}
		if opts.RemoteTables {
			e.layer = remoteEmbedding(b, sh, lc.Dim, lc.Pool, first, end)
			return e, nil
		}
		l, err := NewEmbedding(b, sh, cfg.Input.Vocab, lc.Dim, lc.Pool, first, end, seed, scale)
		e.layer = l
		return e, err
	case "concat", "dense":
		e.layer = NewDenseInput(sh, sh.Kind == "concat")
		return e, nil
	case "fc":
		if !opts.holdsDense(i) {
			l, err := declaredFC(b, sh, lc.Act)
			e.layer = l
			return e, err
		}
		l, err := NewFC(b, sh, lc.Act, seed)
		e.layer = l
		return e, err
	case "cosine", "dot":
		j, err := NewSimilarity(sh, sh.Kind)
		e.join = j
		return e, err
	case "nce":
		if opts.RemoteTables {
			l, err := remoteNCE(b, sh, lc.Classes, lc.Negatives, seed)
			e.layer = l
			return e, err
		}
		l, err := NewNCE(b, sh, lc.Classes, lc.Negatives, seed, scale)
		e.layer = l
		return e, err
	}
	return e, fmt.Errorf("layer kind %q: %w", sh.Kind, errNotBuilt)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Params lists every trainable parameter in layer order.
func (m *Model) Params() []*Param {
	var ps []*Param
	for _, e := range m.entries {
		if e.layer != nil {
			ps = append(ps, e.layer.Params()...)
		}
		if p, ok := e.join.(interface{ Params() []*Param }); ok {
			ps = append(ps, p.Params()...)
		}
	}
	return ps
}

// Layers returns the layers' shapes in order.
func (m *Model) Layers() []config.LayerShape {
	out := make([]config.LayerShape, len(m.entries))
	for i, e := range m.entries {
		if e.layer != nil {
			out[i] = e.layer.Shape()
		} else {
			out[i] = e.join.Shape()
		}
	}
	return out
}

// Forward runs every layer on s.Batch and returns the model's output.
func (m *Model) Forward(s *Step) (Activation, error) {
	acts := map[string]Activation{}
	for i, e := range m.entries {
		if err := s.ready(i); err != nil {
			return Activation{}, err
		}
		if e.join != nil {
			out, err := e.join.ForwardJoin(s, acts[m.towers[0]], acts[m.towers[1]])
			if err != nil {
				return Activation{}, err
			}
			acts[""] = out
			continue
		}
		in := acts[e.tower]
		if in.Rows == 0 {
			in.Rows = s.Batch.Size
		}
		out, err := e.layer.Forward(s, in)
		if err != nil {
			return Activation{}, err
		}
		acts[e.tower] = out
	}
	return acts[lastTower(m)], nil
}

// lastTower is the tower of the final layer ("" after a join).
func lastTower(m *Model) string {
	if len(m.entries) == 0 {
		return ""
	}
	return m.entries[len(m.entries)-1].tower
}

// Backward propagates dout, the gradient of the loss with respect to the
// output of Forward, through every layer, filling parameter gradients.
func (m *Model) Backward(s *Step, dout Activation) error {
	return m.backward(s, dout, nil)
}

// backward is Backward calling done(i), if not nil, once entry i's
// parameter gradients are final. Unless the model is told to stay serial, a
// CPU backend of two or more threads runs the weight gradients on a side
// lane, which is drained before backward returns, and one of one thread
// defers them (when done is set) until the input gradients are through and
// then runs them from the first layer up; done(i) runs behind entry i's
// weight gradients, on the lane. An entry without dense parameters (an
// embedding, whose sparse gradient its backward leaves final) is done as
// soon as its backward has returned, on this goroutine: a data-parallel
// stage's sparse push, which the next step waits on longest (the servers'
// update and the rows pulled after it), then leaves before the weight
// gradients of the layers above are computed rather than after. Calls of
// done never overlap; the func a call returns, if not nil, runs next on
// the same goroutine, outside that exclusion (see Then).
func (m *Model) backward(s *Step, dout Activation, done Then) error {
	if s.side != nil { // already inside a pass that owns the lanes
		var each func(int) error
		if done != nil {
			each = func(i int) error { done.call(i); return nil }
		}
		return m.backwardOn(s, dout, each)
	}
	if done == nil {
		return m.backwardLanes(s, dout, false, nil)
	}
	var mu sync.Mutex
	call := func(i int) {
		mu.Lock()
		then := done(i)
		mu.Unlock()
		if then != nil {
			then()
		}
	}
	return m.backwardLanes(s, dout, true, func(i int, ls *Step) error {
		if !m.hasDense(i) {
			call(i)
			return nil
		}
		return ls.offPath(func(native.Backend) error { call(i); return nil })
	})
}

// Then is what a pass calls once layer i's parameter gradients are final
// (BackwardRangeThen). Its calls never overlap one another, so that it may
// keep its books unlocked; the func it returns, if not nil, runs right
// after on the same goroutine but may overlap another call and its func:
// the work itself — a push, a reduction, an optimiser step — so that a
// layer's long work on the main lane does not hold up the side lane's.
type Then func(layer int) func()

// call calls t for layer i and then what it returned.
func (t Then) call(i int) {
	if then := t(i); then != nil {
		then()
	}
}

// hasDense reports whether entry i has a dense parameter.
func (m *Model) hasDense(i int) bool {
	for _, p := range m.LayerParams(i) {
		if !p.Sparse {
			return true
		}
	}
	return false
}

// backwardLanes is backward on a main and a side lane when the backend
// splits into two (see lane), else on s alone — or, with deferOne, on s
// and a deferred lane when s runs on one CPU thread — calling after(i, ls),
// if not nil, on this goroutine once entry i's backward has returned: ls is
// the step the layers ran with, whose offPath queues work behind entry i's
// weight gradients. Both lanes are done when it returns.
func (m *Model) backwardLanes(s *Step, dout Activation, deferOne bool, after func(layer int, ls *Step) error) error {
	var each func(int) error
	main, side, ok := splitLanes(s.Backend)
	var l *lane
	switch {
	case ok && !m.serial:
		l = keeperOf(&m.lanes).acquire(side)
	case deferOne && !m.serial && oneCPUThread(s.Backend):
		main, l = s.Backend, deferLane(s.Backend)
	default:
		if after != nil {
			each = func(i int) error { return after(i, s) }
		}
		return m.backwardOn(s, dout, each)
	}
	ls := *s
	ls.Backend, ls.side = main, l
	each = func(i int) error {
		defer l.cut() // entry i's weight gradients and what after queued behind them
		if after == nil {
			return nil
		}
		return after(i, &ls)
	}
	err := m.backwardOn(&ls, dout, each)
	ran, werr := l.wait()
	if err == nil {
		err = werr
	}
	m.sideJobs = ran
	return err
}

// oneCPUThread reports whether b is a CPU backend of one thread.
func oneCPUThread(b native.Backend) bool {
	cpu, ok := b.(*native.CPU)
	return ok && cpu.Threads() == 1
}

// paramsDistinct reports whether no parameter belongs to two entries, so
// that an entry's parameters are final once its backward has run.
func (m *Model) paramsDistinct() bool {
	if m.distinct == 0 {
		m.distinct = 1
		seen := map[*Param]bool{}
		for _, p := range m.Params() {
			if seen[p] {
				m.distinct = -1
			}
			seen[p] = true
		}
	}
	return m.distinct > 0
}

func (m *Model) backwardOn(s *Step, dout Activation, done func(layer int) error) error {
	grads := map[string]Activation{lastTower(m): dout}
	for i := len(m.entries) - 1; i >= 0; i-- {
		e := m.entries[i]
		if e.join != nil {
			da, db, err := e.join.BackwardJoin(s, grads[""])
			if err != nil {
				return err
			}
			grads[m.towers[0]], grads[m.towers[1]] = da, db
		} else {
			din, err := e.layer.Backward(s, grads[e.tower])
			if err != nil {
				return err
			}
			grads[e.tower] = din
		}
		if done != nil {
			if err := done(i); err != nil {
				return err
			}
		}
	}
	return nil
}
