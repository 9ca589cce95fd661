// Package initrow computes the initial value of an embedding row from
// (seed, table name, row id) alone, so that every process that needs a row —
// single-process training filling a whole table, or a parameter server
// creating rows lazily on first pull — starts from the same floats.
//
// It sits below both daemon/nn and daemon/ps, which may not import each
// other.
package initrow

import "math/rand/v2"

// golden is 2^64 divided by the golden ratio: multiplying the row id by it
// spreads consecutive ids over the whole seed space.
const golden = 0x9e3779b97f4a7c15

// Fill writes len(dst) values uniform in [-limit, limit) for one row of the
// named table. The values come from a PCG stream seeded with
// (seed ^ row*golden, NameHash(table)), drawing one float64 per element:
//
//	dst[i] = float32((2*rng.Float64() - 1) * limit)
func Fill(dst []float32, seed uint64, table string, row int64, limit float64) {
	rng := rand.New(rand.NewPCG(seed^uint64(row)*golden, NameHash(table)))
	for i := range dst {
		dst[i] = float32((2*rng.Float64() - 1) * limit)
	}
}

// NameHash is the 64-bit FNV-1a hash of a name: stable across processes and
// builds, unlike the runtime's map hash.
func NameHash(s string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * prime
	}
	return h
}
