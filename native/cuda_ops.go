//go:build cuda

package native

/*
#include "heterps_cuda.h"
*/
import "C"

import (
	"fmt"
	"math/bits"
	"unsafe"
)

// The ops of the CUDA backend. Each validates its arguments on the host with
// the CPU backend's checks (same errors), then queues one kernel launch (or a
// few) through the heterps_cuda.h wrappers. Host-side index arrays (ids,
// offsets, rows, labels) are validated before they are uploaded, so the
// kernels only ever see valid indices.

// Gemm computes C[m x n] = alpha*op(A)*op(B) + beta*C through cuBLAS.
func (b *CUDA) Gemm(transA, transB bool, m, n, k int, alpha float32, a Buffer, lda int,
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
	ad, err := b.gemmOperand("A", a, aRows, aCols, lda)
	if err != nil {
		return err
	}
	bd, err := b.gemmOperand("B", bb, bRows, bCols, ldb)
	if err != nil {
		return err
	}
	cd, err := b.gemmOperand("C", c, m, n, ldc)
	if err != nil {
		return err
	}
	b.blasMu.Lock()
	defer b.blasMu.Unlock()
	return b.run("gemm", func(C.cudaStream_t) C.int {
		return C.hps_cuda_sgemm(b.blas, cbool(transA), cbool(transB), C.int64_t(m), C.int64_t(n),
			C.int64_t(k), C.float(alpha), ad.ptr(), C.int64_t(lda), bd.ptr(), C.int64_t(ldb),
			C.float(beta), cd.ptr(), C.int64_t(ldc))
	})
}

func (b *CUDA) gemmOperand(name string, buf Buffer, rows, cols, ld int) (DeviceBuffer, error) {
	if ld < max(1, cols) {
		return DeviceBuffer{}, fmt.Errorf("gemm: ld%s=%d is less than its %d columns: %w", name, ld, cols, ErrShape)
	}
	need := 0
	if rows > 0 && cols > 0 {
		need = (rows-1)*ld + cols
	}
	return b.devAtLeast("gemm: "+name, buf, need)
}

// BiasAct computes y = act(x + bias); bias may be nil, y may be x.
func (b *CUDA) BiasAct(act Act, rows, cols int, x, bias, y Buffer) error {
	const op = "bias-act"
	n, err := matrixLen(op, rows, cols)
	if err != nil {
		return err
	}
	if err := checkAct(op, act); err != nil {
		return err
	}
	xd, err := b.dev(op+": x", x, n)
	if err != nil {
		return err
	}
	bd, err := b.devOptional(op+": bias", bias, cols)
	if err != nil {
		return err
	}
	yd, err := b.dev(op+": y", y, n)
	if err != nil {
		return err
	}
	return b.run(op, func(s C.cudaStream_t) C.int {
		return C.hps_cuda_bias_act_fwd(s, C.hps_act(act), C.int64_t(rows), C.int64_t(cols),
			xd.ptr(), bd.ptr(), yd.ptr())
	})
}

// BiasActBackward computes dx = dy*act'(y) and, when dbias is not nil, its
// column sums (a two-pass reduction without atomics); dx may be dy.
func (b *CUDA) BiasActBackward(act Act, rows, cols int, y, dy, dx, dbias Buffer) error {
	const op = "bias-act backward"
	n, err := matrixLen(op, rows, cols)
	if err != nil {
		return err
	}
	if err := checkAct(op, act); err != nil {
		return err
	}
	yd, err := b.dev(op+": y", y, n)
	if err != nil {
		return err
	}
	dyd, err := b.dev(op+": dy", dy, n)
	if err != nil {
		return err
	}
	dxd, err := b.dev(op+": dx", dx, n)
	if err != nil {
		return err
	}
	dbd, err := b.devOptional(op+": dbias", dbias, cols)
	if err != nil {
		return err
	}
	return b.run(op, func(s C.cudaStream_t) C.int {
		return C.hps_cuda_bias_act_bwd(s, C.hps_act(act), C.int64_t(rows), C.int64_t(cols),
			yd.ptr(), dyd.ptr(), dxd.ptr(), dbd.ptr())
	})
}

