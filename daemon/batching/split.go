package batching

import (
	"fmt"
	"math"
	"sort"
)

// Split divides global samples among replicas in proportion to weights, as
// integers that sum to global, with replica k's batch in [min[k], max[k]].
//
// The real-valued shares are found by water-filling: the largest level λ with
// Σ clamp(λ·w_k, min_k, max_k) = global, so that what clipping a replica
// frees or takes is spread over the others in proportion to their weights.
// They are then rounded by largest remainder, ties going to the lower index.
// A nil min means 0 for every replica, a nil max means no upper bound. All
// weights zero means equal weights; a replica of weight zero among others
// gets its minimum unless the others are all at their maximum.
func Split(global int, weights []float64, min, max []int) ([]int, error) {
	n := len(weights)
	lo, hi, err := splitBounds(global, n, min, max)
	if err != nil {
		return nil, err
	}
	if err := checkWeights(weights); err != nil {
		return nil, err
	}
	if err := checkFeasible(global, lo, hi); err != nil {
		return nil, err
	}
	if n == 0 {
		return []int{}, nil
	}
	shares := waterFill(float64(global), weights, lo, hi)
	return roundLargestRemainder(global, shares, lo, hi), nil
}

// Bounds limit each replica's batch: at least Min, at most Max[k] (a nil Max
// means no upper bound).
type Bounds struct {
	Min int
	Max []int
}

// perReplica returns the bounds as Split's per-replica slices.
func (b Bounds) perReplica(n int) (min, max []int, err error) {
	if b.Max != nil && len(b.Max) != n {
		return nil, nil, fmt.Errorf("batching: max_batch has %d entries for %d replicas", len(b.Max), n)
	}
	min = make([]int, n)
	for k := range min {
		min[k] = b.Min
	}
	return min, b.Max, nil
}

// Variable is the open-loop split: batches proportional to each replica's
// throughput X_k (samples per second, from the plan or a profile), set once
// before the first step.
func Variable(global int, throughput []float64, bounds Bounds) ([]int, error) {
	min, max, err := bounds.perReplica(len(throughput))
	if err != nil {
		return nil, err
	}
	return Split(global, throughput, min, max)
}

func splitBounds(global, n int, min, max []int) (lo, hi []int, err error) {
	if global < 0 {
		return nil, nil, fmt.Errorf("batching: global batch %d is negative", global)
	}
	if min != nil && len(min) != n {
		return nil, nil, fmt.Errorf("batching: %d min batches for %d replicas", len(min), n)
	}
	if max != nil && len(max) != n {
		return nil, nil, fmt.Errorf("batching: %d max batches for %d replicas", len(max), n)
	}
	lo, hi = make([]int, n), make([]int, n)
	for k := range n {
		lo[k], hi[k] = 0, global
		if min != nil {
			lo[k] = min[k]
		}
		if max != nil {
			hi[k] = max[k]
		}
		if lo[k] < 0 {
			return nil, nil, fmt.Errorf("batching: replica %d: min batch %d is negative", k, lo[k])
		}
		if hi[k] < lo[k] {
			return nil, nil, fmt.Errorf("batching: replica %d: max batch %d < min batch %d", k, hi[k], lo[k])
		}
	}
	return lo, hi, nil
}

func checkWeights(weights []float64) error {
	for k, w := range weights {
		if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
			return fmt.Errorf("batching: replica %d: weight %v is not a finite non-negative number", k, w)
		}
	}
	return nil
}

func checkFeasible(global int, lo, hi []int) error {
	sumLo, sumHi := 0, 0
	for k := range lo {
		sumLo += lo[k]
		sumHi += hi[k]
	}
	if sumLo > global {
		return fmt.Errorf("batching: no split of global batch %d over %d replicas: the min batches sum to %d > %d",
			global, len(lo), sumLo, global)
	}
	if sumHi < global {
		return fmt.Errorf("batching: no split of global batch %d over %d replicas: the max batches sum to %d < %d",
			global, len(lo), sumHi, global)
	}
	return nil
}

