package native

import (
	"errors"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

func gonumTrans(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

// TestGemmMatchesGonum checks the OpenBLAS path against gonum's pure-Go
// BLAS on odd shapes, all transpose combinations, padded strides, and
// alpha/beta values, with guard padding around C.
func TestGemmMatchesGonum(t *testing.T) {
	b := MustCPU()
	rng := newRNG(1)
	dims := []int{1, 2, 3, 7, 16, 17, 33, 64, 65}
	for _, m := range dims {
		for _, n := range dims {
			for _, k := range []int{1, 5, 31, 64} {
				for _, ta := range []bool{false, true} {
					for _, tb := range []bool{false, true} {
						checkGemm(t, b, rng.IntN(3), m, n, k, ta, tb, 1.5, 0.25)
					}
				}
			}
		}
	}
}

func checkGemm(t *testing.T, b *CPU, pad, m, n, k int, ta, tb bool, alpha, beta float32) {
	t.Helper()
	rng := newRNG(uint64(m*10007 + n*101 + k))
	ar, ac := m, k
	if ta {
		ar, ac = k, m
	}
	br, bc := k, n
	if tb {
		br, bc = n, k
	}
	lda, ldb, ldc := ac+pad, bc+pad, n+pad
	a := randFloats(rng, ar*lda, -1, 1)
	bm := randFloats(rng, br*ldb, -1, 1)
	c0 := randFloats(rng, m*ldc, -1, 1)
	c, full := guarded(len(c0), c0)
	if err := b.Gemm(ta, tb, m, n, k, alpha, HostBuffer(a), lda, HostBuffer(bm), ldb, beta, c, ldc); err != nil {
		t.Fatal(err)
	}
	checkGuards(t, "gemm C", full)
	want := append([]float32(nil), c0...)
	blas32.Gemm(gonumTrans(ta), gonumTrans(tb), alpha,
		blas32.General{Rows: ar, Cols: ac, Stride: lda, Data: a},
		blas32.General{Rows: br, Cols: bc, Stride: ldb, Data: bm},
		beta, blas32.General{Rows: m, Cols: n, Stride: ldc, Data: want})
	assertClose(t, "gemm", c, want, 1e-4, 1e-4)
}

func TestGemmZeroK(t *testing.T) {
	b := MustCPU()
	c := HostBuffer{1, 2, 3, 4}
	if err := b.Gemm(false, false, 2, 2, 0, 1, HostBuffer{}, 1, HostBuffer{}, 2, 0.5, c, 2); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "beta*C", c, []float32{0.5, 1, 1.5, 2}, 0, 0)
	if err := b.Gemm(false, false, 2, 2, 0, 1, HostBuffer{}, 1, HostBuffer{}, 2, 0, c, 2); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "beta=0 clears C", c, []float32{0, 0, 0, 0}, 0, 0)
}

func TestGemmRejectsShortOrMisStridedOperands(t *testing.T) {
	b := MustCPU()
	a := make(HostBuffer, 6) // 2x3
	bm := make(HostBuffer, 12)
	c := make(HostBuffer, 8)
	cases := []struct {
		name string
		err  error
		call func() error
	}{
		{"negative m", ErrArg, func() error { return b.Gemm(false, false, -1, 4, 3, 1, a, 3, bm, 4, 0, c, 4) }},
		{"short A", ErrShape, func() error { return b.Gemm(false, false, 3, 4, 3, 1, a, 3, bm, 4, 0, c, 4) }},
		{"lda < cols", ErrShape, func() error { return b.Gemm(false, false, 2, 4, 3, 1, a, 2, bm, 4, 0, c, 4) }},
		{"short C", ErrShape, func() error { return b.Gemm(false, false, 2, 4, 3, 1, a, 3, bm, 4, 0, c[:7], 4) }},
		{"transposed B too short", ErrShape, func() error { return b.Gemm(false, true, 2, 5, 3, 1, a, 3, bm, 3, 0, c, 4) }},
		{"nil C", ErrArg, func() error { return b.Gemm(false, false, 2, 4, 3, 1, a, 3, bm, 4, 0, nil, 4) }},
	}
	for _, tc := range cases {
		if err := tc.call(); !errors.Is(err, tc.err) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.err)
		}
	}
}

