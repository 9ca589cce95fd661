package native

import "sync"

// chunks splits n items into pieces of at most grain items and runs fn on
// each, on up to threads goroutines; it returns when all pieces are done.
// Piece boundaries depend on n and grain only, never on threads, so that
// per-piece partial results can be combined in a fixed order.
func chunks(n, grain, threads int, fn func(piece, lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	pieces := (n + grain - 1) / grain
	if threads < 1 {
		threads = 1
	}
	if threads > pieces {
		threads = pieces
	}
	run := func(p int) {
		lo := p * grain
		fn(p, lo, min(lo+grain, n))
	}
	if threads == 1 {
		for p := range pieces {
			run(p)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int, pieces)
	for p := range pieces {
		next <- p
	}
	close(next)
	for range threads {
		wg.Go(func() {
			for p := range next {
				run(p)
			}
		})
	}
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
