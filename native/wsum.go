package native

/*
#include <stdlib.h>
#include "heterps_kernels.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// WeightedSum computes out = sum_k w[k]*g[k] elementwise, reading every
// input once and writing out once (the parameter server's weighted average,
// with w[k] = b_k / sum b). Every g[k] must have out's length. out may be one
// of the g[k] (in-place accumulation) but must not partially overlap any;
// with no inputs out is zeroed.
//
// The elements are split into pieces of 256 KiB of output, each piece one
// cgo call, run on the backend's threads.
func (b *CPU) WeightedSum(out Buffer, w []float32, g []Buffer) error {
	o, err := host("weighted sum: out", out, -1)
	if err != nil {
		return err
	}
	if len(w) != len(g) {
		return fmt.Errorf("weighted sum: %d weights for %d buffers: %w", len(w), len(g), ErrShape)
	}
	in := make([]HostBuffer, len(g))
	for k := range g {
		if in[k], err = hostAt("weighted sum: g", k, g[k], len(o)); err != nil {
			return err
		}
		if partialOverlap(o, in[k]) {
			return fmt.Errorf("weighted sum: out partially overlaps g[%d]: %w", k, ErrArg)
		}
	}
	n, k := len(o), len(in)
	if n == 0 {
		return nil
	}

	// The kernel takes an array of k input pointers. It lives in C memory,
	// one array per piece (each piece points at its own offset), and holds
	// Go pointers, which cgo allows only while they are pinned.
	var pins runtime.Pinner
	defer pins.Unpin()
	for _, h := range in {
		pins.Pin(&h[0])
	}
	const grain = 64 << 10
	pieces := pieceCount(n, grain)
	var ptrs []*C.float
	if k > 0 {
		// calloc, not malloc: Go's write barrier reads the old value of a
		// pointer slot it writes, so the slots must start as nil.
		mem := C.calloc(C.size_t(pieces*k), C.size_t(unsafe.Sizeof((*C.float)(nil))))
		if mem == nil {
			return fmt.Errorf("weighted sum: cannot allocate %d input pointers", pieces*k)
		}
		defer C.free(mem)
		ptrs = unsafe.Slice((**C.float)(mem), pieces*k)
	}
	chunks(n, grain, b.threads, func(p, lo, hi int) {
		var arr **C.float
		if k > 0 {
			mine := ptrs[p*k : (p+1)*k]
			for q, h := range in {
				mine[q] = fptr(h[lo:hi])
			}
			arr = &mine[0]
		}
		C.hps_weighted_sum(b.cisa(), C.int64_t(hi-lo), C.int64_t(k), arr, fptr(w), fptr(o[lo:hi]))
	})
	return nil
}

// partialOverlap reports whether a and b share memory without starting at
// the same address.
func partialOverlap(a, b []float32) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	const size = unsafe.Sizeof(float32(0))
	a0 := uintptr(unsafe.Pointer(&a[0]))
	b0 := uintptr(unsafe.Pointer(&b[0]))
	a1 := a0 + uintptr(len(a))*size
	b1 := b0 + uintptr(len(b))*size
	return a0 != b0 && a0 < b1 && b0 < a1
}