func TestBestISAHonoursEnvironment(t *testing.T) {
	t.Setenv("HETERPS_ISA", "scalar")
	if isa, err := BestISA(); err != nil || isa != Scalar {
		t.Fatalf("HETERPS_ISA=scalar: got %v, %v", isa, err)
	}
	t.Setenv("HETERPS_ISA", "sse9")
	if _, err := BestISA(); err == nil {
		t.Fatal("unknown ISA accepted")
	}
	t.Setenv("HETERPS_ISA", "")
	all := SupportedISAs()
	if isa, _ := BestISA(); isa != all[len(all)-1] {
		t.Fatalf("default ISA %v, want widest %v", isa, all[len(all)-1])
	}
}

func TestChunksCoverEachItemOnce(t *testing.T) {
	for _, n := range []int{0, 1, 7, 100, 1001} {
		for _, threads := range []int{1, 2, 5} {
			seen := make([]int32, n)
			pieces := make([]bool, pieceCount(n, 64))
			chunks(n, 64, threads, func(p, lo, hi int) {
				pieces[p] = true
				for i := lo; i < hi; i++ {
					seen[i]++
				}
			})
			for i, s := range seen {
				if s != 1 {
					t.Fatalf("n=%d threads=%d: item %d seen %d times", n, threads, i, s)
				}
			}
			for p, ok := range pieces {
				if !ok {
					t.Fatalf("piece %d not run", p)
				}
			}
		}
	}
}

// TestGemmSplitAcrossThreads checks that GEMMs split into row blocks on
// several goroutines give the single-threaded result, for every transpose
// combination and odd sizes. Not bit for bit: OpenBLAS picks its blocking
// from the call's shape, so a block of rows may round differently.
func TestGemmSplitAcrossThreads(t *testing.T) {
	one, err := NewCPU(CPUOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	three, err := NewCPU(CPUOptions{Threads: 3})
	if err != nil {
		t.Fatal(err)
	}
	rng := newRNG(11)
	for _, sh := range [][3]int{{512, 247, 512}, {247, 512, 512}, {97, 600, 500}, {33, 1000, 800}} {
		m, n, k := sh[0], sh[1], sh[2]
		if three.gemmGrain(m, n, k) >= m {
			t.Fatalf("%v is not split", sh)
		}
		eachTranspose(m, n, k, func(ta, tb bool, lda, ldb int) {
			a := HostBuffer(randFloats(rng, m*k, -1, 1))
			bm := HostBuffer(randFloats(rng, k*n, -1, 1))
			c0 := randFloats(rng, m*n, -1, 1)
			want := append(HostBuffer(nil), c0...)
			got, full := guarded(m*n, c0)
			if err := one.Gemm(ta, tb, m, n, k, 1.25, a, lda, bm, ldb, 0.5, want, n); err != nil {
				t.Fatal(err)
			}
			if err := three.Gemm(ta, tb, m, n, k, 1.25, a, lda, bm, ldb, 0.5, got, n); err != nil {
				t.Fatal(err)
			}
			checkGuards(t, "split gemm", full)
			assertClose(t, "split gemm", got, want, 1e-5, 2e-4) // k up to 1000 terms in [-1, 1]
		})
	}
}

// eachTranspose calls fn for the four transpose combinations of an
// [m x k] x [k x n] product, with op(A)'s and op(B)'s row strides as
// stored.
func eachTranspose(m, n, k int, fn func(ta, tb bool, lda, ldb int)) {
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			lda, ldb := k, n
			if ta {
				lda = m
			}
			if tb {
				ldb = k
			}
			fn(ta, tb, lda, ldb)
		}
	}
}

// TestGemmGrainKeepsSmallGEMMsWhole: at 2 threads a GEMM is split only
// when each half has at least 2^23 multiply-adds; smaller ones lost time
// when split (see gemmGrain).
func TestGemmGrainKeepsSmallGEMMsWhole(t *testing.T) {
	two, err := NewCPU(CPUOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		m, n, k int
		split   bool
	}{{512, 32, 128, false}, {512, 512, 13, false}, {256, 256, 128, false}, {512, 128, 256, true}, {512, 512, 234, true}} {
		if got := two.gemmGrain(c.m, c.n, c.k) < c.m; got != c.split {
			t.Errorf("%dx%dx%d: split %v, want %v", c.m, c.n, c.k, got, c.split)
		}
	}
}
