package data

import (
	"context"
	"reflect"
	"testing"
)

func newWords(t *testing.T, cfg WordsConfig, opts Options) *Words {
	t.Helper()
	g, err := NewWords(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestWordsDeterministicPerSeed(t *testing.T) {
	opts := Options{Vocab: 100000, Limit: 400}
	a := readAll(t, newWords(t, DefaultWords(5), opts), 100)
	b := readAll(t, newWords(t, DefaultWords(5), opts), 33, 71)
	if a.Size != 400 || !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different samples (%d vs %d)", a.Size, b.Size)
	}
	c := readAll(t, newWords(t, DefaultWords(6), opts), 100)
	if reflect.DeepEqual(a.IDs, c.IDs) {
		t.Fatal("seeds 5 and 6 give the same context words")
	}
	for i, class := range a.Classes {
		if a.Labels[i] != float32(class) {
			t.Fatalf("sample %d: label %v, class %d", i, a.Labels[i], class)
		}
	}
}

func TestWordsContextDeterminesCentre(t *testing.T) {
	cfg := WordsConfig{Seed: 3, Words: 500, Context: 4, Zipf: 1, Noise: 0.25}
	g := newWords(t, cfg, Options{Vocab: 500})
	if got := g.Schema(); got != (Schema{Slots: 4, Vocab: 500, NumClasses: 500, Task: TaskClassify}) {
		t.Fatalf("schema %+v", got)
	}
	const n = 20000
	b, err := g.Next(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	follow, counts := 0, make([]int, cfg.Words)
	for i := range n {
		c := int(b.Classes[i])
		counts[c]++
		for k := range cfg.Context {
			if b.Bag(i, k)[0] == int64(g.Partner(k, c)) {
				follow++
			}
		}
	}
	share := float64(follow) / float64(n*cfg.Context)
	// 1-Noise, plus noise that lands on the partner by chance.
	if share < 1-cfg.Noise-0.02 || share > 1-cfg.Noise+0.05 {
		t.Errorf("%.3f of context words are the centre's partners, want about %.2f", share, 1-cfg.Noise)
	}
	// Zipf with exponent 1: word 0 is about twice as frequent as word 1 and
	// ten times word 9.
	if r := float64(counts[0]) / float64(counts[1]); r < 1.7 || r > 2.3 {
		t.Errorf("word 0 / word 1 frequency %.2f, want about 2", r)
	}
	if r := float64(counts[0]) / float64(counts[9]); r < 7 || r > 13 {
		t.Errorf("word 0 / word 9 frequency %.2f, want about 10", r)
	}
}

func TestWordsConfigErrors(t *testing.T) {
	bad := []WordsConfig{
		{Words: 1, Context: 4, Zipf: 1},
		{Words: 100, Context: 0, Zipf: 1},
		{Words: 100, Context: 4, Zipf: -1},
		{Words: 100, Context: 4, Zipf: 1, Noise: -0.1},
		{Words: 2000, Context: 4, Zipf: 1}, // more words than the vocabulary of 1000
	}
	for _, cfg := range bad {
		if _, err := NewWords(cfg, Options{Vocab: 1000}); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestPairsAndWordsDoNotAllocatePerSample(t *testing.T) {
	ctx := context.Background()
	for name, src := range map[string]Source{
		"pairs": newPairs(t, DefaultPairs(4), Options{}),
		"words": newWords(t, DefaultWords(4), Options{Vocab: 100000}),
	} {
		per := func(size int) float64 {
			return testing.AllocsPerRun(10, func() {
				if _, err := src.Next(ctx, size); err != nil {
					t.Fatal(err)
				}
			})
		}
		if small, large := per(16), per(1024); large != small || large > 8 {
			t.Errorf("%s: %.1f allocations per 16-sample batch, %.1f per 1024-sample batch", name, small, large)
		}
	}
}
