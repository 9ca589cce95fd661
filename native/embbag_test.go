package native

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// randomBags returns CSR offsets and ids for nbags bags of 0..maxLen ids
// (about one bag in five empty) drawn from rows table rows, so that small
// tables give many duplicates inside and across bags.
func randomBags(rng *rand.Rand, nbags, maxLen, rows int) (offsets, ids []int64) {
	offsets = make([]int64, 1, nbags+1)
	for range nbags {
		n := 0
		if rows > 0 && rng.IntN(5) != 0 {
			n = rng.IntN(maxLen + 1)
		}
		for range n {
			ids = append(ids, int64(rng.IntN(rows)))
		}
		offsets = append(offsets, int64(len(ids)))
	}
	return offsets, ids
}

// bagShape is one embedding-bag test case.
type bagShape struct{ rows, dim, nbags, maxLen int }

// bagShapes covers odd dims and odd bag counts, plus one batch large enough
// to be split into several pieces.
func bagShapes(rng *rand.Rand) []bagShape {
	var out []bagShape
	for _, dim := range oddSizes {
		out = append(out, bagShape{rows: 1 + rng.IntN(40), dim: dim, nbags: rng.IntN(13), maxLen: 5})
	}
	for _, nbags := range oddSizes {
		dims := []int{1, 9, 16, 26}
		out = append(out, bagShape{rows: 1 + rng.IntN(60), dim: dims[rng.IntN(len(dims))], nbags: nbags, maxLen: 4})
	}
	out = append(out,
		bagShape{rows: 0, dim: 8, nbags: 5, maxLen: 3},        // empty table, only empty bags
		bagShape{rows: 3000, dim: 65, nbags: 2500, maxLen: 6}, // several pieces of 1008 bags
	)
	return out
}

// refEmbeddingBag is the float64 reference of the forward.
func refEmbeddingBag(pool Pool, table []float32, dim int, offsets, ids []int64) []float64 {
	nbags := len(offsets) - 1
	out := make([]float64, nbags*dim)
	for j := range nbags {
		lo, hi := offsets[j], offsets[j+1]
		for _, id := range ids[lo:hi] {
			for c := range dim {
				out[j*dim+c] += float64(table[int(id)*dim+c])
			}
		}
		if pool == PoolMean && hi > lo {
			for c := range dim {
				out[j*dim+c] /= float64(hi - lo)
			}
		}
	}
	return out
}

// refDenseGrad scatter-adds the backward into a full [rows x dim] table. It
// also returns the sums of the terms' magnitudes, which bound the rounding
// error of a float32 sum.
func refDenseGrad(pool Pool, rows, dim int, offsets, ids []int64, dout []float32) (grad, mag []float64) {
	grad = make([]float64, rows*dim)
	mag = make([]float64, rows*dim)
	for j := range len(offsets) - 1 {
		lo, hi := offsets[j], offsets[j+1]
		for _, id := range ids[lo:hi] {
			for c := range dim {
				g := float64(dout[j*dim+c])
				if pool == PoolMean {
					g /= float64(hi - lo)
				}
				grad[int(id)*dim+c] += g
				mag[int(id)*dim+c] += math.Abs(g)
			}
		}
	}
	return grad, mag
}

func to32(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

// runBag runs the forward on guarded buffers, checking the guards, and
// returns the output.
func runBag(t *testing.T, b *CPU, pool Pool, table []float32, s bagShape, offsets, ids []int64) []float32 {
	t.Helper()
	tb, tfull := guarded(len(table), table)
	out, ofull := guarded(s.nbags*s.dim, randFloats(newRNG(9), s.nbags*s.dim, 5, 6))
	if err := b.EmbeddingBag(pool, tb, s.rows, s.dim, offsets, ids, out); err != nil {
		t.Fatalf("%+v: %v", s, err)
	}
	checkGuards(t, "table", tfull)
	checkGuards(t, "out", ofull)
	if !slices.Equal(tb, table) {
		t.Fatalf("%+v: table changed", s)
	}
	return slices.Clone(out)
}

func TestEmbeddingBagScalarMatchesFloat64(t *testing.T) {
	rng := newRNG(1)
	ref := scalarCPU(t)
	for _, pool := range []Pool{PoolSum, PoolMean} {
		for _, s := range bagShapes(rng) {
			table := randFloats(rng, s.rows*s.dim, -1, 1)
			offsets, ids := randomBags(rng, s.nbags, s.maxLen, s.rows)
			got := runBag(t, ref, pool, table, s, offsets, ids)
			assertClose(t, "out", got, to32(refEmbeddingBag(pool, table, s.dim, offsets, ids)), 1e-6, 1e-6)
		}
	}
}

// The vector variants add each column's rows in the scalar order, so the
// forward is bit-identical across ISAs and thread counts.
func TestEmbeddingBagMatchesScalar(t *testing.T) {
	ref := scalarCPU(t)
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(2)
		for _, pool := range []Pool{PoolSum, PoolMean} {
			for _, s := range bagShapes(rng) {
				table := randFloats(rng, s.rows*s.dim, -1, 1)
				offsets, ids := randomBags(rng, s.nbags, s.maxLen, s.rows)
				want := runBag(t, ref, pool, table, s, offsets, ids)
				got := runBag(t, b, pool, table, s, offsets, ids)
				assertClose(t, "out", got, want, 0, 0)
			}
		}
	})
}

