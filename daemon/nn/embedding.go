package nn

import (
	"fmt"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/native"
)

// Embedding pools rows of a [vocab x dim] table over the bags of its slot
// range and appends the result, [rows x slots*dim], to its input.
type Embedding struct {
	shape       config.LayerShape
	pool        native.Pool
	first, end  int
	Table       *Param
	out         scratch
	offs, ids   []int64
	lastOffsets []int64
	lastIDs     []int64
}

// NewEmbedding builds an embedding layer over slots [first, end) of the
// input with a table initialised row by row (see InitRow).
func NewEmbedding(b native.Backend, shape config.LayerShape, vocab int64, dim int, pool string,
	first, end int, seed uint64, scale float64) (*Embedding, error) {
	l := newEmbedding(b, shape, int(vocab), dim, pool, first, end)
	if err := initRows(b, l.Table, seed, scale); err != nil {
		return nil, err
	}
	return l, nil
}

// remoteEmbedding builds an embedding layer whose table holds no rows: the
// parameter servers hold them, and a pipeline stage fills a batch's.
func remoteEmbedding(b native.Backend, shape config.LayerShape, dim int, pool string, first, end int) *Embedding {
	return newEmbedding(b, shape, 0, dim, pool, first, end)
}

func newEmbedding(b native.Backend, shape config.LayerShape, rows, dim int, pool string, first, end int) *Embedding {
	p := native.PoolSum
	if pool == "mean" {
		p = native.PoolMean
	}
	return &Embedding{shape: shape, pool: p, first: first, end: end,
		Table: newSparse(b, shape.Name+".table", rows, dim)}
}

func (l *Embedding) Shape() config.LayerShape { return l.shape }
func (l *Embedding) Params() []*Param         { return []*Param{l.Table} }

// Dim is the embedding width.
func (l *Embedding) Dim() int { return l.Table.Cols }

// Forward gathers and pools the rows of this layer's slots.
func (l *Embedding) Forward(s *Step, in Activation) (Activation, error) {
	bt := s.Batch
	offsets, ids, err := l.bags(bt)
	if err != nil {
		return Activation{}, err
	}
	dim, nslots := l.Table.Cols, l.end-l.first
	out := l.out.get(s.Backend, bt.Size*nslots*dim)
	if err := s.Backend.EmbeddingBag(l.pool, l.Table.Value, l.Table.Rows, dim, offsets, ids, out); err != nil {
		return Activation{}, fmt.Errorf("%s: %w", l.shape.Name, err)
	}
	l.lastOffsets, l.lastIDs = offsets, ids
	res := Activation{Rows: bt.Size, Parts: append(append([]Part(nil), in.Parts...), Part{Buf: out, Width: nslots * dim, NeedGrad: true})}
	return res, nil
}

// Backward turns the gradient of this layer's part into merged sparse row
// gradients and passes the rest of the gradient on.
func (l *Embedding) Backward(s *Step, dout Activation) (Activation, error) {
	if len(dout.Parts) == 0 {
		return Activation{}, fmt.Errorf("%s: backward got no gradient", l.shape.Name)
	}
	own := dout.Parts[len(dout.Parts)-1]
	if own.Buf == nil {
		return Activation{}, fmt.Errorf("%s: backward got no gradient for its output", l.shape.Name)
	}
	g, err := s.Backend.EmbeddingBagBackward(l.pool, l.Table.Cols, l.lastOffsets, l.lastIDs, own.Buf)
	if err != nil {
		return Activation{}, fmt.Errorf("%s: backward: %w", l.shape.Name, err)
	}
	l.Table.SparseGrad = g
	return Activation{Rows: dout.Rows, Parts: dout.Parts[:len(dout.Parts)-1]}, nil
}

// bags returns the CSR bags of this layer's slots: the batch's own arrays
// when the layer uses every slot, else a compacted copy.
func (l *Embedding) bags(bt *data.Batch) ([]int64, []int64, error) {
	if bt == nil || bt.Slots < l.end {
		return nil, nil, fmt.Errorf("%s: batch has too few sparse slots for range [%d, %d)", l.shape.Name, l.first, l.end)
	}
	if len(bt.Offsets) != bt.Size*bt.Slots+1 {
		return nil, nil, fmt.Errorf("%s: batch has %d offsets, want %d", l.shape.Name, len(bt.Offsets), bt.Size*bt.Slots+1)
	}
	if l.first == 0 && l.end == bt.Slots {
		return bt.Offsets, bt.IDs, nil
	}
	offs, ids := l.offs[:0], l.ids[:0]
	offs = append(offs, 0)
	for i := range bt.Size {
		for slot := l.first; slot < l.end; slot++ {
			j := i*bt.Slots + slot
			lo, hi := bt.Offsets[j], bt.Offsets[j+1]
			if lo < 0 || hi < lo || hi > int64(len(bt.IDs)) {
				return nil, nil, fmt.Errorf("%s: batch bag %d has bad offsets [%d, %d): %w", l.shape.Name, j, lo, hi, native.ErrRange)
			}
			ids = append(ids, bt.IDs[lo:hi]...)
			offs = append(offs, int64(len(ids)))
		}
	}
	l.offs, l.ids = offs, ids
	return offs, ids, nil
}
