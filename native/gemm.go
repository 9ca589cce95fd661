package native

// #include "heterps_kernels.h"
import "C"

import "fmt"

// Gemm computes C[m x n] = alpha*op(A)*op(B) + beta*C through OpenBLAS
// cblas_sgemm, after checking that every operand holds the rows its stride
// implies.
func (b *CPU) Gemm(transA, transB bool, m, n, k int, alpha float32, a Buffer, lda int,
	bb Buffer, ldb int, beta float32, c Buffer, ldc int) error {
	if m < 0 || n < 0 || k < 0 {
		return fmt.Errorf("gemm: negative size m=%d n=%d k=%d: %w", m, n, k, ErrArg)
	}
	aRows, aCols := m, k
	if transA {
		aRows, aCols = k, m
	}
	bRows, bCols := k, n
	if transB {
		bRows, bCols = n, k
	}
	ah, err := gemmOperand("A", a, aRows, aCols, lda)
	if err != nil {
		return err
	}
	bh, err := gemmOperand("B", bb, bRows, bCols, ldb)
	if err != nil {
		return err
	}
	ch, err := gemmOperand("C", c, m, n, ldc)
	if err != nil {
		return err
	}
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		scaleMatrix(ch, m, n, ldc, beta)
		return nil
	}
	C.hps_sgemm_rows(cbool(transA), cbool(transB), C.int64_t(m), C.int64_t(n), C.int64_t(k),
		C.float(alpha), fptr(ah), C.int64_t(lda), fptr(bh), C.int64_t(ldb),
		C.float(beta), fptr(ch), C.int64_t(ldc), C.int64_t(b.gemmGrain(m, n, k)), C.int(b.threads))
	return nil
}

// gemmGrain is how many rows of C one thread computes. OpenBLAS runs
// single-threaded (see NewCPU) and GEMMs large enough to share are split
// into one block of rows per thread, rounded to 16 rows, which the calling
// thread and the helper threads of the kernels' pool run (hps_sgemm_rows):
// OpenBLAS's own threads spin after each call and fight the Go scheduler
// for the cores, which made 2-thread training slower than 1-thread, and
// goroutines of our own, one per block, paid the Go scheduler's hand-offs
// around cgo calls (see kernels/cpu/pool.c). Results depend on the thread
// count in the last bits (OpenBLAS blocks by the call's shape, and takes
// its small-matrix path for some shapes, e.g. 128x32 over 512), as they
// did with OpenBLAS's own threads; runs with equal thread counts are
// bit-identical, which is why the rule is a fixed one by shape and not a
// measurement at start-up that could pick differently from run to run.
//
// A piece needs 2^23 multiply-adds (8.4M): on the 2-core Xeon (OpenBLAS
// 0.3.21, SkylakeX kernels), best of 200 interleaved calls, ctrdnn's
// shapes split in two gained 1.4-1.8x at 61-67M multiply-adds, 0.95-1.47x
// at 16.8M and lost (0.56-0.98x) at 2.1-8.4M, where the second goroutine's
// start and the smaller blocks cost more than half the GEMM.
func (b *CPU) gemmGrain(m, n, k int) int {
	const minWork = 1 << 23 // multiply-adds a piece needs for the split to pay (see above)
	if b.threads <= 1 || m*n*k < minWork*b.threads || m < 32 {
		return m
	}
	rows := (m + b.threads - 1) / b.threads
	return (rows + 15) / 16 * 16
}

// gemmOperand checks a [rows x cols] operand stored with row stride ld.
func gemmOperand(name string, buf Buffer, rows, cols, ld int) (HostBuffer, error) {
	if ld < max(1, cols) {
		return nil, fmt.Errorf("gemm: ld%s=%d is less than its %d columns: %w", name, ld, cols, ErrShape)
	}
	need := 0
	if rows > 0 && cols > 0 {
		need = (rows-1)*ld + cols
	}
	return hostAtLeast("gemm: "+name, buf, need)
}

// scaleMatrix computes C = beta*C, which is what GEMM means when k == 0.
func scaleMatrix(c []float32, m, n, ldc int, beta float32) {
	for r := range m {
		row := c[r*ldc : r*ldc+n]
		for i := range row {
			if beta == 0 {
				row[i] = 0
			} else {
				row[i] *= beta
			}
		}
	}
}

func cbool(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

// poolHelperPieces is how many pieces of split kernels the pool's helper
// threads have run in this process (for tests).
func poolHelperPieces() int64 { return int64(C.hps_pool_helper_pieces(0)) }
