package radix

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkPairs sorts one ctrdnn batch's ids (512 x 26, a 1M vocabulary)
// with their positions, as the pipeline's batch id mapping does.
func BenchmarkPairs(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]uint64, 512*26)
	for i := range src {
		u := rng.Float64()
		src[i] = uint64(u * u * 1_000_000) // skewed to small ids
	}
	keys, vals := make([]uint64, len(src)), make([]int32, len(src))
	for b.Loop() {
		copy(keys, src)
		for i := range vals {
			vals[i] = int32(i)
		}
		Pairs(keys, vals, 1_000_000)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(src)), "ns/key")
}
