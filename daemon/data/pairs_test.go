package data

import (
	"context"
	"errors"
	"reflect"
	"testing"
)

func newPairs(t *testing.T, cfg PairsConfig, opts Options) *Pairs {
	t.Helper()
	g, err := NewPairs(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestPairsDeterministicPerSeed(t *testing.T) {
	a := readAll(t, newPairs(t, DefaultPairs(5), Options{Limit: 400}), 100)
	b := readAll(t, newPairs(t, DefaultPairs(5), Options{Limit: 400}), 33, 71)
	if a.Size != 400 || !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different samples (%d vs %d)", a.Size, b.Size)
	}
	c := readAll(t, newPairs(t, DefaultPairs(6), Options{Limit: 400}), 100)
	same := 0
	for i := range a.IDs {
		if a.IDs[i] == c.IDs[i] {
			same++
		}
	}
	if same > len(a.IDs)/2 {
		t.Fatalf("seeds 5 and 6 share %d of %d ids", same, len(a.IDs))
	}
	for i, l := range a.Labels {
		if l != 1 {
			t.Fatalf("sample %d has label %v; every generated pair is a positive", i, l)
		}
	}
}

// rankOf maps every id of the generator's slot s to its rank.
func rankOf(g *Pairs, s int) map[int64]int {
	m := map[int64]int{}
	for r, id := range g.ids[s] {
		m[id] = r
	}
	return m
}

// followShare is the share of (sample, slot) pairs in which the document
// slot of sample (i+shift) mod n holds the partner of sample i's query rank.
func followShare(g *Pairs, b *Batch, shift int) float64 {
	n, follow := g.cfg.Slots, 0
	for s := range n {
		q, d := rankOf(g, s), rankOf(g, n+s)
		for i := range b.Size {
			j := (i + shift) % b.Size
			if g.partner[s][q[b.Bag(i, s)[0]]] == d[b.Bag(j, n+s)[0]] {
				follow++
			}
		}
	}
	return float64(follow) / float64(n*b.Size)
}

func TestPairsDocumentFollowsItsQueryOnly(t *testing.T) {
	cfg := DefaultPairs(2)
	g := newPairs(t, cfg, Options{})
	if got := g.Schema(); got != (Schema{Slots: 26, Vocab: DefaultVocab, Task: TaskCTR}) {
		t.Fatalf("schema %+v", got)
	}
	b, err := g.Next(context.Background(), 4000)
	if err != nil {
		t.Fatal(err)
	}
	own, other := followShare(g, b, 0), followShare(g, b, 1)
	t.Logf("document slots that follow the query: own %.3f, next sample's %.3f", own, other)
	// Own: 1-Noise, plus noise that lands on the partner by chance.
	if own < 1-cfg.Noise-0.02 || own > 1-cfg.Noise+0.1 {
		t.Errorf("%.3f of document slots follow their query, want about %.2f", own, 1-cfg.Noise)
	}
	if other > 0.15 {
		t.Errorf("%.3f of another sample's document slots follow the query; in-batch negatives should rarely agree", other)
	}
	distinct := map[int64]bool{}
	for s := range 2 * cfg.Slots {
		for _, id := range g.ids[s] {
			distinct[id] = id >= 0 && id < DefaultVocab
		}
	}
	if len(distinct) != 2*cfg.Slots*cfg.IDsPerSlot {
		t.Errorf("%d distinct ids over all slots, want %d", len(distinct), 2*cfg.Slots*cfg.IDsPerSlot)
	}
}

func TestPairsSplitAndShards(t *testing.T) {
	all := readAll(t, newPairs(t, DefaultPairs(3), Options{Limit: 300}))
	train := readAll(t, newPairs(t, DefaultPairs(3), Options{Limit: 300, Split: SplitTrain}))
	eval := readAll(t, newPairs(t, DefaultPairs(3), Options{Limit: 300, Split: SplitEval}))
	shard := readAll(t, newPairs(t, DefaultPairs(3), Options{Limit: 300, Shard: 1, Shards: 3}))
	if train.Size+eval.Size != all.Size || eval.Size == 0 || shard.Size != 100 {
		t.Fatalf("train %d + eval %d of %d samples, shard 1 of 3 has %d", train.Size, eval.Size, all.Size, shard.Size)
	}
	keys := map[string]bool{}
	for i := range all.Size {
		keys[sampleKey(all, i)] = true
	}
	for _, b := range []*Batch{train, eval, shard} {
		for i := range b.Size {
			if !keys[sampleKey(b, i)] {
				t.Fatalf("a selected sample is not one of the full stream's")
			}
		}
	}
}

func TestPairsConfigErrors(t *testing.T) {
	bad := []PairsConfig{
		{Slots: 0, IDsPerSlot: 10, Zipf: 1},
		{Slots: 2, IDsPerSlot: 0, Zipf: 1},
		{Slots: 2, IDsPerSlot: 10, Zipf: 0},
		{Slots: 2, IDsPerSlot: 10, Zipf: 1, Noise: 1.5},
		{Slots: 13, IDsPerSlot: 1000, Zipf: 1, Noise: 0.1}, // 26,000 ids in a vocabulary of 1000
	}
	for _, cfg := range bad {
		if _, err := NewPairs(cfg, Options{Vocab: 1000}); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestGeneratorSpecs(t *testing.T) {
	for in, want := range map[string]Spec{
		"pairs":    {Kind: "pairs", Seed: DefaultSeed},
		"pairs:9":  {Kind: "pairs", Seed: 9},
		"words":    {Kind: "words", Seed: DefaultSeed},
		"words:12": {Kind: "words", Seed: 12},
	} {
		got, err := ParseSpec(in)
		if err != nil || got != want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if again, err := ParseSpec(got.String()); err != nil || again != got {
			t.Errorf("%q does not parse back: %+v, %v", got.String(), again, err)
		}
	}
	for _, in := range []string{"pairs:x", "words:-3"} {
		var se *SpecError
		if _, err := ParseSpec(in); !errors.As(err, &se) {
			t.Errorf("ParseSpec(%q): error %v, want a *SpecError", in, err)
		}
	}
	cases := map[string]Schema{
		"pairs:2": {Slots: 26, Vocab: DefaultVocab, Task: TaskCTR},
		"words:2": {Slots: 4, Vocab: 100000, NumClasses: 10000, Task: TaskClassify},
	}
	for spec, want := range cases {
		src, err := Open(spec, Options{Vocab: want.Vocab})
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		if got := src.Schema(); got != want {
			t.Errorf("%s: schema %+v, want %+v", spec, got, want)
		}
		b, err := src.Next(context.Background(), 8)
		if err != nil || b.Validate(want) != nil {
			t.Errorf("%s: %v", spec, err)
		}
		src.Close()
	}
	// A vocabulary too small for the generator is an error, not a typed nil.
	if src, err := Open("words:1", Options{Vocab: 100}); err == nil || src != nil {
		t.Errorf("words in a vocabulary of 100: %v, %v", src, err)
	}
}