func TestEmbeddingBagMeanEmptyBags(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		const rows, dim = 4, 19
		table := randFloats(newRNG(3), rows*dim, -1, 1)
		offsets := []int64{0, 0, 3, 3, 3, 4, 4} // bags 0, 2, 3 and 5 are empty
		ids := []int64{1, 3, 1, 2}
		s := bagShape{rows: rows, dim: dim, nbags: len(offsets) - 1}
		out := runBag(t, b, PoolMean, table, s, offsets, ids)
		for _, j := range []int{0, 2, 3, 5} {
			for c, v := range out[j*dim : (j+1)*dim] {
				if v != 0 {
					t.Fatalf("empty bag %d: out[%d] = %v, want 0", j, c, v)
				}
			}
		}
		for c := range dim {
			want := (table[1*dim+c] + table[3*dim+c] + table[1*dim+c]) * (1.0 / 3)
			if got := out[1*dim+c]; math.Abs(float64(got-want)) > 1e-6 {
				t.Fatalf("bag 1 col %d = %v, want %v", c, got, want)
			}
		}
		assertClose(t, "bag 4", out[4*dim:5*dim], table[2*dim:3*dim], 0, 0)
	})
}

// Offsets may end before the last id: the ids past offsets[bags] are
// ignored (and not range-checked).
func TestEmbeddingBagIgnoresTrailingIDs(t *testing.T) {
	b := scalarCPU(t)
	table := []float32{1, 2, 3, 4}
	out := make(HostBuffer, 2)
	if err := b.EmbeddingBag(PoolSum, HostBuffer(table), 2, 2, []int64{0, 2}, []int64{0, 1, 99}, out); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "out", out, []float32{4, 6}, 0, 0)
	g, err := b.EmbeddingBagBackward(PoolSum, 2, []int64{0, 2}, []int64{0, 1, 99}, HostBuffer{1, 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.IDs, []int64{0, 1}) {
		t.Fatalf("ids %v, want [0 1]", g.IDs)
	}
}

