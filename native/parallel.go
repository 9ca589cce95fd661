package native

import (
	"sync"
	"sync/atomic"
)

// chunks splits n items into pieces of at most grain items and runs fn on
// each, on the calling goroutine and up to threads-1 more; it returns when
// all pieces are done. Piece boundaries depend on n and grain only, never
// on threads, so that per-piece partial results can be combined in a fixed
// order. The caller claims pieces too, rather than parking until others
// have run them all: a parked goroutine resumes on whichever thread the Go
// scheduler picks, possibly the CPU where the kernels' pool helper waits
// for the next split GEMM (see BiasAct, which uses the pool instead).
func chunks(n, grain, threads int, fn func(piece, lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	pieces := pieceCount(n, grain)
	threads = max(1, min(threads, pieces))
	var next atomic.Int64
	work := func() {
		for {
			p := int(next.Add(1) - 1)
			if p >= pieces {
				return
			}
			lo := p * grain
			fn(p, lo, min(lo+grain, n))
		}
	}
	var wg sync.WaitGroup
	for range threads - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}

// pieceCount is the number of pieces chunks makes of n items.
func pieceCount(n, grain int) int {
	if n <= 0 {
		return 0
	}
	return (n + grain - 1) / grain
}

// rowGrain picks how many rows of cols floats make one piece: about 64 Ki
// floats (256 KiB, inside L2), at least one row.
func rowGrain(cols int) int {
	const target = 64 << 10
	if cols <= 0 {
		return target
	}
	return max(1, target/cols)
}

// minGatherRows is the fewest rows gatherGrain puts in a piece: below that
// a goroutine's start and wake-up cost about what the rows do.
const minGatherRows = 256

// gatherGrain picks how many of n rows of cols floats make one piece of a
// kernel that reads or writes rows of a big table by id (embedding bags,
// the row optimisers). Each row there costs a cache miss on a random row,
// so the work is in rows rather than floats, and rowGrain's 64 Ki floats
// would put a ctrdnn step's ~4,700 rows of 9 (7,281 to a piece) on one
// thread of two. It cuts the rows into up to two equal pieces a thread
// (the pieces are taken as threads come free) of at least minGatherRows
// rows each, none over rowGrain's; on one thread, rowGrain's.
func gatherGrain(n, cols, threads int) int {
	g := rowGrain(cols)
	if threads <= 1 {
		return g
	}
	pieces := min(2*threads, max(1, n/minGatherRows))
	return max(1, min(g, (n+pieces-1)/pieces))
}
