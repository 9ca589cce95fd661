package ps

import (
	"fmt"
	"math"
	"slices"

	"github.com/heterps/heterps/native"
)

// PushRows pushes a sparse gradient of a table: distinct ids and their rows
// (grad is len(ids) x dim). In BSP weight is the replica's batch size for
// the step; in ASP it multiplies the gradient. Rows not yet created are
// created (a push can reach the row cap). See the package comment for the
// BSP barrier and the exactly-once rule. The shard reads grad during the
// call and copies it only if it keeps it (borrowGrad): the caller may reuse
// it once PushRows returns.
func (s *Shard) PushRows(id PushID, name string, weight float64, ids []int64, grad []float32) (Ack, error) {
	t, err := s.table(name)
	if err != nil {
		return Ack{}, err
	}
	fail := func(err error) (Ack, error) {
		return Ack{}, fmt.Errorf("ps shard %d: push %q (%v): %w", s.cfg.Shard, name, id, err)
	}
	if err := s.checkPush(id, t.spec.Stage, weight); err != nil {
		return fail(err)
	}
	if len(grad) != len(ids)*t.spec.Dim {
		return fail(fmt.Errorf("%d gradient floats for %d rows of %d: %w", len(grad), len(ids), t.spec.Dim, ErrArg))
	}
	sorted := slices.IsSorted(ids)
	if i := firstDuplicateSorted(ids); sorted && i >= 0 {
		return fail(fmt.Errorf("ids[%d] = %d is listed twice: %w", i, ids[i], ErrArg))
	}
	if err := s.checkOwned(ids); err != nil {
		return fail(err)
	}
	c := &contribution{weight: weight, grad: grad}
	t.mu.Lock()
	defer t.mu.Unlock()
	dup, err := t.admit(s.cfg.Mode, id, s.stageMembers(id.Stage))
	if err != nil {
		return fail(err)
	}
	if dup {
		return Ack{Duplicate: true, Version: t.version}, nil
	}
	if c.slots, err = t.ensure(s, ids); err != nil {
		return fail(err)
	}
	if i := t.firstRepeatedSlot(c.slots); !sorted && i >= 0 {
		return fail(fmt.Errorf("ids[%d] = %d is listed twice: %w", i, ids[i], ErrArg))
	}
	ack, err := s.accept(&t.stepped, id, c, t.applyStep, t.applyOne)
	if err != nil {
		return fail(err)
	}
	return ack, nil
}

// PushBlock pushes the gradient of a dense block (its length). The weight
// and the use of grad are as for PushRows.
func (s *Shard) PushBlock(id PushID, name string, weight float64, grad []float32) (Ack, error) {
	b, err := s.block(name)
	if err != nil {
		return Ack{}, err
	}
	fail := func(err error) (Ack, error) {
		return Ack{}, fmt.Errorf("ps shard %d: push %q (%v): %w", s.cfg.Shard, name, id, err)
	}
	if err := s.checkPush(id, b.spec.Stage, weight); err != nil {
		return fail(err)
	}
	if len(grad) != len(b.value) {
		return fail(fmt.Errorf("%d gradient floats for a block of %d: %w", len(grad), len(b.value), ErrArg))
	}
	c := &contribution{weight: weight, grad: grad}
	b.mu.Lock()
	defer b.mu.Unlock()
	dup, err := b.admit(s.cfg.Mode, id, s.stageMembers(id.Stage))
	if err != nil {
		return fail(err)
	}
	if dup {
		return Ack{Duplicate: true, Version: b.version}, nil
	}
	ack, err := s.accept(&b.stepped, id, c, b.applyStep, b.applyOne)
	if err != nil {
		return fail(err)
	}
	return ack, nil
}

