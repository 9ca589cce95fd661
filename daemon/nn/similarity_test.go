package nn

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/native"
)

// smallMatch is a two-tower model: each tower an embedding and an FC
// layer. The margin exceeds any cosine difference (at most 2), so every
// sample's hinge is active and finite differences never cross its kink.
const smallMatch = `
version = 1
name = "smallmatch"
task = "match"
[input]
slots = 4
vocab = 30
[init]
embedding_scale = 0.5
[[layer]]
kind = "embedding"
tower = "query"
dim = 3
slots = [0, 2]
[[layer]]
kind = "fc"
tower = "query"
out = 4
act = "tanh"
[[layer]]
kind = "embedding"
tower = "doc"
dim = 3
slots = [2, 4]
[[layer]]
kind = "fc"
tower = "doc"
out = 4
act = "tanh"
[[layer]]
kind = "cosine"
[loss]
kind = "hinge"
margin = 2.5
`

// multiPartDot has towers of two embeddings each, side by side (two parts
// per tower), joined by a dot product.
const multiPartDot = `
version = 1
name = "multipart"
task = "match"
[input]
slots = 4
vocab = 30
[init]
embedding_scale = 0.5
[[layer]]
kind = "embedding"
tower = "query"
dim = 2
slots = [0, 1]
[[layer]]
kind = "embedding"
tower = "query"
dim = 2
slots = [1, 2]
[[layer]]
kind = "embedding"
tower = "doc"
dim = 2
slots = [2, 3]
[[layer]]
kind = "embedding"
tower = "doc"
dim = 2
slots = [3, 4]
[[layer]]
kind = "dot"
[loss]
kind = "hinge"
margin = 20
`

func TestGradientsTwoTowerMatching(t *testing.T) {
	b := native.MustCPU()
	for _, src := range []string{smallMatch, multiPartDot} {
		tr, err := NewTrainer(b, mustModel(t, src), 11, 0)
		if err != nil {
			t.Fatal(err)
		}
		if w := tr.Model.Layers()[len(tr.Model.Layers())-1].Out; w != 2 {
			t.Fatalf("%s: the join outputs %d scores per sample, want 2", tr.Model.Config.Name, w)
		}
		checkGradients(t, tr, testBatch(rand.New(rand.NewPCG(5, 6)), 7, 4, 0, 30, 0))
	}
}

// simScores returns the similarity layer's [rows x 2] output for q and d.
func simScores(t *testing.T, kind string, q, d []float32, width int) ([]float32, *Similarity) {
	t.Helper()
	l, err := NewSimilarity(config.LayerShape{Name: kind, Kind: kind, In: width, Out: 2}, kind)
	if err != nil {
		t.Fatal(err)
	}
	rows := len(q) / width
	s := &Step{Backend: native.MustCPU()}
	act := func(v []float32) Activation {
		return Activation{Rows: rows, Parts: []Part{{Buf: native.HostBuffer(v), Width: width, NeedGrad: true}}}
	}
	out, err := l.ForwardJoin(s, act(q), act(d))
	if err != nil {
		t.Fatal(err)
	}
	h, _ := native.Host(out.Parts[0].Buf)
	return append([]float32(nil), h...), l
}

func TestSimilarityScoresOwnAndNextDocument(t *testing.T) {
	const width = 3
	rng := rand.New(rand.NewPCG(1, 1))
	q, d := make([]float32, 4*width), make([]float32, 4*width)
	for i := range q {
		q[i], d[i] = rng.Float32()*2-1, rng.Float32()*2-1
	}
	row := func(v []float32, i int) []float32 { return v[i*width : (i+1)*width] }
	cosine := func(a, b []float32) float64 {
		return dot64(a, b) / math.Sqrt(dot64(a, a)*dot64(b, b))
	}
	for _, kind := range []string{"cosine", "dot"} {
		got, _ := simScores(t, kind, q, d, width)
		for i := range 4 {
			j := (i + 1) % 4
			want := [2]float64{dot64(row(q, i), row(d, i)), dot64(row(q, i), row(d, j))}
			if kind == "cosine" {
				want = [2]float64{cosine(row(q, i), row(d, i)), cosine(row(q, i), row(d, j))}
			}
			for c := range 2 {
				if math.Abs(float64(got[2*i+c])-want[c]) > 1e-6 {
					t.Errorf("%s: row %d column %d = %v, want %v", kind, i, c, got[2*i+c], want[c])
				}
			}
		}
	}
}

