package native

/*
#cgo CFLAGS: -O3 -std=gnu11 -I${SRCDIR}/../kernels -I/usr/include/x86_64-linux-gnu
#cgo LDFLAGS: -lopenblas -lm
#include "heterps_kernels.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// HostBuffer is the CPU backend's Buffer: plain Go memory.
type HostBuffer []float32

// Len returns the number of floats.
func (h HostBuffer) Len() int { return len(h) }

// Slice returns the view [from, to).
func (h HostBuffer) Slice(from, to int) Buffer { return h[from:to:to] }

// Host returns the Go slice behind a CPU buffer, or nil and false for a
// device buffer. Code that must stay backend-neutral uses Upload/Download.
func Host(b Buffer) ([]float32, bool) {
	h, ok := b.(HostBuffer)
	return h, ok
}

// MaxThreads is the most threads one backend's ops split across (the
// calling thread and the kernels' pool's helpers).
const MaxThreads = C.HPS_MAX_THREADS

// CPUOptions configures the CPU backend. Zero values mean: widest supported
// ISA (or HETERPS_ISA), runtime.GOMAXPROCS(0) threads (at most MaxThreads),
// threads unpinned.
type CPUOptions struct {
	ISA     *ISA
	Threads int
	Pin     Pinning
}

// CPU is the default backend: C kernels on host memory.
type CPU struct {
	isa     ISA
	threads int
	cpus    []int // the CPU of each thread when pinned (see Pinning), else nil
	base    int   // the number of the first thread among the pinned backend's
}

// NewCPU returns a CPU backend. It fails if a forced ISA is not supported
// or more than MaxThreads threads are asked for.
func NewCPU(opts CPUOptions) (*CPU, error) {
	if opts.Threads > MaxThreads {
		return nil, fmt.Errorf("native: %d threads, at most %d: %w", opts.Threads, MaxThreads, ErrArg)
	}
	isa, err := BestISA()
	if err != nil {
		return nil, err
	}
	if opts.ISA != nil {
		isa = *opts.ISA
		if !isa.Supported() {
			return nil, fmt.Errorf("native: ISA %s is not supported by this CPU", isa)
		}
	}
	threads := opts.Threads
	if threads <= 0 {
		threads = min(runtime.GOMAXPROCS(0), MaxThreads)
	}
	C.hps_blas_threads(1) // the backend splits GEMMs itself; see gemmGrain
	b := &CPU{isa: isa, threads: threads}
	if err := b.pin(opts.Pin); err != nil {
		return nil, err
	}
	return b, nil
}

// MustCPU is NewCPU with default options for tests and tools; it panics on
// an unsupported forced ISA, which is a start-up configuration error.
func MustCPU() *CPU {
	b, err := NewCPU(CPUOptions{})
	if err != nil {
		panic(err)
	}
	return b
}

// Name reports the backend and its ISA, e.g. "cpu/avx512".
func (b *CPU) Name() string { return "cpu/" + b.isa.String() }

// ISA returns the instruction set the kernels run with.
func (b *CPU) ISA() ISA { return b.isa }

// Threads returns the number of threads ops split across.
func (b *CPU) Threads() int { return b.threads }

// WithThreads returns a backend with b's ISA whose ops split across n
// threads (at least 1), b's first n when b is pinned and has them. b itself
// is unchanged.
func (b *CPU) WithThreads(n int) *CPU {
	n = max(n, 1)
	w := &CPU{isa: b.isa, threads: n, base: b.base}
	if n <= len(b.cpus) {
		w.cpus = b.cpus[:n]
	}
	return w
}

// Split divides b's threads into a main share of all but n and a side
// share of n (1 <= n < Threads()), each with its own CPUs when b is pinned,
// for work that runs beside other work on b's cores (see nn's backward
// lanes). b itself is unchanged.
func (b *CPU) Split(n int) (main, side *CPU) {
	n = min(max(n, 1), b.threads-1)
	main = b.WithThreads(b.threads - n)
	side = &CPU{isa: b.isa, threads: n, base: b.base + main.threads}
	if b.cpus != nil {
		side.cpus = b.cpus[main.threads:b.threads]
	}
	return main, side
}

func (b *CPU) cisa() C.hps_isa { return C.hps_isa(b.isa) }

// Alloc returns n zeroed floats.
func (b *CPU) Alloc(n int) Buffer {
	buf := make(HostBuffer, n)
	adviseHugePages(buf)
	return buf
}

// Upload copies src into dst.
func (b *CPU) Upload(dst Buffer, src []float32) error {
	d, err := host("upload: dst", dst, len(src))
	if err != nil {
		return err
	}
	copy(d, src)
	return nil
}

// Download copies src into dst.
func (b *CPU) Download(dst []float32, src Buffer) error {
	s, err := host("download: src", src, len(dst))
	if err != nil {
		return err
	}
	copy(dst, s)
	return nil
}

// Copy copies src into dst (same lengths) with memcpy, split across threads.
func (b *CPU) Copy(dst, src Buffer) error {
	s, err := host("copy: src", src, -1)
	if err != nil {
		return err
	}
	d, err := host("copy: dst", dst, len(s))
	if err != nil {
		return err
	}
	chunks(len(s), 1<<18, b.threads, func(_, lo, hi int) {
		C.hps_copy(C.int64_t(hi-lo), fptr(s[lo:]), fptr(d[lo:]))
	})
	return nil
}

// Fill sets every element of dst to v.
func (b *CPU) Fill(dst Buffer, v float32) error {
	d, err := host("fill", dst, -1)
	if err != nil {
		return err
	}
	for i := range d {
		d[i] = v
	}
	return nil
}

// host unwraps a CPU buffer and checks its length (want < 0: any length).
func host(what string, b Buffer, want int) (HostBuffer, error) {
	h, ok := b.(HostBuffer)
	if !ok {
		if b == nil {
			return nil, fmt.Errorf("%s: nil buffer: %w", what, ErrArg)
		}
		return nil, fmt.Errorf("%s: %T is not a CPU buffer: %w", what, b, ErrArg)
	}
	if want >= 0 && len(h) != want {
		return nil, fmt.Errorf("%s: %d floats, want %d: %w", what, len(h), want, ErrShape)
	}
	return h, nil
}

// hostAt is host for element k of a list of buffers, named what[k]; the
// name is formatted only on failure, as hot paths call it per piece.
func hostAt(what string, k int, b Buffer, want int) (HostBuffer, error) {
	if h, ok := b.(HostBuffer); ok && (want < 0 || len(h) == want) {
		return h, nil
	}
	return host(fmt.Sprintf("%s[%d]", what, k), b, want)
}

// hostAtLeast is host for buffers that may be longer than needed (strided
// GEMM operands).
func hostAtLeast(what string, b Buffer, need int) (HostBuffer, error) {
	h, err := host(what, b, -1)
	if err != nil {
		return nil, err
	}
	if len(h) < need {
		return nil, fmt.Errorf("%s: %d floats, need at least %d: %w", what, len(h), need, ErrShape)
	}
	return h, nil
}

// optional is host for a buffer that may be nil.
func optional(what string, b Buffer, want int) (HostBuffer, error) {
	if b == nil {
		return nil, nil
	}
	if h, ok := b.(HostBuffer); ok && h == nil && want == 0 {
		return nil, nil
	}
	return host(what, b, want)
}

// fptr is the C pointer to s[0], or NULL for an empty slice.
func fptr(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(unsafe.SliceData(s)))
}

// iptr is the C pointer to s[0], or NULL for an empty slice.
func iptr(s []int64) *C.int64_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.int64_t)(unsafe.Pointer(unsafe.SliceData(s)))
}