// accept applies an admitted push (ASP) or adds it to the open step and
// applies the step if it is complete and not held by a checkpoint (BSP).
// Under the write lock. A failed apply leaves the version where it was.
// c.grad is the pusher's: accept copies it when the shard keeps it past the
// call (borrowGrad).
func (s *Shard) accept(st *stepped, id PushID, c *contribution,
	applyStep func(*Shard) error, applyOne func(*Shard, *contribution) error) (Ack, error) {
	if s.cfg.Mode == ASP {
		st.keep(c) // an ASP apply may scale it in place
		err := applyOne(s, c)
		st.release(c)
		if err != nil {
			return Ack{Version: st.version}, err
		}
		st.window(id.Replica).mark(id.Step)
		st.advance(st.version + 1)
		return Ack{Applied: true, Version: st.version}, nil
	}
	st.add(id.Replica, c)
	if !st.open.full() || s.held(st.open.step) {
		st.keep(c) // it waits for the step's other pushes
		return Ack{Version: st.version}, nil
	}
	if err := applyStep(s); err != nil {
		st.keep(c) // the step stays open, holding it
		return Ack{Version: st.version}, err
	}
	return Ack{Applied: true, Version: st.version}, nil
}

// borrowGrad: a push's gradient is the caller's buffer (the client's for a
// local shard, the received frame for the service). A BSP push that
// completes its step is applied before the push returns and the update
// only reads the gradient (the optimisers' kernels take it const), so the
// gradient is used in place; one that must wait for the step's other
// pushes or a checkpoint fence is copied, as is every ASP push. For a
// one-replica stage this saves a copy of every gradient every step.

func (s *Shard) checkPush(id PushID, stage int, weight float64) error {
	switch {
	case id.Job != s.cfg.Job:
		return fmt.Errorf("this shard serves job %q: %w", s.cfg.Job, ErrWrongJob)
	case id.Stage != stage:
		return fmt.Errorf("pushed by stage %d, owned by stage %d: %w", id.Stage, stage, ErrArg)
	case id.Step < 1:
		return fmt.Errorf("step %d, want >= 1: %w", id.Step, ErrArg)
	case !(weight > 0) || math.IsInf(weight, 1):
		return fmt.Errorf("weight %g, want a positive number: %w", weight, ErrArg)
	}
	return nil
}

// held reports whether a checkpoint fence keeps step from being applied.
func (s *Shard) held(step int64) bool {
	f := s.fence.Load()
	return f >= 0 && step > f
}

// stepWeights returns w_k = b_k / sum(b) for the pushes of a full step.
func stepWeights(pushes []*contribution) []float32 {
	sum := 0.0
	for _, c := range pushes {
		sum += c.weight
	}
	w := make([]float32, len(pushes))
	for k, c := range pushes {
		w[k] = float32(c.weight / sum)
	}
	return w
}

// applyStep applies the open, full BSP step: the rows of every push merged
// by id (absent rows count zero) and weighted, then one optimiser update.
func (t *table) applyStep(s *Shard) error {
	b := t.open
	slots, rows := t.layOut(b.pushes)
	d := t.spec.Dim
	n := len(slots) * d
	var sum []float32
	if len(b.pushes) == 1 { // its weight is exactly 1: the sum is its gradient
		sum = scatterRows(t.scratchBuf(0, n), b.pushes[0].grad, rows[0], d)
	} else {
		grads := make([]native.Buffer, len(b.pushes))
		for p, c := range b.pushes {
			g := t.scratchBuf(p, n)
			clear(g) // rows this push lacks count zero
			grads[p] = native.HostBuffer(scatterRows(g, c.grad, rows[p], d))
		}
		sum = t.scratchBuf(len(b.pushes), n)
		if err := s.backend.WeightedSum(native.HostBuffer(sum), stepWeights(b.pushes), grads); err != nil {
			return fmt.Errorf("table %q: step %d: %w", t.spec.Name, b.step, err)
		}
	}
	if err := t.update(s.backend, t.spec.Optim.At(b.step), slots, sum); err != nil {
		return fmt.Errorf("step %d: %w", b.step, err)
	}
	t.finishStep()
	return nil
}

// applyOne applies one ASP push, its gradient times its weight.
func (t *table) applyOne(s *Shard, c *contribution) error {
	slots, rows := t.layOut([]*contribution{c})
	g := scatterRows(t.scratchBuf(0, len(slots)*t.spec.Dim), c.grad, rows[0], t.spec.Dim)
	gb := native.HostBuffer(g)
	if err := s.backend.WeightedSum(gb, []float32{float32(c.weight)}, []native.Buffer{gb}); err != nil {
		return fmt.Errorf("table %q: %w", t.spec.Name, err)
	}
	return t.update(s.backend, t.spec.Optim.At(t.version+1), slots, g)
}

