package ps

import (
	"fmt"
	"slices"
	"sync"

	"github.com/heterps/heterps/native"
)

// block is a dense parameter block.
type block struct {
	spec    BlockSpec
	stepped // mu guards value and state as well
	value   []float32
	state   [][]float32
	sum     []float32 // a step's weighted sum of several pushes, reused (under mu)
	// replies recycles the buffers the service pulls the block into for
	// remote replicas: every replica pulls every block every step, and a
	// fresh buffer a pull (1.2 MB a step for ctrdnn's blocks) was most of
	// what a parameter server allocated. A buffer is back once its reply
	// is written (wire.Conn.Send writes before it returns).
	replies sync.Pool
	// assigning collects the parts of an assignment (AssignBlock) until
	// every part is in; under mu.
	assigning *assignment
}

// part returns part k of the block: its values (BlockValue) or, for k > 0,
// its optimiser's state buffer k-1; an error for a part it lacks.
func (b *block) part(k int) ([]float32, error) {
	switch {
	case k == BlockValue:
		return b.value, nil
	case k > 0 && k <= len(b.state):
		return b.state[k-1], nil
	}
	return nil, fmt.Errorf("part %d, but its optimiser keeps %d state buffer(s) (parts 1..%d): %w", k, len(b.state), len(b.state), ErrArg)
}

// replyBuffer returns a buffer of the block's length for a pull's reply,
// recycled when one is free.
func (b *block) replyBuffer() *[]float32 { return pooled[float32](&b.replies, len(b.value), 0) }

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
