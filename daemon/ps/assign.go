package ps

import (
	"fmt"
	"slices"
)

// Assigned blocks. The replicas of a stage that keeps its dense parameters
// itself (an allreduce stage) hand them to the parameter servers only for
// checkpoints: at a checkpoint step one replica assigns each block its
// values and optimiser state as of that step (AssignBlock), part by part
// (BlockValue, then state buffer k as part k+1, in any order, each at most
// a block long like a pushed gradient). The block takes them together once
// every part of the step is in: the step then goes through the block's BSP
// step like a push (the checkpoint fence holds it, a retry is acknowledged
// as a duplicate), except that the version may jump over the steps the
// replicas kept to themselves.

// assignment collects the parts of one step's assignment of a block.
type assignment struct {
	step  int64
	parts [][]float32 // nil until that part arrives
	got   int
}

// AssignBlock gives dense block name part (BlockValue or 1+k for optimiser
// state buffer k) of its state after step id.Step. The shard copies v. The
// block takes the step once all its parts are in; until then the ack says
// pending. BSP only.
func (s *Shard) AssignBlock(id PushID, name string, part int, v []float32) (Ack, error) {
	b, err := s.block(name)
	if err != nil {
		return Ack{}, err
	}
	fail := func(err error) (Ack, error) {
		return Ack{}, fmt.Errorf("ps shard %d: assign %q part %d (%v): %w", s.cfg.Shard, name, part, id, err)
	}
	if _, err := b.part(part); err != nil {
		return fail(err)
	}
	switch err := s.checkPush(id, b.spec.Stage, 1); {
	case err != nil:
		return fail(err)
	case s.cfg.Mode != BSP:
		return fail(fmt.Errorf("assigning a block needs BSP: %w", ErrArg))
	case len(v) != len(b.value):
		return fail(fmt.Errorf("%d floats for a block of %d: %w", len(v), len(b.value), ErrArg))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	dup, err := b.admitAssign(id, s.stageMembers(id.Stage))
	switch {
	case err != nil:
		return fail(err)
	case dup:
		return Ack{Duplicate: true, Version: b.version}, nil
	}
	a := b.assigning
	if a == nil || a.step < id.Step { // a later step replaces an assignment left unfinished
		a = &assignment{step: id.Step, parts: make([][]float32, 1+len(b.state))}
		b.assigning = a
	}
	if a.parts[part] != nil {
		return Ack{Duplicate: true, Version: b.version}, nil
	}
	a.parts[part] = slices.Clone(v)
	if a.got++; a.got < len(a.parts) {
		return Ack{Version: b.version}, nil
	}
	b.assigning = nil
	if b.open == nil {
		b.open = newBarrier(id.Step, []int{id.Replica})
	}
	ack, err := s.accept(&b.stepped, id, &contribution{weight: 1, parts: a.parts}, b.applyStep, nil)
	if err != nil {
		return fail(err)
	}
	return ack, nil
}

// admitAssign is admit for a part of an assignment: the step may be any
// after the version, but not another than a step still open (held by a
// checkpoint fence), and the replica must be the stage's only member.
// Under the write lock.
func (b *block) admitAssign(id PushID, members func(step int64) []int) (dup bool, err error) {
	switch {
	case b.pending(id) || b.window(id.Replica).has(id.Step):
		return true, nil
	case id.Step <= b.version:
		return false, fmt.Errorf("%v: step %d is already applied: %w", id, b.version, ErrStale)
	case b.open != nil && b.open.step != id.Step:
		return false, fmt.Errorf("%v: step %d is still open: %w", id, b.open.step, ErrAhead)
	case b.assigning != nil && b.assigning.step > id.Step:
		return false, fmt.Errorf("%v: step %d is being assigned: %w", id, b.assigning.step, ErrStale)
	}
	if m := members(id.Step); len(m) != 1 || m[0] != id.Replica {
		return false, fmt.Errorf("%v: the stage's members for the step are %v, and only a stage of one replica assigns blocks: %w", id, m, ErrNotMember)
	}
	return false, nil
}

// applyAssignment makes the open step's assigned parts the block's values
// and optimiser state.
func (b *block) applyAssignment(parts [][]float32) {
	for k, v := range parts {
		dst, _ := b.part(k) // AssignBlock checked every part
		copy(dst, v)
	}
}
