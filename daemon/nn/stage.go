package nn

import (
	"errors"
	"fmt"
)

// ErrTowerRange refuses a layer range of a tower model that is not the
// whole model: towers and their join run only as one piece.
var ErrTowerRange = errors.New("a model with towers runs only as a whole, not as a layer range")

// NumLayers is the number of layers, joins included.
func (m *Model) NumLayers() int { return len(m.entries) }

// Layer returns layer i, or nil for a join (cosine, dot).
func (m *Model) Layer(i int) Layer { return m.entries[i].layer }

// LayerParams lists layer i's trainable parameters.
func (m *Model) LayerParams(i int) []*Param {
	e := m.entries[i]
	if e.layer != nil {
		return e.layer.Params()
	}
	if p, ok := e.join.(interface{ Params() []*Param }); ok {
		return p.Params()
	}
	return nil
}

// SlotRange is the range [first, end) of the batch's sparse slots the layer
// pools.
func (l *Embedding) SlotRange() (first, end int) { return l.first, l.end }

// ForwardRange runs layers [first, last] on in, the output of layer
// first-1 (an empty activation for first = 0), and returns the output of
// layer last. A pipeline stage runs its range this way; the whole range of
// a model equals Forward.
func (m *Model) ForwardRange(s *Step, first, last int, in Activation) (Activation, error) {
	if err := m.checkRange(first, last); err != nil {
		return Activation{}, err
	}
	if m.whole(first, last) {
		return m.Forward(s)
	}
	act := in
	for i := first; i <= last; i++ {
		if act.Rows == 0 {
			act.Rows = s.Batch.Size
		}
		if err := s.ready(i); err != nil {
			return Activation{}, err
		}
		out, err := m.entries[i].layer.Forward(s, act)
		if err != nil {
			return Activation{}, err
		}
		act = out
	}
	return act, nil
}

// BackwardRange propagates dout, the gradient with respect to the output of
// layer last, through layers [last, first], filling their parameters'
// gradients, and returns the gradient with respect to the input of layer
// first (parts that need none have a nil Buf). It follows a ForwardRange
// over the same range.
func (m *Model) BackwardRange(s *Step, first, last int, dout Activation) (Activation, error) {
	return m.BackwardRangeThen(s, first, last, dout, nil)
}

// BackwardRangeThen is BackwardRange that calls done(i), if not nil, as
// soon as layer i's parameter gradients are final, layers in backward
// order, so that a caller can ship them while lower layers still run.
func (m *Model) BackwardRangeThen(s *Step, first, last int, dout Activation, done Then) (Activation, error) {
	if err := m.checkRange(first, last); err != nil {
		return Activation{}, err
	}
	if m.whole(first, last) {
		return Activation{Rows: dout.Rows}, m.backward(s, dout, done)
	}
	g := dout
	for i := last; i >= first; i-- {
		din, err := m.entries[i].layer.Backward(s, g)
		if err != nil {
			return Activation{}, err
		}
		g = din
		if done != nil {
			done.call(i)
		}
	}
	return g, nil
}

func (m *Model) whole(first, last int) bool { return first == 0 && last == len(m.entries)-1 }

func (m *Model) checkRange(first, last int) error {
	if first < 0 || last < first || last >= len(m.entries) {
		return fmt.Errorf("model %s: layer range [%d, %d] outside [0, %d]", m.Config.Name, first, last, len(m.entries)-1)
	}
	if len(m.towers) > 0 && !m.whole(first, last) {
		return fmt.Errorf("model %s: layers [%d, %d]: %w", m.Config.Name, first, last, ErrTowerRange)
	}
	return nil
}
