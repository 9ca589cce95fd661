package data

import "slices"

// rankTable draws ranks from a CDF: rank(u) is the first rank whose
// cumulative probability reaches u, the answer of a binary search over the
// CDF, found through a guide table instead: bucket j of the table holds the
// first rank that can answer a u in [j/n, (j+1)/n), from which a short scan
// finds the answer. For the generator's Zipf CDF of 1000 ranks the binary
// search took over half of the time to draw a batch; with one bucket a rank
// the scan through the tail's ranks, ten or so to a bucket, still took a
// third (its branches mispredicted), and sixteen buckets a rank drew a
// batch of 512 in 25 % less time (BenchmarkSyntheticNext512).
type rankTable struct {
	cdf   []float64
	guide []int32
}

// guideSize is the table's length for a CDF of n ranks: sixteen buckets a
// rank, as long as that stays in 256 KiB (64Ki buckets), and never fewer
// than one a rank.
func guideSize(n int) int { return max(n, min(16*n, 1<<16)) + 1 }

func newRankTable(cdf []float64) *rankTable {
	t := &rankTable{cdf: cdf, guide: make([]int32, guideSize(len(cdf)))}
	n := float64(len(t.guide))
	for j := range t.guide {
		r, _ := slices.BinarySearch(cdf, float64(j)/n)
		t.guide[j] = int32(min(r, max(len(cdf)-1, 0)))
	}
	return t
}

// rank returns the first rank r with cdf[r] >= u, or the last rank when
// none is (u in [0, 1) never needs that but rounding might).
func (t *rankTable) rank(u float64) int {
	last := len(t.cdf) - 1
	j := int(u * float64(len(t.guide)))
	j = min(max(j, 0), len(t.guide)-1)
	r := int(t.guide[j])
	for r > 0 && t.cdf[r-1] >= u { // rounding put u below its bucket's start
		r--
	}
	for r < last && t.cdf[r] < u {
		r++
	}
	return r
}
