package place

import (
	"fmt"

	"github.com/heterps/heterps/config"
)

// Op kinds. Each is one kernel launch of a training step.
const (
	KindInput        = "input"         // the batch arriving (no compute)
	KindMatMul       = "matmul"        // GEMM [Dims[0] x Dims[2]] x [Dims[2] x Dims[1]]
	KindAct          = "act"           // bias + activation on [Dims[0] x Dims[1]]
	KindActGrad      = "act_grad"      // its backward
	KindGather       = "gather"        // embedding bag: Dims = rows, dim, ids
	KindGatherGrad   = "gather_grad"   // its backward (sparse rows)
	KindConcat       = "concat"        // copies [Dims[0] x Dims[1]]
	KindLoss         = "loss"          // loss and its gradient on [Dims[0] x Dims[1]]
	KindUpdate       = "update"        // dense optimiser step on Dims[0] weights, Dims[1] floats of state each
	KindSparseUpdate = "sparse_update" // optimiser step on Dims[0] rows of Dims[1], Dims[2] states
	KindSimilarity   = "similarity"    // row dot products in a host loop (float64): Dims = rows, width, passes
	KindLSTM         = "lstm"          // LSTM cell pointwise part on [Dims[0] x Dims[1]]
	KindLSTMGrad     = "lstm_grad"     // its backward
	KindSoftmax      = "softmax"       // softmax on [Dims[0] x Dims[1]]
)

// Kinds lists every op kind, in a fixed order (the rl policy's features).
var Kinds = []string{KindInput, KindMatMul, KindAct, KindActGrad, KindGather, KindGatherGrad, KindConcat,
	KindLoss, KindUpdate, KindSparseUpdate, KindSimilarity, KindLSTM, KindLSTMGrad, KindSoftmax}

// Op is one node of a step's graph. Ops are stored in a topological order:
// every input comes before the op.
type Op struct {
	Name   string
	Kind   string
	Group  int     // co-location group (Graph.Groups)
	FLOPs  float64 // floating-point operations
	Bytes  float64 // bytes read and written in the device's memory
	Out    int64   // bytes of the op's output tensor, sent to consumers on other devices
	Mem    int64   // bytes held on the op's device for the whole step: parameters, optimiser state, saved outputs
	Inputs []int   // producer ops
	Dims   [3]int  // kernel shape, for measuring (see the kinds)
	// NextStep are the ops that read this op's output in the next step: an
	// optimiser update's new weights must reach the devices of the ops that
	// use them before the next step can run them.
	NextStep []int
}

// Graph is the op graph of one training step.
type Graph struct {
	Name   string
	Ops    []Op
	Groups []string // group names; an op's Group indexes this
}

// MaxBatch bounds the batch of a model's graph.
const MaxBatch = 1 << 20

// builder appends ops and groups to a graph.
type builder struct {
	g     *Graph
	batch int
}

func (b *builder) group(name string) int {
	b.g.Groups = append(b.g.Groups, name)
	return len(b.g.Groups) - 1
}

// feeds records that the next step's ops read op's output.
func (b *builder) feeds(op int, next ...int) {
	b.g.Ops[op].NextStep = append(b.g.Ops[op].NextStep, next...)
}

func (b *builder) add(op Op, inputs ...int) int {
	op.Inputs = append([]int(nil), inputs...)
	b.g.Ops = append(b.g.Ops, op)
	return len(b.g.Ops) - 1
}

// elementwise is an op touching rows x cols floats, flops per element, read
// and written once each.
func elementwise(name, kind string, group, rows, cols int, flops float64) Op {
	n := float64(rows) * float64(cols)
	return Op{Name: name, Kind: kind, Group: group, FLOPs: flops * n, Bytes: 8 * n,
		Out: int64(4 * n), Dims: [3]int{rows, cols}}
}

