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
// have their own sparse tables (each holds the rows of its own
// micro-batch). A worker keeps as many as its schedule has micro-batches
// live (liveBound) and hands them round-robin; a micro-batch's gradients
// outlive its copy in its microGrad.
type modelCopy struct {
	model      *nn.Model
	dense      []*nn.Param
	denseLayer []int // the layer of each dense parameter
	tables     []sparseTable
	tableIDs   [][]int64 // per table: the global id of each local row, this step
	step       *nn.Step
	micro      int // the micro-batch whose forward state it holds, -1 if none
}

// microGrad is one micro-batch's share of a step's gradients: its rows, a
// gradient buffer per dense parameter (the copy's parameters write into
// it during the micro-batch's backward) and, once its copy is released,
// its sparse gradients with global ids.
type microGrad struct {
	rows  int
	dense []native.Buffer
	copy  *modelCopy // holds the sparse gradients until takeSparse
	ids   [][]int64  // per table, after takeSparse
	vals  [][]float32
}

// begin makes g micro-batch m's of a new step, forward on copy c.
func (g *microGrad) begin(c *modelCopy, rows int) {
	g.rows, g.copy, g.ids, g.vals = rows, c, nil, nil
}

// useDense points c's dense parameters' gradients at g's buffers, before
// g's micro-batch runs backward on c.
func (g *microGrad) useDense(c *modelCopy) {
	for i, p := range c.dense {
		p.Grad = g.dense[i]
	}
}

// takeSparse copies the sparse gradients out of g's copy, which another
// micro-batch may then take.
func (g *microGrad) takeSparse(be native.Backend) error {
	c := g.copy
	g.ids, g.vals = make([][]int64, len(c.tables)), make([][]float32, len(c.tables))
	for e := range c.tables {
		ids, rows, err := copySparse(be, c, e)
		if err != nil {
			return err
		}
		g.ids[e], g.vals[e] = ids, slices.Clone(rows)
	}
	g.copy = nil
	return nil
}

// sparse returns g's gradient of table e: global ids and their rows.
func (g *microGrad) sparse(be native.Backend, e int) ([]int64, []float32, error) {
	if g.copy != nil {
		return copySparse(be, g.copy, e)
	}
	return g.ids[e], g.vals[e], nil
}

// copySparse returns c's gradient of table e as global ids and the rows
// (the layer's own memory on the CPU backend).
func copySparse(be native.Backend, c *modelCopy, e int) ([]int64, []float32, error) {
	table, local := c.tables[e].table, c.tableIDs[e]
	g := table.SparseGrad
	var rows []float32
	if len(g.IDs) > 0 {
		h, err := hostFloats(be, g.Rows)
		if err != nil {
			return nil, nil, err
		}
		rows = h[:len(g.IDs)*table.Cols]
	}
	ids := make([]int64, len(g.IDs))
	for j, k := range g.IDs {
		if k < 0 || k >= int64(len(local)) {
			return nil, nil, fmt.Errorf("%s: gradient row %d outside the micro-batch's %d rows", table.Name, k, len(local))
		}
		ids[j] = local[k]
	}
	return ids, rows, nil
}

// newMicroGrads makes a worker's microGrads, giving the first ones the
// copies' own gradient buffers and allocating the rest.
func newMicroGrads(be native.Backend, copies []*modelCopy, micros int) []microGrad {
	grads := make([]microGrad, micros)
	for m := range grads {
		for i, p := range copies[0].dense {
			if m < len(copies) {
				grads[m].dense = append(grads[m].dense, copies[m].dense[i].Grad)
			} else {
				grads[m].dense = append(grads[m].dense, be.Alloc(p.Len()))
			}
		}
	}
	return grads
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

// microWeights returns each micro-batch's share of the step's rows, n_m / n.
func microWeights(grads []microGrad) []float32 {
	total := 0
	for _, g := range grads {
		total += g.rows
	}
	w := make([]float32, len(grads))
	for m, g := range grads {
		w[m] = float32(float64(g.rows) / float64(total))
	}
	return w
}

// denseGradient returns dense parameter i's gradient for the step: the
// micro-batches' gradients (each of its mean loss) weighted by n_m / n.
func (w *Worker) denseGradient(i int) ([]float32, error) {
	grads := w.grads
	if len(grads) == 1 {
		return hostFloats(w.cfg.Backend, grads[0].dense[i])
	}
	bufs := make([]native.Buffer, len(grads))
	for m, g := range grads {
		bufs[m] = g.dense[i]
	}
	out := w.cfg.Backend.Alloc(bufs[0].Len())
	if err := w.cfg.Backend.WeightedSum(out, microWeights(grads), bufs); err != nil {
		return nil, err
	}
	return hostFloats(w.cfg.Backend, out)
}

// sparseGradient returns sparse table e's gradient for the step as
// distinct ids (ascending when merged from several micro-batches) and
// their rows.
func (w *Worker) sparseGradient(e int) ([]int64, []float32, error) {
	dim := w.copies[0].tables[e].table.Cols
	weights := microWeights(w.grads)
	// Each distinct id gets a row of acc, in order of first appearance;
	// index maps the id to it (no allocation per id).
	var index map[int64]int
	var acc []float32
	for m := range w.grads {
		ids, rows, err := w.grads[m].sparse(w.cfg.Backend, e)
		if err != nil {
			return nil, nil, err
		}
		if len(w.grads) == 1 {
			return ids, rows, nil
		}
		if index == nil {
			index = make(map[int64]int, 2*len(ids))
		}
		for j, id := range ids {
			k, ok := index[id]
			if !ok {
				k = len(index)
				index[id] = k
				acc = append(acc, make([]float32, dim)...)
			}
			row := acc[k*dim : (k+1)*dim]
			for x, v := range rows[j*dim : (j+1)*dim] {
				row[x] += weights[m] * v
			}
		}
	}
	ids := make([]int64, 0, len(index))
	for id := range index {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	rows := make([]float32, len(ids)*dim)
	for i, id := range ids {
		k := index[id]
		copy(rows[i*dim:(i+1)*dim], acc[k*dim:(k+1)*dim])
	}
	return ids, rows, nil
}
