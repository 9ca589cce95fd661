package ps

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/heterps/heterps/daemon/initrow"
	"github.com/heterps/heterps/internal/radix"
	"github.com/heterps/heterps/native"
)

// table is a sparse embedding table. Rows are numbered by slot in order of
// creation and live in slabs, laid out by sizes.
type table struct {
	spec   TableSpec
	sizes  slabSizes
	nstate int

	stepped         // mu guards everything below as well
	slot    idMap   // id -> slot
	ids     []int64 // slot -> id
	slabs   []*slab
	// at is scratch for laying a step's pushes out: 1 + a slot's position
	// in the step's rows, 0 between uses. Under the write lock.
	at []int32
	// laid holds the last layOut's slots and rows, reused by the next
	// (under the write lock): a push allocated them anew every step.
	laid struct {
		slots []int
		rows  [][]int32
	}
	// scratch holds a step's scattered gradients and their sum across
	// steps (scratchBuf), under the write lock.
	scratch [][]float32
	// replies recycles the buffers the service pulls rows into for remote
	// replicas (*[]float32), as block.replies does a block's: the largest
	// of what a parameter server serving three replicas allocated.
	replies sync.Pool
}

// replyBuffer returns a buffer of n floats for a pull's reply, recycled
// when one large enough is free.
func (t *table) replyBuffer(n int) *[]float32 { return pooled[float32](&t.replies, n, n/4) }

// slab holds its rows (slabSizes) of values and of each optimiser state
// buffer.
// args is its state as the optimiser takes it, boxed once: a step's update
// calls it once per slab it touches, a hundred times for a ctrdnn step.
type slab struct {
	value []float32
	state [][]float32
	args  []native.Buffer
}

// scratchBuf returns scratch buffer i of n floats, kept across steps
// (under the write lock): the step's scattered gradients and their sum.
func (t *table) scratchBuf(i, n int) []float32 {
	for len(t.scratch) <= i {
		t.scratch = append(t.scratch, nil)
	}
	if cap(t.scratch[i]) < n {
		t.scratch[i] = make([]float32, n, n+n/4)
	}
	return t.scratch[i][:n]
}

func newTable(spec TableSpec, slabRows int) *table {
	return &table{spec: spec, sizes: slabSizesFor(slabRows, spec.Dim), nstate: spec.Optim.Hyper.StateBuffers(),
		stepped: newStepped(), slot: newIDMap()}
}

// row returns the values of a slot.
func (t *table) row(slot int) []float32 {
	d := t.spec.Dim
	si, r := t.sizes.locate(slot)
	return t.slabs[si].value[r*d : (r+1)*d]
}

// lookup writes the slot of every id to slots, -1 where the id has no row
// yet, and returns how many are -1. Under at least the read lock.
func (t *table) lookup(ids []int64, slots []int) int {
	return t.slot.probe(ids, slots)
}

// ensure returns the slot of every id, creating missing rows with their
// initial values. Under the write lock. It creates nothing when the shard's
// row cap would be exceeded.
func (t *table) ensure(s *Shard, ids []int64) ([]int, error) {
	slots := make([]int, len(ids))
	if t.lookup(ids, slots) == 0 {
		return slots, nil
	}
	return slots, t.createMissing(s, ids, slots)
}

// createMissing fills the slots that a lookup left at -1: rows created
// since (a slot, once given, never changes) or made now with their initial
// values. Under the write lock. It creates nothing when the shard's row cap
// would be exceeded.
func (t *table) createMissing(s *Shard, ids []int64, slots []int) error {
	fresh := make(map[int64]bool)
	for i, k := range slots {
		if k >= 0 {
			continue
		}
		if k2, ok := t.slot.get(ids[i]); ok {
			slots[i] = k2
		} else {
			fresh[ids[i]] = true
		}
	}
	if err := s.reserveRows(t, len(fresh)); err != nil {
		return err
	}
	for i, k := range slots {
		if k < 0 {
			if k2, ok := t.slot.get(ids[i]); ok { // a repeat of an id created above
				slots[i] = k2
			} else {
				slots[i] = t.create(ids[i])
			}
		}
	}
	return nil
}

// create appends a row for id with its initial values.
func (t *table) create(id int64) int {
	k := t.add(id)
	spec := t.spec
	initrow.Fill(t.row(k), spec.InitSeed, spec.Name, id, spec.InitLimit)
	return k
}

// add appends a zero row for id, allocating a slab when the last is full,
// and returns its slot.
func (t *table) add(id int64) int {
	k := len(t.ids)
	if k == t.sizes.start(len(t.slabs)) {
		t.slabs = append(t.slabs, t.newSlab())
	}
	t.ids = append(t.ids, id)
	t.slot.put(id, k)
	return k
}