// hostRows is a loop on the host over rows x width floats, passes times
// (dot products or row updates accumulated in float64, as daemon/nn's
// similarity and NCE layers do them): two FLOPs per element and pass.
func hostRows(name string, group, rows, width, passes int) Op {
	n := float64(rows) * float64(width) * float64(passes)
	return Op{Name: name, Kind: KindSimilarity, Group: group, FLOPs: 2 * n, Bytes: 8 * n,
		Out: int64(4 * rows * width), Dims: [3]int{rows, width, passes}}
}

// matmul is C[m x n] = A[m x k] B[k x n].
func matmul(name string, group, m, n, k int) Op {
	fm, fn, fk := float64(m), float64(n), float64(k)
	return Op{Name: name, Kind: KindMatMul, Group: group, FLOPs: 2 * fm * fn * fk,
		Bytes: 4 * (fm*fk + fk*fn + fm*fn), Out: int64(4 * fm * fn), Dims: [3]int{m, n, k}}
}

// update is an optimiser step on n weights with states floats of state per
// weight; its output is the new weights.
func update(name string, group int, n int64, states int) Op {
	fn := float64(n)
	return Op{Name: name, Kind: KindUpdate, Group: group, FLOPs: 10 * fn, Bytes: 4 * fn * float64(3+2*states),
		Out: 4 * n, Mem: 4 * n * int64(states), Dims: [3]int{int(min(n, 1<<30)), states}}
}

// optimiserStates is the floats of state an optimiser keeps per weight.
func optimiserStates(o config.Optimizer) int {
	switch o.Kind {
	case "adam":
		return 2
	case "adagrad":
		return 1
	case "sgd":
		if o.Momentum > 0 {
			return 1
		}
	}
	return 0
}

// layerOps is what a layer's forward leaves for its backward.
type layerOps struct {
	out     int   // the op whose output is the layer's output
	sources []int // layers whose outputs this layer reads (-1: the input)
	saved   []int // forward ops the backward reads besides the output gradient
}

// FromModel builds the op graph of one training step of m at the given
// batch: each layer's forward ops in order, the loss, each layer's backward
// in reverse, and the optimiser updates. Co-location groups follow the
// paper's (TensorFlow's) rules: a layer's forward and backward ops form one
// group; a dense layer's weights and their optimiser update another (an
// embedding's lookups stay with its table and update).
func FromModel(m *config.Model, batch int) (*Graph, error) {
	if batch <= 0 || batch > MaxBatch {
		return nil, fmt.Errorf("place: model %s: batch must be in 1..%d, got %d", m.Name, MaxBatch, batch)
	}
	shapes := m.Shapes()
	if len(shapes) != len(m.Layers) {
		return nil, fmt.Errorf("place: model %s: layers do not fit together (validate the model first)", m.Name)
	}
	b := &builder{g: &Graph{Name: m.Name}, batch: batch}
	inGroup := b.group("input")
	input := b.add(Op{Name: "input", Kind: KindInput, Group: inGroup,
		Out: int64(4 * batch * (m.Input.Dense + m.Input.Slots)), Dims: [3]int{batch, m.Input.Dense + m.Input.Slots}})
	fwd := make([]layerOps, len(shapes))
	groups := make([]int, len(shapes))
	last := map[string]int{} // tower -> last layer index
	for i, s := range shapes {
		groups[i] = b.group(s.Name)
		src := -1
		if j, ok := last[s.Tower]; ok {
			src = j
		}
		var srcs []int
		if s.Kind == "cosine" || s.Kind == "dot" {
			for t, j := range last {
				if t != "" {
					srcs = append(srcs, j)
				}
			}
			if len(srcs) == 2 && srcs[0] > srcs[1] {
				srcs[0], srcs[1] = srcs[1], srcs[0]
			}
		} else {
			srcs = []int{src}
		}
		fwd[i] = b.forward(m, i, s, groups[i], srcs, fwd, input)
		last[s.Tower] = i
	}
	lastLayer := len(shapes) - 1
	lossGroup := b.group("loss")
	out := shapes[lastLayer].Out
	grad := b.add(elementwise("loss", KindLoss, lossGroup, batch, out, 8), fwd[lastLayer].out)
	b.backward(m, shapes, groups, fwd, lastLayer, grad)
	return b.g, nil
}

