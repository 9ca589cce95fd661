package native

// #include "heterps_kernels.h"
import "C"

import (
	"fmt"
	"math"
)

// maxPartialPieces bounds how many per-piece partial column sums a reduction
// keeps: pieces get more rows when a tensor would need more, so the scratch
// stays at most maxPartialPieces*cols floats even for very wide rows.
const maxPartialPieces = 64

// BiasAct computes y = act(x + bias) over a [rows x cols] tensor, as this
// reference loop does:
//
//	for r := range rows {
//		for c := range cols {
//			v := x[r*cols+c]
//			if bias != nil {
//				v += bias[c]
//			}
//			y[r*cols+c] = act(v)
//		}
//	}
//
// with relu(v) = v < 0 ? 0 : v, sigmoid(v) = 1/(1+exp(-v)) and tanh; NaN
// propagates through every activation. bias ([cols]) may be nil; y may be x.
// Pieces of rows run in one cgo call on the calling thread and the kernels'
// pool (hps_bias_act_fwd_split): goroutines of their own, one per piece,
// parked the caller in a WaitGroup, and its goroutine came back on another
// thread, often the CPU where the pool's helper waits for the next GEMM's
// rows; measured on the 2-core Xeon, the forward's split GEMMs then ran as
// if alone (fc2: 700-935 us at 2 threads against 364 split, 720 alone), and
// a 2-thread ctrdnn step took 6-11% longer.
func (b *CPU) BiasAct(act Act, rows, cols int, x, bias, y Buffer) error {
	const op = "bias-act"
	n, err := matrixLen(op, rows, cols)
	if err != nil {
		return err
	}
	if err := checkAct(op, act); err != nil {
		return err
	}
	xh, err := host(op+": x", x, n)
	if err != nil {
		return err
	}
	bh, err := optional(op+": bias", bias, cols)
	if err != nil {
		return err
	}
	yh, err := host(op+": y", y, n)
	if err != nil {
		return err
	}
	C.hps_bias_act_fwd_split(b.cisa(), C.hps_act(act), C.int64_t(rows), C.int64_t(cols),
		fptr(xh), fptr(bh), fptr(yh), C.int64_t(rowGrain(cols)), C.int(b.threads))
	return nil
}

// BiasActBackward computes, from the forward's output y and its gradient dy,
// the gradient of the pre-activation and the column sums of it:
//
//	for r := range rows {
//		for c := range cols {
//			i := r*cols + c
//			dx[i] = dy[i] * act'(y[i]) // 1, y > 0, y*(1-y), 1-y*y
//			dbias[c] += dx[i]          // dbias starts at zero
//		}
//	}
//
// dbias ([cols]) may be nil; dx may be dy. Column sums are added per piece of
// rows and the pieces in order, so dbias does not depend on the thread count.
func (b *CPU) BiasActBackward(act Act, rows, cols int, y, dy, dx, dbias Buffer) error {
	const op = "bias-act backward"
	n, err := matrixLen(op, rows, cols)
	if err != nil {
		return err
	}
	if err := checkAct(op, act); err != nil {
		return err
	}
	yh, err := host(op+": y", y, n)
	if err != nil {
		return err
	}
	dyh, err := host(op+": dy", dy, n)
	if err != nil {
		return err
	}
	dxh, err := host(op+": dx", dx, n)
	if err != nil {
		return err
	}
	dbh, err := optional(op+": dbias", dbias, cols)
	if err != nil {
		return err
	}
	run := func(grain int, partials []float32) {
		C.hps_bias_act_bwd_split(b.cisa(), C.hps_act(act), C.int64_t(rows), C.int64_t(cols),
			fptr(yh), fptr(dyh), fptr(dxh), fptr(partials), C.int64_t(grain), C.int(b.threads))
	}
	if dbh == nil {
		run(rowGrain(cols), nil)
		return nil
	}
	grain := reductionGrain(rows, cols)
	partials := make([]float32, pieceCount(rows, grain)*cols)
	run(grain, partials)
	sumPieces(dbh, partials)
	return nil
}

// reductionGrain is rowGrain, coarsened so that a reduction over rows has at
// most maxPartialPieces pieces. It depends on the shape only, never on the
// thread count.
func reductionGrain(rows, cols int) int {
	return max(rowGrain(cols), (rows+maxPartialPieces-1)/maxPartialPieces)
}

// sumPieces sets dst to the sum of the consecutive len(dst)-float pieces of
// partials, added in piece order.
func sumPieces(dst, partials []float32) {
	clear(dst)
	if len(dst) == 0 {
		return
	}
	for ; len(partials) >= len(dst); partials = partials[len(dst):] {
		for i, v := range partials[:len(dst)] {
			dst[i] += v
		}
	}
}

// matrixLen checks a [rows x cols] shape and returns rows*cols. Shapes are
// capped far below overflow so that callers may also form 4*rows*cols.
func matrixLen(op string, rows, cols int) (int, error) {
	if rows < 0 || cols < 0 {
		return 0, fmt.Errorf("%s: negative shape %d x %d: %w", op, rows, cols, ErrArg)
	}
	if cols > 0 && rows > (math.MaxInt>>3)/cols {
		return 0, fmt.Errorf("%s: shape %d x %d is too large: %w", op, rows, cols, ErrArg)
	}
	return rows * cols, nil
}

func checkAct(op string, act Act) error {
	if act < Identity || act > Tanh {
		return fmt.Errorf("%s: unknown activation %v: %w", op, act, ErrArg)
	}
	return nil
}
