package nn

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/heterps/heterps/native"
)

// paramGrads returns a copy of every parameter's gradient (dense, or the
// sparse rows with their ids folded in as floats).
func paramGrads(t *testing.T, m *Model) [][]float32 {
	t.Helper()
	var out [][]float32
	for _, p := range m.Params() {
		g := p.Grad
		var ids []float32
		if p.Sparse {
			g = p.SparseGrad.Rows
			for _, id := range p.SparseGrad.IDs {
				ids = append(ids, float32(id))
			}
		}
		h, ok := native.Host(g)
		if !ok {
			t.Fatalf("%s: gradient not in host memory", p.Name)
		}
		out = append(out, append(ids, h...))
	}
	return out
}

func TestRangesEqualWholeModel(t *testing.T) {
	b := native.MustCPU()
	cfg := mustModel(t, smallCTR)
	whole, err := Build(b, cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	split, err := Build(b, cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	batch := testBatch(rand.New(rand.NewPCG(4, 5)), 7, 4, 3, 40, 0)
	s := &Step{Backend: b, Batch: batch, Train: true}

	tr := &Trainer{Backend: b, Model: whole}
	if _, err := tr.Gradients(s); err != nil {
		t.Fatal(err)
	}

	cut := 2 // layers [0, 2] (embeddings, concat) and [3, 5] (FCs)
	mid, err := split.ForwardRange(s, 0, cut, Activation{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := split.ForwardRange(s, cut+1, split.NumLayers()-1, mid)
	if err != nil {
		t.Fatal(err)
	}
	_, dout, err := split.Loss.Forward(s, out)
	if err != nil {
		t.Fatal(err)
	}
	dmid, err := split.BackwardRange(s, cut+1, split.NumLayers()-1, dout)
	if err != nil {
		t.Fatal(err)
	}
	if len(dmid.Parts) != len(mid.Parts) {
		t.Fatalf("input gradient has %d parts, activation %d", len(dmid.Parts), len(mid.Parts))
	}
	for i, p := range mid.Parts {
		if (dmid.Parts[i].Buf != nil) != p.NeedGrad {
			t.Fatalf("part %d: gradient present %v, NeedGrad %v", i, dmid.Parts[i].Buf != nil, p.NeedGrad)
		}
	}
	if _, err := split.BackwardRange(s, 0, cut, dmid); err != nil {
		t.Fatal(err)
	}

	want, got := paramGrads(t, whole), paramGrads(t, split)
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("param %d: %d gradient values, want %d", i, len(got[i]), len(want[i]))
		}
		for j := range want[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
				t.Fatalf("param %d [%d]: split %v, whole %v", i, j, got[i][j], want[i][j])
			}
		}
	}
}

func TestRangeRefusesTowerSplitsAndBadBounds(t *testing.T) {
	b := native.MustCPU()
	m, err := Build(b, mustModel(t, smallMatch), 1)
	if err != nil {
		t.Fatal(err)
	}
	s := &Step{Backend: b, Train: true}
	if _, err := m.ForwardRange(s, 0, 1, Activation{}); !errors.Is(err, ErrTowerRange) {
		t.Fatalf("tower model range: err %v, want ErrTowerRange", err)
	}
	if _, err := m.BackwardRange(s, 1, 2, Activation{}); !errors.Is(err, ErrTowerRange) {
		t.Fatalf("tower model backward range: err %v, want ErrTowerRange", err)
	}
	for _, r := range [][2]int{{-1, 0}, {2, 1}, {0, m.NumLayers()}} {
		if _, err := m.ForwardRange(s, r[0], r[1], Activation{}); err == nil {
			t.Fatalf("range %v accepted", r)
		}
	}
}

// TestBackwardRangeThenReportsFinalLayers checks that done(i) comes once per
// layer, the dense ones in backward order, when layer i's gradients hold
// their final values: on a layer range of a plain model and on a whole
// tower model.
func TestBackwardRangeThenReportsFinalLayers(t *testing.T) {
	b := native.MustCPU()
	for _, tc := range []struct {
		name string
		cfg  string
	}{{"ctr range", smallCTR}, {"towers whole", smallMatch}} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Build(b, mustModel(t, tc.cfg), 3)
			if err != nil {
				t.Fatal(err)
			}
			batch := testBatch(rand.New(rand.NewPCG(4, 5)), 7, m.Config.Input.Slots, m.Config.Input.Dense, m.Config.Input.Vocab, 0)
			s := &Step{Backend: b, Batch: batch, Train: true}
			last := m.NumLayers() - 1
			out, err := m.ForwardRange(s, 0, last, Activation{})
			if err != nil {
				t.Fatal(err)
			}
			_, dout, err := m.Loss.Forward(s, out)
			if err != nil {
				t.Fatal(err)
			}
			var order []int
			seen := map[int][][]float32{}
			_, err = m.BackwardRangeThen(s, 0, last, dout, func(i int) func() {
				order = append(order, i)
				seen[i] = layerGrads(t, m, i)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// Layers with dense parameters come in backward order; those
			// without may come as soon as their backward has returned.
			dense := denseOnly(m, order)
			if !slices.IsSortedFunc(dense, func(a, b int) int { return b - a }) {
				t.Fatalf("done order %v: the dense layers %v out of backward order", order, dense)
			}
			if slices.Sort(order); !slices.Equal(order, iotaInts(last+1)) {
				t.Fatalf("done called for %v, want every layer once", order)
			}
			for i, early := range seen {
				final := layerGrads(t, m, i)
				for p := range final {
					for j := range final[p] {
						if math.Float32bits(early[p][j]) != math.Float32bits(final[p][j]) {
							t.Fatalf("layer %d param %d [%d]: %v when reported done, %v at the end", i, p, j, early[p][j], final[p][j])
						}
					}
				}
			}
		})
	}
}

