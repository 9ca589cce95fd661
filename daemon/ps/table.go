package ps

import (
	"fmt"

	"github.com/heterps/heterps/daemon/initrow"
	"github.com/heterps/heterps/native"
)

// table is a sparse embedding table. Rows are numbered by slot in order of
// creation; slot k is row k%slabRows of slab k/slabRows.
type table struct {
	spec     TableSpec
	slabRows int
	nstate   int

	stepped               // mu guards everything below as well
	slot    map[int64]int // id -> slot
	ids     []int64       // slot -> id
	slabs   []*slab
}

// slab holds slabRows rows of values and of each optimiser state buffer.
type slab struct {
	value []float32
	state [][]float32
}

func newTable(spec TableSpec, slabRows int) *table {
	return &table{spec: spec, slabRows: slabRows, nstate: spec.Optim.Hyper.StateBuffers(),
		stepped: newStepped(), slot: make(map[int64]int)}
}

// row returns the values of a slot.
func (t *table) row(slot int) []float32 {
	d := t.spec.Dim
	r := slot % t.slabRows
	return t.slabs[slot/t.slabRows].value[r*d : (r+1)*d]
}

// missing counts the distinct ids that have no row yet.
func (t *table) missing(ids []int64) int {
	var fresh map[int64]bool
	for _, id := range ids {
		if _, ok := t.slot[id]; !ok {
			if fresh == nil {
				fresh = make(map[int64]bool)
			}
			fresh[id] = true
		}
	}
	return len(fresh)
}

// ensure returns the slot of every id, creating missing rows with their
// initial values. Under the write lock. It creates nothing when the shard's
// row cap would be exceeded.
func (t *table) ensure(s *Shard, ids []int64) ([]int, error) {
	if n := t.missing(ids); n > 0 {
		if err := s.reserveRows(t.spec.Name, n); err != nil {
			return nil, err
		}
	}
	slots := make([]int, len(ids))
	for i, id := range ids {
		k, ok := t.slot[id]
		if !ok {
			k = t.create(id)
		}
		slots[i] = k
	}
	return slots, nil
}

// create appends a row for id, allocating a slab when the last is full.
func (t *table) create(id int64) int {
	k := len(t.ids)
	if k == len(t.slabs)*t.slabRows {
		t.slabs = append(t.slabs, t.newSlab())
	}
	t.ids = append(t.ids, id)
	t.slot[id] = k
	spec := t.spec
	initrow.Fill(t.row(k), spec.InitSeed, spec.Name, id, spec.InitLimit)
	return k
}

func (t *table) newSlab() *slab {
	n := t.slabRows * t.spec.Dim
	sl := &slab{value: make([]float32, n), state: make([][]float32, t.nstate)}
	for i := range sl.state {
		sl.state[i] = make([]float32, n)
	}
	return sl
}

// reserveRows takes n rows from the shard's cap, or fails taking none.
func (s *Shard) reserveRows(table string, n int) error {
	for {
		have := s.rows.Load()
		if have+int64(n) > int64(s.cfg.MaxRows) {
			return fmt.Errorf("ps shard %d: table %q: %d new rows beside the %d held would pass the cap of %d: %w",
				s.cfg.Shard, table, n, have, s.cfg.MaxRows, ErrRowCap)
		}
		if s.rows.CompareAndSwap(have, have+int64(n)) {
			return nil
		}
	}
}

// read copies the rows of ids into dst (len(ids) x dim) if all exist. Under
// at least the read lock.
func (t *table) read(ids []int64, dst []float32) bool {
	d := t.spec.Dim
	for i, id := range ids {
		k, ok := t.slot[id]
		if !ok {
			return false
		}
		copy(dst[i*d:(i+1)*d], t.row(k))
	}
	return true
}

// update applies one optimiser step to the rows at slots, which must be
// distinct and ascending, with gradient g (len(slots) x dim): one
// UpdateRows call per run of slots in the same slab.
func (t *table) update(b native.Backend, o native.Optim, slots []int, g []float32) error {
	d := t.spec.Dim
	for lo := 0; lo < len(slots); {
		si := slots[lo] / t.slabRows
		hi := lo
		local := make([]int64, 0, len(slots)-lo)
		for ; hi < len(slots) && slots[hi]/t.slabRows == si; hi++ {
			local = append(local, int64(slots[hi]%t.slabRows))
		}
		sl := t.slabs[si]
		state := make([]native.Buffer, len(sl.state))
		for i, st := range sl.state {
			state[i] = native.HostBuffer(st)
		}
		err := b.UpdateRows(o, native.HostBuffer(sl.value), t.slabRows, d, local,
			native.HostBuffer(g[lo*d:hi*d]), state...)
		if err != nil {
			return fmt.Errorf("table %q: slab %d: %w", t.spec.Name, si, err)
		}
		lo = hi
	}
	return nil
}
