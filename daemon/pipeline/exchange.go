package pipeline

import (
	"fmt"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

// Message layouts (see also daemon/wire's message types). Meta.Job is
// ps.JobKey(job), Stage and Replica the sender's, Step the step, Batch the
// rows.
//
// MsgActivation, stage i -> stage i+1:
//
//	T0        int64 [p]            1 where part j needs a gradient, else 0
//	T1..Tp    float32 [rows, w_j]  the activation's parts, side by side
//	Tp+1      float32 [rows, d]    the batch's dense features
//	Tp+2      int64 [rows*slots+1] the batch's bag offsets
//	Tp+3      int64 [n]            the batch's ids
//	Tp+4      float32 [rows]       the labels
//	Tp+5      int64 [rows] or [0]  the classes (classifiers) or none
//
// Parts travel separately (not as one [rows, width] tensor) so that the
// next stage's first layer multiplies them exactly as single-process
// training does. The batch travels with its activations: later stages need
// its labels (the loss), dense features (a concat layer) or ids.
//
// MsgGradient, stage i+1 -> stage i: T0..Tp-1 float32 [rows, w_j], the
// gradient of part j, or [0] for a part that needs none. The gradient is
// of the sender's mean loss over all its rows; Meta.Key is that row count
// n (rows of stacked partners included), so that the receiver, with b
// rows of its own, scales the gradient by n/b to that of its own mean.

// input is what a stage received for a step: the activation and batch of
// each upstream partner, concatenated, and each partner's row count.
type input struct {
	act   nn.Activation
	batch *data.Batch
	rows  []int
	plan  *rowPlan // nil until planned
	// tables, if pulled ahead, are the embedding tables for plan: one per
	// embedding of the stage, as fetchTable returns them.
	tables [][]float32
}

func activationMessage(be native.Backend, meta wire.Meta, act nn.Activation, b *data.Batch, lo, hi int) (*wire.Message, error) {
	rows := hi - lo
	flags := make([]int64, len(act.Parts))
	tensors := []wire.Tensor{wire.I64Tensor(flags, len(flags))}
	for j, p := range act.Parts {
		if p.NeedGrad {
			flags[j] = 1
		}
		h, err := hostFloats(be, p.Buf)
		if err != nil {
			return nil, fmt.Errorf("activation part %d: %w", j, err)
		}
		tensors = append(tensors, wire.F32Tensor(h[lo*p.Width:hi*p.Width], rows, p.Width))
	}
	piece := sliceBatch(b, lo, hi)
	classes := piece.Classes
	if classes == nil {
		classes = []int64{}
	}
	tensors = append(tensors,
		wire.F32Tensor(piece.Dense, rows, piece.NumDense),
		wire.I64Tensor(piece.Offsets, len(piece.Offsets)),
		wire.I64Tensor(piece.IDs, len(piece.IDs)),
		wire.F32Tensor(piece.Labels, len(piece.Labels)),
		wire.I64Tensor(classes, len(classes)))
	meta.Batch = uint64(rows)
	return &wire.Message{Type: wire.MsgActivation, Meta: meta, Tensors: tensors}, nil
}

// decodeActivation checks and copies an activation message.
func decodeActivation(be native.Backend, m *wire.MessageView) (nn.Activation, *data.Batch, error) {
	if len(m.Tensors) < 6 || m.Tensors[0].DType != wire.Int64 {
		return nn.Activation{}, nil, fmt.Errorf("activation: %d tensors, want the part flags first", len(m.Tensors))
	}
	flags, err := m.Tensors[0].Int64s(nil)
	if err != nil {
		return nn.Activation{}, nil, err
	}
	p := len(flags)
	if len(m.Tensors) != p+6 {
		return nn.Activation{}, nil, fmt.Errorf("activation: %d tensors for %d parts, want %d", len(m.Tensors), p, p+6)
	}
	rows := int(m.Meta.Batch)
	if rows < 1 || uint64(rows) != m.Meta.Batch {
		return nn.Activation{}, nil, fmt.Errorf("activation: %d rows", m.Meta.Batch)
	}
	act := nn.Activation{Rows: rows}
	for j := range p {
		t := &m.Tensors[1+j]
		if t.DType != wire.Float32 || len(t.Shape) != 2 || t.Shape[0] != rows {
			return nn.Activation{}, nil, fmt.Errorf("activation part %d: %v %v, want float32 [%d, w]", j, t.DType, t.Shape, rows)
		}
		buf, err := floatsToBuffer(be, t)
		if err != nil {
			return nn.Activation{}, nil, err
		}
		act.Parts = append(act.Parts, nn.Part{Buf: buf, Width: t.Shape[1], NeedGrad: flags[j] != 0})
	}
	b, err := decodeBatch(m.Tensors[1+p:], rows)
	if err != nil {
		return nn.Activation{}, nil, err
	}
	return act, b, nil
}

func decodeBatch(ts []wire.TensorView, rows int) (*data.Batch, error) {
	want := []wire.DType{wire.Float32, wire.Int64, wire.Int64, wire.Float32, wire.Int64}
	for i, dt := range want {
		if ts[i].DType != dt {
			return nil, fmt.Errorf("batch tensor %d is %v, want %v", i, ts[i].DType, dt)
		}
	}
	dense := &ts[0]
	if len(dense.Shape) != 2 || dense.Shape[0] != rows {
		return nil, fmt.Errorf("batch dense features %v, want [%d, d]", dense.Shape, rows)
	}
	b := &data.Batch{Size: rows, NumDense: dense.Shape[1]}
	var err error
	if b.Dense, err = dense.Float32s(nil); err != nil {
		return nil, err
	}
	if b.Offsets, err = ts[1].Int64s(nil); err != nil {
		return nil, err
	}
	if b.IDs, err = ts[2].Int64s(nil); err != nil {
		return nil, err
	}
	if b.Labels, err = ts[3].Float32s(nil); err != nil {
		return nil, err
	}
	if ts[4].Len() > 0 {
		if b.Classes, err = ts[4].Int64s(nil); err != nil {
			return nil, err
		}
	}
	if err := checkBatch(b); err != nil {
		return nil, err
	}
	return b, nil
}

// checkBatch checks what the layers rely on of a batch from the network.
func checkBatch(b *data.Batch) error {
	bags := len(b.Offsets) - 1
	switch {
	case bags < 0 || bags%b.Size != 0:
		return fmt.Errorf("batch: %d offsets for %d rows", len(b.Offsets), b.Size)
	case b.Offsets[0] != 0 || b.Offsets[bags] != int64(len(b.IDs)):
		return fmt.Errorf("batch: offsets run %d..%d over %d ids", b.Offsets[0], b.Offsets[bags], len(b.IDs))
	case len(b.Labels) != b.Size || (b.Classes != nil && len(b.Classes) != b.Size):
		return fmt.Errorf("batch: %d labels, %d classes for %d rows", len(b.Labels), len(b.Classes), b.Size)
	}
	for j := 1; j <= bags; j++ {
		if b.Offsets[j] < b.Offsets[j-1] {
			return fmt.Errorf("batch: offsets decrease at bag %d", j)
		}
	}
	for _, id := range b.IDs {
		if id < 0 {
			return fmt.Errorf("batch: negative id %d", id)
		}
	}
	b.Slots = bags / b.Size
	return nil
}

func gradientMessage(be native.Backend, meta wire.Meta, g nn.Activation, lo, hi int) (*wire.Message, error) {
	meta.Key = uint64(g.Rows)
	rows := hi - lo
	tensors := make([]wire.Tensor, len(g.Parts))
	for j, p := range g.Parts {
		if p.Buf == nil {
			tensors[j] = wire.F32Tensor([]float32{}, 0)
			continue
		}
		h, err := hostFloats(be, p.Buf)
		if err != nil {
			return nil, fmt.Errorf("gradient part %d: %w", j, err)
		}
		tensors[j] = wire.F32Tensor(h[lo*p.Width:hi*p.Width], rows, p.Width)
	}
	meta.Batch = uint64(rows)
	return &wire.Message{Type: wire.MsgGradient, Meta: meta, Tensors: tensors}, nil
}

// decodeGradient checks a gradient message against the activation part
// widths it answers, rows rows of them, and scales it from the mean over
// the sender's rows to the mean over own.
func decodeGradient(be native.Backend, m *wire.MessageView, parts []nn.Part, rows, own int) (nn.Activation, error) {
	if len(m.Tensors) != len(parts) || m.Meta.Batch != uint64(rows) || m.Meta.Key < uint64(rows) || m.Meta.Key > 1<<40 {
		return nn.Activation{}, fmt.Errorf("gradient: %d tensors for %d of %d rows, want %d parts for %d rows",
			len(m.Tensors), m.Meta.Batch, m.Meta.Key, len(parts), rows)
	}
	scale := float32(1)
	if n := int(m.Meta.Key); n != own {
		scale = float32(float64(n) / float64(own))
	}
	g := nn.Activation{Rows: rows}
	for j, p := range parts {
		t := &m.Tensors[j]
		part := nn.Part{Width: p.Width, NeedGrad: p.NeedGrad}
		switch {
		case t.DType != wire.Float32:
			return nn.Activation{}, fmt.Errorf("gradient part %d is %v", j, t.DType)
		case t.Len() == 0 && len(t.Shape) == 1:
		case len(t.Shape) == 2 && t.Shape[0] == rows && t.Shape[1] == p.Width:
			h, err := t.Float32s(nil)
			if err != nil {
				return nn.Activation{}, err
			}
			if scale != 1 {
				for i := range h {
					h[i] *= scale
				}
			}
			if part.Buf, err = toBuffer(be, h); err != nil {
				return nn.Activation{}, err
			}
		default:
			return nn.Activation{}, fmt.Errorf("gradient part %d: shape %v, want [%d %d]", j, t.Shape, rows, p.Width)
		}
		if p.NeedGrad && part.Buf == nil {
			return nn.Activation{}, fmt.Errorf("gradient part %d: missing, and the part needs one", j)
		}
		g.Parts = append(g.Parts, part)
	}
	return g, nil
}

// floatsToBuffer copies a float32 tensor into a buffer of be.
func floatsToBuffer(be native.Backend, t *wire.TensorView) (native.Buffer, error) {
	h, err := t.Float32s(nil)
	if err != nil {
		return nil, err
	}
	return toBuffer(be, h)
}

// hostFloats returns buf's contents: its own memory on the CPU backend, a
// downloaded copy elsewhere.
func hostFloats(be native.Backend, buf native.Buffer) ([]float32, error) {
	if h, ok := native.Host(buf); ok {
		return h, nil
	}
	h := make([]float32, buf.Len())
	return h, be.Download(h, buf)
}

// toBuffer turns h, which the caller gives away, into a buffer of be: h
// itself on the CPU backend, an upload of it elsewhere.
func toBuffer(be native.Backend, h []float32) (native.Buffer, error) {
	if _, onHost := be.(*native.CPU); onHost {
		return native.HostBuffer(h), nil // h is the caller's to give away
	}
	buf := be.Alloc(len(h))
	if own, ok := native.Host(buf); ok {
		copy(own, h)
		return buf, nil
	}
	return buf, be.Upload(buf, h)
}

// chunks splits rows into n near-equal contiguous pieces, the larger first,
// and returns their bounds.
func chunks(rows, n int) []int {
	bounds := []int{0}
	for k := range n {
		size := rows / n
		if k < rows%n {
			size++
		}
		bounds = append(bounds, bounds[k]+size)
	}
	return bounds
}

// sliceBatch returns rows [lo, hi) of b; slices alias b except the offsets.
func sliceBatch(b *data.Batch, lo, hi int) *data.Batch {
	if lo == 0 && hi == b.Size {
		return b
	}
	first, last := b.Offsets[lo*b.Slots], b.Offsets[hi*b.Slots]
	offs := make([]int64, (hi-lo)*b.Slots+1)
	for j := range offs {
		offs[j] = b.Offsets[lo*b.Slots+j] - first
	}
	out := &data.Batch{Size: hi - lo, NumDense: b.NumDense, Slots: b.Slots, Offsets: offs,
		Dense: b.Dense[lo*b.NumDense : hi*b.NumDense], IDs: b.IDs[first:last], Labels: b.Labels[lo:hi]}
	if b.Classes != nil {
		out.Classes = b.Classes[lo:hi]
	}
	return out
}

// concatBatches stacks batches of one schema row-wise.
func concatBatches(bs []*data.Batch) (*data.Batch, error) {
	if len(bs) == 1 {
		return bs[0], nil
	}
	out := &data.Batch{NumDense: bs[0].NumDense, Slots: bs[0].Slots, Offsets: []int64{0}}
	for i, b := range bs {
		if b.NumDense != out.NumDense || b.Slots != out.Slots || (b.Classes == nil) != (bs[0].Classes == nil) {
			return nil, fmt.Errorf("batch %d: shape %d dense x %d slots, batch 0 %d x %d", i, b.NumDense, b.Slots, out.NumDense, out.Slots)
		}
		base := int64(len(out.IDs))
		for _, o := range b.Offsets[1:] {
			out.Offsets = append(out.Offsets, base+o)
		}
		out.Size += b.Size
		out.Dense = append(out.Dense, b.Dense...)
		out.IDs = append(out.IDs, b.IDs...)
		out.Labels = append(out.Labels, b.Labels...)
		out.Classes = append(out.Classes, b.Classes...)
	}
	return out, nil
}

// concatActivations stacks activations of one part structure row-wise.
func concatActivations(be native.Backend, acts []nn.Activation) (nn.Activation, error) {
	if len(acts) == 1 {
		return acts[0], nil
	}
	out := nn.Activation{}
	for _, a := range acts {
		out.Rows += a.Rows
	}
	for j, p := range acts[0].Parts {
		var h []float32
		for i, a := range acts {
			if len(a.Parts) != len(acts[0].Parts) || a.Parts[j].Width != p.Width || a.Parts[j].NeedGrad != p.NeedGrad {
				return nn.Activation{}, fmt.Errorf("activation %d: parts differ from activation 0's", i)
			}
			hp, err := hostFloats(be, a.Parts[j].Buf)
			if err != nil {
				return nn.Activation{}, fmt.Errorf("activation %d part %d: %w", i, j, err)
			}
			h = append(h, hp...)
		}
		buf, err := toBuffer(be, h)
		if err != nil {
			return nn.Activation{}, err
		}
		out.Parts = append(out.Parts, nn.Part{Buf: buf, Width: p.Width, NeedGrad: p.NeedGrad})
	}
	return out, nil
}
