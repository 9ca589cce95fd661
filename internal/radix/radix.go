// Package radix sorts non-negative integer keys by LSD radix sort, a byte a
// pass, as many passes as the largest key has bytes: what the parameter
// server's step layout and the pipeline's batch id mapping use for the few
// thousand keys a step sorts, several times faster than a comparison sort.
package radix

import "sync"

// Key is an integer key type; keys must be non-negative.
type Key interface {
	~int | ~int64 | ~uint64
}

// Sort sorts keys (each in [0, top]) ascending. Each pass counts one byte
// of the keys, so a top below 2^16 takes two passes whatever len(keys) is.
func Sort[K Key](keys []K, top K) {
	src, dst := keys, make([]K, len(keys))
	passes := 0
	for shift := uint(0); shift < 64 && top>>shift > 0; shift += 8 {
		var count [257]int
		for _, k := range src {
			count[digit(k, shift)+1]++
		}
		for b := 1; b < len(count); b++ {
			count[b] += count[b-1]
		}
		for _, k := range src {
			d := digit(k, shift)
			dst[count[d]] = k
			count[d]++
		}
		src, dst = dst, src
		passes++
	}
	if passes%2 == 1 { // the result is in the scratch
		copy(keys, src)
	}
}

// digit is byte shift/8 of k, as an int the count's bounds are known for.
func digit[K Key](k K, shift uint) int { return int(uint64(k)>>shift) & 0xff }

// Pairs sorts keys (each in [0, top]) ascending, stably, and moves vals
// (as long as keys) along with them: the pipeline's batch id mapping
// where a batch's ids span too many values for its bitmap. It is written for these types
// rather than as a generic Sort with values: on a ctrdnn batch a generic
// version took 344-350 us against this one's 269-293.
func Pairs(keys []uint64, vals []int32, top uint64) {
	if len(vals) != len(keys) {
		panic("radix: vals and keys differ in length")
	}
	scratch := GetBuffers(len(keys))
	defer PutBuffers(scratch)
	k2, v2 := scratch.Keys, scratch.Vals
	for shift := uint(0); shift < 64 && top>>shift > 0; shift += 8 {
		var count [257]int
		for _, k := range keys {
			count[(k>>shift)&0xff+1]++
		}
		for b := 1; b < len(count); b++ {
			count[b] += count[b-1]
		}
		for i, k := range keys {
			d := (k >> shift) & 0xff
			k2[count[d]], v2[count[d]] = k, vals[i]
			count[d]++
		}
		copy(keys, k2) // back each pass: the loops keep fixed slices, which measured faster
		copy(vals, v2)
	}
}

// Buffers holds keys and values for Pairs, pooled between calls
// (GetBuffers, PutBuffers): the pipeline maps a batch's ids every step,
// and these buffers, its own and Pairs' scratch, were a fifth of what a
// make-run step allocated.
type Buffers struct {
	Keys []uint64
	Vals []int32
}

var buffers sync.Pool // of *Buffers

// GetBuffers returns buffers of n keys and n values, recycled when a
// large enough pair is free.
func GetBuffers(n int) *Buffers {
	b, _ := buffers.Get().(*Buffers)
	if b == nil || cap(b.Keys) < n {
		b = &Buffers{Keys: make([]uint64, n), Vals: make([]int32, n)}
	}
	b.Keys, b.Vals = b.Keys[:n], b.Vals[:n]
	return b
}

// PutBuffers gives b back for a later GetBuffers; the caller no longer
// uses it.
func PutBuffers(b *Buffers) { buffers.Put(b) }
