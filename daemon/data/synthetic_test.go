package data

import (
	"context"
	"math"
	"reflect"
	"testing"
)

func newGenerator(t *testing.T, seed uint64, opts Options) *Synthetic {
	t.Helper()
	g, err := NewSynthetic(DefaultSynthetic(seed), opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestSyntheticDeterministicPerSeed(t *testing.T) {
	a := readAll(t, newGenerator(t, 5, Options{Limit: 500}), 100)
	b := readAll(t, newGenerator(t, 5, Options{Limit: 500}), 33, 71)
	if a.Size != 500 || !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different samples (%d vs %d)", a.Size, b.Size)
	}
	c := readAll(t, newGenerator(t, 6, Options{Limit: 500}), 100)
	same := 0
	for i := range a.IDs {
		if a.IDs[i] == c.IDs[i] {
			same++
		}
	}
	if same > len(a.IDs)/2 || reflect.DeepEqual(a.Dense, c.Dense) {
		t.Fatalf("seeds 5 and 6 share %d of %d ids and the same dense features", same, len(a.IDs))
	}
}

func TestSyntheticBayesAUC(t *testing.T) {
	const n = 20000
	g := newGenerator(t, 1, Options{})
	bayes, err := g.BayesAUC(n)
	if err != nil {
		t.Fatal(err)
	}
	if bayes < 0.75 || bayes > 0.85 {
		t.Errorf("Bayes AUC %.4f outside [0.75, 0.85]", bayes)
	}
	// The same held-out stream, drawn in uneven batches.
	eval := newGenerator(t, 1, Options{Split: SplitEval})
	var probs, labels []float32
	for len(probs) < n {
		b, err := eval.Next(context.Background(), min(3000, n-len(probs)))
		if err != nil {
			t.Fatal(err)
		}
		probs, labels = append(probs, b.Probs...), append(labels, b.Labels...)
	}
	auc, err := AUC(probs, labels)
	if err != nil {
		t.Fatal(err)
	}
	if auc != bayes {
		t.Errorf("AUC of the eval stream's true probabilities %.6f, BayesAUC %.6f", auc, bayes)
	}
}

func TestSyntheticLabelsFollowProbabilities(t *testing.T) {
	b, err := newGenerator(t, 3, Options{}).Next(context.Background(), 50000)
	if err != nil {
		t.Fatal(err)
	}
	// Within probability bins, the click rate matches the mean probability.
	var clicks, probs, count [5]float64
	for i, p := range b.Probs {
		k := min(int(p*5), 4)
		clicks[k] += float64(b.Labels[i])
		probs[k] += float64(p)
		count[k]++
	}
	for k := range count {
		if count[k] < 500 {
			continue
		}
		rate, mean := clicks[k]/count[k], probs[k]/count[k]
		if se := math.Sqrt(mean * (1 - mean) / count[k]); math.Abs(rate-mean) > 5*se {
			t.Errorf("bin %d: click rate %.4f, mean probability %.4f (%g samples)", k, rate, mean, count[k])
		}
	}
}

func TestSyntheticIDsArePopularityRankedAndDistinct(t *testing.T) {
	g := newGenerator(t, 2, Options{Vocab: 100_003})
	owner := map[int64]int{}
	for s, planted := range g.planted {
		for _, p := range planted {
			if prev, dup := owner[p.id]; dup {
				t.Fatalf("id %d in slots %d and %d", p.id, prev, s)
			}
			owner[p.id] = s
		}
	}
	b, err := g.Next(context.Background(), 20000)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Validate(g.Schema()); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]int{}
	for i := range b.Size {
		seen[b.Bag(i, 0)[0]]++
	}
	top, tail := seen[g.planted[0][0].id], seen[g.planted[0][500].id]
	if top < 2000 || tail > top/100 || len(seen) < 300 {
		t.Errorf("slot 0: top id %d times, rank 500 %d times, %d distinct ids", top, tail, len(seen))
	}
}

func TestSyntheticConfigErrors(t *testing.T) {
	bad := []func(*SyntheticConfig){
		func(c *SyntheticConfig) { c.Slots, c.NumDense = 0, 0 },
		func(c *SyntheticConfig) { c.IDsPerSlot = 0 },
		func(c *SyntheticConfig) { c.IDsPerSlot = 30000 }, // 26 x 30000 > vocab/2
		func(c *SyntheticConfig) { c.Zipf = 0 },
		func(c *SyntheticConfig) { c.Bias = math.NaN() },
	}
	for i, change := range bad {
		cfg := DefaultSynthetic(1)
		change(&cfg)
		if _, err := NewSynthetic(cfg, Options{}); err == nil {
			t.Errorf("config %d accepted", i)
		}
	}
}

func BenchmarkSyntheticNext512(b *testing.B) {
	g, err := NewSynthetic(DefaultSynthetic(1), Options{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := g.Next(context.Background(), 512); err != nil {
			b.Fatal(err)
		}
	}
}
