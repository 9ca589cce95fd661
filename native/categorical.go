package native

// Argmax is the index of the largest of probs (the first on ties), or 0
// when probs is empty.
func Argmax(probs []float32) int {
	best := 0
	for i, q := range probs {
		if q > probs[best] {
			best = i
		}
	}
	return best
}

// SampleCategorical is the index i at which the running sum of probs
// first exceeds u, drawn uniformly from [0, 1): a draw from the
// categorical distribution probs. Rounding that leaves the sum short of u
// gives the last index.
func SampleCategorical(probs []float32, u float32) int {
	acc := float32(0)
	for i, q := range probs {
		if acc += q; u < acc {
			return i
		}
	}
	return len(probs) - 1
}