// state returns optimiser state buffer i of a slot's row.
func (t *table) stateRow(slot, i int) []float32 {
	d := t.spec.Dim
	si, r := t.sizes.locate(slot)
	return t.slabs[si].state[i][r*d : (r+1)*d]
}

func (t *table) newSlab() *slab {
	n := t.sizes.rows(len(t.slabs)) * t.spec.Dim
	sl := &slab{value: make([]float32, n), state: make([][]float32, t.nstate), args: make([]native.Buffer, t.nstate)}
	for i := range sl.state {
		sl.state[i] = make([]float32, n)
		sl.args[i] = native.HostBuffer(sl.state[i])
	}
	return sl
}

// reserveRows takes n rows of t from the shard's row cap and memory
// budget, or fails taking none.
func (s *Shard) reserveRows(t *table, n int) error {
	if err := s.reserveBytes(t, n); err != nil {
		return err
	}
	for {
		have := s.rows.Load()
		if have+int64(n) > int64(s.cfg.MaxRows) {
			s.bytes.Add(-int64(n) * t.rowBytes())
			return fmt.Errorf("ps shard %d: table %q: %d new rows beside the %d held would pass the cap of %d: %w",
				s.cfg.Shard, t.spec.Name, n, have, s.cfg.MaxRows, ErrRowCap)
		}
		if s.rows.CompareAndSwap(have, have+int64(n)) {
			return nil
		}
	}
}

// reserveBytes takes n rows' bytes from the memory budget, or fails
// taking none.
func (s *Shard) reserveBytes(t *table, n int) error {
	per := t.rowBytes()
	need := int64(n) * per
	for {
		have := s.bytes.Load()
		if s.cfg.MemoryBytes > 0 && need > s.cfg.MemoryBytes-have {
			return fmt.Errorf("ps shard %d: table %q: %d new rows of %d bytes each beside the %d bytes held would pass the budget of %d bytes: %w",
				s.cfg.Shard, t.spec.Name, n, per, have, s.cfg.MemoryBytes, ErrMemoryBudget)
		}
		if s.bytes.CompareAndSwap(have, have+need) {
			return nil
		}
	}
}

// rowIndexBytes is what a row costs besides its floats: the id map's two
// cells (it stays at most half full) of an id and a slot (12 bytes each),
// the slot's id (8) and the push layout's scratch (4).
const rowIndexBytes = 2*12 + 8 + 4

// RowBytes is the memory a table row of dim floats takes on a shard with
// an optimiser of stateBuffers state buffers: its values and state, 4
// bytes a float, and rowIndexBytes. Rows are allocated in slabs of
// Config.SlabRows, so a table holds up to a slab more than its rows.
func RowBytes(dim, stateBuffers int) int64 {
	return floatBytes(dim, stateBuffers) + rowIndexBytes
}

// floatBytes is the memory of n floats of values with stateBuffers
// buffers of optimiser state beside them.
func floatBytes(n, stateBuffers int) int64 {
	return int64(n) * int64(1+stateBuffers) * 4
}

func (t *table) rowBytes() int64 { return RowBytes(t.spec.Dim, t.nstate) }

// reserveBlocks takes the blocks' values and optimiser state from the
// memory budget.
func (s *Shard) reserveBlocks() error {
	var need int64
	for _, b := range s.cfg.Blocks {
		need += floatBytes(len(b.Init), b.Optim.Hyper.StateBuffers())
	}
	if s.cfg.MemoryBytes > 0 && need > s.cfg.MemoryBytes {
		return fmt.Errorf("%d dense blocks need %d bytes with their optimiser state, more than the budget of %d bytes: %w",
			len(s.cfg.Blocks), need, s.cfg.MemoryBytes, ErrMemoryBudget)
	}
	s.bytes.Store(need)
	return nil
}

// read copies the row at slots[i] into row at[i] of dst (at nil: row i).
// Under at least the read lock.
func (t *table) read(slots []int, dst []float32, at []int64) {
	d := t.spec.Dim
	for i, k := range slots {
		r := i
		if at != nil {
			r = int(at[i])
		}
		copy(dst[r*d:(r+1)*d], t.row(k))
	}
}

