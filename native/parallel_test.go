package native

import "testing"

// Row kernels of a training step split across the threads: a ctrdnn step's
// ~4,700 sparse rows of 9 in two pieces a thread (rowGrain alone gave one
// piece, so one thread of two did the update), tiny ones stay whole, one
// thread keeps rowGrain's pieces, and no piece outgrows rowGrain's.
func TestGatherGrainSplitsRowKernelsAcrossThreads(t *testing.T) {
	for _, c := range []struct {
		n, cols, threads, wantPieces int
	}{
		{4700, 9, 2, 4},
		{13312, 9, 2, 4}, // a ctrdnn batch's bags
		{4700, 9, 4, 8},
		{300, 9, 2, 1},      // under 2 x minGatherRows: whole
		{4700, 9, 1, 1},     // one thread: rowGrain's one piece
		{100000, 64, 2, 98}, // rowGrain's 1,024 rows bound it
		{600, 17, 2, 2},     // minGatherRows a piece at least
		{0, 9, 2, 0},
	} {
		g := gatherGrain(c.n, c.cols, c.threads)
		if p := pieceCount(c.n, g); p != c.wantPieces || g > rowGrain(c.cols) || g < 1 {
			t.Errorf("%d rows of %d on %d threads: grain %d, %d pieces; want %d pieces of at most %d rows",
				c.n, c.cols, c.threads, g, p, c.wantPieces, rowGrain(c.cols))
		}
	}
}
