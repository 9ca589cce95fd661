package pipeline

import (
	"fmt"
	"slices"

	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/native"
)

// modelCopy holds one micro-batch's forward state. Layers keep the tensors
// of their last forward pass for backward, so each micro-batch in flight
// needs its own layers; the copies share the dense parameters' values and
// have their own gradients and sparse tables (each holds the rows of its
// own micro-batch).
type modelCopy struct {
	model      *nn.Model
	dense      []*nn.Param
	denseLayer []int // the layer of each dense parameter
	tables     []sparseTable
	tableIDs   [][]int64 // per table: the global id of each local row, this step
	step       *nn.Step
	rows       int // the micro-batch's rows at this replica
}

// newCopy prepares m's layers [r.First, r.Last] for a worker; values, if
// given, are the dense parameters' values to share.
func newCopy(m *nn.Model, r Range, cfg *Config, values []*nn.Param) (*modelCopy, error) {
	c := &modelCopy{model: m}
	for i := range m.NumLayers() {
		for _, p := range m.LayerParams(i) {
			inRange := i >= r.First && i <= r.Last
			switch {
			case p.Sparse:
				t := sparseTable{index: i, table: p}
				t.embedding, _ = m.Layer(i).(*nn.Embedding)
				t.nce, _ = m.Layer(i).(*nn.NCE)
				if t.embedding == nil && t.nce == nil && inRange {
					return nil, fmt.Errorf("sparse parameter %s: %w", p.Name, ErrUnsupported)
				}
				// The parameter servers hold the table: drop the local one.
				p.Value, p.Rows = cfg.Backend.Alloc(0), 0
				if inRange {
					c.tables = append(c.tables, t)
				}
			case inRange:
				if p.Value.Len() != p.Len() {
					return nil, fmt.Errorf("%s of layer %d holds %d of its %d values: build the model with BuildStageModel for layers [%d, %d]",
						p.Name, i, p.Value.Len(), p.Len(), r.First, r.Last)
				}
				if values != nil {
					p.Value = values[len(c.dense)].Value
				}
				c.dense = append(c.dense, p)
				c.denseLayer = append(c.denseLayer, i)
			}
		}
	}
	return c, nil
}

// microBounds splits a step's rows into n micro-batches.
func microBounds(rows, n int) ([]int, error) {
	if rows < n {
		return nil, fmt.Errorf("%d rows for %d micro-batches", rows, n)
	}
	return chunks(rows, n), nil
}

// microWeights returns each copy's share of the step's rows, n_m / n.
func microWeights(copies []*modelCopy) []float32 {
	total := 0
	for _, c := range copies {
		total += c.rows
	}
	w := make([]float32, len(copies))
	for m, c := range copies {
		w[m] = float32(float64(c.rows) / float64(total))
	}
	return w
}

// denseGradient returns dense parameter i's gradient for the step: the
// micro-batches' gradients (each of its mean loss) weighted by n_m / n.
func (w *Worker) denseGradient(i int) ([]float32, error) {
	copies := w.copies
	if len(copies) == 1 {
		return hostFloats(w.cfg.Backend, copies[0].dense[i].Grad)
	}
	bufs := make([]native.Buffer, len(copies))
	for m, c := range copies {
		bufs[m] = c.dense[i].Grad
	}
	out := w.cfg.Backend.Alloc(copies[0].dense[i].Len())
	if err := w.cfg.Backend.WeightedSum(out, microWeights(copies), bufs); err != nil {
		return nil, err
	}
	return hostFloats(w.cfg.Backend, out)
}

// sparseGradient returns sparse table e's gradient for the step as
// distinct ids (ascending when merged from several micro-batches) and
// their rows.
func (w *Worker) sparseGradient(e int) ([]int64, []float32, error) {
	dim := w.copies[0].tables[e].table.Cols
	weights := microWeights(w.copies)
	merged := map[int64][]float32{}
	for m, c := range w.copies {
		table, local := c.tables[e].table, c.tableIDs[e]
		g := table.SparseGrad
		var rows []float32
		if len(g.IDs) > 0 {
			h, err := hostFloats(w.cfg.Backend, g.Rows)
			if err != nil {
				return nil, nil, err
			}
			rows = h[:len(g.IDs)*dim]
		}
		ids := make([]int64, len(g.IDs))
		for j, k := range g.IDs {
			if k < 0 || k >= int64(len(local)) {
				return nil, nil, fmt.Errorf("%s: gradient row %d outside the micro-batch's %d rows", table.Name, k, len(local))
			}
			ids[j] = local[k]
		}
		if len(w.copies) == 1 {
			return ids, rows, nil
		}
		for j, id := range ids {
			acc, ok := merged[id]
			if !ok {
				acc = make([]float32, dim)
				merged[id] = acc
			}
			for x, v := range rows[j*dim : (j+1)*dim] {
				acc[x] += weights[m] * v
			}
		}
	}
	ids := make([]int64, 0, len(merged))
	for id := range merged {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	rows := make([]float32, 0, len(ids)*dim)
	for _, id := range ids {
		rows = append(rows, merged[id]...)
	}
	return ids, rows, nil
}
