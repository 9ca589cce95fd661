package native

// #include "heterps_kernels.h"
import "C"

import "fmt"

// elementGrain is how many elements one piece of an elementwise op holds:
// 64 Ki floats per input, inside L2.
const elementGrain = 64 << 10

// Softmax writes the row softmax of a [rows x cols] tensor x into y, or the
// log-softmax when log is set, shifting each row by its maximum first:
//
//	for r := range rows {
//		row, out := x[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
//		m := max(row...)
//		s := sum(exp(row[i] - m) for i)
//		for i := range row {
//			if log {
//				out[i] = (row[i] - m) - ln(s)
//			} else {
//				out[i] = exp(row[i]-m) * (1/s)
//			}
//		}
//	}
//
// A NaN in a row makes the whole output row NaN. y may be x.
func (b *CPU) Softmax(rows, cols int, x, y Buffer, log bool) error {
	const op = "softmax"
	n, err := matrixLen(op, rows, cols)
	if err != nil {
		return err
	}
	xh, err := host(op+": x", x, n)
	if err != nil {
		return err
	}
	yh, err := host(op+": y", y, n)
	if err != nil {
		return err
	}
	chunks(rows, rowGrain(cols), b.threads, func(_, lo, hi int) {
		C.hps_softmax_rows(b.cisa(), C.int64_t(hi-lo), C.int64_t(cols),
			fptr(xh[lo*cols:]), fptr(yh[lo*cols:]), cbool(log))
	})
	return nil
}

// BCEWithLogits returns the summed binary cross-entropy of logits x against
// labels y, in the form that cannot overflow:
//
//	for i := range n {
//		loss += max(x[i], 0) - x[i]*y[i] + log1p(exp(-|x[i]|))
//	}
//
// Each term is computed in float32 and the sum in float64, per piece of 64 Ki
// elements; pieces are added in order, so the sum does not depend on the
// thread count.
func (b *CPU) BCEWithLogits(n int, logits, labels Buffer) (float64, error) {
	const op = "bce-with-logits"
	xh, yh, err := bceOperands(op, n, logits, labels)
	if err != nil {
		return 0, err
	}
	partials := make([]float64, pieceCount(n, elementGrain))
	chunks(n, elementGrain, b.threads, func(p, lo, hi int) {
		partials[p] = float64(C.hps_bce_logits_fwd(b.cisa(), C.int64_t(hi-lo),
			fptr(xh[lo:hi]), fptr(yh[lo:hi])))
	})
	return sumInOrder(partials), nil
}

// BCEWithLogitsBackward writes the gradient of scale*BCEWithLogits:
//
//	for i := range n {
//		dx[i] = scale * (sigmoid(x[i]) - y[i])
//	}
//
// For x >= 0 it is computed as (1-y) - sigmoid(-x), so a confident correct
// prediction keeps its tiny gradient instead of rounding sigmoid(x) to 1.
func (b *CPU) BCEWithLogitsBackward(n int, logits, labels Buffer, scale float32, dx Buffer) error {
	const op = "bce-with-logits backward"
	xh, yh, err := bceOperands(op, n, logits, labels)
	if err != nil {
		return err
	}
	dxh, err := host(op+": dx", dx, n)
	if err != nil {
		return err
	}
	chunks(n, elementGrain, b.threads, func(_, lo, hi int) {
		C.hps_bce_logits_bwd(b.cisa(), C.int64_t(hi-lo), fptr(xh[lo:hi]), fptr(yh[lo:hi]),
			C.float(scale), fptr(dxh[lo:hi]))
	})
	return nil
}

func bceOperands(op string, n int, logits, labels Buffer) (x, y HostBuffer, err error) {
	if n < 0 {
		return nil, nil, fmt.Errorf("%s: negative length %d: %w", op, n, ErrArg)
	}
	if x, err = host(op+": logits", logits, n); err != nil {
		return nil, nil, err
	}
	if y, err = host(op+": labels", labels, n); err != nil {
		return nil, nil, err
	}
	return x, y, nil
}

// SoftmaxCrossEntropy returns the summed cross-entropy of the rows of logits
// x [rows x cols] against class labels, and, when dx is not nil, writes the
// gradient of scale times that sum:
//
//	for r := range rows {
//		p := softmax(x[r*cols : (r+1)*cols])
//		loss += -ln(p[labels[r]])              // as ln(s) - (x[label] - m)
//		for i := range cols {
//			dx[r*cols+i] = scale * (p[i] - onehot(i == labels[r]))
//		}
//	}
//
// Labels must lie in [0, cols) (else an error wrapping ErrRange, before
// anything is written). Row losses are summed in float64 per piece of rows and
// the pieces in order, so the loss does not depend on the thread count.
func (b *CPU) SoftmaxCrossEntropy(rows, cols int, logits Buffer, labels []int64, scale float32,
	dx Buffer) (float64, error) {
	const op = "softmax cross-entropy"
	n, err := matrixLen(op, rows, cols)
	if err != nil {
		return 0, err
	}
	xh, err := host(op+": logits", logits, n)
	if err != nil {
		return 0, err
	}
	if err := checkLabels(op, labels, rows, cols); err != nil {
		return 0, err
	}
	dxh, err := optional(op+": dx", dx, n)
	if err != nil {
		return 0, err
	}
	grain := rowGrain(cols)
	partials := make([]float64, pieceCount(rows, grain))
	status := make([]C.int, len(partials))
	bad := make([]int64, len(partials))
	chunks(rows, grain, b.threads, func(p, lo, hi int) {
		var dxp *C.float
		if dxh != nil {
			dxp = fptr(dxh[lo*cols:])
		}
		var loss C.double
		var badRow C.int64_t
		status[p] = C.hps_softmax_xent(b.cisa(), C.int64_t(hi-lo), C.int64_t(cols),
			fptr(xh[lo*cols:]), iptr(labels[lo:hi]), C.float(scale), dxp, &loss, &badRow)
		partials[p], bad[p] = float64(loss), int64(badRow)+int64(lo)
	})
	for p, rc := range status {
		if rc != C.HPS_OK {
			return 0, fmt.Errorf("%s: kernel rejected row %d (status %d): %w", op, bad[p], int(rc), ErrRange)
		}
	}
	return sumInOrder(partials), nil
}

func checkLabels(op string, labels []int64, rows, cols int) error {
	if len(labels) != rows {
		return fmt.Errorf("%s: %d labels for %d rows: %w", op, len(labels), rows, ErrShape)
	}
	for r, l := range labels {
		if l < 0 || l >= int64(cols) {
			return fmt.Errorf("%s: label %d of row %d is outside [0, %d): %w", op, l, r, cols, ErrRange)
		}
	}
	return nil
}

// sumInOrder adds per-piece partial sums in piece order.
func sumInOrder(partials []float64) float64 {
	var s float64
	for _, v := range partials {
		s += v
	}
	return s
}
