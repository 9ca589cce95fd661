package native

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on x86-64.
const hugePage = 2 << 20

// adviseHugePages asks the kernel to back buf's whole huge pages with
// transparent huge pages (madvise MADV_HUGEPAGE). Rows of an embedding
// table or its optimiser state are read and written at random: with 4 KiB
// pages nearly every row costs a TLB miss besides its cache miss. Kernels
// that leave THP to madvise (Debian's default) otherwise never give Go's
// heap huge pages. Best effort: an error (an old kernel, THP off) changes
// nothing but speed, so it is ignored.
func adviseHugePages(buf []float32) {
	if len(buf)*4 < 2*hugePage {
		return
	}
	start := uintptr(unsafe.Pointer(&buf[0]))
	end := start + uintptr(len(buf))*4
	lo, hi := (start+hugePage-1)&^(hugePage-1), end&^(hugePage-1)
	if hi <= lo {
		return
	}
	bytes := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*4)
	_ = unix.Madvise(bytes[lo-start:hi-start], unix.MADV_HUGEPAGE)
}