func TestEmbeddingBagBadInput(t *testing.T) {
	b := MustCPU()
	const rows, dim = 5, 3
	table := HostBuffer(randFloats(newRNG(4), rows*dim, -1, 1))
	cases := []struct {
		name    string
		pool    Pool
		rows    int
		dim     int
		table   Buffer
		offsets []int64
		ids     []int64
		outLen  int
		want    error
	}{
		{"no offsets", PoolSum, rows, dim, table, nil, nil, 0, ErrShape},
		{"offsets start at 1", PoolSum, rows, dim, table, []int64{1, 2}, []int64{0, 1}, dim, ErrArg},
		{"decreasing offsets", PoolSum, rows, dim, table, []int64{0, 2, 1, 3}, []int64{0, 1, 2}, 3 * dim, ErrArg},
		{"negative offset", PoolSum, rows, dim, table, []int64{0, -1}, []int64{0}, dim, ErrArg},
		{"offsets past ids", PoolSum, rows, dim, table, []int64{0, 1, 4}, []int64{0, 1, 2}, 2 * dim, ErrRange},
		{"negative id", PoolSum, rows, dim, table, []int64{0, 1, 3}, []int64{0, 1, -1}, 2 * dim, ErrRange},
		{"id past table", PoolMean, rows, dim, table, []int64{0, 1, 3}, []int64{0, 4, rows}, 2 * dim, ErrRange},
		{"huge id", PoolSum, rows, dim, table, []int64{0, 1}, []int64{math.MaxInt64}, dim, ErrRange},
		{"short table", PoolSum, rows + 1, dim, table, []int64{0, 1}, []int64{0}, dim, ErrShape},
		{"short out", PoolSum, rows, dim, table, []int64{0, 1, 2}, []int64{0, 1}, dim, ErrShape},
		{"negative dim", PoolSum, rows, -dim, table, []int64{0}, nil, 0, ErrArg},
		{"unknown pool", Pool(7), rows, dim, table, []int64{0, 1}, []int64{0}, dim, ErrArg},
		{"nil table", PoolSum, rows, dim, nil, []int64{0, 1}, []int64{0}, dim, ErrArg},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, full := guarded(c.outLen, randFloats(newRNG(5), c.outLen, 7, 8))
			before := slices.Clone(out)
			err := b.EmbeddingBag(c.pool, c.table, c.rows, c.dim, c.offsets, c.ids, out)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			checkGuards(t, "out", full)
			if !slices.Equal(out, before) {
				t.Fatal("out written despite the error")
			}
		})
	}
}

// A bad id in the last bag of a batch that runs in several pieces must stop
// every piece before any writes.
func TestEmbeddingBagBadIDWritesNothing(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(6)
		s := bagShape{rows: 100, dim: 64, nbags: 3000, maxLen: 3}
		table := HostBuffer(randFloats(rng, s.rows*s.dim, -1, 1))
		offsets, ids := randomBags(rng, s.nbags, s.maxLen, s.rows)
		ids = append(ids, int64(s.rows))
		offsets[s.nbags] = int64(len(ids))
		out, full := guarded(s.nbags*s.dim, randFloats(rng, s.nbags*s.dim, 7, 8))
		before := slices.Clone(out)
		if err := b.EmbeddingBag(PoolSum, table, s.rows, s.dim, offsets, ids, out); !errors.Is(err, ErrRange) {
			t.Fatalf("err = %v, want ErrRange", err)
		}
		checkGuards(t, "out", full)
		if !slices.Equal(out, before) {
			t.Fatal("out written despite the error")
		}
	})
}

// checkSparseGrad checks a backward result against the dense scatter-add:
// distinct ids in order of first occurrence, each row equal to the dense
// gradient's row.
func checkSparseGrad(t *testing.T, g SparseRows, pool Pool, rows, dim int, offsets, ids []int64, dout []float32) {
	t.Helper()
	used := ids[:offsets[len(offsets)-1]]
	var order []int64
	seen := map[int64]bool{}
	for _, id := range used {
		if !seen[id] {
			seen[id] = true
			order = append(order, id)
		}
	}
	if !slices.Equal(g.IDs, order) && len(g.IDs)+len(order) > 0 {
		t.Fatalf("ids %v, want %v", g.IDs, order)
	}
	if g.Dim != dim || g.Rows.Len() != len(order)*dim {
		t.Fatalf("dim %d, %d floats; want dim %d, %d floats", g.Dim, g.Rows.Len(), dim, len(order)*dim)
	}
	dense, mag := refDenseGrad(pool, rows, dim, offsets, ids, dout)
	got := g.Rows.(HostBuffer)
	for u, id := range g.IDs {
		for c := range dim {
			i := int(id)*dim + c
			if err := math.Abs(float64(got[u*dim+c]) - dense[i]); err > 1e-6*mag[i]+1e-7 {
				t.Fatalf("grad of id %d col %d = %v, want %v", id, c, got[u*dim+c], dense[i])
			}
		}
	}
}