// update applies one optimiser step to the rows at slots, which must be
// distinct and grouped by slab (ascending), with gradient g (len(slots) x
// dim): one UpdateRows call per slab. A CPU backend of several threads
// updates groups of slabs side by side (the slabs' rows are disjoint, and
// each row's update is the same whichever thread makes it): a BSP step's
// update is on the critical path, when every replica waits for it.
func (t *table) update(b native.Backend, o native.Optim, slots []int, g []float32) error {
	runs := t.slabRuns(slots)
	cpu, ok := b.(*native.CPU)
	if !ok || cpu.Threads() < 2 || len(runs) < 2 || len(slots) < parallelUpdateRows {
		return t.updateRuns(b, o, runs, slots, g)
	}
	parts := splitRuns(runs, cpu.Threads())
	one := cpu.WithThreads(1) // the split is the parallelism
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, part := range parts {
		wg.Go(func() { errs[i] = t.updateRuns(one, o, part, slots, g) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// parallelUpdateRows is the fewest rows whose update is split across
// threads: a ctrdnn step's ~4,700 rows of 9 take ~0.5 ms on one thread,
// and below a thousand rows a goroutine's start and wake-up cost more than
// the half they save.
const parallelUpdateRows = 1024

// slabRun is the slots[lo:hi] of one slab in a step's ascending slots.
type slabRun struct{ slab, lo, hi int }

// slabRuns cuts ascending slots into one run per slab.
func (t *table) slabRuns(slots []int) []slabRun {
	var runs []slabRun
	for lo := 0; lo < len(slots); {
		si, _ := t.sizes.locate(slots[lo])
		end, hi := t.sizes.start(si+1), lo
		for hi < len(slots) && slots[hi] < end {
			hi++
		}
		runs = append(runs, slabRun{si, lo, hi})
		lo = hi
	}
	return runs
}

// splitRuns cuts runs into at most n consecutive groups of about equal
// rows (none empty).
func splitRuns(runs []slabRun, n int) [][]slabRun {
	total := runs[len(runs)-1].hi - runs[0].lo
	var parts [][]slabRun
	start := 0
	for i, r := range runs {
		k := len(parts) + 1 // the group being filled
		if k < n && r.hi-runs[0].lo >= total*k/n {
			parts = append(parts, runs[start:i+1])
			start = i + 1
		}
	}
	if start < len(runs) {
		parts = append(parts, runs[start:])
	}
	return parts
}

// updateRuns applies the update to the runs' rows, one UpdateRows call a
// run.
func (t *table) updateRuns(b native.Backend, o native.Optim, runs []slabRun, slots []int, g []float32) error {
	d := t.spec.Dim
	longest := 0
	for _, r := range runs {
		longest = max(longest, r.hi-r.lo)
	}
	local := make([]int64, 0, longest)
	for _, r := range runs {
		local = local[:0]
		first := t.sizes.start(r.slab)
		for _, k := range slots[r.lo:r.hi] {
			local = append(local, int64(k-first))
		}
		sl := t.slabs[r.slab]
		err := b.UpdateRows(o, native.HostBuffer(sl.value), t.sizes.rows(r.slab), d, local,
			native.HostBuffer(g[r.lo*d:r.hi*d]), sl.args...)
		if err != nil {
			return fmt.Errorf("table %q: slab %d: %w", t.spec.Name, r.slab, err)
		}
	}
	return nil
}

// layOut arranges the rows that pushes touch for one update: slots lists
// each touched slot once, ascending (so grouped by slab), and rows[p][j]
// is the position in slots of push p's j-th row. Under the write lock;
// both stay valid until the next layOut.
func (t *table) layOut(pushes []*contribution) (slots []int, rows [][]int32) {
	if cap(t.at) < len(t.ids) {
		t.at = make([]int32, len(t.ids), cap(t.ids))
	}
	at := t.at[:len(t.ids)]
	slots = t.laid.slots[:0]
	for _, c := range pushes {
		for _, k := range c.slots {
			if at[k] == 0 {
				slots = append(slots, k)
				at[k] = 1 // seen; its position comes after the grouping
			}
		}
	}
	t.ascending(slots)
	for j, k := range slots {
		at[k] = int32(j) + 1
	}
	rows = t.laid.rows[:0]
	for p, c := range pushes {
		if p < cap(rows) {
			rows = rows[:p+1]
		} else {
			rows = append(rows, nil)
		}
		rows[p] = slices.Grow(rows[p][:0], len(c.slots))[:len(c.slots)]
		for j, k := range c.slots {
			rows[p][j] = at[k] - 1
		}
	}
	for _, k := range slots {
		at[k] = 0
	}
	t.laid.slots, t.laid.rows = slots, rows
	return slots, rows
}

// ascending sorts slots ascending, in place: grouped by slab, and within
// a slab in the order of its rows, so that the optimiser's kernels walk
// each slab's values and state forwards, where the hardware prefetchers
// follow (in the order the pushes listed them, a ctrdnn step's update of
// ~4,700 rows took 1.6x as long). A radix sort: a step's few thousand
// slots sort in microseconds.
func (t *table) ascending(slots []int) {
	radix.Sort(slots, len(t.ids))
}
