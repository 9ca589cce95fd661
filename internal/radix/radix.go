// Package radix sorts non-negative integer keys by LSD radix sort, a byte a
// pass, as many passes as the largest key has bytes: what the parameter
// server's step layout and the pipeline's batch id mapping use for the few
// thousand keys a step sorts, several times faster than a comparison sort.
package radix

// Key is an integer key type; keys must be non-negative.
type Key interface {
	~int | ~int64 | ~uint64
}

// Sort sorts keys (each in [0, top]) ascending, stably, and moves vals
// (nil, or as long as keys) along with them. Each pass counts one byte of
// the keys, so a top below 2^16 takes two passes whatever len(keys) is.
func Sort[K Key, V any](keys []K, vals []V, top K) {
	if vals != nil && len(vals) != len(keys) {
		panic("radix: vals and keys differ in length")
	}
	k2 := make([]K, len(keys))
	var v2 []V
	if vals != nil {
		v2 = make([]V, len(vals))
	}
	src, srcV, dst, dstV := keys, vals, k2, v2
	passes := 0
	for shift := uint(0); shift < 64 && top>>shift > 0; shift += 8 {
		var count [257]int
		for _, k := range src {
			count[(k>>shift)&0xff+1]++
		}
		for b := 1; b < len(count); b++ {
			count[b] += count[b-1]
		}
		for i, k := range src {
			d := (k >> shift) & 0xff
			dst[count[d]] = k
			if dstV != nil {
				dstV[count[d]] = srcV[i]
			}
			count[d]++
		}
		src, srcV, dst, dstV = dst, dstV, src, srcV
		passes++
	}
	if passes%2 == 1 { // the result is in the scratch
		copy(keys, src)
		copy(vals, srcV)
	}
}
