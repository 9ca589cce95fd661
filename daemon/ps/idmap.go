package ps

import "github.com/heterps/heterps/native"

// idMap maps row ids to table slots: open addressing with linear probing
// over a power-of-two array kept at most half full. The tables' hot paths
// look up every id of every pull and push; this is about twice as fast as
// a Go map on a million ids (slots stay below 2^31: a shard's row cap).
type idMap struct {
	keys  []int64
	slots []int32 // slot+1; 0 marks an empty cell
	n     int
	mask  uint64
}

const idMapMinCap = 1 << 10

func newIDMap() idMap {
	var m idMap
	m.reset(idMapMinCap)
	return m
}

func (m *idMap) reset(capacity int) {
	m.keys, m.slots = make([]int64, capacity), make([]int32, capacity)
	m.n, m.mask = 0, uint64(capacity-1)
}

// idHash spreads ids over the cells: ShardOf's mix, of the id offset by a
// constant first, since a shard holds only ids whose plain mix falls in one
// residue class.
func idHash(id int64) uint64 { return splitmix64(uint64(id) ^ 0x9e3779b97f4a7c15) }

// get returns id's slot.
func (m *idMap) get(id int64) (int, bool) {
	for i := idHash(id) & m.mask; ; i = (i + 1) & m.mask {
		s := m.slots[i]
		if s == 0 {
			return 0, false
		}
		if m.keys[i] == id {
			return int(s - 1), true
		}
	}
}

// probe writes each id's slot, or -1, to slots and returns how many ids
// are absent: get for a batch, in native code that asks for the cells of
// the ids a few ahead (a big map's cells are cache misses).
func (m *idMap) probe(ids []int64, slots []int) int {
	if missing, err := native.ProbeIDs(m.keys, m.slots, ids, slots); err == nil {
		return missing
	}
	missing := 0 // slots too short: as far as it goes, id by id
	for i := range min(len(ids), len(slots)) {
		k, ok := m.get(ids[i])
		if !ok {
			k = -1
			missing++
		}
		slots[i] = k
	}
	return missing
}

// put sets id's slot, growing the array when it would pass half full.
func (m *idMap) put(id int64, slot int) {
	if 2*(m.n+1) > len(m.keys) {
		m.grow()
	}
	for i := idHash(id) & m.mask; ; i = (i + 1) & m.mask {
		if m.slots[i] == 0 {
			m.keys[i], m.slots[i] = id, int32(slot+1)
			m.n++
			return
		}
		if m.keys[i] == id {
			m.slots[i] = int32(slot + 1)
			return
		}
	}
}

func (m *idMap) grow() {
	keys, slots := m.keys, m.slots
	m.reset(2 * len(keys))
	for i, s := range slots {
		if s != 0 {
			m.put(keys[i], int(s-1))
		}
	}
}

// len is the number of ids held.
func (m *idMap) len() int { return m.n }