// EmbeddingBag pools table rows over CSR bags into out [bags x dim]. offsets
// and ids are validated on the host, then uploaded for the kernel.
func (b *CUDA) EmbeddingBag(pool Pool, table Buffer, rows, dim int, offsets, ids []int64, out Buffer) error {
	const op = "embedding bag"
	if err := checkBagPool(op, pool); err != nil {
		return err
	}
	if rows < 0 || dim < 0 {
		return fmt.Errorf("%s: negative table shape %d x %d: %w", op, rows, dim, ErrArg)
	}
	td, err := b.dev(op+": table", table, rows*dim)
	if err != nil {
		return err
	}
	nbags, err := checkBagOffsets(op, offsets, len(ids))
	if err != nil {
		return err
	}
	od, err := b.dev(op+": out", out, nbags*dim)
	if err != nil {
		return err
	}
	used := ids[:offsets[nbags]]
	if _, err := cudaCheckIDs(op, used, rows); err != nil {
		return err
	}
	if nbags == 0 || dim == 0 {
		return nil
	}
	return b.run(op, func(s C.cudaStream_t) C.int {
		off, freeOff, st := b.uploadInts(s, offsets)
		if st != C.HPS_OK {
			return st
		}
		defer freeOff()
		idp, freeIDs, st := b.uploadInts(s, used)
		if st != C.HPS_OK {
			return st
		}
		defer freeIDs()
		return C.hps_cuda_embbag_fwd(s, C.hps_pool(pool), C.int64_t(rows), C.int64_t(dim), td.ptr(),
			C.int64_t(nbags), off, C.int64_t(len(used)), idp, od.ptr())
	})
}

// cudaCheckIDs checks 0 <= id < rows for every id and returns the largest.
func cudaCheckIDs(op string, ids []int64, rows int) (int64, error) {
	var top int64
	for i, id := range ids {
		if id < 0 || id >= int64(rows) {
			return 0, fmt.Errorf("%s: ids[%d] = %d outside the table's %d rows: %w", op, i, id, rows, ErrRange)
		}
		top = max(top, id)
	}
	return top, nil
}

// EmbeddingBagBackward turns dout [bags x dim] into one merged gradient row
// per distinct id, in order of first occurrence, entirely on the GPU: a
// radix sort of (id, position) finds the distinct ids and each position's
// row, a second sort of (row, position) groups each row's occurrences, and
// one thread group per row adds them in position order. The distinct ids are
// downloaded (SparseRows.IDs lives on the host); Rows stays on the device.
func (b *CUDA) EmbeddingBagBackward(pool Pool, dim int, offsets, ids []int64, dout Buffer) (SparseRows, error) {
	const op = "embedding bag backward"
	if err := checkBagPool(op, pool); err != nil {
		return SparseRows{}, err
	}
	if dim < 0 {
		return SparseRows{}, fmt.Errorf("%s: negative dim %d: %w", op, dim, ErrArg)
	}
	nbags, err := checkBagOffsets(op, offsets, len(ids))
	if err != nil {
		return SparseRows{}, err
	}
	dd, err := b.dev(op+": dout", dout, nbags*dim)
	if err != nil {
		return SparseRows{}, err
	}
	used := ids[:offsets[nbags]]
	if len(used) > 1<<31-1 {
		return SparseRows{}, fmt.Errorf("%s: %d ids, at most 2^31-1 per call: %w", op, len(used), ErrArg)
	}
	var top int64
	for i, id := range used {
		if id < 0 {
			return SparseRows{}, fmt.Errorf("%s: ids[%d] = %d is negative: %w", op, i, id, ErrRange)
		}
		top = max(top, id)
	}
	if len(used) == 0 {
		return SparseRows{IDs: []int64{}, Dim: dim, Rows: b.Alloc(0)}, nil
	}
	uniq := make([]int64, len(used))
	var nuniq C.int64_t
	var gradMem unsafe.Pointer
	err = b.run(op, func(s C.cudaStream_t) C.int {
		idp, freeIDs, st := b.uploadInts(s, used)
		if st != C.HPS_OK {
			return st
		}
		defer freeIDs()
		off, freeOff, st := b.uploadInts(s, offsets)
		if st != C.HPS_OK {
			return st
		}
		defer freeOff()
		var dev unsafe.Pointer // the distinct ids, then each position's row
		if st := C.hps_cuda_malloc(s, C.size_t(16*len(used)), &dev); st != C.HPS_OK {
			return st
		}
		defer C.hps_cuda_free(s, dev)
		uniqDev := (*C.int64_t)(dev)
		index := (*C.int64_t)(unsafe.Add(dev, 8*len(used)))
		keyBits := C.int(max(1, bits.Len64(uint64(top))))
		if st := C.hps_cuda_unique(s, C.int64_t(len(used)), idp, keyBits, uniqDev, index, &nuniq); st != C.HPS_OK {
			return st
		}
		if e := C.cudaMemcpyAsync(unsafe.Pointer(&uniq[0]), unsafe.Pointer(uniqDev), C.size_t(8*nuniq),
			C.cudaMemcpyDeviceToHost, s); e != C.cudaSuccess {
			return C.int(e)
		}
		if gradMem, st = allocZeroed(s, int(nuniq)*dim); st != C.HPS_OK {
			return st
		}
		st = C.hps_cuda_embbag_bwd(s, C.hps_pool(pool), C.int64_t(dim), C.int64_t(nbags), off,
			C.int64_t(len(used)), index, dd.ptr(), nuniq, (*C.float)(gradMem))
		if st != C.HPS_OK {
			if gradMem != nil {
				C.hps_cuda_free(s, gradMem)
			}
			return st
		}
		return C.int(C.cudaStreamSynchronize(s)) // the ids have arrived
	})
	if err != nil {
		return SparseRows{}, err
	}
	return SparseRows{IDs: uniq[:nuniq:nuniq], Dim: dim, Rows: b.wrap(gradMem, int(nuniq)*dim)}, nil
}