// outputOf is the op holding layer src's output (src -1: the input).
func outputOf(fwd []layerOps, src, input int) int {
	if src < 0 {
		return input
	}
	return fwd[src].out
}

// forward adds layer i's forward ops.
func (b *builder) forward(m *config.Model, i int, s config.LayerShape, g int, srcs []int, fwd []layerOps, input int) layerOps {
	B, name := b.batch, s.Name
	in := outputOf(fwd, srcs[0], input)
	lo := layerOps{sources: srcs}
	switch s.Kind {
	case "embedding":
		l := m.Layers[i]
		slots := (s.Out - s.In) / l.Dim
		op := Op{Name: name + "/gather", Kind: KindGather, Group: g, FLOPs: float64(B * slots * l.Dim),
			Bytes: float64(8 * B * slots * l.Dim), Out: int64(4 * B * s.Out), Mem: 4 * s.Weights,
			Dims: [3]int{int(min(m.Input.Vocab, 1<<30)), l.Dim, B * slots}}
		lo.out = b.add(op, dedup(input, in)...)
	case "concat", "dense":
		lo.out = b.add(elementwise(name+"/concat", KindConcat, g, B, s.Out, 0), dedup(input, in)...)
	case "fc":
		l := m.Layers[i]
		z := b.add(matmul(name+"/matmul", g, B, s.Out, s.In), in)
		act := elementwise(name+"/"+l.Act, KindAct, g, B, s.Out, 4)
		act.Mem = act.Out // saved for the backward
		lo.out = b.add(act, z)
		lo.saved = []int{in}
	case "cosine", "dot":
		other := outputOf(fwd, srcs[len(srcs)-1], input)
		op := hostRows(name+"/"+s.Kind, g, B, 2*s.In, 2) // two scores and two norms per row
		op.Out = int64(4 * B * s.Out)
		lo.out = b.add(op, in, other)
	case "nce":
		// The K negatives are drawn once per batch and shared by its rows
		// (daemon/nn's NCE): the layer gathers B+K table rows, not B(1+K).
		l := m.Layers[i]
		k, n := 1+l.Negatives, B+l.Negatives
		rows := b.add(Op{Name: name + "/gather", Kind: KindGather, Group: g, FLOPs: float64(n * (s.In + 1)),
			Bytes: float64(8 * n * (s.In + 1)), Out: int64(4 * n * (s.In + 1)), Mem: 4 * s.Weights,
			Dims: [3]int{l.Classes, s.In + 1, n}}, input) // the targets and sampled negatives
		neg := b.add(matmul(name+"/logits", g, B, k, s.In), in, rows)
		// The targets' dot products and the logits' biases, a host loop.
		dots := hostRows(name+"/target_dots", g, B, s.In, 1)
		dots.Out = int64(4 * B * k)
		lo.out = b.add(dots, neg, in, rows)
		lo.saved = []int{in, rows}
	}
	return lo
}

func dedup(a, b int) []int {
	if a == b {
		return []int{a}
	}
	return []int{a, b}
}

