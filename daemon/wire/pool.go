package wire

import (
	"math/bits"
	"sync"
)

// Receive buffers are recycled by size class, so that steady traffic reads
// into memory that is already mapped and need not be zeroed: fresh large
// allocations cost page faults inside every read. Class k holds buffers of
// 2^k bytes plus poolHeadroom, enough for the message and tensor headers, so
// that a message carrying a 2^k-byte tensor fits class k.
const (
	minPoolClass = 12 // 4 KiB
	maxPoolClass = 28 // 256 MiB
	poolHeadroom = 8 << 10
)

var payloadPools [maxPoolClass - minPoolClass + 1]sync.Pool

// poolClass is the smallest class whose buffers hold n bytes, or -1 when n
// is too small to be worth pooling or too large for any class.
func poolClass(n int) int {
	if n <= 1<<minPoolClass+poolHeadroom {
		if n < 1<<minPoolClass {
			return -1
		}
		return minPoolClass
	}
	k := bits.Len(uint(n - poolHeadroom - 1))
	if k > maxPoolClass {
		return -1
	}
	return k
}

// getPayload returns a buffer of length n, recycled when one is free.
func getPayload(n int) []byte {
	k := poolClass(n)
	if k < 0 {
		return make([]byte, n)
	}
	if b, ok := payloadPools[k-minPoolClass].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<k+poolHeadroom)
}

// putPayload recycles a buffer that getPayload handed out.
func putPayload(b []byte) {
	c := cap(b)
	k := poolClass(c)
	if k < 0 || c != 1<<k+poolHeadroom {
		return
	}
	b = b[:0]
	payloadPools[k-minPoolClass].Put(&b)
}
