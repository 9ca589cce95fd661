package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/native"
)

// testBatch makes a batch of n samples with slots sparse slots (1..3 ids
// each, duplicates included), dense features, 0/1 labels and classes.
func testBatch(rng *rand.Rand, n, slots, dense int, vocab int64, classes int) *data.Batch {
	b := &data.Batch{Size: n, Slots: slots, NumDense: dense, Offsets: []int64{0}}
	for range n {
		for range slots {
			for range 1 + rng.IntN(3) {
				b.IDs = append(b.IDs, rng.Int64N(vocab))
			}
			b.Offsets = append(b.Offsets, int64(len(b.IDs)))
		}
		for range dense {
			b.Dense = append(b.Dense, rng.Float32()*2-1)
		}
		b.Labels = append(b.Labels, float32(rng.IntN(2)))
		if classes > 0 {
			b.Classes = append(b.Classes, rng.Int64N(int64(classes)))
		}
	}
	return b
}

func mustModel(t *testing.T, src string) *config.Model {
	t.Helper()
	m, err := config.ParseModel("test.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// lossOf runs forward and the loss only.
func lossOf(t *testing.T, tr *Trainer, batch *data.Batch) float64 {
	t.Helper()
	s := &Step{Backend: tr.Backend, Batch: batch}
	out, err := tr.Model.Forward(s)
	if err != nil {
		t.Fatal(err)
	}
	sum, _, err := tr.Model.Loss.Forward(s, out)
	if err != nil {
		t.Fatal(err)
	}
	return sum / float64(batch.Size)
}

// checkGradients compares every parameter's analytic gradient with central
// finite differences of the mean loss at up to 25 entries per parameter.
func checkGradients(t *testing.T, tr *Trainer, batch *data.Batch) {
	t.Helper()
	if _, err := tr.Gradients(&Step{Backend: tr.Backend, Batch: batch, Train: true}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, p := range tr.Model.Params() {
		analytic := analyticGrad(t, p)
		w, _ := native.Host(p.Value)
		for _, i := range sampleEntries(rng, p, 25) {
			const eps = 1e-2
			orig := w[i]
			w[i] = orig + eps
			up := lossOf(t, tr, batch)
			w[i] = orig - eps
			down := lossOf(t, tr, batch)
			w[i] = orig
			numeric := (up - down) / (2 * eps)
			if math.Abs(numeric-analytic[i]) > 2e-3+3e-2*math.Abs(numeric) {
				t.Errorf("%s[%d]: analytic %.6g, numeric %.6g", p.Name, i, analytic[i], numeric)
			}
		}
	}
}

// analyticGrad returns p's gradient as a dense map from flat index to value.
func analyticGrad(t *testing.T, p *Param) map[int]float64 {
	t.Helper()
	g := map[int]float64{}
	if !p.Sparse {
		h, _ := native.Host(p.Grad)
		for i, v := range h {
			g[i] = float64(v)
		}
		return g
	}
	rows, _ := native.Host(p.SparseGrad.Rows)
	seen := map[int64]bool{}
	for k, id := range p.SparseGrad.IDs {
		if seen[id] {
			t.Fatalf("%s: id %d appears twice in the sparse gradient", p.Name, id)
		}
		seen[id] = true
		for c := range p.Cols {
			g[int(id)*p.Cols+c] = float64(rows[k*p.Cols+c])
		}
	}
	return g
}

// sampleEntries picks entries to check: for sparse tables, entries of rows
// that have gradients plus a few untouched rows (whose gradient must be 0).
func sampleEntries(rng *rand.Rand, p *Param, n int) []int {
	var out []int
	if p.Sparse {
		for _, id := range p.SparseGrad.IDs {
			out = append(out, int(id)*p.Cols+rng.IntN(p.Cols))
		}
		out = append(out, rng.IntN(p.Len()), rng.IntN(p.Len()))
	} else {
		for range n {
			out = append(out, rng.IntN(p.Len()))
		}
	}
	if len(out) > n {
		rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		out = out[:n]
	}
	return out
}

const smallCTR = `
version = 1
name = "small"
task = "ctr"
[input]
dense = 3
slots = 4
vocab = 40
[init]
embedding_scale = 0.5
[[layer]]
kind = "embedding"
dim = 3
slots = [0, 2]
pool = "mean"
[[layer]]
kind = "embedding"
dim = 2
slots = [2, 4]
[[layer]]
kind = "concat"
[[layer]]
kind = "fc"
out = 6
act = "tanh"
[[layer]]
kind = "fc"
out = 5
act = "sigmoid"
[[layer]]
kind = "fc"
out = 1
[loss]
kind = "bce"
`

func TestGradientsCTRModel(t *testing.T) {
	b := native.MustCPU()
	tr, err := NewTrainer(b, mustModel(t, smallCTR), 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkGradients(t, tr, testBatch(rand.New(rand.NewPCG(1, 2)), 9, 4, 3, 40, 0))
}

func TestGradientsClassifierAndRegression(t *testing.T) {
	classifier := `
version = 1
name = "cls"
task = "classify"
[input]
dense = 5
classes = 4
[[layer]]
kind = "dense"
[[layer]]
kind = "fc"
out = 7
act = "relu"
[[layer]]
kind = "fc"
out = 4
[loss]
kind = "softmax"
`
	regress := `
version = 1
name = "reg"
task = "regress"
[input]
dense = 5
[[layer]]
kind = "dense"
[[layer]]
kind = "fc"
out = 1
[loss]
kind = "mse"
`
	b := native.MustCPU()
	for _, src := range []string{classifier, regress} {
		tr, err := NewTrainer(b, mustModel(t, src), 5, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkGradients(t, tr, testBatch(rand.New(rand.NewPCG(3, 4)), 11, 0, 5, 1, 4))
	}
}
