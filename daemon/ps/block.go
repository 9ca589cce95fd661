package ps

import (
	"slices"

	"github.com/heterps/heterps/native"
)

// block is a dense parameter block.
type block struct {
	spec    BlockSpec
	stepped // mu guards value and state as well
	value   []float32
	state   [][]float32
}

func newBlock(spec BlockSpec) *block {
	b := &block{spec: spec, stepped: newStepped(), value: slices.Clone(spec.Init)}
	b.state = make([][]float32, spec.Optim.Hyper.StateBuffers())
	for i := range b.state {
		b.state[i] = make([]float32, len(b.value))
	}
	return b
}

// update applies one optimiser step with gradient g.
func (b *block) update(be native.Backend, o native.Optim, g []float32) error {
	state := make([]native.Buffer, len(b.state))
	for i, st := range b.state {
		state[i] = native.HostBuffer(st)
	}
	return be.Update(o, native.HostBuffer(b.value), native.HostBuffer(g), state...)
}