func TestEmbeddingBagBackwardMatchesDense(t *testing.T) {
	ref := scalarCPU(t)
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(7)
		for _, pool := range []Pool{PoolSum, PoolMean} {
			for _, s := range bagShapes(rng) {
				offsets, ids := randomBags(rng, s.nbags, s.maxLen, s.rows)
				dout, full := guarded(s.nbags*s.dim, randFloats(rng, s.nbags*s.dim, -1, 1))
				before := slices.Clone(dout)
				g, err := b.EmbeddingBagBackward(pool, s.dim, offsets, ids, dout)
				if err != nil {
					t.Fatalf("%+v: %v", s, err)
				}
				checkGuards(t, "dout", full)
				if !slices.Equal(dout, before) {
					t.Fatal("dout changed")
				}
				checkSparseGrad(t, g, pool, s.rows, s.dim, offsets, ids, dout)
				want, err := ref.EmbeddingBagBackward(pool, s.dim, offsets, ids, dout)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(g.IDs, want.IDs) {
					t.Fatalf("ids %v, scalar %v", g.IDs, want.IDs)
				}
				// Vector variants may fuse the scaling into the add (FMA):
				// allow rounding relative to the terms' magnitudes.
				_, mag := refDenseGrad(pool, s.rows, s.dim, offsets, ids, dout)
				got, exp := g.Rows.(HostBuffer), want.Rows.(HostBuffer)
				for u, id := range g.IDs {
					for c := range s.dim {
						i := u*s.dim + c
						if math.Abs(float64(got[i]-exp[i])) > 1e-6*mag[int(id)*s.dim+c]+1e-7 {
							t.Fatalf("grad of id %d col %d = %v, scalar %v", id, c, got[i], exp[i])
						}
					}
				}
			}
		}
	})
}

func TestEmbeddingBagBackwardMergesDuplicates(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		const dim = 20
		// id 7 twice in bag 0 and once in bag 1; id 3 in bags 0 and 2; bag 3 empty.
		offsets := []int64{0, 4, 6, 7, 7}
		ids := []int64{7, 3, 7, -5, 7, 1 << 40, 3}
		dout := randFloats(newRNG(8), 4*dim, -1, 1)
		for _, pool := range []Pool{PoolSum, PoolMean} {
			g, err := b.EmbeddingBagBackward(pool, dim, offsets, ids, HostBuffer(dout))
			if err != nil {
				t.Fatal(err)
			}
			if want := []int64{7, 3, -5, 1 << 40}; !slices.Equal(g.IDs, want) {
				t.Fatalf("ids %v, want %v", g.IDs, want)
			}
			s0, s1 := float32(1), float32(1)
			if pool == PoolMean {
				s0, s1 = 1.0/4, 1.0/2
			}
			rows := g.Rows.(HostBuffer)
			for c := range dim {
				d0, d1, d2 := dout[c], dout[dim+c], dout[2*dim+c]
				check := func(u int, want float32) {
					if got := rows[u*dim+c]; math.Abs(float64(got-want)) > 1e-6 {
						t.Fatalf("%v: row %d col %d = %v, want %v", pool, u, c, got, want)
					}
				}
				check(0, 2*s0*d0+s1*d1)
				check(1, s0*d0+d2)
				check(2, s0*d0)
				check(3, s1*d1)
			}
		}
	})
}

// The loss L = sum(out * r) is linear in the table, so central differences
// with a step that is exact in binary recover dL/dtable up to rounding.
func TestEmbeddingBagBackwardFiniteDifferences(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(10)
		for _, pool := range []Pool{PoolSum, PoolMean} {
			const rows, dim, nbags = 6, 5, 9
			table := randFloats(rng, rows*dim, -1, 1)
			offsets, ids := randomBags(rng, nbags, 4, rows-1) // the last row is never used
			r := randFloats(rng, nbags*dim, -1, 1)
			loss := func() float64 {
				out := make(HostBuffer, nbags*dim)
				if err := b.EmbeddingBag(pool, HostBuffer(table), rows, dim, offsets, ids, out); err != nil {
					t.Fatal(err)
				}
				var l float64
				for i := range out {
					l += float64(out[i]) * float64(r[i])
				}
				return l
			}
			g, err := b.EmbeddingBagBackward(pool, dim, offsets, ids, HostBuffer(r))
			if err != nil {
				t.Fatal(err)
			}
			analytic := make([]float32, rows*dim)
			for u, id := range g.IDs {
				copy(analytic[int(id)*dim:], g.Rows.(HostBuffer)[u*dim:(u+1)*dim])
			}
			const h = 0.25
			for i := range table {
				orig := table[i]
				table[i] = orig + h
				lp := loss()
				table[i] = orig - h
				lm := loss()
				table[i] = orig
				fd := (lp - lm) / (2 * h)
				if math.Abs(fd-float64(analytic[i])) > 1e-4 {
					t.Fatalf("%v: d/dtable[%d] = %v, finite differences %v", pool, i, analytic[i], fd)
				}
			}
		}
	})
}