func TestCosineOfZeroVectorIsZeroWithFiniteGradient(t *testing.T) {
	q := []float32{0, 0, 0, 1, 2, 2}
	d := []float32{1, 0, 0, 0, 0, 0}
	scores, l := simScores(t, "cosine", q, d, 3)
	for i, v := range scores[:3] {
		if v != 0 {
			t.Errorf("score %d of a pair with a zero vector = %v, want 0", i, v)
		}
	}
	if math.Abs(float64(scores[3])-1.0/3) > 1e-6 {
		t.Errorf("cos((1,2,2), e1) = %v, want 1/3", scores[3])
	}
	s := &Step{Backend: native.MustCPU()}
	dout := Activation{Rows: 2, Parts: []Part{{Buf: native.HostBuffer{1, 1, 1, 1}, Width: 2, NeedGrad: true}}}
	da, db, err := l.BackwardJoin(s, dout)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []Activation{da, db} {
		h, _ := native.Host(a.Parts[0].Buf)
		for _, v := range h {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("gradient %v is not finite", h)
			}
		}
	}
	// Query 1 = (1,2,2)/3 meets document 1 = 0 (positive) and document 0 =
	// e1 (negative): d cos(q, e1)/dq = (e1 - cos q/|q|)/|q| = (1 - 1/9, -2/9, -2/9)/3.
	dq, _ := native.Host(da.Parts[0].Buf)
	want := []float64{8.0 / 27, -2.0 / 27, -2.0 / 27}
	for k, w := range want {
		if math.Abs(float64(dq[3+k])-w) > 1e-6 {
			t.Errorf("dq[1][%d] = %v, want %v", k, dq[3+k], w)
		}
	}
}

func TestHingeLossAndMargins(t *testing.T) {
	h, err := NewHinge(0.5)
	if err != nil {
		t.Fatal(err)
	}
	scores := []float32{0.9, 0.1, 0.2, 0.4, 0.3, 0}
	out := Activation{Rows: 3, Parts: []Part{{Buf: native.HostBuffer(scores), Width: 2}}}
	s := &Step{Backend: native.MustCPU()}
	sum, dout, err := h.Forward(s, out)
	if err != nil {
		t.Fatal(err)
	}
	want, wantGrad := 0.0, make([]float64, 6)
	for i := range 3 {
		if v := 0.5 - float64(scores[2*i]) + float64(scores[2*i+1]); v > 0 {
			want += v
			wantGrad[2*i], wantGrad[2*i+1] = -1.0/3, 1.0/3
		}
	}
	if math.Abs(sum-want) > 1e-6 {
		t.Errorf("hinge sum %v, want %v", sum, want)
	}
	g, _ := native.Host(dout.Parts[0].Buf)
	for i := range g {
		if math.Abs(float64(g[i])-wantGrad[i]) > 1e-7 {
			t.Errorf("gradient %v, want %v", g, wantGrad)
			break
		}
	}
	margins, err := h.Scores(s, out)
	if err != nil {
		t.Fatal(err)
	}
	// countCorrect counts a positive margin as a correct ranking.
	if got := countCorrect(h, margins, &data.Batch{Size: 3}); got != 2 {
		t.Errorf("%d of margins %v counted correct, want 2", got, margins)
	}
	if _, err := NewHinge(-1); err == nil {
		t.Error("a negative margin was accepted")
	}
	bad := Activation{Rows: 3, Parts: []Part{{Buf: native.HostBuffer(scores[:3]), Width: 1}}}
	if _, _, err := h.Forward(s, bad); err == nil || !strings.Contains(err.Error(), "want 2") {
		t.Errorf("one score per sample: %v", err)
	}
}

func TestMatchnetLearnsPairs(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for several seconds; skipped with -short")
	}
	cfg := loadZoo(t, "matchnet")
	tr, err := NewTrainer(native.MustCPU(), cfg, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	opts := data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitEval}
	eval := func() Metrics {
		m, err := tr.Evaluate(context.Background(), openData(t, "pairs:1", opts), 256, 5000)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := eval()
	start := time.Now()
	train := openData(t, "pairs:1", data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain})
	trainSteps(t, tr, train, 256, 300)
	after := eval()
	t.Logf("pairwise accuracy %.4f -> %.4f, hinge loss %.4f -> %.4f (%d held-out pairs, trained %.1f s)",
		before.Accuracy, after.Accuracy, before.Loss, after.Loss, after.Samples, time.Since(start).Seconds())
	if after.Accuracy < 0.9 {
		t.Fatalf("held-out pairwise accuracy %.4f, want >= 0.9", after.Accuracy)
	}
}