// backward adds every layer's backward and update ops, from the last layer
// down; grad is the op holding the loss's gradient of the last layer's
// output.
func (b *builder) backward(m *config.Model, shapes []config.LayerShape, groups []int, fwd []layerOps, last, grad int) {
	gradOut := map[int]int{last: grad}
	dense, sparse := optimiserStates(m.Optimizer), optimiserStates(m.Optimizer)
	if m.SparseOptimizer != nil {
		sparse = optimiserStates(*m.SparseOptimizer)
	}
	B := b.batch
	for i := last; i >= 0; i-- {
		dy, ok := gradOut[i]
		if !ok {
			continue // a layer nothing downstream depends on
		}
		s, g, lo := shapes[i], groups[i], fwd[i]
		name := s.Name
		var dx []int // gradient ops of the sources, in order
		switch s.Kind {
		case "embedding":
			l := m.Layers[i]
			slots := (s.Out - s.In) / l.Dim
			gg := b.add(Op{Name: name + "/gather_grad", Kind: KindGatherGrad, Group: g, FLOPs: float64(B * slots * l.Dim),
				Bytes: float64(8 * B * slots * l.Dim), Out: int64(4 * B * slots * l.Dim),
				Dims: [3]int{int(min(m.Input.Vocab, 1<<30)), l.Dim, B * slots}}, dy)
			upd := update(name+"/sparse_update", g, int64(B*slots)*int64(l.Dim), sparse)
			upd.Kind, upd.Mem = KindSparseUpdate, 4*s.Weights*int64(sparse)
			upd.Dims = [3]int{B * slots, l.Dim, sparse}
			b.feeds(b.add(upd, gg), lo.out)
			if s.In > 0 {
				dx = []int{gg}
			}
		case "concat", "dense":
			if s.In > 0 {
				dx = []int{b.add(elementwise(name+"/concat_grad", KindConcat, g, B, s.In, 0), dy)}
			}
		case "fc":
			l := m.Layers[i]
			dz := b.add(elementwise(name+"/"+l.Act+"_grad", KindActGrad, g, B, s.Out, 2), dy, lo.out)
			dw := matmul(name+"/matmul_dw", g, s.In, s.Out, B)
			// The weights live with their optimiser update, a group of its
			// own (a variable and its apply op, as TensorFlow colocates
			// them); the layer's ops read them from there.
			u := update(name+"/update", b.group(name+"/update"), s.Weights, dense)
			u.Mem += 4 * s.Weights
			upd := b.add(u, b.add(dw, lo.saved[0], dz))
			dx = []int{b.add(matmul(name+"/matmul_dx", g, B, s.In, s.Out), dz)}
			b.feeds(upd, b.g.Ops[lo.out].Inputs[0], dx[0])
		case "cosine", "dot":
			op := hostRows(name+"/"+s.Kind+"_grad", g, B, 2*s.In, 2) // four row updates per row
			d := b.add(op, dy, lo.out)
			dx = []int{d, d}
		case "nce":
			// The gathered rows' gradient: the targets' rows and, for the
			// K shared negatives, dlogits^T [K x B] times h [B x in]; then
			// merged per class (the embedding-bag backward) and updated.
			l := m.Layers[i]
			k, n := 1+l.Negatives, B+l.Negatives
			drows := matmul(name+"/logits_drows", g, k, s.In+1, B)
			drows.Out = int64(4 * n * (s.In + 1))
			dr := b.add(drows, dy, lo.saved[0])
			ndx := b.add(matmul(name+"/logits_dx", g, B, s.In, k), dy, lo.saved[1])
			// The targets' rows' gradients and their share of the input's
			// gradient, host loops over the batch.
			tg := hostRows(name+"/target_grads", g, B, s.In, 2)
			tg.Out = int64(4 * B * s.In)
			dxOp := b.add(tg, dy, lo.saved[0], lo.saved[1], ndx)
			merge := b.add(Op{Name: name + "/rows_grad", Kind: KindGatherGrad, Group: g, FLOPs: float64(n * (s.In + 1)),
				Bytes: float64(8 * n * (s.In + 1)), Out: int64(4 * n * (s.In + 1)),
				Dims: [3]int{l.Classes, s.In + 1, n}}, dr, dxOp)
			upd := update(name+"/sparse_update", g, int64(n)*int64(s.In+1), sparse)
			upd.Kind, upd.Mem = KindSparseUpdate, 4*s.Weights*int64(sparse)
			upd.Dims = [3]int{n, s.In + 1, sparse}
			b.feeds(b.add(upd, merge), lo.saved[1])
			dx = []int{dxOp}
		}
		for j, src := range lo.sources {
			if src >= 0 && j < len(dx) {
				gradOut[src] = dx[j]
			}
		}
	}
}
