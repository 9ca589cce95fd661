package data

import (
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// referenceDraw is Synthetic.draw as the generator's doc states it, through
// a record and math/rand/v2's Rand: the twin the fast draw is tested against.
func referenceDraw(g *Synthetic, i int64, rec *record) {
	rec.reset()
	rng := rand.New(rand.NewPCG(g.cfg.Seed, mix64(uint64(i))))
	logit := g.cfg.Bias
	for s := range g.cfg.Slots {
		r := g.ranks.rank(rng.Float64())
		rec.ids = append(rec.ids, g.planted[s][r].id)
		rec.endBag()
		logit += g.planted[s][r].weight
	}
	for j := range rec.dense {
		x := rng.Float64()
		rec.dense[j] = float32(x)
		logit += g.denseW[j] * (x - 0.5)
	}
	rec.prob = float32(1 / (1 + math.Exp(-logit)))
	if rng.Float32() < rec.prob {
		rec.label = 1
	}
}

// referenceNext is Synthetic.Next through referenceDraw.
func referenceNext(g *Synthetic, size int) *Batch {
	b := newBatch(g.schema, size, true)
	rec := newRecord(g.schema)
	for ; b.Size < size && !g.opts.past(g.next); g.next++ {
		if g.opts.keeps(g.next) {
			referenceDraw(g, g.next, rec)
			b.add(rec)
		}
	}
	return b
}

func TestSyntheticDrawsAsTheReference(t *testing.T) {
	cases := []struct {
		name   string
		seed   uint64
		opts   Options
		change func(*SyntheticConfig)
	}{
		{"default", 1, Options{}, nil},
		{"eval split", 7, Options{Split: SplitEval}, nil},
		{"shard 1 of 3 from 1000", 3, Options{Shard: 1, Shards: 3, Start: 1000, Split: SplitTrain}, nil},
		{"70000 ranks, no dense", 5, Options{Limit: 3000}, func(c *SyntheticConfig) { c.Slots, c.NumDense, c.IDsPerSlot = 3, 0, 70_000 }},
		{"dense only", 9, Options{}, func(c *SyntheticConfig) { c.Slots, c.IDsPerSlot = 0, 0 }},
	}
	for _, c := range cases {
		cfg := DefaultSynthetic(c.seed)
		if c.change != nil {
			c.change(&cfg)
		}
		fast, err := NewSynthetic(cfg, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := NewSynthetic(cfg, c.opts)
		for k := range 4 {
			got, err := fast.Next(context.Background(), 700)
			if err != nil {
				t.Fatalf("%s: batch %d: %v", c.name, k, err)
			}
			if want := referenceNext(ref, 700); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: batch %d differs from the reference draw", c.name, k)
			}
		}
	}
}
