package place

import (
	"context"
	"math"
	"time"
)

// Link is a transfer between two cores of this machine, as measured.
type Link struct {
	Latency   float64 // seconds from an op handing its output over to a goroutine on the other core running
	Bandwidth float64 // bytes/s of a copy, on the other core, of a buffer one core just wrote
}

// linkBytes is the buffer MeasureLink copies: large enough to leave the
// first-level caches, as a layer's activations do.
const linkBytes = 1 << 20

// MeasureLink measures the link between two cores as Execute uses it: two
// goroutines pinned to two CPUs (the same one on a single-CPU machine)
// handing each other work through channels, and one of them copying a
// buffer the other just wrote. Latency is half the fastest round trip,
// Bandwidth the fastest copy; reps rounds of each.
func MeasureLink(ctx context.Context, reps int) (Link, error) {
	reps = max(reps, 1)
	const rounds = 64 // round trips per timing
	src, dst := make([]float32, linkBytes/4), make([]float32, linkBytes/4)
	toB, toA := make(chan int, 1), make(chan time.Duration, 1)
	go func() { // core 1: answers each hand-off; copies what core 0 wrote
		defer pinToCPU(1)()
		for kind := range toB {
			if kind == 0 {
				toA <- 0
				continue
			}
			start := time.Now()
			copy(dst, src)
			toA <- time.Since(start)
		}
	}()
	defer close(toB)
	defer pinToCPU(0)()
	best := Link{Latency: math.Inf(1)}
	fastestCopy := time.Duration(math.MaxInt64)
	for range reps {
		if err := ctx.Err(); err != nil {
			return Link{}, err
		}
		start := time.Now()
		for range rounds {
			toB <- 0
			<-toA
		}
		best.Latency = math.Min(best.Latency, time.Since(start).Seconds()/rounds/2)
		for i := range src {
			src[i] = float32(i)
		}
		toB <- 1
		fastestCopy = min(fastestCopy, <-toA)
	}
	best.Bandwidth = linkBytes / math.Max(fastestCopy.Seconds(), 1e-9)
	return best, nil
}