// waterFill returns real shares x_k = clamp(λ·w_k, lo_k, hi_k) summing to g.
// Σ clamp(λ·w_k) is continuous, non-decreasing and linear between the
// breakpoints lo_k/w_k and hi_k/w_k, so λ is found exactly on one segment.
// The caller has checked Σlo ≤ g ≤ Σhi.
func waterFill(g float64, w []float64, lo, hi []int) []float64 {
	fill := func(level float64) float64 {
		sum := 0.0
		for k := range w {
			sum += clampShare(level*w[k], lo[k], hi[k])
		}
		return sum
	}
	var breaks []float64
	for k := range w {
		if w[k] > 0 {
			breaks = append(breaks, float64(lo[k])/w[k], float64(hi[k])/w[k])
		}
	}
	sort.Float64s(breaks)
	prev, fPrev := 0.0, fill(0)
	for _, b := range breaks {
		if fPrev >= g {
			break
		}
		if b <= prev {
			continue
		}
		f := fill(b)
		if f >= g {
			return sharesAt(prev+(b-prev)*(g-fPrev)/(f-fPrev), w, lo, hi)
		}
		prev, fPrev = b, f
	}
	if fPrev >= g {
		return sharesAt(prev, w, lo, hi)
	}
	return fillZeroWeights(g, w, lo, hi)
}

// fillZeroWeights handles the case where every weighted replica (if any) is
// at its maximum and still short of g: the rest goes to the zero-weight
// replicas, equally.
func fillZeroWeights(g float64, w []float64, lo, hi []int) []float64 {
	shares := make([]float64, len(w))
	var idle []int
	rest := g
	for k := range w {
		if w[k] > 0 {
			shares[k] = float64(hi[k])
			rest -= shares[k]
		} else {
			idle = append(idle, k)
		}
	}
	ones := make([]float64, len(idle))
	sublo, subhi := make([]int, len(idle)), make([]int, len(idle))
	for i, k := range idle {
		ones[i], sublo[i], subhi[i] = 1, lo[k], hi[k]
	}
	for i, x := range waterFill(rest, ones, sublo, subhi) {
		shares[idle[i]] = x
	}
	return shares
}

func sharesAt(level float64, w []float64, lo, hi []int) []float64 {
	shares := make([]float64, len(w))
	for k := range w {
		shares[k] = clampShare(level*w[k], lo[k], hi[k])
	}
	return shares
}

func clampShare(x float64, lo, hi int) float64 {
	return math.Min(math.Max(x, float64(lo)), float64(hi))
}

// roundLargestRemainder floors the shares and hands the samples left over to
// the largest fractional parts (lower index first on ties). Floating-point
// error can leave the floors a little off global in either direction; the
// loops below correct that while keeping every batch within its bounds.
func roundLargestRemainder(global int, shares []float64, lo, hi []int) []int {
	const eps = 1e-9
	n := len(shares)
	batches := make([]int, n)
	frac := make([]float64, n)
	left := global
	for k, x := range shares {
		b := int(math.Floor(x + eps))
		batches[k] = min(max(b, lo[k]), hi[k])
		frac[k] = math.Round((x-float64(batches[k]))/eps) * eps
		left -= batches[k]
	}
	order := make([]int, n)
	for k := range order {
		order[k] = k
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		return frac[a] > frac[b] || frac[a] == frac[b] && a < b
	})
	for left > 0 {
		for _, k := range order {
			if left > 0 && batches[k] < hi[k] {
				batches[k]++
				left--
			}
		}
	}
	for left < 0 {
		for i := n - 1; i >= 0; i-- {
			if k := order[i]; left < 0 && batches[k] > lo[k] {
				batches[k]--
				left++
			}
		}
	}
	return batches
}
