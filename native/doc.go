// Package native is heterps' only door to native code: it exposes the C
// kernels of kernels/ (and, with the cuda build tag, the CUDA kernels) as a Go
// Backend over device buffers. Nothing outside this package calls C.
//
// The CPU backend is the default. It picks the widest instruction set the CPU
// and OS support (AVX-512, AVX2, or the scalar reference) once at start-up;
// HETERPS_ISA=scalar|avx2|avx512 forces one. Memory-bound ops are split by rows
// into fixed-size chunks that run on several goroutines, each chunk one cgo
// call; reductions add per-chunk partials in chunk order, so results do not
// depend on the thread count. The embedding-bag forward and the row
// optimisers split inside one cgo call instead, over the kernels' pool of
// helper threads (kernels/cpu/pool.c), as does a GEMM large enough
// (gemmGrain: 2^23 multiply-adds a piece) into row blocks; OpenBLAS runs
// single-threaded, and a split GEMM's results depend on the thread count
// in the last bits. WithThreads and Split give a backend a share of the
// threads for work that runs beside other work (nn's backward lanes).
// A backend may pin its threads one to a CPU (Pinning): its pool helpers
// at creation, the goroutine running its steps and each lane when they
// call PinCaller.
package native