// layerGrads copies layer i's parameter gradients (dense, or sparse rows).
func layerGrads(t *testing.T, m *Model, i int) [][]float32 {
	t.Helper()
	var out [][]float32
	for _, p := range m.LayerParams(i) {
		g := p.Grad
		if p.Sparse {
			g = p.SparseGrad.Rows
		}
		h, ok := native.Host(g)
		if !ok {
			t.Fatalf("%s: gradient not in host memory", p.Name)
		}
		out = append(out, append([]float32(nil), h...))
	}
	return out
}

func iotaInts(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// Step.Ready is called with every layer's index, in order, before the
// layer runs, by Forward and by ForwardRange alike; its error ends the
// forward before the layer it refused.
func TestForwardAsksReadyBeforeEachLayer(t *testing.T) {
	b := native.MustCPU()
	m, err := Build(b, mustModel(t, smallCTR), 3)
	if err != nil {
		t.Fatal(err)
	}
	batch := testBatch(rand.New(rand.NewPCG(4, 5)), 7, 4, 3, 40, 0)
	var asked []int
	s := &Step{Backend: b, Batch: batch, Train: true, Ready: func(i int) error { asked = append(asked, i); return nil }}
	if _, err := m.Forward(s); err != nil {
		t.Fatal(err)
	}
	if want := iotaInts(m.NumLayers()); !slices.Equal(asked, want) {
		t.Fatalf("Forward asked for layers %v, want %v", asked, want)
	}
	asked = nil
	mid, err := m.ForwardRange(s, 0, 2, Activation{})
	if err == nil {
		_, err = m.ForwardRange(s, 3, m.NumLayers()-1, mid)
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := iotaInts(m.NumLayers()); !slices.Equal(asked, want) {
		t.Fatalf("ForwardRange asked for layers %v, want %v", asked, want)
	}
	refused := errors.New("layer 4 is not ready")
	asked = nil
	s.Ready = func(i int) error {
		if i == 4 {
			return refused
		}
		asked = append(asked, i)
		return nil
	}
	if _, err := m.ForwardRange(s, 3, m.NumLayers()-1, mid); !errors.Is(err, refused) {
		t.Fatalf("ForwardRange with layer 4 refused: %v, want %v", err, refused)
	}
	if !slices.Equal(asked, []int{3}) {
		t.Fatalf("layers %v ran before the refusal, want [3]", asked)
	}
}
