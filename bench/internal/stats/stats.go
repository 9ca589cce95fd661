// Package stats holds the summary statistics the benchmarks print.
package stats

import "slices"

// Median is the middle of xs once sorted, the mean of the middle two for
// an even count, and 0 for none. xs is left as it was.
func Median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return (s[(n-1)/2] + s[n/2]) / 2
}
