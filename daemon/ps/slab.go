package ps

import "math/bits"

// Slab sizes. A table's rows live in slabs, one allocation per slab and
// buffer (values, each optimiser state), so that a row costs no allocation
// of its own and memory grows by at most a slab ahead of the rows. Small
// slabs waste little on small tables but cut a step's update into a call
// per slab it touches: a ctrdnn step's ~5,000 rows of 9 touch ~100 slabs of
// 4,096 rows, and that update took half again as long as over slabs of
// 65,536. So unless Config.SlabRows fixes the size, a table's slabs start
// at DefaultSlabRows rows and double, as a slice's capacity does but
// without copying, until a buffer of a slab holds slabBytes; later slabs
// all hold that. A table thus holds at most about twice its rows while it
// is small, and at most one large slab more than its rows once it is not.

// slabBytes is the bytes a buffer of a full-grown slab holds, about: its
// rows are the power of two nearest below slabBytes/(4·dim), and never
// fewer than DefaultSlabRows.
const slabBytes = 4 << 20

// slabSizes lays slots out over slabs: slab i < grown holds first<<i rows,
// every later slab full rows.
type slabSizes struct {
	first, full int
	grown       int // the slabs that double, before the full-size ones
	grownEnd    int // their rows: the first slot of the full-size ones
}

// slabSizesFor is fixed-size slabs of fixed rows, or, for fixed 0, slabs
// growing from DefaultSlabRows to full-grown slabs of rows of dim floats.
func slabSizesFor(fixed, dim int) slabSizes {
	if fixed > 0 {
		return slabSizes{first: fixed, full: fixed}
	}
	full := DefaultSlabRows
	for full*2*4*max(dim, 1) <= slabBytes {
		full *= 2
	}
	grown := bits.Len(uint(full/DefaultSlabRows)) - 1
	return slabSizes{first: DefaultSlabRows, full: full, grown: grown, grownEnd: DefaultSlabRows * (1<<grown - 1)}
}

// start is the first slot of slab i (the slots of all slabs before it).
func (z slabSizes) start(i int) int {
	if i <= z.grown {
		return z.first * (1<<i - 1)
	}
	return z.grownEnd + (i-z.grown)*z.full
}

// rows is the rows of slab i.
func (z slabSizes) rows(i int) int {
	if i < z.grown {
		return z.first << i
	}
	return z.full
}

// locate returns the slab of slot and the slot's row in it.
func (z slabSizes) locate(slot int) (slab, row int) {
	if slot < z.grownEnd {
		i := bits.Len(uint(slot/z.first+1)) - 1
		return i, slot - z.first*(1<<i-1)
	}
	j := (slot - z.grownEnd) / z.full
	return z.grown + j, slot - z.grownEnd - j*z.full
}
