package native

// #include "heterps_kernels.h"
import "C"

import (
	"fmt"
)

// Update applies one optimiser step to the dense parameters w with gradient
// g (same length). state holds o.StateBuffers() buffers shaped like w: the
// velocity for SGD with momentum, the squared-gradient accumulator for
// Adagrad, the first and second moments for Adam.
//
// The elements are split into pieces of denseUpdateGrain parameters, run in
// one cgo call by the calling thread and the kernels' pool
// (hps_update_split); every element's update depends on that element only,
// so results do not depend on the thread count.
func (b *CPU) Update(o Optim, w, g Buffer, state ...Buffer) error {
	if err := checkOptim("update", o, len(state)); err != nil {
		return err
	}
	wh, err := host("update: w", w, -1)
	if err != nil {
		return err
	}
	gh, err := host("update: g", g, len(wh))
	if err != nil {
		return err
	}
	st, err := stateBuffers("update", state, len(wh))
	if err != nil {
		return err
	}
	co := cOptim(o)
	C.hps_update_split(b.cisa(), cOptKind(o.Kind), C.int64_t(len(wh)), fptr(wh), fptr(gh),
		stateAt(st, 0, len(wh)), stateAt(st, 1, len(wh)), &co, C.int64_t(denseUpdateGrain), C.int(b.threads))
	return nil
}

// UpdateRows applies one optimiser step to the listed rows of a [tableRows x
// dim] table; g is [len(rows) x dim], row r of g being the gradient of table
// row rows[r]; state tables are shaped like the table. Rows must lie in the
// table (ErrRange) and be distinct (ErrArg): a duplicate is found with one
// hash pass over rows, cheap beside the update's own memory traffic, and
// rejecting it keeps the row pieces that run on different threads disjoint.
// Nothing is written unless all checks pass.
//
// The rows are split into pieces of about 256 KiB of gradient, each piece
// one cgo call, run on the backend's threads.
func (b *CPU) UpdateRows(o Optim, table Buffer, tableRows, dim int, rows []int64, g Buffer, state ...Buffer) error {
	if err := checkOptim("update rows", o, len(state)); err != nil {
		return err
	}
	if tableRows < 0 || dim < 0 {
		return fmt.Errorf("update rows: negative table shape %d x %d: %w", tableRows, dim, ErrArg)
	}
	t, err := host("update rows: table", table, tableRows*dim)
	if err != nil {
		return err
	}
	gh, err := host("update rows: g", g, len(rows)*dim)
	if err != nil {
		return err
	}
	st, err := stateBuffers("update rows", state, tableRows*dim)
	if err != nil {
		return err
	}
	for r, row := range rows {
		if row < 0 || row >= int64(tableRows) {
			return fmt.Errorf("update rows: rows[%d] = %d outside the table's %d rows: %w", r, row, tableRows, ErrRange)
		}
	}
	if r := firstDuplicateID(rows); r >= 0 {
		return fmt.Errorf("update rows: rows[%d] = %d is listed twice: %w", r, rows[r], ErrArg)
	}
	co := cOptim(o)
	var bad C.int64_t
	rc := C.hps_rows_update_split(b.cisa(), cOptKind(o.Kind), C.int64_t(tableRows), C.int64_t(dim), fptr(t),
		C.int64_t(len(rows)), iptr(rows), fptr(gh), stateAt(st, 0, len(t)), stateAt(st, 1, len(t)), &co,
		C.int64_t(gatherGrain(len(rows), dim, b.threads)), C.int(b.threads), &bad)
	if rc != C.HPS_OK {
		// Unreachable after the checks above; reported rather than ignored.
		return hpsStatusError("update rows", rc, int64(bad))
	}
	return nil
}

// checkOptim validates the optimiser's kind, hyper-parameters and the
// number of state buffers given.
func checkOptim(op string, o Optim, nstate int) error {
	switch o.Kind {
	case SGD, Adagrad:
	case Adam:
		if o.Step < 1 {
			return fmt.Errorf("%s: adam step %d, want >= 1 (1-based, for bias correction): %w", op, o.Step, ErrArg)
		}
		if !(o.Beta1 >= 0 && o.Beta1 < 1 && o.Beta2 >= 0 && o.Beta2 < 1) {
			return fmt.Errorf("%s: adam betas %g, %g, want in [0, 1): %w", op, o.Beta1, o.Beta2, ErrArg)
		}
	default:
		return fmt.Errorf("%s: unknown optimiser kind %d: %w", op, int(o.Kind), ErrArg)
	}
	if want := o.StateBuffers(); nstate != want {
		return fmt.Errorf("%s: %d state buffers, optimiser needs %d: %w", op, nstate, want, ErrArg)
	}
	return nil
}

// stateBuffers unwraps the optimiser state, each of n floats.
func stateBuffers(op string, state []Buffer, n int) ([]HostBuffer, error) {
	out := make([]HostBuffer, len(state))
	for i, s := range state {
		h, err := hostAt(op+": state", i, s, n)
		if err != nil {
			return nil, err
		}
		out[i] = h
	}
	return out, nil
}

// denseUpdateGrain is the parameters of a piece of a dense update (256 KiB).
const denseUpdateGrain = 64 << 10

// stateAt is the C pointer to st[i][:n], or NULL when there is no such
// state buffer (SGD without momentum) or n is 0.
func stateAt(st []HostBuffer, i, n int) *C.float {
	if i >= len(st) {
		return nil
	}
	return fptr(st[i][:n])
}

func cOptim(o Optim) C.hps_opt {
	return C.hps_opt{
		lr:           C.float(o.LR),
		momentum:     C.float(o.Momentum),
		beta1:        C.float(o.Beta1),
		beta2:        C.float(o.Beta2),
		eps:          C.float(o.Eps),
		weight_decay: C.float(o.WeightDecay),
		step:         C.int64_t(o.Step),
	}
}

// cOptKind is the kernels' name (HPS_OPT_*) of an optimiser kind.
func cOptKind(k OptKind) C.int {
	switch k {
	case SGD:
		return C.HPS_OPT_SGD
	case Adagrad:
		return C.HPS_OPT_ADAGRAD
	}
	return C.HPS_OPT_ADAM
}

// rawUpdateRows calls a sparse-row kernel without the Go checks of
// UpdateRows, so that tests can check the kernel's own validation.
func rawUpdateRows(isa ISA, o Optim, tableRows, dim int, w []float32, rows []int64, g []float32,
	state ...[]float32) (int64, error) {
	var bad C.int64_t = -1
	co := cOptim(o)
	st := func(i int) *C.float {
		if i < len(state) {
			return fptr(state[i])
		}
		return nil
	}
	tr, d, n := C.int64_t(tableRows), C.int64_t(dim), C.int64_t(len(rows))
	var rc C.int
	switch o.Kind {
	case SGD:
		rc = C.hps_sgd_rows(C.hps_isa(isa), tr, d, fptr(w), n, iptr(rows), fptr(g), st(0), &co, &bad)
	case Adagrad:
		rc = C.hps_adagrad_rows(C.hps_isa(isa), tr, d, fptr(w), n, iptr(rows), fptr(g), st(0), &co, &bad)
	default:
		rc = C.hps_adam_rows(C.hps_isa(isa), tr, d, fptr(w), n, iptr(rows), fptr(g), st(0), st(1), &co, &bad)
	}
	return rawStatus(rc, bad)
}
