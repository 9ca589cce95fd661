package nn

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/native"
)

// smallNCE feeds an FC layer's output (one part) to an NCE layer.
const smallNCE = `
version = 1
name = "smallnce"
task = "nce"
[input]
slots = 2
vocab = 20
classes = 12
[init]
embedding_scale = 0.5
[[layer]]
kind = "embedding"
dim = 3
[[layer]]
kind = "fc"
out = 5
act = "tanh"
[[layer]]
kind = "nce"
classes = 12
negatives = 4
[loss]
kind = "nce"
`

// multiPartNCE feeds two embeddings side by side (two parts) to the NCE layer.
const multiPartNCE = `
version = 1
name = "multipartnce"
task = "nce"
[input]
slots = 2
vocab = 20
classes = 12
[init]
embedding_scale = 0.5
[[layer]]
kind = "embedding"
dim = 3
slots = [0, 1]
[[layer]]
kind = "embedding"
dim = 2
slots = [1, 2]
[[layer]]
kind = "nce"
classes = 12
negatives = 4
[loss]
kind = "nce"
`

func nceLayer(t *testing.T, tr *Trainer) *NCE {
	t.Helper()
	for _, e := range tr.Model.entries {
		if l, ok := e.layer.(*NCE); ok {
			return l
		}
	}
	t.Fatal("model has no NCE layer")
	return nil
}

// hitsAndRepeats reports whether batch's negatives include an accidental
// hit (a negative equal to some sample's target) and a class drawn twice.
func hitsAndRepeats(l *NCE, b *data.Batch) (hit, repeat bool) {
	neg := l.Negatives(b)
	for k, c := range neg {
		hit = hit || slices.Contains(b.Classes, c)
		repeat = repeat || slices.Contains(neg[:k], c)
	}
	return hit, repeat
}

// trickyBatch returns a test batch whose negatives include an accidental
// hit and a repeated class, so that masking and row merging are exercised.
func trickyBatch(t *testing.T, l *NCE) *data.Batch {
	t.Helper()
	for seed := range uint64(100) {
		b := testBatch(rand.New(rand.NewPCG(seed, 9)), 9, 2, 0, 20, 12)
		if hit, repeat := hitsAndRepeats(l, b); hit && repeat {
			return b
		}
	}
	t.Fatal("no batch with both an accidental hit and a repeated negative")
	return nil
}

