package data

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
)

// PairsConfig describes the query-document generator for two-tower
// matching models. A sample is a query of Slots ids (slots [0, Slots)) and
// its document of Slots ids (slots [Slots, 2*Slots)). Query slot s draws a
// rank r with probability proportional to 1/(r+1)^Zipf among IDsPerSlot
// ranks; document slot s then takes rank perm_s(r) of its own ids, except
// with probability Noise, when it draws a rank of its own from the same
// popularity law. perm_s is a permutation drawn once from the seed.
//
// So a document is a noisy function of its query (about 1-Noise of its
// slots follow from the query's), while another sample's document agrees
// with the query only where popular ids collide by chance: a model can
// learn to score its own document above an in-batch negative.
type PairsConfig struct {
	Seed       uint64
	Slots      int     // slots per side
	IDsPerSlot int     // distinct ids in each slot
	Zipf       float64 // popularity exponent of the ranks (> 0)
	Noise      float64 // probability that a document slot ignores the query, in [0, 1]
}

// DefaultPairs is shaped like the matchnet model: 13 query slots and 13
// document slots of 1000 ids each.
func DefaultPairs(seed uint64) PairsConfig {
	return PairsConfig{Seed: seed, Slots: 13, IDsPerSlot: 1000, Zipf: 1.1, Noise: 0.2}
}

func (c PairsConfig) validate(vocab int64) error {
	switch {
	case c.Slots < 1 || c.IDsPerSlot < 1:
		return fmt.Errorf("data: pairs: %d slots of %d ids, want >= 1 of >= 1", c.Slots, c.IDsPerSlot)
	case 2*int64(c.Slots)*int64(c.IDsPerSlot) > vocab/2:
		return fmt.Errorf("data: pairs: 2 x %d x %d ids do not fit distinctly in half the vocabulary of %d",
			c.Slots, c.IDsPerSlot, vocab)
	case !(c.Zipf > 0) || math.IsInf(c.Zipf, 0) || !(c.Noise >= 0 && c.Noise <= 1):
		return fmt.Errorf("data: pairs: zipf %g, noise %g; want zipf > 0 and noise in [0, 1]", c.Zipf, c.Noise)
	}
	return nil
}

// Pairs generates query-document pairs. Every sample is a positive pair
// (label 1); the negatives of a pairwise loss come from other samples of
// the batch. Like Synthetic, sample i is drawn from its own random stream
// seeded by (Seed, i), and options select samples as they select the lines
// of a file; without a limit the stream never ends.
type Pairs struct {
	*sampleStream
	cfg     PairsConfig
	cdf     []float64  // popularity CDF over ranks
	law     *rankTable // draws from cdf
	ids     [][]int64  // [slot][rank], slots 0..2*Slots-1: hashed ids, distinct across slots
	partner [][]int    // [query slot][query rank]: the document rank
	ranks   []int      // the query ranks of the sample being drawn
}

// NewPairs builds the generator's planted query-document relation and opens
// a stream over it.
func NewPairs(cfg PairsConfig, opts Options) (*Pairs, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.validate(opts.Vocab); err != nil {
		return nil, err
	}
	g := &Pairs{cfg: cfg, cdf: zipfCDF(cfg.IDsPerSlot, cfg.Zipf), ranks: make([]int, cfg.Slots)}
	g.law = newRankTable(g.cdf)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x7061697273)) // "pairs"
	taken := make(map[int64]bool, 2*cfg.Slots*cfg.IDsPerSlot)
	g.ids = make([][]int64, 2*cfg.Slots)
	for s := range g.ids {
		g.ids[s] = make([]int64, cfg.IDsPerSlot)
		for r := range g.ids[s] {
			g.ids[s][r] = distinctID(s, r, opts.Vocab, taken)
		}
	}
	g.partner = make([][]int, cfg.Slots)
	for s := range g.partner {
		g.partner[s] = rng.Perm(cfg.IDsPerSlot)
	}
	schema := Schema{Slots: 2 * cfg.Slots, Vocab: opts.Vocab, Task: TaskCTR}
	g.sampleStream = newSampleStream(cfg.Seed, opts, schema, g.draw)
	return g, nil
}

// Config returns the generator's description.
func (g *Pairs) Config() PairsConfig { return g.cfg }

func (g *Pairs) draw(rng *rand.Rand, rec *record) {
	n, ranks := g.cfg.Slots, g.ranks
	for s := range n {
		ranks[s] = g.rank(rng)
		rec.ids = append(rec.ids, g.ids[s][ranks[s]])
		rec.endBag()
	}
	for s := range n {
		r := g.partner[s][ranks[s]]
		if rng.Float64() < g.cfg.Noise {
			r = g.rank(rng)
		}
		rec.ids = append(rec.ids, g.ids[n+s][r])
		rec.endBag()
	}
	rec.label = 1
}

// rank draws a rank from the popularity law.
func (g *Pairs) rank(rng *rand.Rand) int {
	return g.law.rank(rng.Float64())
}

// sampleStream is what the generators (Pairs, Words) share: it numbers
// samples 0, 1, 2, ..., selects them by the Options like every source, and
// has draw fill sample i from its own random stream seeded by (seed, i).
type sampleStream struct {
	seed   uint64
	opts   Options
	schema Schema
	pcg    *rand.PCG
	rng    *rand.Rand
	rec    *record
	next   int64
	draw   func(rng *rand.Rand, rec *record)
}

func newSampleStream(seed uint64, opts Options, schema Schema, draw func(*rand.Rand, *record)) *sampleStream {
	pcg := rand.NewPCG(0, 0)
	return &sampleStream{seed: seed, opts: opts, next: opts.Start, schema: schema, pcg: pcg, rng: rand.New(pcg),
		rec: newRecord(schema), draw: draw}
}

func (g *sampleStream) Schema() Schema  { return g.schema }
func (g *sampleStream) BadLines() int64 { return 0 }
func (g *sampleStream) Close() error    { return nil }

// Next draws the next batch.
func (g *sampleStream) Next(ctx context.Context, size int) (*Batch, error) {
	if err := checkSize(size); err != nil {
		return nil, err
	}
	b := newBatch(g.schema, size, false)
	for n := 0; b.Size < size; n++ {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		i := g.next
		if g.opts.past(i) {
			break
		}
		g.next++
		if g.opts.keeps(i) {
			g.rec.reset()
			g.pcg.Seed(g.seed, mix64(uint64(i)))
			g.draw(g.rng, g.rec)
			b.add(g.rec)
		}
	}
	if b.Size == 0 {
		return nil, io.EOF
	}
	return b, nil
}
