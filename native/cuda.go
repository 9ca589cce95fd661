//go:build cuda

package native

/*
#cgo CFLAGS: -I${SRCDIR}/../kernels/cuda -I/usr/local/cuda/include
#cgo LDFLAGS: -L${SRCDIR}/../kernels/cuda/build -lheterps_cuda -L/usr/local/cuda/lib64 -lcudart_static -lstdc++ -ldl -lpthread -lrt -lm
#include "heterps_cuda.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/heterps/heterps/native/cudadrv"
)

// The CUDA backend. It is compiled only with -tags cuda and links the kernels
// of kernels/cuda (built by `make -C kernels/cuda` into
// kernels/cuda/build/libheterps_cuda.a) and the CUDA runtime, statically. The
// driver (libcuda) and cuBLAS are opened at run time, so a binary built with
// CUDA starts on any machine; NewCUDA says why when there is no GPU.
//
// Each CUDA backend owns one stream and one cuBLAS handle; every op is queued
// on that stream, in call order, and returns without waiting for the GPU,
// except those that hand results to the host (Download, the loss sums,
// EmbeddingBagBackward, which needs the distinct ids). Buffers belong to the
// backend that allocated them: another backend (another stream) may use them
// only after After has ordered its stream behind the owner's.

// CUDAOptions configures a CUDA backend.
type CUDAOptions struct {
	Device int  // driver ordinal
	TF32   bool // let cuBLAS use TF32 tensor cores in GEMM (about 10 mantissa bits)
	// PageableUploads copies uploads straight from Go memory, which the
	// driver stages itself, instead of through the backend's pinned
	// buffers: what a backend does anyway when it cannot have pinned
	// memory (CUDA.PinnedStaging says why).
	PageableUploads bool
}

var _ Backend = (*CUDA)(nil)

// CUDA runs heterps' kernels on one NVIDIA GPU.
type CUDA struct {
	ctx    *cudadrv.Context
	info   cudadrv.Info
	stream *cudaStream
	blasMu sync.Mutex // cuBLAS handles are not for concurrent use
	blas   *C.hps_cuda_blas
	stager *C.hps_cuda_stager // pinned buffers that uploads pass through; nil: plain copies
	// stagerErr is why there is no stager (nil with one).
	stagerErr error
}

// cudaStream is a backend's stream, shared with the cleanups of its buffers:
// they free in stream order while the stream lives, and with cudaFree after.
type cudaStream struct {
	ctx    *cudadrv.Context
	mu     sync.RWMutex
	s      C.cudaStream_t
	closed bool
}

// Errors of the CUDA backend, besides those every Backend wraps.
var (
	// ErrNoGPU: there is no usable GPU (no driver, no device, or a driver
	// older than the runtime the binary was built with).
	ErrNoGPU = errors.New("no CUDA device")
	// ErrDeviceMemory: a device allocation failed.
	ErrDeviceMemory = errors.New("out of device memory")
	// ErrClosedBackend: the backend (or its context) was closed.
	ErrClosedBackend = errors.New("cuda backend closed")
)

// CUDAError is a failure reported by the CUDA runtime or cuBLAS.
type CUDAError struct {
	Op   string
	Code int    // cudaError_t, or HPS_CUDA_EBLAS + cublasStatus_t
	Name string // e.g. "cudaErrorIllegalAddress"
}

func (e *CUDAError) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d)", e.Op, e.Name, e.Code)
}

// Is matches ErrDeviceMemory and ErrNoGPU for the runtime codes that mean them.
func (e *CUDAError) Is(target error) bool {
	switch target {
	case ErrDeviceMemory:
		return e.Code == C.cudaErrorMemoryAllocation
	case ErrNoGPU:
		return e.Code == C.cudaErrorNoDevice || e.Code == C.cudaErrorInsufficientDriver
	}
	return false
}

// cudaStatus maps a status of the heterps_cuda.h functions to an error.
func cudaStatus(op string, st C.int) error {
	switch {
	case st == C.HPS_OK:
		return nil
	case st == C.HPS_EINVAL:
		return fmt.Errorf("cuda: %s: %w", op, ErrArg)
	case st == C.HPS_ERANGE || st == C.HPS_EORDER:
		return fmt.Errorf("cuda: %s: %w", op, ErrRange)
	}
	return &CUDAError{Op: op, Code: int(st), Name: C.GoString(C.hps_cuda_strerror(st))}
}

var (
	contextsMu sync.Mutex
	contexts   = map[int]*cudadrv.Context{}
)

// deviceContext returns the process-wide primary context of device i,
// retained on first use and kept for the life of the process.
func deviceContext(i int) (*cudadrv.Context, cudadrv.Info, error) {
	if err := cudadrv.Init(); err != nil {
		return nil, cudadrv.Info{}, fmt.Errorf("cuda: %w: %w", ErrNoGPU, err)
	}
	devs, err := cudadrv.Devices()
	if err != nil {
		return nil, cudadrv.Info{}, fmt.Errorf("cuda: %w: %w", ErrNoGPU, err)
	}
	if i < 0 || i >= len(devs) {
		return nil, cudadrv.Info{}, fmt.Errorf("cuda: device %d of %d: %w", i, len(devs), ErrNoGPU)
	}
	contextsMu.Lock()
	defer contextsMu.Unlock()
	if c, ok := contexts[i]; ok {
		return c, devs[i], nil
	}
	dev, err := cudadrv.GetDevice(i)
	if err != nil {
		return nil, cudadrv.Info{}, err
	}
	c, err := dev.PrimaryContext()
	if err != nil {
		return nil, cudadrv.Info{}, fmt.Errorf("cuda: %w", err)
	}
	contexts[i] = c
	return c, devs[i], nil
}

// CUDADevices lists the GPUs of this machine; on a machine without one it
// returns an error wrapping ErrNoGPU that says why.
func CUDADevices() ([]cudadrv.Info, error) {
	if err := cudadrv.Init(); err != nil {
		return nil, fmt.Errorf("cuda: %w: %w", ErrNoGPU, err)
	}
	devs, err := cudadrv.Devices()
	if err != nil {
		return nil, fmt.Errorf("cuda: %w: %w", ErrNoGPU, err)
	}
	return devs, nil
}

// NewCUDA returns a backend on device opts.Device with its own stream and
// cuBLAS handle. Without a usable GPU the error wraps ErrNoGPU.
func NewCUDA(opts CUDAOptions) (*CUDA, error) {
	ctx, info, err := deviceContext(opts.Device)
	if err != nil {
		return nil, err
	}
	b := &CUDA{ctx: ctx, info: info, stream: &cudaStream{ctx: ctx}}
	err = ctx.Bind(func() error {
		var s C.cudaStream_t
		if err := cudaStatus("create stream", C.int(C.cudaStreamCreateWithFlags(&s, C.cudaStreamNonBlocking))); err != nil {
			return err
		}
		var h *C.hps_cuda_blas
		if err := cudaStatus("create cuBLAS handle", C.hps_cuda_blas_create(s, cbool(opts.TF32), &h)); err != nil {
			C.cudaStreamDestroy(s)
			return err
		}
		b.stream.s, b.blas = s, h
		if opts.PageableUploads {
			b.stagerErr = errors.New("pageable uploads asked for (CUDAOptions.PageableUploads)")
			return nil
		}
		// Without pinned memory (a locked-memory limit, a driver that
		// refuses it) uploads are plain copies: slower, not wrong.
		var st *C.hps_cuda_stager
		b.stagerErr = cudaStatus("allocate pinned staging buffers", C.hps_cuda_stager_create(&st))
		b.stager = st
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", opts.Device, err)
	}
	return b, nil
}

// PinnedStaging reports why uploads are plain copies from pageable memory
// rather than staged through pinned buffers, or nil when they are staged.
func (b *CUDA) PinnedStaging() error { return b.stagerErr }

// Name is "cuda/<device name>", e.g. "cuda/NVIDIA H200".
func (b *CUDA) Name() string { return "cuda/" + b.info.Name }

// Device describes the backend's GPU.
func (b *CUDA) Device() cudadrv.Info { return b.info }

// Sync waits until every op queued on the backend's stream has finished and
// reports the first asynchronous error, if any.
func (b *CUDA) Sync() error {
	return b.run("synchronize", func(s C.cudaStream_t) C.int {
		return C.int(C.cudaStreamSynchronize(s))
	})
}

// After makes the ops queued on b from now on wait for everything queued on
// other so far (an event recorded on other's stream), without blocking the
// host: the way to hand a buffer from one backend's stream to another's.
func (b *CUDA) After(other *CUDA) error {
	if other == b {
		return nil
	}
	other.stream.mu.RLock()
	defer other.stream.mu.RUnlock()
	if other.stream.closed {
		return fmt.Errorf("cuda: after: %w", ErrClosedBackend)
	}
	return b.run("after", func(s C.cudaStream_t) C.int {
		var ev C.cudaEvent_t
		if st := C.cudaEventCreateWithFlags(&ev, C.cudaEventDisableTiming); st != C.cudaSuccess {
			return C.int(st)
		}
		defer C.cudaEventDestroy(ev) // released once the wait is satisfied
		if st := C.cudaEventRecord(ev, other.stream.s); st != C.cudaSuccess {
			return C.int(st)
		}
		return C.int(C.cudaStreamWaitEvent(s, ev, 0))
	})
}

// Close waits for the stream, then frees the cuBLAS handle and the stream.
// Buffers stay valid (and are freed when unreachable, or by Free).
func (b *CUDA) Close() error {
	st := b.stream
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return nil
	}
	st.closed = true
	return b.ctx.Bind(func() error {
		err := cudaStatus("close: synchronize", C.int(C.cudaStreamSynchronize(st.s)))
		C.hps_cuda_blas_destroy(b.blas)
		C.hps_cuda_stager_destroy(b.stager)
		return errors.Join(err, cudaStatus("close: destroy stream", C.int(C.cudaStreamDestroy(st.s))))
	})
}

// run calls f with the backend's stream, on a thread where the device's
// context is current, and maps its status.
func (b *CUDA) run(op string, f func(s C.cudaStream_t) C.int) error {
	b.stream.mu.RLock()
	defer b.stream.mu.RUnlock()
	if b.stream.closed {
		return fmt.Errorf("cuda: %s: %w", op, ErrClosedBackend)
	}
	return b.ctx.Bind(func() error {
		st := f(b.stream.s)
		if st > 0 && st < C.HPS_CUDA_EBLAS {
			// A runtime error stays the thread's last error until read, and
			// the next launch here would report it as its own (see
			// kernels/cuda/common.cuh, status).
			C.cudaGetLastError()
		}
		return cudaStatus(op, st)
	})
}

// ---- device buffers ------------------------------------------------------------

// DeviceBuffer is the CUDA backend's Buffer: a view [off, off+n) of float32
// device memory. Slices share the allocation, which is freed when no view of
// it is reachable any more (or by CUDA.Free). A buffer whose allocation
// failed reports that failure from every op that uses it.
type DeviceBuffer struct {
	mem *deviceMem
	off int
	n   int
}

type deviceMem struct {
	alloc *deviceAlloc
	err   error // allocation failure
}

// deviceAlloc is what the cleanup needs: it must not point back at deviceMem.
type deviceAlloc struct {
	base   unsafe.Pointer // device address; nil for an empty or failed allocation
	stream *cudaStream
	once   sync.Once
}

func (a *deviceAlloc) free() {
	a.once.Do(func() {
		if a.base == nil {
			return
		}
		st := a.stream
		// Errors here have no caller to go to: the memory is lost at worst.
		_ = st.ctx.Bind(func() error {
			st.mu.RLock()
			defer st.mu.RUnlock()
			if st.closed {
				C.cudaFree(a.base)
			} else {
				C.hps_cuda_free(st.s, a.base)
			}
			return nil
		})
		a.base = nil
	})
}

// Len returns the number of floats in the view.
func (d DeviceBuffer) Len() int { return d.n }

// Slice returns the view [from, to) of d, sharing its memory. It panics when
// the bounds are outside d, as slicing does.
func (d DeviceBuffer) Slice(from, to int) Buffer {
	if from < 0 || to < from || to > d.n {
		panic(fmt.Sprintf("native: DeviceBuffer.Slice(%d, %d) of %d floats", from, to, d.n))
	}
	return DeviceBuffer{mem: d.mem, off: d.off + from, n: to - from}
}

// Err reports the allocation failure behind d, if any.
func (d DeviceBuffer) Err() error {
	if d.mem == nil {
		return nil
	}
	return d.mem.err
}

// ptr is the device address of element 0 (nil for an empty view).
func (d DeviceBuffer) ptr() *C.float {
	if d.n == 0 || d.mem == nil || d.mem.alloc.base == nil {
		return nil
	}
	return (*C.float)(unsafe.Add(d.mem.alloc.base, 4*d.off))
}

// Alloc returns n zeroed floats of device memory. It never fails outright:
// a failed allocation gives a buffer whose Err (and every op using it)
// reports the failure.
func (b *CUDA) Alloc(n int) Buffer {
	if n < 0 {
		return DeviceBuffer{mem: &deviceMem{alloc: &deviceAlloc{}, err: fmt.Errorf("cuda: alloc %d floats: %w", n, ErrArg)}}
	}
	var base unsafe.Pointer
	err := b.run("alloc", func(s C.cudaStream_t) C.int {
		var st C.int
		base, st = allocZeroed(s, n)
		return st
	})
	if err != nil {
		return DeviceBuffer{mem: &deviceMem{alloc: &deviceAlloc{}, err: fmt.Errorf("cuda: alloc %d floats: %w", n, err)}, n: n}
	}
	return b.wrap(base, n)
}

// allocZeroed queues the allocation and zeroing of n floats on stream s
// (nil for n == 0).
func allocZeroed(s C.cudaStream_t, n int) (unsafe.Pointer, C.int) {
	if n == 0 {
		return nil, C.HPS_OK
	}
	var base unsafe.Pointer
	bytes := C.size_t(n) * 4
	if st := C.hps_cuda_malloc(s, bytes, &base); st != C.HPS_OK {
		return nil, st
	}
	if st := C.cudaMemsetAsync(base, 0, bytes, s); st != C.cudaSuccess {
		C.hps_cuda_free(s, base)
		return nil, C.int(st)
	}
	return base, C.HPS_OK
}

// wrap makes device memory from allocZeroed on b's stream a DeviceBuffer
// that frees it once unreachable.
func (b *CUDA) wrap(base unsafe.Pointer, n int) DeviceBuffer {
	alloc := &deviceAlloc{base: base, stream: b.stream}
	mem := &deviceMem{alloc: alloc}
	if base != nil {
		runtime.AddCleanup(mem, func(a *deviceAlloc) { a.free() }, alloc)
	}
	return DeviceBuffer{mem: mem, n: n}
}

// Free releases buf's allocation now (in stream order) instead of when it
// becomes unreachable. Every view of it becomes invalid.
func (b *CUDA) Free(buf Buffer) error {
	d, err := b.dev("free", buf, -1)
	if err != nil {
		return err
	}
	if d.mem != nil {
		d.mem.alloc.free()
		d.mem.err = fmt.Errorf("cuda: buffer used after Free: %w", ErrArg)
	}
	return nil
}

// dev unwraps a device buffer and checks its length (want < 0: any).
func (b *CUDA) dev(what string, buf Buffer, want int) (DeviceBuffer, error) {
	d, ok := buf.(DeviceBuffer)
	if !ok {
		if buf == nil {
			return DeviceBuffer{}, fmt.Errorf("%s: nil buffer: %w", what, ErrArg)
		}
		return DeviceBuffer{}, fmt.Errorf("%s: %T is not a CUDA buffer: %w", what, buf, ErrArg)
	}
	if err := d.Err(); err != nil {
		return DeviceBuffer{}, fmt.Errorf("%s: %w", what, err)
	}
	if d.mem != nil && d.n > 0 && d.mem.alloc.stream.ctx != b.ctx {
		return DeviceBuffer{}, fmt.Errorf("%s: buffer of another device: %w", what, ErrArg)
	}
	if want >= 0 && d.n != want {
		return DeviceBuffer{}, fmt.Errorf("%s: %d floats, want %d: %w", what, d.n, want, ErrShape)
	}
	return d, nil
}

// devAtLeast is dev for strided operands that may be longer than needed.
func (b *CUDA) devAtLeast(what string, buf Buffer, need int) (DeviceBuffer, error) {
	d, err := b.dev(what, buf, -1)
	if err == nil && d.n < need {
		err = fmt.Errorf("%s: %d floats, need at least %d: %w", what, d.n, need, ErrShape)
	}
	return d, err
}

// devOptional is dev for a buffer that may be nil (a nil pointer in C).
func (b *CUDA) devOptional(what string, buf Buffer, want int) (DeviceBuffer, error) {
	if buf == nil {
		return DeviceBuffer{}, nil
	}
	return b.dev(what, buf, want)
}

// Upload copies src into dst. It returns once src may be reused (copied into
// the pinned staging buffers, or by the driver into its own); the copy itself
// is ordered on the stream before later ops.
func (b *CUDA) Upload(dst Buffer, src []float32) error {
	d, err := b.dev("upload: dst", dst, len(src))
	if err != nil || len(src) == 0 {
		return err
	}
	return b.run("upload", func(s C.cudaStream_t) C.int {
		return C.hps_cuda_upload(b.stager, s, unsafe.Pointer(d.ptr()), unsafe.Pointer(&src[0]), C.size_t(4*len(src)))
	})
}

// Download copies src into dst once the ops queued before it have run.
func (b *CUDA) Download(dst []float32, src Buffer) error {
	d, err := b.dev("download: src", src, len(dst))
	if err != nil || len(dst) == 0 {
		return err
	}
	return b.run("download", func(s C.cudaStream_t) C.int {
		st := C.cudaMemcpyAsync(unsafe.Pointer(&dst[0]), unsafe.Pointer(d.ptr()),
			C.size_t(4*len(dst)), C.cudaMemcpyDeviceToHost, s)
		if st != C.cudaSuccess {
			return C.int(st)
		}
		return C.int(C.cudaStreamSynchronize(s))
	})
}

// uploadInts copies host int64s into fresh stream-ordered device memory,
// which free releases in stream order.
func (b *CUDA) uploadInts(s C.cudaStream_t, v []int64) (p *C.int64_t, free func(), st C.int) {
	if len(v) == 0 {
		return nil, func() {}, C.HPS_OK
	}
	var mem unsafe.Pointer
	bytes := C.size_t(8 * len(v))
	if st := C.hps_cuda_malloc(s, bytes, &mem); st != C.HPS_OK {
		return nil, func() {}, st
	}
	free = func() { C.hps_cuda_free(s, mem) }
	if st := C.hps_cuda_upload(b.stager, s, mem, unsafe.Pointer(&v[0]), bytes); st != C.HPS_OK {
		free()
		return nil, func() {}, st
	}
	return (*C.int64_t)(mem), free, C.HPS_OK
}

// Copy copies src into dst (same lengths), device to device.
func (b *CUDA) Copy(dst, src Buffer) error {
	sb, err := b.dev("copy: src", src, -1)
	if err != nil {
		return err
	}
	db, err := b.dev("copy: dst", dst, sb.n)
	if err != nil {
		return err
	}
	return b.run("copy", func(s C.cudaStream_t) C.int {
		return C.hps_cuda_copy(s, C.int64_t(sb.n), sb.ptr(), db.ptr())
	})
}

// Fill sets every element of dst to v.
func (b *CUDA) Fill(dst Buffer, v float32) error {
	d, err := b.dev("fill", dst, -1)
	if err != nil {
		return err
	}
	return b.run("fill", func(s C.cudaStream_t) C.int {
		return C.hps_cuda_fill(s, C.int64_t(d.n), d.ptr(), C.float(v))
	})
}