// WeightedSum computes out = sum_k w[k]*g[k]; out may be one of the g[k].
func (b *CUDA) WeightedSum(out Buffer, w []float32, g []Buffer) error {
	const op = "weighted sum"
	od, err := b.dev(op+": out", out, -1)
	if err != nil {
		return err
	}
	if len(w) != len(g) {
		return fmt.Errorf("%s: %d weights for %d buffers: %w", op, len(w), len(g), ErrShape)
	}
	ptrs := make([]*C.float, len(g))
	for k := range g {
		gd, err := b.dev(fmt.Sprintf("%s: g[%d]", op, k), g[k], od.n)
		if err != nil {
			return err
		}
		if gd.mem == od.mem && gd.off != od.off && gd.off < od.off+od.n && od.off < gd.off+gd.n {
			return fmt.Errorf("%s: out partially overlaps g[%d]: %w", op, k, ErrArg)
		}
		ptrs[k] = gd.ptr()
	}
	if od.n == 0 {
		return nil
	}
	return b.run(op, func(s C.cudaStream_t) C.int {
		// The wrapper copies the pointers and weights into the kernel's
		// parameters; both arrays are only read during the call. The
		// pointers are device addresses, not Go pointers.
		var gp **C.float
		var wp *C.float
		if len(g) > 0 {
			gp, wp = &ptrs[0], (*C.float)(unsafe.Pointer(&w[0]))
		}
		return C.hps_cuda_weighted_sum(s, C.int64_t(od.n), C.int64_t(len(g)), gp, wp, od.ptr())
	})
}

// Update applies one optimiser step to dense parameters.
func (b *CUDA) Update(o Optim, w, g Buffer, state ...Buffer) error {
	const op = "update"
	if err := checkOptim(op, o, len(state)); err != nil {
		return err
	}
	wd, err := b.dev(op+": w", w, -1)
	if err != nil {
		return err
	}
	gd, err := b.dev(op+": g", g, wd.n)
	if err != nil {
		return err
	}
	st, err := b.states(op, state, wd.n)
	if err != nil {
		return err
	}
	co := cOptim(o)
	return b.run(op, func(s C.cudaStream_t) C.int {
		n := C.int64_t(wd.n)
		switch o.Kind {
		case SGD:
			return C.hps_cuda_sgd(s, n, wd.ptr(), gd.ptr(), st[0].ptr(), &co)
		case Adagrad:
			return C.hps_cuda_adagrad(s, n, wd.ptr(), gd.ptr(), st[0].ptr(), &co)
		default:
			return C.hps_cuda_adam(s, n, wd.ptr(), gd.ptr(), st[0].ptr(), st[1].ptr(), &co)
		}
	})
}

