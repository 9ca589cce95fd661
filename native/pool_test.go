package native

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// blockwiseGemm is what a split Gemm must equal bit for bit: each block of
// grain rows of C computed alone on one thread.
func blockwiseGemm(t *testing.T, ta, tb bool, m, n, k int, a HostBuffer, lda int, b HostBuffer, ldb int, c HostBuffer, grain int) {
	t.Helper()
	one, err := NewCPU(CPUOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	for lo := 0; lo < m; lo += grain {
		hi := min(lo+grain, m)
		aOff := lo * lda
		if ta {
			aOff = lo
		}
		if err := one.Gemm(ta, tb, hi-lo, n, k, 1.25, a[aOff:], lda, b, ldb, 0.5, c[lo*n:], n); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGemmPoolRunsTheBlocks: a GEMM split over the pool's threads gives,
// bit for bit, its row blocks computed one by one, for every transpose,
// at 2 and 3 threads.
func TestGemmPoolRunsTheBlocks(t *testing.T) {
	rng := newRNG(5)
	for _, threads := range []int{2, 3} {
		be, err := NewCPU(CPUOptions{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range [][3]int{{512, 247, 512}, {97, 600, 500}} {
			m, n, k := sh[0], sh[1], sh[2]
			grain := be.gemmGrain(m, n, k)
			if grain >= m {
				t.Fatalf("%v at %d threads is not split", sh, threads)
			}
			eachTranspose(m, n, k, func(ta, tb bool, lda, ldb int) {
				a := HostBuffer(randFloats(rng, m*k, -1, 1))
				b := HostBuffer(randFloats(rng, k*n, -1, 1))
				c0 := randFloats(rng, m*n, -1, 1)
				want := append(HostBuffer(nil), c0...)
				blockwiseGemm(t, ta, tb, m, n, k, a, lda, b, ldb, want, grain)
				got := append(HostBuffer(nil), c0...)
				if err := be.Gemm(ta, tb, m, n, k, 1.25, a, lda, b, ldb, 0.5, got, n); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%v transA %t transB %t at %d threads: not its blocks' bits", sh, ta, tb, threads)
				}
			})
		}
	}
}

// TestGemmPoolHelpersTakePieces: split GEMMs run some of their blocks on
// the pool's helper threads, not all on the caller.
func TestGemmPoolHelpersTakePieces(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: a helper may never run before the caller has claimed every block")
	}
	be, err := NewCPU(CPUOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	const m, n, k = 512, 512, 256
	a, b, c := make(HostBuffer, m*k), make(HostBuffer, k*n), make(HostBuffer, m*n)
	before := poolHelperPieces()
	for range 100 {
		if err := be.Gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n); err != nil {
			t.Fatal(err)
		}
	}
	if ran := poolHelperPieces() - before; ran == 0 {
		t.Fatal("100 split GEMMs ran every block on the calling thread")
	}
}

// TestPointwiseKernelsSplitOverThePool: the bias-activation forward and
// backward and the dense optimiser update split their pieces over the
// pool's helper threads too, not over goroutines that park the caller.
// Each kernel is called until a helper has run one of its pieces, for up
// to 10 s: on a loaded machine a sleeping helper may wake only after the
// caller has run every piece of many calls, but never is what fails.
func TestPointwiseKernelsSplitOverThePool(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: a helper may never run before the caller has claimed every piece")
	}
	be, err := NewCPU(CPUOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	const rows, cols = 2048, 512 // 16 pieces of bias-act, 16 of the update
	x, bias, y, db := make(HostBuffer, rows*cols), make(HostBuffer, cols), make(HostBuffer, rows*cols), make(HostBuffer, cols)
	m, v := make(HostBuffer, rows*cols), make(HostBuffer, rows*cols)
	adam := Optim{Kind: Adam, LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
	for _, k := range []struct {
		name string
		run  func() error
	}{
		{"bias-act", func() error { return be.BiasAct(ReLU, rows, cols, x, bias, y) }},
		{"bias-act backward", func() error { return be.BiasActBackward(ReLU, rows, cols, y, x, y, db) }},
		{"dense update", func() error { return be.Update(adam, x, y, m, v) }},
	} {
		before, start, calls := poolHelperPieces(), time.Now(), 0
		for poolHelperPieces() == before && time.Since(start) < 10*time.Second {
			if err := k.run(); err != nil {
				t.Fatalf("%s: %v", k.name, err)
			}
			calls++
		}
		if poolHelperPieces() == before {
			t.Errorf("%s: %d calls at 2 threads over %v ran every piece on the calling thread", k.name, calls, time.Since(start).Round(time.Millisecond))
		}
	}
}

// TestGemmPoolSharedByConcurrentCallers: goroutines splitting GEMMs at
// once share the helpers, and each still gets its own blocks' bits.
func TestGemmPoolSharedByConcurrentCallers(t *testing.T) {
	const m, n, k = 512, 384, 256 // split at 2 to 4 threads
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			be, err := NewCPU(CPUOptions{Threads: 2 + g%3})
			if err != nil {
				t.Error(err)
				return
			}
			rng := newRNG(uint64(100 + g))
			a := HostBuffer(randFloats(rng, m*k, -1, 1))
			b := HostBuffer(randFloats(rng, k*n, -1, 1))
			want := make(HostBuffer, m*n)
			if be.gemmGrain(m, n, k) >= m {
				t.Errorf("%d threads: not split", be.Threads())
				return
			}
			blockwiseGemm(t, false, false, m, n, k, a, k, b, n, want, be.gemmGrain(m, n, k))
			for range 40 {
				got := make(HostBuffer, m*n)
				if err := be.Gemm(false, false, m, n, k, 1.25, a, k, b, n, 0.5, got, n); err != nil {
					t.Error(err)
					return
				}
				if !slices.Equal(got, want) {
					t.Errorf("caller %d: a split GEMM differs from its blocks", g)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestRowKernelsSplitKeepTheBits: the embedding-bag forward and the row
// optimisers, split over the pool into pieces of bags or rows, give the
// one-thread result bit for bit at 2 and 3 threads, with mean pooling and
// bags of 1-3 ids, so each piece must find its bags' ids and its rows'
// gradients where the whole call has them.
func TestRowKernelsSplitKeepTheBits(t *testing.T) {
	const tableRows, dim = 1 << 20, 9
	rng := newRNG(77)
	table := HostBuffer(randFloats(rng, tableRows*dim, -1, 1))
	offsets, ids, _ := benchBags(dim)
	nbags := len(offsets) - 1
	rows := randDistinctRows(rng, tableRows, 4700)
	g := HostBuffer(randFloats(rng, len(rows)*dim, -1, 1))
	opts := []Optim{
		{Kind: SGD, LR: 0.05, Momentum: 0.9},
		{Kind: Adagrad, LR: 0.05, Eps: 1e-8},
		{Kind: Adam, LR: 0.001, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 3},
	}
	run := func(threads int) (HostBuffer, []HostBuffer) {
		be, err := NewCPU(CPUOptions{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		if threads > 1 && (pieceCount(nbags, gatherGrain(nbags, dim, threads)) < 2 || pieceCount(len(rows), gatherGrain(len(rows), dim, threads)) < 2) {
			t.Fatalf("%d threads: the bags or rows are not split", threads)
		}
		out := make(HostBuffer, nbags*dim)
		if err := be.EmbeddingBag(PoolMean, table, tableRows, dim, offsets, ids, out); err != nil {
			t.Fatal(err)
		}
		var updated []HostBuffer
		for _, o := range opts {
			w := append(HostBuffer(nil), table...)
			state := make([]Buffer, o.StateBuffers())
			for i := range state {
				state[i] = make(HostBuffer, tableRows*dim)
			}
			if err := be.UpdateRows(o, w, tableRows, dim, rows, g, state...); err != nil {
				t.Fatal(err)
			}
			updated = append(updated, w)
		}
		return out, updated
	}
	wantOut, wantRows := run(1)
	for _, threads := range []int{2, 3} {
		out, updated := run(threads)
		if !slices.Equal(out, wantOut) {
			t.Errorf("embedding bag at %d threads differs from one thread", threads)
		}
		for i := range opts {
			if !slices.Equal(updated[i], wantRows[i]) {
				t.Errorf("%v rows at %d threads differ from one thread", opts[i].Kind, threads)
			}
		}
	}
}

// A backend splits across at most MaxThreads threads: more is refused by
// name, and a split of that many engages helpers past the 64 the pool once
// held (a 128-thread run used to get 64 silently).
func TestBackendThreadsUpToMaxThreads(t *testing.T) {
	if _, err := NewCPU(CPUOptions{Threads: MaxThreads + 1}); !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), fmt.Sprintf("%d threads, at most %d", MaxThreads+1, MaxThreads)) {
		t.Fatalf("MaxThreads+1 threads: %v, want ErrArg naming the bound", err)
	}
	be, err := NewCPU(CPUOptions{Threads: 100})
	if err != nil {
		t.Fatal(err)
	}
	const rows, cols = 100, 1 << 16 // 100 pieces of one row (rowGrain: 64 Ki floats a piece)
	x, bias, y := make(HostBuffer, rows*cols), make(HostBuffer, cols), make(HostBuffer, rows*cols)
	before := poolHelperPiecesOf(99)
	for start := time.Now(); poolHelperPiecesOf(99) == before && time.Since(start) < 10*time.Second; {
		if err := be.BiasAct(ReLU, rows, cols, x, bias, y); err != nil {
			t.Fatal(err)
		}
	}
	if poolHelperPiecesOf(99) == before {
		t.Fatal("helper 99 of a 100-thread backend never ran a piece in 10 s")
	}
}
