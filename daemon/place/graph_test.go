package place

import (
	"slices"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
)

func loadGraph(t *testing.T, model string, batch int) *Graph {
	t.Helper()
	m, err := config.LoadModel(model)
	if err != nil {
		t.Fatal(err)
	}
	g, err := FromModel(m, batch)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func opIndex(t *testing.T, g *Graph, name string) int {
	t.Helper()
	i := slices.IndexFunc(g.Ops, func(op Op) bool { return op.Name == name })
	if i < 0 {
		t.Fatalf("%s: no op %q", g.Name, name)
	}
	return i
}

// reads reports whether op `to` reads op `from`.
func reads(t *testing.T, g *Graph, to, from string) bool {
	return slices.Contains(g.Ops[opIndex(t, g, to)].Inputs, opIndex(t, g, from))
}

// TestCTRDNNGraphHasItsOpsAndEdges: ctrdnn's step is an embedding gather,
// a concat, five FC layers (GEMM + activation forward; activation backward,
// two GEMMs and an Adam update backward), the loss and the sparse update,
// with the dependencies of the forward and backward passes.
func TestCTRDNNGraphHasItsOpsAndEdges(t *testing.T) {
	g := loadGraph(t, "ctrdnn", 512)
	count := map[string]int{}
	for _, op := range g.Ops {
		count[op.Kind]++
	}
	want := map[string]int{KindInput: 1, KindGather: 1, KindGatherGrad: 1, KindSparseUpdate: 1, KindConcat: 2,
		KindMatMul: 15, KindAct: 5, KindActGrad: 5, KindUpdate: 5, KindLoss: 1}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%d %s ops, want %d (all: %v)", count[k], k, n, count)
		}
	}
	if len(g.Ops) != 37 || len(g.Groups) != 14 {
		t.Errorf("%d ops in %d groups, want 37 in 14 (9 layers, input, loss, 5 weights)", len(g.Ops), len(g.Groups))
	}
	for _, e := range [][2]string{
		{"emb/gather", "input"}, {"concat/concat", "emb/gather"}, {"fc1/matmul", "concat/concat"},
		{"fc1/relu", "fc1/matmul"}, {"fc2/matmul", "fc1/relu"}, {"loss", "logit/identity"},
		{"logit/identity_grad", "loss"}, {"fc1/relu_grad", "fc2/matmul_dx"}, {"fc1/matmul_dw", "concat/concat"},
		{"fc1/matmul_dw", "fc1/relu_grad"}, {"fc1/update", "fc1/matmul_dw"}, {"concat/concat_grad", "fc1/matmul_dx"},
		{"emb/gather_grad", "concat/concat_grad"}, {"emb/sparse_update", "emb/gather_grad"},
	} {
		if !reads(t, g, e[0], e[1]) {
			t.Errorf("%s does not read %s", e[0], e[1])
		}
	}
	fc1 := g.Ops[opIndex(t, g, "fc1/matmul")]
	if fc1.FLOPs != 2*512*247*512 || fc1.Out != 4*512*512 {
		t.Errorf("fc1/matmul: %g FLOPs, %d bytes held, %d out", fc1.FLOPs, fc1.Mem, fc1.Out)
	}
	if emb := g.Ops[opIndex(t, g, "emb/gather")]; emb.Mem != 4*1000001*9 {
		t.Errorf("emb/gather holds %d bytes, want the table's %d", emb.Mem, 4*1000001*9)
	}
	// The weights live with their update, and Adam keeps two floats per
	// weight.
	if u := g.Ops[opIndex(t, g, "fc1/update")]; u.Mem != 3*4*(247*512+512) {
		t.Errorf("fc1/update holds %d bytes", u.Mem)
	}
	for i, op := range g.Ops {
		want := strings.Split(op.Name, "/")[0]
		if op.Kind == KindUpdate {
			want = op.Name
		}
		if g.Groups[op.Group] != want {
			t.Errorf("op %d %s in group %s", i, op.Name, g.Groups[op.Group])
		}
	}
}

// TestTowersJoinAtTheSimilarity: matchnet's cosine reads both towers, and
// its gradient flows back into both.
func TestTowersJoinAtTheSimilarity(t *testing.T) {
	g := loadGraph(t, "matchnet", 256)
	if !reads(t, g, "similarity/cosine", "query_fc2/tanh") || !reads(t, g, "similarity/cosine", "doc_fc2/tanh") {
		t.Error("the cosine does not read both towers")
	}
	if !reads(t, g, "query_fc2/tanh_grad", "similarity/cosine_grad") || !reads(t, g, "doc_fc2/tanh_grad", "similarity/cosine_grad") {
		t.Error("the cosine's gradient does not reach both towers")
	}
	for _, name := range []string{"query_emb/sparse_update", "doc_emb/sparse_update"} {
		opIndex(t, g, name)
	}
}