func TestEmbeddingBagBackwardBadInput(t *testing.T) {
	b := MustCPU()
	cases := []struct {
		name    string
		pool    Pool
		dim     int
		offsets []int64
		ids     []int64
		doutLen int
		want    error
	}{
		{"no offsets", PoolSum, 2, nil, nil, 0, ErrShape},
		{"offsets start at 2", PoolSum, 2, []int64{2, 3}, []int64{0, 1, 2}, 2, ErrArg},
		{"decreasing offsets", PoolMean, 2, []int64{0, 2, 1}, []int64{0, 1}, 4, ErrArg},
		{"offsets past ids", PoolSum, 2, []int64{0, 3}, []int64{0, 1}, 2, ErrRange},
		{"short dout", PoolSum, 2, []int64{0, 1, 2}, []int64{0, 1}, 3, ErrShape},
		{"negative dim", PoolSum, -1, []int64{0}, nil, 0, ErrArg},
		{"unknown pool", Pool(-1), 2, []int64{0}, nil, 0, ErrArg},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := b.EmbeddingBagBackward(c.pool, c.dim, c.offsets, c.ids, make(HostBuffer, c.doutLen))
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	if _, err := b.EmbeddingBagBackward(PoolSum, 1, []int64{0}, nil, nil); !errors.Is(err, ErrArg) {
		t.Fatalf("nil dout: err = %v, want ErrArg", err)
	}
}

// refUnique is the map-based reference of hps_unique.
func refUnique(ids []int64) (uniq, index []int64) {
	pos := map[int64]int64{}
	uniq = []int64{}
	index = make([]int64, len(ids))
	for i, id := range ids {
		p, ok := pos[id]
		if !ok {
			p = int64(len(uniq))
			pos[id] = p
			uniq = append(uniq, id)
		}
		index[i] = p
	}
	return uniq, index
}

// uniqueInputs draws n ids from a small pool with extreme values and ids
// that differ only in high bits, so that most are duplicates and a weak hash
// would collide.
func uniqueInputs(rng *rand.Rand, n int) []int64 {
	pool := []int64{0, -1, 1, math.MinInt64, math.MaxInt64, math.MinInt64 + 1, 1 << 32, 2 << 32, 3 << 32, -1 << 40}
	for len(pool) < 10+n/3 {
		pool = append(pool, int64(rng.Uint64()))
	}
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = pool[rng.IntN(len(pool))]
	}
	return ids
}

func TestUnique(t *testing.T) {
	rng := newRNG(11)
	for _, n := range append(slices.Clone(oddSizes), 20000) {
		ids := uniqueInputs(rng, n)
		uniq, index, ws := uniqueIDs(ids)
		wantU, wantI := refUnique(ids)
		if !slices.Equal(uniq, wantU) {
			t.Fatalf("n=%d: uniq %v, want %v", n, uniq, wantU)
		}
		if !slices.Equal(index, wantI) {
			t.Fatalf("n=%d: index %v, want %v", n, index, wantI)
		}
		for i, id := range ids {
			if uniq[index[i]] != id {
				t.Fatalf("n=%d: uniq[index[%d]] = %d, want %d", n, i, uniq[index[i]], id)
			}
		}
		if cap(uniq) != len(uniq) {
			t.Fatalf("n=%d: uniq holds %d spare ids", n, cap(uniq)-len(uniq))
		}
		putInt64s(ws) // the next call may reuse dirty scratch
	}
	// All distinct: sequential and strided ids.
	seq := make([]int64, 5000)
	for i := range seq {
		seq[i] = int64(i) << 20
	}
	if uniq, _, _ := uniqueIDs(seq); !slices.Equal(uniq, seq) {
		t.Fatal("distinct strided ids not kept in order")
	}
}