// scatterRows writes grad's row j to row at[j] of g and returns g; rows of
// g that at does not name keep what they held.
func scatterRows(g, grad []float32, at []int32, d int) []float32 {
	for j, pos := range at {
		copy(g[int(pos)*d:(int(pos)+1)*d], grad[j*d:(j+1)*d])
	}
	return g
}

// applyStep applies the open, full BSP step of a block: its pushes, or an
// assignment of its parts (AssignBlock).
func (b *block) applyStep(s *Shard) error {
	st := b.open
	if parts := st.pushes[0].parts; parts != nil {
		b.applyAssignment(parts)
		b.finishStep()
		return nil
	}
	sum := st.pushes[0].grad // one push weighs exactly 1: its own copy is the sum
	if len(st.pushes) > 1 {
		grads := make([]native.Buffer, len(st.pushes))
		for r, c := range st.pushes {
			grads[r] = native.HostBuffer(c.grad)
		}
		if b.sum == nil {
			b.sum = make([]float32, len(b.value))
		}
		sum = b.sum
		if err := s.backend.WeightedSum(native.HostBuffer(sum), stepWeights(st.pushes), grads); err != nil {
			return fmt.Errorf("block %q: step %d: %w", b.spec.Name, st.step, err)
		}
	}
	if err := b.update(s.backend, b.spec.Optim.At(st.step), sum); err != nil {
		return fmt.Errorf("block %q: step %d: %w", b.spec.Name, st.step, err)
	}
	b.finishStep()
	return nil
}

// applyOne applies one ASP push of a block.
func (b *block) applyOne(s *Shard, c *contribution) error {
	g := native.HostBuffer(c.grad)
	if err := s.backend.WeightedSum(g, []float32{float32(c.weight)}, []native.Buffer{g}); err != nil {
		return fmt.Errorf("block %q: %w", b.spec.Name, err)
	}
	if err := b.update(s.backend, b.spec.Optim.At(b.version+1), g); err != nil {
		return fmt.Errorf("block %q: %w", b.spec.Name, err)
	}
	return nil
}

// firstDuplicate returns the index of the first id listed earlier too, or -1.
func firstDuplicate(ids []int64) int {
	if slices.IsSorted(ids) { // clients send ascending ids: no map needed
		return firstDuplicateSorted(ids)
	}
	seen := make(map[int64]struct{}, len(ids))
	for i, id := range ids {
		if _, ok := seen[id]; ok {
			return i
		}
		seen[id] = struct{}{}
	}
	return -1
}

// firstDuplicateSorted returns the index of the first id equal to the one
// before it, or -1: in ascending ids, the first listed earlier too.
func firstDuplicateSorted(ids []int64) int {
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			return i
		}
	}
	return -1
}

// firstRepeatedSlot returns the index of the first slot listed earlier
// too, or -1, marking slots in t.at (left all zero again) instead of
// hashing ids into a map: the ids of a push that are not ascending (the
// pipeline's, in the order the embedding's backward merged them) are
// checked after ensure has found their slots. Such a refused push may have
// created its rows, as a pull of them would. Under the write lock.
func (t *table) firstRepeatedSlot(slots []int) int {
	if cap(t.at) < len(t.ids) {
		t.at = make([]int32, len(t.ids), cap(t.ids))
	}
	at := t.at[:len(t.ids)]
	found, marked := -1, len(slots)
	for j, k := range slots {
		if at[k] != 0 {
			found, marked = j, j
			break
		}
		at[k] = 1
	}
	for _, k := range slots[:marked] {
		at[k] = 0
	}
	return found
}

// releaseHeld applies every step a checkpoint fence held back.
func (s *Shard) releaseHeld() error {
	var errs []error
	for _, t := range s.tables {
		errs = append(errs, applyIfFull(s, &t.stepped, t.applyStep))
	}
	for _, b := range s.blocks {
		errs = append(errs, applyIfFull(s, &b.stepped, b.applyStep))
	}
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("ps shard %d: apply held step: %w", s.cfg.Shard, err)
		}
	}
	return nil
}

func applyIfFull(s *Shard, st *stepped, apply func(*Shard) error) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.open == nil || !st.open.full() || s.held(st.open.step) {
		return nil
	}
	return apply(s)
}
