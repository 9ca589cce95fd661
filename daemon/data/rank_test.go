package data

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRankTableAnswersAsTheBinarySearch: the guide table gives the rank
// the binary search over the CDF gives (the generator's draws before it),
// for random u and for u at and beside every CDF value.
func TestRankTableAnswersAsTheBinarySearch(t *testing.T) {
	for _, cdf := range [][]float64{zipfCDF(1000, 1.1), zipfCDF(50000, 1), zipfCDF(7, 0.5), zipfCDF(1, 1), {0.5, 0.5, 0.5, 1}} {
		table := newRankTable(cdf)
		want := func(u float64) int {
			r, _ := slices.BinarySearch(cdf, u)
			return min(r, len(cdf)-1)
		}
		us := []float64{0, math.Nextafter(1, 0)}
		for _, c := range cdf {
			us = append(us, c, math.Nextafter(c, 0), math.Nextafter(c, 2))
		}
		rng := rand.New(rand.NewPCG(5, 6))
		for range 100000 {
			us = append(us, rng.Float64())
		}
		for _, u := range us {
			if got, w := table.rank(u), want(u); got != w {
				t.Fatalf("%d ranks: u = %v: rank %d, binary search %d", len(cdf), u, got, w)
			}
		}
	}
}