func TestGradientsNCEModel(t *testing.T) {
	b := native.MustCPU()
	for _, src := range []string{smallNCE, multiPartNCE} {
		tr, err := NewTrainer(b, mustModel(t, src), 13, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkGradients(t, tr, trickyBatch(t, nceLayer(t, tr)))
	}
}

func TestNCELogitsMaskAndLoss(t *testing.T) {
	b := native.MustCPU()
	tr, err := NewTrainer(b, mustModel(t, multiPartNCE), 13, 0)
	if err != nil {
		t.Fatal(err)
	}
	l := nceLayer(t, tr)
	batch := trickyBatch(t, l)
	s := &Step{Backend: b, Batch: batch, Train: true}
	out, err := tr.Model.Forward(s)
	if err != nil {
		t.Fatal(err)
	}
	logits, _ := native.Host(out.Parts[0].Buf)
	table, _ := native.Host(l.Table.Value)
	neg := l.Negatives(batch)
	k, w := len(neg), l.Table.Cols
	// h_i is the embedding rows of sample i's two slots side by side.
	h := func(i int) []float32 {
		var row []float32
		for slot, e := range tr.Model.entries[:2] {
			emb := e.layer.(*Embedding)
			dim := emb.Dim()
			v, _ := native.Host(emb.Table.Value)
			id := batch.Bag(i, slot)
			pooled := make([]float32, dim)
			for _, id := range id {
				for c := range pooled {
					pooled[c] += v[int(id)*dim+c]
				}
			}
			row = append(row, pooled...)
		}
		return row
	}
	// logit(c) = s(c) - log(K Q(c)), with s(c) = h·w_c + β_c + log Q(c).
	want := func(i int, c int64) float64 {
		wc := table[int(c)*w : int(c+1)*w]
		score, err := l.Score(b, h(i), c)
		if err != nil {
			t.Fatal(err)
		}
		if direct := dot64(h(i), wc[:w-1]) + float64(wc[w-1]) + math.Log(l.sampler.Prob(c)); math.Abs(score-direct) > 1e-9 {
			t.Fatalf("Score(%d) = %v, want %v", c, score, direct)
		}
		return score - math.Log(float64(k)*l.sampler.Prob(c))
	}
	wantLoss, hits := 0.0, 0
	softplus := func(x float64) float64 { return math.Log1p(math.Exp(-math.Abs(x))) + max(x, 0) }
	for i, target := range batch.Classes {
		row := logits[i*(1+k) : (i+1)*(1+k)]
		if d := float64(row[0]) - want(i, target); math.Abs(d) > 1e-5 {
			t.Errorf("row %d target logit %v, want %v", i, row[0], want(i, target))
		}
		wantLoss += softplus(-want(i, target))
		for j, c := range neg {
			expect := want(i, c)
			if c == target {
				expect, hits = maskedLogit, hits+1
			} else {
				wantLoss += softplus(expect)
			}
			if math.Abs(float64(row[1+j])-expect) > 1e-5 {
				t.Errorf("row %d negative %d (class %d, target %d) logit %v, want %v", i, j, c, target, row[1+j], expect)
			}
		}
	}
	if hits == 0 {
		t.Fatal("the batch has no accidental hit")
	}
	sum, dout, err := tr.Model.Loss.Forward(s, out)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(sum-wantLoss) > 1e-4*wantLoss {
		t.Errorf("NCE loss %v, want %v (accidental hits excluded)", sum, wantLoss)
	}
	if err := tr.Model.Backward(s, dout); err != nil {
		t.Fatal(err)
	}
	dl, _ := native.Host(l.dlogits.buf)
	for i, target := range batch.Classes {
		for j, c := range neg {
			if c == target && dl[i*(1+k)+1+j] != 0 {
				t.Errorf("accidental hit at row %d, negative %d has gradient %v", i, j, dl[i*(1+k)+1+j])
			}
		}
	}
	ids := l.Table.SparseGrad.IDs
	for _, c := range append(slices.Clone(batch.Classes), neg...) {
		if !slices.Contains(ids, c) {
			t.Errorf("class %d has no gradient row (rows %v)", c, ids)
		}
	}
}

// An upstream gradient on accidental hits alone must not reach the table
// or the input, whatever the loss says about those entries.
func TestNCEIgnoresGradientOnAccidentalHits(t *testing.T) {
	b := native.MustCPU()
	tr, err := NewTrainer(b, mustModel(t, smallNCE), 13, 0)
	if err != nil {
		t.Fatal(err)
	}
	l := nceLayer(t, tr)
	batch := trickyBatch(t, l)
	s := &Step{Backend: b, Batch: batch, Train: true}
	if _, err := tr.Model.Forward(s); err != nil {
		t.Fatal(err)
	}
	neg := l.Negatives(batch)
	k := len(neg)
	dout := make(native.HostBuffer, batch.Size*(1+k))
	for i, target := range batch.Classes {
		for j, c := range neg {
			if c == target {
				dout[i*(1+k)+1+j] = 1
			}
		}
	}
	din, err := l.Backward(s, Activation{Rows: batch.Size, Parts: []Part{{Buf: dout, Width: 1 + k, NeedGrad: true}}})
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := native.Host(l.Table.SparseGrad.Rows)
	dx, _ := native.Host(din.Parts[0].Buf)
	for _, v := range append(slices.Clone(rows), dx...) {
		if v != 0 {
			t.Fatalf("gradient on accidental hits leaked: table rows %v, input %v", rows, dx)
		}
	}
}

func TestLogUniformSampler(t *testing.T) {
	const n, draws = 20, 200000
	s := NewLogUniform(n)
	total := 0.0
	for c := range int64(n) {
		total += s.Prob(c)
	}
	if math.Abs(total-1) > 1e-12 {
		t.Fatalf("probabilities sum to %v", total)
	}
	a, b := rand.New(rand.NewPCG(3, 4)), rand.New(rand.NewPCG(3, 4))
	counts := make([]float64, n)
	for range draws {
		c := s.Sample(a)
		if c != s.Sample(b) {
			t.Fatal("two streams with the same seed drew different classes")
		}
		counts[c]++
	}
	chi2 := 0.0
	for c, got := range counts {
		want := draws * s.Prob(int64(c))
		chi2 += (got - want) * (got - want) / want
	}
	// 19 degrees of freedom: P(chi2 > 43.8) = 0.001 under the law.
	if chi2 > 43.8 {
		t.Errorf("chi-square %.1f over %d classes: counts %v do not follow log-uniform", chi2, n, counts)
	}
	if counts[0] < 4*counts[n-1] {
		t.Errorf("class 0 drawn %v times, class %d %v times: not Zipfian", counts[0], n-1, counts[n-1])
	}
}

func TestNCENegativesDependOnSeedAndBatchOnly(t *testing.T) {
	b := native.MustCPU()
	cfg := mustModel(t, smallNCE)
	build := func(seed uint64) *NCE {
		tr, err := NewTrainer(b, cfg, seed, 0)
		if err != nil {
			t.Fatal(err)
		}
		return nceLayer(t, tr)
	}
	batch := func(seed uint64) *data.Batch { return testBatch(rand.New(rand.NewPCG(seed, 1)), 16, 2, 0, 20, 12) }
	first, again := build(1).Negatives(batch(1)), build(1).Negatives(batch(1))
	if !slices.Equal(first, again) {
		t.Fatalf("same seed and batch, negatives %v and %v", first, again)
	}
	otherSeed, otherBatch := 0, 0
	for i := range uint64(20) {
		if !slices.Equal(first, build(2+i).Negatives(batch(1))) {
			otherSeed++
		}
		if !slices.Equal(first, build(1).Negatives(batch(2+i))) {
			otherBatch++
		}
	}
	if otherSeed < 15 || otherBatch < 15 {
		t.Errorf("of 20 other seeds %d, of 20 other batches %d changed the negatives", otherSeed, otherBatch)
	}
}

// sampledRanking returns the share of (sample, negative) pairs in which the
// true class's logit beats the negative's (accidental hits left out) and
// the sampled top-1 accuracy, over n held-out samples.
func sampledRanking(t *testing.T, tr *Trainer, src data.Source, n int) (pairs, top1 float64) {
	t.Helper()
	won, total, first, samples := 0, 0, 0, 0
	for samples < n {
		batch, err := src.Next(context.Background(), min(256, n-samples))
		if err != nil {
			t.Fatal(err)
		}
		s := &Step{Backend: tr.Backend, Batch: batch}
		out, err := tr.Model.Forward(s)
		if err != nil {
			t.Fatal(err)
		}
		logits, _ := native.Host(out.Parts[0].Buf)
		cols := out.Width()
		for i := range batch.Size {
			row, best := logits[i*cols:(i+1)*cols], true
			for _, v := range row[1:] {
				if v == maskedLogit {
					continue
				}
				total++
				if row[0] > v {
					won++
				} else {
					best = false
				}
			}
			if best {
				first++
			}
		}
		samples += batch.Size
	}
	return float64(won) / float64(total), float64(first) / float64(samples)
}

func TestNCELearnsCentreWords(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for several seconds; skipped with -short")
	}
	cfg := loadZoo(t, "nce")
	tr, err := NewTrainer(native.MustCPU(), cfg, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	eval := func() (Metrics, float64, float64) {
		opts := data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitEval}
		m, err := tr.Evaluate(context.Background(), openData(t, "words:1", opts), 256, 5000)
		if err != nil {
			t.Fatal(err)
		}
		pairs, top1 := sampledRanking(t, tr, openData(t, "words:1", opts), 5000)
		return m, pairs, top1
	}
	before, pairsBefore, top1Before := eval()
	start := time.Now()
	train := openData(t, "words:1", data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain})
	trainSteps(t, tr, train, 256, 1000)
	after, pairs, top1 := eval()
	t.Logf("held-out NCE loss %.4f -> %.4f; true word above a sampled negative %.3f -> %.3f; above all %d: %.3f -> %.3f (accuracy %.3f); trained %.1f s",
		before.Loss, after.Loss, pairsBefore, pairs, cfg.Layers[1].Negatives, top1Before, top1, after.Accuracy, time.Since(start).Seconds())
	if after.Loss > 0.5*before.Loss {
		t.Errorf("held-out NCE loss fell from %.4f to only %.4f", before.Loss, after.Loss)
	}
	if pairs < 0.9 {
		t.Errorf("the true centre word beats %.3f of sampled negatives, want >= 0.9", pairs)
	}
	if math.Abs(after.Accuracy-top1) > 1e-9 {
		t.Errorf("Evaluate's accuracy %.4f differs from the sampled top-1 %.4f", after.Accuracy, top1)
	}
}

