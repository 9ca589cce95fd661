package nn

import (
	"fmt"

	"github.com/heterps/heterps/native"
)

// Part is one [rows x Width] block of an activation. NeedGrad says whether
// anything before it has parameters, i.e. whether the backward pass must
// compute the gradient for it.
type Part struct {
	Buf      native.Buffer
	Width    int
	NeedGrad bool
}

// Activation is a layer's output for one batch: Parts side by side form a
// [Rows x Width()] tensor.
type Activation struct {
	Rows  int
	Parts []Part
}

// Width is the total width of all parts.
func (a Activation) Width() int {
	w := 0
	for _, p := range a.Parts {
		w += p.Width
	}
	return w
}

// Single returns the only part, or an error naming the layer when the
// activation has several (a layer that needs one contiguous tensor).
func (a Activation) Single(layer string) (native.Buffer, error) {
	if len(a.Parts) != 1 {
		return nil, fmt.Errorf("%s: needs one input tensor, got %d parts", layer, len(a.Parts))
	}
	return a.Parts[0].Buf, nil
}

// NeedGrad reports whether any part needs a gradient.
func (a Activation) NeedGrad() bool {
	for _, p := range a.Parts {
		if p.NeedGrad {
			return true
		}
	}
	return false
}

// scratch is a reusable buffer that grows to the largest size asked for.
type scratch struct {
	buf native.Buffer
}

// get returns a buffer of exactly n floats, reusing memory when it can. The
// contents are unspecified.
func (s *scratch) get(b native.Backend, n int) native.Buffer {
	if s.buf == nil || s.buf.Len() < n {
		s.buf = b.Alloc(n)
	}
	return s.buf.Slice(0, n)
}

// hostFloats returns buf's contents as a Go slice: the memory itself on the
// CPU backend (writes go through), a downloaded copy elsewhere (call
// putBack after writing).
func hostFloats(b native.Backend, buf native.Buffer) ([]float32, error) {
	if h, ok := native.Host(buf); ok {
		return h, nil
	}
	out := make([]float32, buf.Len())
	return out, b.Download(out, buf)
}

// putBack uploads h into buf unless h is buf's own memory.
func putBack(b native.Backend, buf native.Buffer, h []float32) error {
	if own, ok := native.Host(buf); ok && len(own) > 0 && len(h) > 0 && &own[0] == &h[0] {
		return nil
	}
	return b.Upload(buf, h)
}