// TestUniqueOfCompactIDs: ids spanning few values (a pipeline stage's rows
// of its local table) are found in order of first occurrence as the hash
// table finds them, on both sides of the span the scratch can index by
// value, near the ends of int64 too, and over dirty scratch.
func TestUniqueOfCompactIDs(t *testing.T) {
	rng := newRNG(13)
	for _, n := range []int{1, 2, 7, 1000, 13312} {
		room := int64(uniqueScratchLen(n)) // the span indexed by value
		for _, c := range []struct {
			lo   int64
			span int64
		}{{0, 1}, {0, int64(n)}, {-5, max(1, int64(n)/2)}, {0, room}, {0, room + 1}, {math.MaxInt64 - room + 1, room}, {math.MinInt64, room}} {
			ids := make([]int64, n)
			for i := range ids {
				ids[i] = c.lo + rng.Int64N(c.span)
			}
			ids[0], ids[n-1] = c.lo, c.lo+c.span-1 // the span's ends
			uniq, index, ws := uniqueIDs(ids)
			wantU, wantI := refUnique(ids)
			if !slices.Equal(uniq, wantU) || !slices.Equal(index, wantI) {
				t.Fatalf("n=%d, ids in [%d, %d]: uniq %v index %v, want %v %v", n, c.lo, c.lo+c.span-1, uniq, index, wantU, wantI)
			}
			putInt64s(ws) // the next call may reuse dirty scratch
		}
	}
}

func TestFirstDuplicate(t *testing.T) {
	rng := newRNG(12)
	for _, n := range oddSizes {
		ids := uniqueInputs(rng, n)
		want := -1
		seen := map[int64]bool{}
		for i, id := range ids {
			if seen[id] {
				want = i
				break
			}
			seen[id] = true
		}
		if got := firstDuplicateID(ids); got != want {
			t.Fatalf("n=%d: first duplicate %d, want %d", n, got, want)
		}
		distinct, _ := refUnique(ids)
		if got := firstDuplicateID(distinct); got != -1 {
			t.Fatalf("n=%d distinct ids: first duplicate %d, want -1", len(distinct), got)
		}
	}
	// Ascending but not strictly: the scan that spares strictly ascending
	// ids the hash pass must not take a repeat for distinct.
	for _, c := range []struct {
		ids  []int64
		want int
	}{{[]int64{1, 2, 2, 3}, 2}, {[]int64{-5, -5}, 1}, {[]int64{1, 2, 3, 7}, -1}, {[]int64{4, 9, 9}, 2}} {
		if got := firstDuplicateID(c.ids); got != c.want {
			t.Fatalf("%v: first duplicate %d, want %d", c.ids, got, c.want)
		}
	}
}

// benchBags is a CTR-style batch: 512 samples x 26 slots, up to 3 ids per
// bag, ids skewed towards the head of a 1M-row table (many repeats).
func benchBags(dim int) (offsets, ids []int64, dout HostBuffer) {
	rng := newRNG(30)
	zipf := rand.NewZipf(rng, 1.1, 1, 1<<20-1)
	const nbags = 512 * 26
	offsets = make([]int64, 1, nbags+1)
	for range nbags {
		for range 1 + rng.IntN(3) {
			ids = append(ids, int64(zipf.Uint64()))
		}
		offsets = append(offsets, int64(len(ids)))
	}
	return offsets, ids, HostBuffer(randFloats(rng, nbags*dim, -1, 1))
}