// UpdateRows applies one optimiser step to the listed distinct rows of a
// table; rows are validated on the host (range and duplicates) and uploaded.
func (b *CUDA) UpdateRows(o Optim, table Buffer, tableRows, dim int, rows []int64, g Buffer, state ...Buffer) error {
	const op = "update rows"
	if err := checkOptim(op, o, len(state)); err != nil {
		return err
	}
	if tableRows < 0 || dim < 0 {
		return fmt.Errorf("%s: negative table shape %d x %d: %w", op, tableRows, dim, ErrArg)
	}
	td, err := b.dev(op+": table", table, tableRows*dim)
	if err != nil {
		return err
	}
	gd, err := b.dev(op+": g", g, len(rows)*dim)
	if err != nil {
		return err
	}
	st, err := b.states(op, state, tableRows*dim)
	if err != nil {
		return err
	}
	for r, row := range rows {
		if row < 0 || row >= int64(tableRows) {
			return fmt.Errorf("%s: rows[%d] = %d outside the table's %d rows: %w", op, r, row, tableRows, ErrRange)
		}
	}
	if r := firstDuplicateID(rows); r >= 0 {
		return fmt.Errorf("%s: rows[%d] = %d is listed twice: %w", op, r, rows[r], ErrArg)
	}
	if len(rows) == 0 || dim == 0 {
		return nil
	}
	co := cOptim(o)
	return b.run(op, func(s C.cudaStream_t) C.int {
		rp, free, stc := b.uploadInts(s, rows)
		if stc != C.HPS_OK {
			return stc
		}
		defer free()
		tr, d, n := C.int64_t(tableRows), C.int64_t(dim), C.int64_t(len(rows))
		switch o.Kind {
		case SGD:
			return C.hps_cuda_sgd_rows(s, tr, d, td.ptr(), n, rp, gd.ptr(), st[0].ptr(), &co)
		case Adagrad:
			return C.hps_cuda_adagrad_rows(s, tr, d, td.ptr(), n, rp, gd.ptr(), st[0].ptr(), &co)
		default:
			return C.hps_cuda_adam_rows(s, tr, d, td.ptr(), n, rp, gd.ptr(), st[0].ptr(), st[1].ptr(), &co)
		}
	})
}

// states unwraps optimiser state buffers of n floats each, padded to two
// entries with empty buffers (NULL in C).
func (b *CUDA) states(op string, state []Buffer, n int) ([2]DeviceBuffer, error) {
	var out [2]DeviceBuffer
	for i, s := range state {
		d, err := b.dev(fmt.Sprintf("%s: state[%d]", op, i), s, n)
		if err != nil {
			return out, err
		}
		out[i] = d
	}
	return out, nil
}

// LSTMForward is the pointwise part of an LSTM cell (see CPU.LSTMForward).
func (b *CUDA) LSTMForward(batch, hidden int, z, bias, cPrev, gates, c, h Buffer) error {
	const op = "lstm forward"
	n, err := matrixLen(op, batch, hidden)
	if err != nil {
		return err
	}
	var zd, bd, cpd, gd, cd, hd DeviceBuffer
	err = b.operands(op,
		devOperand{&zd, "z", z, 4 * n, false},
		devOperand{&bd, "bias", bias, 4 * hidden, true},
		devOperand{&cpd, "cPrev", cPrev, n, false},
		devOperand{&gd, "gates", gates, 4 * n, false},
		devOperand{&cd, "c", c, n, false},
		devOperand{&hd, "h", h, n, false})
	if err != nil {
		return err
	}
	return b.run(op, func(s C.cudaStream_t) C.int {
		return C.hps_cuda_lstm_fwd(s, C.int64_t(batch), C.int64_t(hidden), zd.ptr(), bd.ptr(),
			cpd.ptr(), gd.ptr(), cd.ptr(), hd.ptr())
	})
}

// LSTMBackward is the backward of LSTMForward (see CPU.LSTMBackward).
func (b *CUDA) LSTMBackward(batch, hidden int, gates, cPrev, c, dh, dc, dz, dcPrev Buffer) error {
	const op = "lstm backward"
	n, err := matrixLen(op, batch, hidden)
	if err != nil {
		return err
	}
	var gd, cpd, cd, dhd, dcd, dzd, dcpd DeviceBuffer
	err = b.operands(op,
		devOperand{&gd, "gates", gates, 4 * n, false},
		devOperand{&cpd, "cPrev", cPrev, n, false},
		devOperand{&cd, "c", c, n, false},
		devOperand{&dhd, "dh", dh, n, false},
		devOperand{&dcd, "dc", dc, n, true},
		devOperand{&dzd, "dz", dz, 4 * n, false},
		devOperand{&dcpd, "dcPrev", dcPrev, n, false})
	if err != nil {
		return err
	}
	return b.run(op, func(s C.cudaStream_t) C.int {
		return C.hps_cuda_lstm_bwd(s, C.int64_t(batch), C.int64_t(hidden), gd.ptr(), cpd.ptr(),
			cd.ptr(), dhd.ptr(), dcd.ptr(), dzd.ptr(), dcpd.ptr())
	})
}

// devOperand is one named buffer of an op, its required length, and whether
// it may be nil.
type devOperand struct {
	dst      *DeviceBuffer
	name     string
	buf      Buffer
	want     int
	optional bool
}

