package pipeline

import (
	"context"
	"fmt"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/ps"
)

// after is the version a pull of step's parameters waits for: step-1 in
// BSP, none in ASP (whatever the servers hold).
func (w *Worker) after(step int64) int64 {
	if w.cfg.Mode == ps.ASP {
		return 0
	}
	return step - 1
}

// pull brings the stage's parameters to the state after step-1: the dense
// blocks whole, and for each embedding table the rows of the batch's ids
// its slots use, into a table of the batch's distinct ids. It returns the
// batch with its ids renumbered into that table.
func (w *Worker) pull(ctx context.Context, step int64, b *data.Batch) (*data.Batch, error) {
	if len(w.dense)+len(w.embeddings) == 0 {
		return b, nil
	}
	local := *b
	w.uniq, local.IDs = localIDs(b.IDs)
	n := len(w.dense)
	err := each(n+len(w.embeddings), func(i int) error {
		if i < n {
			return w.pullBlock(ctx, step, i)
		}
		return w.pullRows(ctx, step, w.embeddings[i-n], &local)
	})
	return &local, err
}

func (w *Worker) pullBlock(ctx context.Context, step int64, i int) error {
	p := w.dense[i]
	v, _, err := w.cfg.PS.PullBlock(ctx, p.Name, w.after(step))
	if err != nil {
		return err
	}
	if len(v) != p.Len() {
		return fmt.Errorf("%s: pulled %d floats, want %d", p.Name, len(v), p.Len())
	}
	return w.cfg.Backend.Upload(p.Value, v)
}

func (w *Worker) pullRows(ctx context.Context, step int64, e embedding, local *data.Batch) error {
	first, end := e.layer.SlotRange()
	if local.Slots < end {
		return fmt.Errorf("%s: batch has %d slots, the layer reads [%d, %d)", e.table.Name, local.Slots, first, end)
	}
	rows := slotIDs(local.Offsets, local.IDs, local.Slots, first, end)
	ids := make([]int64, len(rows))
	for j, k := range rows {
		ids[j] = w.uniq[k]
	}
	v, _, err := w.cfg.PS.Pull(ctx, e.table.Name, ids, w.after(step))
	if err != nil {
		return err
	}
	dim := e.table.Cols
	if len(v) != len(ids)*dim {
		return fmt.Errorf("%s: pulled %d floats for %d rows of %d", e.table.Name, len(v), len(ids), dim)
	}
	table := make([]float32, len(w.uniq)*dim)
	for j, k := range rows {
		copy(table[int(k)*dim:int(k+1)*dim], v[j*dim:(j+1)*dim])
	}
	buf, err := toBuffer(w.cfg.Backend, table)
	if err != nil {
		return err
	}
	e.table.Value, e.table.Rows = buf, len(w.uniq)
	return nil
}

// push sends every parameter's gradient of step to the parameter servers,
// weighted by the replica's rows, in parallel.
func (w *Worker) push(ctx context.Context, step int64, weight int) error {
	n := len(w.dense)
	return each(n+len(w.embeddings), func(i int) error {
		if i < n {
			p := w.dense[i]
			g, err := hostFloats(w.cfg.Backend, p.Grad)
			if err != nil {
				return err
			}
			return w.cfg.PS.PushBlock(ctx, p.Name, step, weight, g[:p.Len()])
		}
		return w.pushRows(ctx, step, weight, w.embeddings[i-n])
	})
}

func (w *Worker) pushRows(ctx context.Context, step int64, weight int, e embedding) error {
	g := e.table.SparseGrad
	dim := e.table.Cols
	ids := make([]int64, len(g.IDs))
	for j, k := range g.IDs {
		if k < 0 || k >= int64(len(w.uniq)) {
			return fmt.Errorf("%s: gradient row %d outside the batch's %d ids", e.table.Name, k, len(w.uniq))
		}
		ids[j] = w.uniq[k]
	}
	var rows []float32
	if len(ids) > 0 {
		h, err := hostFloats(w.cfg.Backend, g.Rows)
		if err != nil {
			return err
		}
		rows = h[:len(ids)*dim]
	}
	return w.cfg.PS.PushRows(ctx, e.table.Name, step, weight, ids, rows, dim)
}