// TestEveryZooModelHasAGraph: each zoo model builds an acyclic step graph
// whose every op but the input reads something.
func TestEveryZooModelHasAGraph(t *testing.T) {
	for _, name := range config.ZooNames() {
		g := loadGraph(t, name, 128)
		if _, err := NewSimulator(g, []Device{testDevice("d", 1e12, 1<<40, 1e10)}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		for i, op := range g.Ops[1:] {
			if len(op.Inputs) == 0 {
				t.Errorf("%s: op %d (%s) reads nothing", name, i+1, op.Name)
			}
		}
	}
}

func TestBadBatchIsRefused(t *testing.T) {
	m, err := config.LoadModel("ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []int{0, -1, MaxBatch + 1} {
		if _, err := FromModel(m, b); err == nil || !strings.Contains(err.Error(), "batch") {
			t.Errorf("batch %d: %v", b, err)
		}
	}
}

// TestSyntheticGraphsHaveThePapersShape: the NMT-like graph has about 300
// ops (an LSTM stack over time, so cells read the cell below and the cell
// before), the Inception-like one blocks whose concat joins four branches.
func TestSyntheticGraphsHaveThePapersShape(t *testing.T) {
	nmt, err := NMTGraph(DefaultNMT)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(nmt.Ops); n < 250 || n > 350 {
		t.Errorf("nmt-like: %d ops", n)
	}
	if !reads(t, nmt, "dec1/matmul3", "dec0/lstm3") || !reads(t, nmt, "dec1/matmul3", "dec1/lstm2") ||
		!reads(t, nmt, "dec0/matmul0", "enc0/lstm9") {
		t.Error("nmt-like: LSTM cells do not read the cell below, the one before, or the encoder's last state")
	}
	inc, err := InceptionGraph(DefaultInception)
	if err != nil {
		t.Fatal(err)
	}
	cat := inc.Ops[opIndex(t, inc, "block2/concat")]
	if len(cat.Inputs) != 4 {
		t.Errorf("inception-like: block2's concat reads %d ops, want 4 branches", len(cat.Inputs))
	}
	for _, g := range []*Graph{nmt, inc} {
		if _, err := NewSimulator(g, []Device{testDevice("d", 1e12, 1<<40, 1e10)}); err != nil {
			t.Error(err)
		}
	}
	if _, err := NMTGraph(NMTConfig{}); err == nil {
		t.Error("an empty NMT config was accepted")
	}
}

// TestUpdatesFeedTheNextStep: the new weights go to the ops that read them.
func TestUpdatesFeedTheNextStep(t *testing.T) {
	g := loadGraph(t, "ctrdnn", 512)
	feeds := func(from, to string) bool {
		return slices.Contains(g.Ops[opIndex(t, g, from)].NextStep, opIndex(t, g, to))
	}
	if !feeds("fc2/update", "fc2/matmul") || !feeds("fc2/update", "fc2/matmul_dx") || !feeds("emb/sparse_update", "emb/gather") {
		t.Error("updates do not feed the next step's readers of their weights")
	}
	if u := g.Ops[opIndex(t, g, "fc2/update")]; u.Out != 4*(512*256+256) {
		t.Errorf("fc2/update outputs %d bytes", u.Out)
	}
}

// TestNCEGraphSharesItsNegatives: daemon/nn's NCE layer draws K negatives
// per batch, shared by its rows, so a step gathers, merges and updates B+K
// table rows (not B(1+K)), and its host loops over the batch (the targets'
// dot products and gradients) are ops of their own.
func TestNCEGraphSharesItsNegatives(t *testing.T) {
	const batch, negatives = 64, 8 // the nce zoo model samples 8
	g := loadGraph(t, "nce", batch)
	rows := map[string]int{}
	for _, op := range g.Ops {
		rows[op.Name] = op.Dims[2]
		if op.Kind == KindSparseUpdate {
			rows[op.Name] = op.Dims[0]
		}
	}
	for _, name := range []string{"output/gather", "output/rows_grad", "output/sparse_update"} {
		if rows[name] != batch+negatives {
			t.Errorf("%s touches %d rows, want %d", name, rows[name], batch+negatives)
		}
	}
	for _, name := range []string{"output/target_dots", "output/target_grads"} {
		if rows[name] == 0 {
			t.Errorf("no %s op", name)
		}
	}
}