func (b *CUDA) operands(op string, ops ...devOperand) error {
	for _, o := range ops {
		var err error
		if o.optional {
			*o.dst, err = b.devOptional(op+": "+o.name, o.buf, o.want)
		} else {
			*o.dst, err = b.dev(op+": "+o.name, o.buf, o.want)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Softmax writes the row softmax (log-softmax when log) of x into y; y may be x.
func (b *CUDA) Softmax(rows, cols int, x, y Buffer, log bool) error {
	const op = "softmax"
	n, err := matrixLen(op, rows, cols)
	if err != nil {
		return err
	}
	xd, err := b.dev(op+": x", x, n)
	if err != nil {
		return err
	}
	yd, err := b.dev(op+": y", y, n)
	if err != nil {
		return err
	}
	return b.run(op, func(s C.cudaStream_t) C.int {
		return C.hps_cuda_softmax_rows(s, C.int64_t(rows), C.int64_t(cols), xd.ptr(), yd.ptr(), cbool(log))
	})
}

// BCEWithLogits returns the summed binary cross-entropy (deterministic
// two-pass reduction in double on the GPU; waits for the result).
func (b *CUDA) BCEWithLogits(n int, logits, labels Buffer) (float64, error) {
	const op = "bce-with-logits"
	if n < 0 {
		return 0, fmt.Errorf("%s: negative length %d: %w", op, n, ErrArg)
	}
	xd, err := b.dev(op+": logits", logits, n)
	if err != nil {
		return 0, err
	}
	yd, err := b.dev(op+": labels", labels, n)
	if err != nil {
		return 0, err
	}
	return b.lossSum(op, func(s C.cudaStream_t, loss *C.double) C.int {
		return C.hps_cuda_bce_logits_fwd(s, C.int64_t(n), xd.ptr(), yd.ptr(), loss)
	})
}

// lossSum runs a kernel that writes one double into device memory and
// returns that double once the stream has reached it.
func (b *CUDA) lossSum(op string, f func(s C.cudaStream_t, loss *C.double) C.int) (float64, error) {
	var out C.double
	err := b.run(op, func(s C.cudaStream_t) C.int {
		var dev unsafe.Pointer
		if st := C.hps_cuda_malloc(s, 8, &dev); st != C.HPS_OK {
			return st
		}
		defer C.hps_cuda_free(s, dev)
		if st := f(s, (*C.double)(dev)); st != C.HPS_OK {
			return st
		}
		if e := C.cudaMemcpyAsync(unsafe.Pointer(&out), dev, 8, C.cudaMemcpyDeviceToHost, s); e != C.cudaSuccess {
			return C.int(e)
		}
		return C.int(C.cudaStreamSynchronize(s))
	})
	return float64(out), err
}

// BCEWithLogitsBackward writes dx = scale*(sigmoid(logits) - labels).
func (b *CUDA) BCEWithLogitsBackward(n int, logits, labels Buffer, scale float32, dx Buffer) error {
	const op = "bce-with-logits backward"
	if n < 0 {
		return fmt.Errorf("%s: negative length %d: %w", op, n, ErrArg)
	}
	xd, err := b.dev(op+": logits", logits, n)
	if err != nil {
		return err
	}
	yd, err := b.dev(op+": labels", labels, n)
	if err != nil {
		return err
	}
	dxd, err := b.dev(op+": dx", dx, n)
	if err != nil {
		return err
	}
	return b.run(op, func(s C.cudaStream_t) C.int {
		return C.hps_cuda_bce_logits_bwd(s, C.int64_t(n), xd.ptr(), yd.ptr(), C.float(scale), dxd.ptr())
	})
}

// SoftmaxCrossEntropy returns the summed cross-entropy of row logits against
// class labels (validated on the host) and, when dx is not nil, writes
// dx = scale*(softmax - onehot). Waits for the loss.
func (b *CUDA) SoftmaxCrossEntropy(rows, cols int, logits Buffer, labels []int64, scale float32,
	dx Buffer) (float64, error) {
	const op = "softmax cross-entropy"
	n, err := matrixLen(op, rows, cols)
	if err != nil {
		return 0, err
	}
	xd, err := b.dev(op+": logits", logits, n)
	if err != nil {
		return 0, err
	}
	if err := checkLabels(op, labels, rows, cols); err != nil {
		return 0, err
	}
	dxd, err := b.devOptional(op+": dx", dx, n)
	if err != nil {
		return 0, err
	}
	if rows == 0 {
		return 0, nil
	}
	return b.lossSum(op, func(s C.cudaStream_t, loss *C.double) C.int {
		lp, free, st := b.uploadInts(s, labels)
		if st != C.HPS_OK {
			return st
		}
		defer free()
		return C.hps_cuda_softmax_xent(s, C.int64_t(rows), C.int64_t(cols), xd.ptr(), lp,
			C.float(scale), dxd.ptr(), loss)
	})
}
