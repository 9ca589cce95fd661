package nn

import (
	"fmt"
	"math"

	"github.com/heterps/heterps/config"
)

// EstimateStage returns the bytes a worker running layers [firstLayer,
// lastLayer] of m at batch rows per step in microBatches micro-batches
// needs, tables excepted (the parameter servers hold them; see
// EstimatePSRowBytes and TableBytes). With P the layers' dense parameter
// floats, S the dense optimiser's state buffers (adam 2, adagrad 1, sgd 1
// with momentum, else 0), M = microBatches, B = batch and A, E, I floats
// per sample:
//
//	bytes = 4·(P·(1 + S) + P·M + B·(A + E)) + B·I
//
// P·(1+S) is the values and their optimiser state, P·M one gradient per
// micro-batch copy of the layers. A is what the layers keep between
// forward and backward and their gradients: an fc layer 2·out + in (output,
// pre-activation gradient, input gradient), an embedding 2·w (pooled
// output and merged row gradients; w = slots·dim), dense/concat the dense
// features, nce 2·(in+1) + 3·(1+K) + in, cosine/dot 4·in + 4, plus 2 floats
// for the loss's gradient. E is the batch's embedding rows, w per sample
// per embedding layer (one id per slot). I is the batch itself: 16 bytes
// per slot (an id and an offset), 4 per dense feature and 8 for the label
// and class. Activations do not depend on M: the copies split B rows.
// Go's allocator and runtime come on top; measured against a real build
// the estimate is within the tolerance its test states.
//
// Absurd sizes give an error, never an overflowed number.
func EstimateStage(m *config.Model, firstLayer, lastLayer, batch, microBatches int) (int64, error) {
	shapes := m.Shapes()
	switch {
	case firstLayer < 0 || lastLayer < firstLayer || lastLayer >= len(shapes):
		return 0, fmt.Errorf("estimate %s: layers [%d, %d] outside [0, %d]", m.Name, firstLayer, lastLayer, len(shapes)-1)
	case batch < 1 || microBatches < 1 || microBatches > batch:
		return 0, fmt.Errorf("estimate %s: batch %d in %d micro-batches: want 1 <= micro-batches <= batch", m.Name, batch, microBatches)
	}
	var dense, act, rows int64
	for i := firstLayer; i <= lastLayer; i++ {
		s := shapes[i]
		if s.Kind == "fc" {
			dense = addSat(dense, s.Weights)
		}
		a, e := layerFloats(m, i, s)
		act, rows = addSat(act, a), addSat(rows, e)
	}
	if lastLayer == len(shapes)-1 {
		act = addSat(act, 2*int64(shapes[lastLayer].Out))
	}
	states := int64(NativeOptim(m.Optimizer, 1, 0).StateBuffers())
	b := int64(batch)
	floats := addSat(mulSat(dense, 1+states), mulSat(dense, int64(microBatches)))
	floats = addSat(floats, mulSat(b, addSat(act, rows)))
	input := mulSat(b, int64(m.Input.Slots)*16+int64(m.Input.Dense)*4+8)
	total := addSat(mulSat(floats, floatBytes), input)
	if total == math.MaxInt64 {
		return 0, fmt.Errorf("estimate %s: layers [%d, %d] at batch %d need more than 2^63 bytes", m.Name, firstLayer, lastLayer, batch)
	}
	return total, nil
}

// layerFloats returns layer i's activation floats per sample and its
// embedding row floats per sample (EstimateStage's A and E terms).
func layerFloats(m *config.Model, i int, s config.LayerShape) (act, rows int64) {
	in, out := int64(s.In), int64(s.Out)
	switch s.Kind {
	case "fc":
		return 2*out + in, 0
	case "embedding":
		w := out - in // this layer's own part of its output
		return 2 * w, w
	case "concat", "dense":
		return int64(m.Input.Dense), 0
	case "nce":
		k := int64(m.Layers[i].Negatives)
		return 2*(in+1) + 3*(1+k) + in, 0
	case "cosine", "dot":
		return 4*in + 4, 0
	}
	return 0, 0
}

// TableRowBytes is what one row of a sparse table costs on a parameter
// server.
type TableRowBytes struct {
	Name  string // the table's parameter name, e.g. "emb.table"
	Layer int
	Dim   int   // floats per row
	Bytes int64 // per row: values and optimiser state, 4 bytes a float, and the shard's index
}

// psRowIndexBytes is ps.RowBytes' per-row index cost (nn cannot import ps;
// a pipeline test checks that the two agree).
const psRowIndexBytes = 36

// EstimatePSRowBytes returns, for each embedding and NCE table of m, the
// bytes a parameter-server shard spends per row it creates:
// 4·dim·(1 + S) + 36, S the sparse optimiser's state buffers and 36 the
// shard's id map and bookkeeping (ps.RowBytes). A shard holding r rows of a
// table needs r times that, plus the rows of at most one slab allocated
// ahead (as many as it holds while it is small, about 4 MiB a buffer once
// it is not).
func EstimatePSRowBytes(m *config.Model) []TableRowBytes {
	states := sparseStates(m)
	var out []TableRowBytes
	for i, s := range m.Shapes() {
		var dim int
		switch s.Kind {
		case "embedding":
			dim = m.Layers[i].Dim
		case "nce":
			dim = s.In + 1
		default:
			continue
		}
		out = append(out, TableRowBytes{Name: s.Name + ".table", Layer: i, Dim: dim,
			Bytes: int64(dim)*(1+states)*floatBytes + psRowIndexBytes})
	}
	return out
}

// sparseStates is the state buffers m's sparse optimiser keeps per value.
func sparseStates(m *config.Model) int64 {
	return int64(NativeOptim(NewOptimizer(m, 0).Sparse, 1, 0).StateBuffers())
}

// EstimateProcess returns the bytes single-process training of m at batch
// needs: its sparse tables held whole (their values and the sparse
// optimiser's state), and the rest, the whole model as one stage
// (EstimateStage).
func EstimateProcess(m *config.Model, batch int) (tables, stage int64, err error) {
	stage, err = EstimateStage(m, 0, len(m.Shapes())-1, batch, 1)
	if err != nil {
		return 0, 0, err
	}
	return mulSat(TableBytes(m.Shapes()), 1+sparseStates(m)), stage, nil
}