// The negatives depend on the seed and the batch only, so a resumed run
// draws the ones the uninterrupted run drew and ends bit-identical.
func TestNCEResumeMatchesUninterruptedRun(t *testing.T) {
	cfg := mustModel(t, `
version = 1
name = "nceresume"
task = "nce"
[input]
slots = 4
vocab = 10000
classes = 10000
[[layer]]
kind = "embedding"
dim = 8
[[layer]]
kind = "nce"
classes = 10000
negatives = 5
[loss]
kind = "nce"
[optimizer]
kind = "adam"
[sparse_optimizer]
kind = "adagrad"
lr = 0.05
`)
	opts := data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain}
	b := native.MustCPU()
	straight, _ := NewTrainer(b, cfg, 3, 0)
	trainSteps(t, straight, openData(t, "words:2", opts), 64, 20)

	path := filepath.Join(t.TempDir(), "nce.safetensors")
	first, _ := NewTrainer(b, cfg, 3, 0)
	src := openData(t, "words:2", opts)
	trainSteps(t, first, src, 64, 8)
	if err := first.Save(path); err != nil {
		t.Fatal(err)
	}
	resumed, _ := NewTrainer(b, cfg, 3, 0)
	if err := resumed.Load(path); err != nil {
		t.Fatal(err)
	}
	trainSteps(t, resumed, src, 64, 12)
	want, got := paramsOf(straight), paramsOf(resumed)
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			t.Fatalf("%s differs between the resumed and the uninterrupted run", name)
		}
	}
}
