// Package stats holds the summary statistics the benchmarks print.
package stats

import (
	"fmt"
	"slices"
	"strings"
)

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

// Rates lists samples/s rates in whole numbers, space-separated ("61200
// 58100 63050"), as the benchmarks print each run beside a best or median.
func Rates(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(s, " ")
}