// BenchmarkEmbeddingBagBackward measures the whole backward and, beside it,
// its serial hash pass alone: their difference is the scatter-add that
// could be split across threads.
func BenchmarkEmbeddingBagBackward(b *testing.B) {
	for _, dim := range []int{9, 16, 64} {
		offsets, ids, dout := benchBags(dim)
		for _, threads := range []int{1, runtime.GOMAXPROCS(0)} {
			cpu, err := NewCPU(CPUOptions{Threads: threads})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("dim%d/t%d", dim, threads), func(b *testing.B) {
				for b.Loop() {
					if _, err := cpu.EmbeddingBagBackward(PoolSum, dim, offsets, ids, dout); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run(fmt.Sprintf("dim%d/unique", dim), func(b *testing.B) {
			for b.Loop() {
				_, _, ws := uniqueIDs(ids)
				putInt64s(ws)
			}
		})
		// The same ids as rows of a compact local table (a pipeline
		// stage's batch): indexed by value, not hashed.
		_, index, _ := uniqueIDs(ids)
		local := slices.Clone(index)
		b.Run(fmt.Sprintf("dim%d/unique-local", dim), func(b *testing.B) {
			for b.Loop() {
				_, _, ws := uniqueIDs(local)
				putInt64s(ws)
			}
		})
	}
}

func BenchmarkEmbeddingBag(b *testing.B) {
	const rows = 1 << 20
	for _, dim := range []int{9, 16, 64} {
		table := HostBuffer(randFloats(newRNG(31), rows*dim, -1, 1))
		offsets, ids, _ := benchBags(dim)
		out := make(HostBuffer, (len(offsets)-1)*dim)
		for _, isa := range SupportedISAs() {
			cpu, err := NewCPU(CPUOptions{ISA: &isa})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("dim%d/%s", dim, isa), func(b *testing.B) {
				for b.Loop() {
					if err := cpu.EmbeddingBag(PoolSum, table, rows, dim, offsets, ids, out); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}

// The kernels validate their input themselves, without the Go checks, and
// write nothing when it is bad.
func TestEmbeddingBagKernelValidates(t *testing.T) {
	const rows, dim = 4, 3
	table := randFloats(newRNG(40), rows*dim, -1, 1)
	fwd := []struct {
		name    string
		offsets []int64
		nids    int
		ids     []int64
		want    error
		wantBad int64
	}{
		{"decreasing offsets", []int64{0, 2, 1}, 2, []int64{0, 1}, ErrArg, 2},
		{"offsets past nids", []int64{0, 2, 5}, 4, []int64{0, 1, 2, 3, 0}, ErrArg, 2},
		{"negative first offset", []int64{-1, 0}, 1, []int64{0}, ErrArg, 0},
		{"id past table", []int64{0, 1, 3}, 3, []int64{0, rows, 1}, ErrRange, 1},
		{"negative id", []int64{0, 1}, 1, []int64{-1}, ErrRange, 0},
	}
	for _, isa := range SupportedISAs() {
		for _, c := range fwd {
			out := randFloats(newRNG(41), (len(c.offsets)-1)*dim, 7, 8)
			before := slices.Clone(out)
			bad, err := rawEmbbagFwd(isa, PoolSum, rows, dim, table, c.offsets, c.nids, c.ids, out)
			if !errors.Is(err, c.want) || bad != c.wantBad {
				t.Fatalf("%s %s: err %v bad %d, want %v at %d", isa, c.name, err, bad, c.want, c.wantBad)
			}
			if !slices.Equal(out, before) {
				t.Fatalf("%s %s: out written despite the error", isa, c.name)
			}
		}
		if _, err := rawEmbbagFwd(isa, PoolSum, rows, -1, table, []int64{0}, 0, nil, nil); !errors.Is(err, ErrArg) {
			t.Fatalf("%s negative dim: err %v, want ErrArg", isa, err)
		}

		// A chunk of bags: offsets relative to the first, ids from there.
		out := make([]float32, 2*dim)
		if _, err := rawEmbbagFwd(isa, PoolSum, rows, dim, table, []int64{5, 6, 8}, 3, []int64{1, 2, 3}, out); err != nil {
			t.Fatalf("%s chunk: %v", isa, err)
		}
		want := to32(refEmbeddingBag(PoolSum, table, dim, []int64{0, 1, 3}, []int64{1, 2, 3}))
		assertClose(t, "chunk", out, want, 0, 0)

		bwd := []struct {
			name    string
			offsets []int64
			nids    int
			index   []int64
			want    error
			wantBad int64
		}{
			{"index past nuniq", []int64{0, 1, 2}, 2, []int64{0, 2}, ErrRange, 1},
			{"negative index", []int64{0, 2}, 2, []int64{-1, 0}, ErrRange, 0},
			{"offsets past nids", []int64{0, 1, 3}, 2, []int64{0, 1, 1}, ErrArg, 2},
		}
		for _, c := range bwd {
			dout := randFloats(newRNG(42), (len(c.offsets)-1)*dim, -1, 1)
			grad := randFloats(newRNG(43), 2*dim, 7, 8)
			before := slices.Clone(grad)
			bad, err := rawEmbbagBwd(isa, PoolMean, dim, c.offsets, c.nids, c.index, dout, 2, grad)
			if !errors.Is(err, c.want) || bad != c.wantBad {
				t.Fatalf("%s %s: err %v bad %d, want %v at %d", isa, c.name, err, bad, c.want, c.wantBad)
			}
			if !slices.Equal(grad, before) {
				t.Fatalf("%s %s: grad written despite the error", isa, c.name)
			}
		}
	}
}
