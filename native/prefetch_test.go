package native

import "testing"

// Row prefetching only asks for memory early: the sparse-row kernels give
// the same bits with it on and off (guarded buffers, so no write strays),
// on every ISA and on row counts below, at and past the prefetch distance.
func TestRowPrefetchChangesNoResult(t *testing.T) {
	defer SetRowPrefetch(true)
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(41)
		for _, s := range bagShapes(rng) {
			table := randFloats(rng, s.rows*s.dim, -1, 1)
			offsets, ids := randomBags(rng, s.nbags, s.maxLen, s.rows)
			SetRowPrefetch(false)
			off := runBag(t, b, PoolSum, table, s, offsets, ids)
			SetRowPrefetch(true)
			on := runBag(t, b, PoolSum, table, s, offsets, ids)
			assertClose(t, "embedding-bag out", on, off, 0, 0)
		}
		for _, o := range optimCases {
			for _, c := range rowsCases(rng, true, 300) {
				table0 := randFloats(rng, c.tableRows*c.dim, -1, 1)
				rows := randDistinctRows(rng, c.tableRows, c.nrows)
				grads := randGrads(rng, optimSteps, c.nrows*c.dim)
				SetRowPrefetch(false)
				off := runRows(t, b, o, c, table0, rows, grads)
				SetRowPrefetch(true)
				on := runRows(t, b, o, c, table0, rows, grads)
				assertClose(t, "table+state", on, off, 0, 0)
			}
		}
	})
}
