package ps

import (
	"context"
	"fmt"
	"sync"
)

// PullRows returns the rows of ids, len(ids) x dim, one row per id in the
// order given (repeats included), once the table's version is at least
// after, and the version they were read at. Rows that do not exist yet are
// created with their initial values, before the wait (a pull whose wait
// fails has still created them; they would be created by the next). The
// wait ends with ctx, or after Config.WaitTimeout when ctx has no deadline.
func (s *Shard) PullRows(ctx context.Context, name string, ids []int64, after int64) ([]float32, int64, error) {
	t, err := s.table(name)
	if err != nil {
		return nil, 0, err
	}
	out := make([]float32, len(ids)*t.spec.Dim)
	version, err := s.pullRows(ctx, t, ids, after, out, nil)
	if err != nil {
		return nil, 0, err
	}
	return out, version, nil
}

// PullRowsInto is PullRows writing the row of ids[j] into row at[j] of
// dst (dim floats a row, the table's; at nil: row j) instead of a new
// slice, and returning the version: a replica whose servers are in its
// own process pulls straight into its batch's rows.
func (s *Shard) PullRowsInto(ctx context.Context, name string, ids []int64, after int64, dst []float32, dim int, at []int64) (int64, error) {
	t, err := s.table(name)
	if err != nil {
		return 0, err
	}
	if dim != t.spec.Dim {
		return 0, fmt.Errorf("ps shard %d: pull %q: rows of %d floats, the table's are %d", s.cfg.Shard, name, dim, t.spec.Dim)
	}
	return s.pullRows(ctx, t, ids, after, dst, at)
}

// pullRows is PullRowsInto of a table already looked up, into rows of its
// width.
func (s *Shard) pullRows(ctx context.Context, t *table, ids []int64, after int64, dst []float32, at []int64) (int64, error) {
	name := t.spec.Name
	if err := s.checkOwned(ids); err != nil {
		return 0, fmt.Errorf("ps shard %d: pull %q: %w", s.cfg.Shard, name, err)
	}
	if err := checkDestination(ids, dst, t.spec.Dim, at); err != nil {
		return 0, fmt.Errorf("ps shard %d: pull %q: %w", s.cfg.Shard, name, err)
	}
	// The slots first, the wait after: a slot once given never changes, so
	// a pull held for the step's update (a BSP replica asks for the next
	// batch's rows early) has only the copies left once it is applied.
	buf := pooled[int](&slotBufs, len(ids), 0)
	defer slotBufs.Put(buf)
	slots, err := t.slotsOf(s, ids, *buf)
	if err != nil {
		return 0, fmt.Errorf("ps shard %d: pull %q: %w", s.cfg.Shard, name, err)
	}
	if err := s.await(ctx, &t.stepped, after); err != nil {
		return 0, fmt.Errorf("ps shard %d: pull %q: %w", s.cfg.Shard, name, err)
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	t.read(slots, dst, at)
	return t.version, nil
}

// slotBufs recycles the slots a pull looks its ids up into (*[]int): they
// are done with once the rows are copied.
var slotBufs sync.Pool

// checkDestination checks that dst holds a row of dim floats at every
// position of at (at nil: len(ids) rows) and that at names one per id.
func checkDestination(ids []int64, dst []float32, dim int, at []int64) error {
	if dim <= 0 {
		return fmt.Errorf("rows of %d floats", dim)
	}
	if at == nil {
		if len(dst) != len(ids)*dim {
			return fmt.Errorf("%d floats for %d rows of %d", len(dst), len(ids), dim)
		}
		return nil
	}
	if len(at) != len(ids) {
		return fmt.Errorf("%d destination rows for %d ids", len(at), len(ids))
	}
	rows := int64(len(dst) / dim)
	for _, r := range at {
		if r < 0 || r >= rows {
			return fmt.Errorf("destination row %d of %d", r, rows)
		}
	}
	return nil
}

// slotsOf writes the slot of every id into slots (as long as ids),
// creating the rows that do not exist yet with their initial values: only
// those ids are looked up again, under the write lock.
func (t *table) slotsOf(s *Shard, ids []int64, slots []int) ([]int, error) {
	t.mu.RLock()
	missing := t.lookup(ids, slots)
	t.mu.RUnlock()
	if missing == 0 {
		return slots, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return slots, t.createMissing(s, ids, slots)
}

// PullBlock returns a copy of a dense block once its version is at least
// after, and the version it was read at.
func (s *Shard) PullBlock(ctx context.Context, name string, after int64) ([]float32, int64, error) {
	b, err := s.block(name)
	if err != nil {
		return nil, 0, err
	}
	v := make([]float32, len(b.value))
	version, err := s.pullBlockPart(ctx, b, after, BlockValue, v)
	if err != nil {
		return nil, 0, err
	}
	return v, version, nil
}

// PullBlockInto is PullBlock into dst, which must have the block's
// length: no allocation, for a caller that keeps a buffer per block.
func (s *Shard) PullBlockInto(ctx context.Context, name string, after int64, dst []float32) (int64, error) {
	return s.PullBlockStateInto(ctx, name, after, BlockValue, dst)
}

// BlockValue is the part of a dense block that PullBlockStateInto calls
// the values; state buffer k of its optimiser is part k+1.
const BlockValue = 0

// PullBlockStateInto copies part of dense block name into dst once the
// block's version is at least after: its values (BlockValue) or, for part
// k+1, its optimiser's state buffer k (Adam's first moment is part 1), and
// returns the version it was read at. The replicas of an allreduce stage
// load the state with the values when they start, so that a job restored
// from a checkpoint goes on from the optimiser state the checkpoint holds.
func (s *Shard) PullBlockStateInto(ctx context.Context, name string, after int64, part int, dst []float32) (int64, error) {
	b, err := s.block(name)
	if err != nil {
		return 0, err
	}
	return s.pullBlockPart(ctx, b, after, part, dst)
}

// pullBlockPart is PullBlockStateInto of a block already looked up.
func (s *Shard) pullBlockPart(ctx context.Context, b *block, after int64, part int, dst []float32) (int64, error) {
	src, err := b.part(part)
	if err != nil {
		return 0, fmt.Errorf("ps shard %d: pull %q: %w", s.cfg.Shard, b.spec.Name, err)
	}
	if len(dst) != len(b.value) {
		return 0, fmt.Errorf("ps shard %d: pull %q: a buffer of %d floats for a block of %d: %w", s.cfg.Shard, b.spec.Name, len(dst), len(b.value), ErrArg)
	}
	if err := s.await(ctx, &b.stepped, after); err != nil {
		return 0, fmt.Errorf("ps shard %d: pull %q: %w", s.cfg.Shard, b.spec.Name, err)
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	copy(dst, src)
	return b.version, nil
}

func (s *Shard) await(ctx context.Context, st *stepped, after int64) error {
	if st.reached(after) { // most pulls: no timer to arm
		return nil
	}
	ctx, cancel := s.waitCtx(ctx)
	defer cancel()
	return st.waitVersion(ctx, s.closed, 0, after)
}

// checkOwned refuses ids that ShardOf places on another shard.
func (s *Shard) checkOwned(ids []int64) error {
	if s.cfg.Shards == 1 { // every id is the only shard's; the hashes cost ~3 ns a row
		return nil
	}
	for i, id := range ids {
		if got := ShardOf(id, s.cfg.Shards); got != s.cfg.Shard {
			return fmt.Errorf("ids[%d] = %d lives on shard %d: %w", i, id, got, ErrWrongShard)
		}
	}
	return nil
}
