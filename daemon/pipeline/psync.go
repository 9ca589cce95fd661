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

// pullDense brings the dense parameters, which the model copies share, to
// the state after step-1.
func (w *Worker) pullDense(ctx context.Context, step int64) error {
	dense := w.copies[0].dense
	return each(len(dense), func(i int) error {
		p := dense[i]
		v, _, err := w.cfg.PS.PullBlock(ctx, p.Name, w.after(step))
		if err != nil {
			return err
		}
		if len(v) != p.Len() {
			return fmt.Errorf("%s: pulled %d floats, want %d", p.Name, len(v), p.Len())
		}
		return w.cfg.Backend.Upload(p.Value, v)
	})
}

// pullRows fills c's embedding tables for micro-batch in: for each layer
// the rows of the ids its slots use, in a table of the batch's distinct
// ids. It returns the batch with its ids renumbered into those tables.
func (w *Worker) pullRows(ctx context.Context, step int64, c *modelCopy, in input) (*data.Batch, error) {
	if len(c.embeddings) == 0 {
		return in.batch, nil
	}
	plan := in.plan
	if plan == nil {
		var err error
		if plan, err = planRows(in.batch, c.embeddings); err != nil {
			return nil, err
		}
	}
	c.uniq = plan.uniq
	err := each(len(c.embeddings), func(i int) error {
		return w.pullTable(ctx, step, c, c.embeddings[i], plan.rows[i])
	})
	return plan.local, err
}

// pullTable pulls the rows (compact rows of c.uniq) of embedding e's table.
func (w *Worker) pullTable(ctx context.Context, step int64, c *modelCopy, e embedding, rows []int64) error {
	ids := make([]int64, len(rows))
	for j, k := range rows {
		ids[j] = c.uniq[k]
	}
	v, _, err := w.cfg.PS.Pull(ctx, e.table.Name, ids, w.after(step))
	if err != nil {
		return err
	}
	dim := e.table.Cols
	if len(v) != len(ids)*dim {
		return fmt.Errorf("%s: pulled %d floats for %d rows of %d", e.table.Name, len(v), len(ids), dim)
	}
	table := make([]float32, len(c.uniq)*dim)
	for j, k := range rows {
		copy(table[int(k)*dim:int(k+1)*dim], v[j*dim:(j+1)*dim])
	}
	buf, err := toBuffer(w.cfg.Backend, table)
	if err != nil {
		return err
	}
	e.table.Value, e.table.Rows = buf, len(c.uniq)
	return nil
}

// pushLayer starts pushing the gradients of layer's parameters for step,
// each in the background on bg. Call it once they are final: after the
// last micro-batch's backward through the layer.
func (w *Worker) pushLayer(bg *group, ctx context.Context, step int64, weight, layer int) {
	first := w.copies[0]
	for i, l := range first.denseLayer {
		if l != layer {
			continue
		}
		bg.start(func() error {
			g, err := w.denseGradient(i)
			if err != nil {
				return err
			}
			p := first.dense[i]
			return w.cfg.PS.PushBlock(ctx, p.Name, step, weight, g[:p.Len()])
		})
	}
	for e, emb := range first.embeddings {
		if emb.index != layer {
			continue
		}
		bg.start(func() error {
			ids, rows, err := w.sparseGradient(e)
			if err != nil {
				return err
			}
			return w.cfg.PS.PushRows(ctx, emb.table.Name, step, weight, ids, rows, emb.table.Cols)
		})
	}
}
