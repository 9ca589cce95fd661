package data

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
)

// SyntheticConfig describes the generator's planted logistic model. Each
// sample has one id per slot and NumDense features; its click probability is
//
//	p = sigmoid(Bias + sum over slots s of w[s][rank_s] + sum over j of v[j]*(x[j]-1/2))
//
// where rank_s is drawn with probability proportional to 1/(rank+1)^Zipf
// among IDsPerSlot ranks, x[j] is uniform in [0, 1), and the label is 1 with
// probability p. The weights are drawn once from the seed, w ~ N(0,
// WeightStd^2) and v ~ N(0, DenseStd^2), and each slot's w is then shifted to
// a popularity-weighted mean of 0, so that the logit's mean is Bias for every
// seed.
type SyntheticConfig struct {
	Seed       uint64
	Slots      int     // sparse slots, one id each
	NumDense   int     // dense features
	IDsPerSlot int     // distinct ids in each slot
	Zipf       float64 // popularity exponent of the ids (> 0)
	WeightStd  float64 // spread of the per-id logit weights
	DenseStd   float64 // spread of the dense features' weights
	Bias       float64 // logit bias
}

// DefaultSynthetic is shaped like Criteo and the ctrdnn model: 26 slots of
// 1000 ids, 13 dense features. Its Bayes-optimal AUC lies between about
// 0.77 and 0.84 depending on the seed, and its click rate near 0.28.
func DefaultSynthetic(seed uint64) SyntheticConfig {
	return SyntheticConfig{
		Seed: seed, Slots: 26, NumDense: 13, IDsPerSlot: 1000,
		Zipf: 1.1, WeightStd: 0.2, DenseStd: 1, Bias: -1.3,
	}
}

func (c SyntheticConfig) validate(vocab int64) error {
	switch {
	case c.Slots < 0 || c.NumDense < 0 || c.Slots+c.NumDense == 0:
		return fmt.Errorf("data: synthetic: %d slots and %d dense features", c.Slots, c.NumDense)
	case c.Slots > 0 && c.IDsPerSlot < 1:
		return fmt.Errorf("data: synthetic: %d ids per slot, want >= 1", c.IDsPerSlot)
	case int64(c.Slots)*int64(c.IDsPerSlot) > vocab/2:
		return fmt.Errorf("data: synthetic: %d x %d ids do not fit distinctly in half the vocabulary of %d",
			c.Slots, c.IDsPerSlot, vocab)
	case !(c.Zipf > 0) || !(c.WeightStd >= 0) || !(c.DenseStd >= 0) || math.IsNaN(c.Bias) || math.IsInf(c.Bias, 0):
		return fmt.Errorf("data: synthetic: zipf %g, weight std %g, dense std %g, bias %g", c.Zipf, c.WeightStd, c.DenseStd, c.Bias)
	}
	return nil
}

// Synthetic generates click-through samples whose true click probability is
// known (Batch.Probs). Sample i is drawn from its own random stream seeded by
// (Seed, i), so the generator is deterministic per seed, and sharding, the
// hold-out split and the limit select samples exactly as they select the
// lines of a file. Without a limit the stream never ends.
type Synthetic struct {
	*plantedModel
	opts   Options
	schema Schema
	pcg    *rand.PCG
	next   int64
}

// plantedModel is the ground truth, shared by the streams of one generator.
type plantedModel struct {
	cfg   SyntheticConfig
	cdf   []float64  // popularity CDF over ranks
	ranks *rankTable // draws from cdf
	// planted[slot][rank] is the rank's id and logit weight side by side,
	// so that drawing a rank reads one cache line: the generator runs
	// beside training, and its tables miss the caches the GEMMs fill.
	planted [][]plantedID
	denseW  []float64
}

// plantedID is one rank of one slot: its hashed id, distinct across all
// slots, and its logit weight.
type plantedID struct {
	id     int64
	weight float64
}

// NewSynthetic builds the generator's planted model from cfg and opens a
// stream over it.
func NewSynthetic(cfg SyntheticConfig, opts Options) (*Synthetic, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.validate(opts.Vocab); err != nil {
		return nil, err
	}
	return newPlantedModel(cfg, opts.Vocab).stream(opts), nil
}

func newPlantedModel(cfg SyntheticConfig, vocab int64) *plantedModel {
	m := &plantedModel{cfg: cfg, cdf: zipfCDF(cfg.IDsPerSlot, cfg.Zipf)}
	m.ranks = newRankTable(m.cdf)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x706c616e746564)) // "planted"
	taken := make(map[int64]bool, cfg.Slots*cfg.IDsPerSlot)
	m.planted = make([][]plantedID, cfg.Slots)
	for s := range cfg.Slots {
		m.planted[s] = make([]plantedID, cfg.IDsPerSlot)
		for r := range cfg.IDsPerSlot {
			m.planted[s][r] = plantedID{id: distinctID(s, r, vocab, taken), weight: rng.NormFloat64() * cfg.WeightStd}
		}
		m.centre(s)
	}
	m.denseW = make([]float64, cfg.NumDense)
	for j := range m.denseW {
		m.denseW[j] = rng.NormFloat64() * cfg.DenseStd
	}
	return m
}

// centre shifts slot s's weights to a popularity-weighted mean of 0.
func (m *plantedModel) centre(s int) {
	mean, prev := 0.0, 0.0
	for r, c := range m.cdf {
		mean += (c - prev) * m.planted[s][r].weight
		prev = c
	}
	for r := range m.planted[s] {
		m.planted[s][r].weight -= mean
	}
}

// distinctID is HashID(slot, decimal rank); on a collision with an id
// already taken, the rank's text gets a suffix "#1", "#2", ... until the id
// is free. validate keeps the vocabulary at least half empty, so this ends.
func distinctID(slot, rank int, vocab int64, taken map[int64]bool) int64 {
	text := strconv.AppendInt(nil, int64(rank), 10)
	id := HashID(slot, text, vocab)
	for k := 1; taken[id]; k++ {
		id = HashID(slot, fmt.Appendf(text, "#%d", k), vocab)
	}
	taken[id] = true
	return id
}

// zipfCDF is the cumulative distribution of ranks 0..n-1 with probability
// proportional to 1/(rank+1)^s.
func zipfCDF(n int, s float64) []float64 {
	cdf := make([]float64, n)
	total := 0.0
	for r := range cdf {
		total += math.Pow(float64(r+1), -s)
		cdf[r] = total
	}
	for r := range cdf {
		cdf[r] /= total
	}
	if n > 0 {
		cdf[n-1] = 1
	}
	return cdf
}

func (m *plantedModel) stream(opts Options) *Synthetic {
	schema := Schema{NumDense: m.cfg.NumDense, Slots: m.cfg.Slots, Vocab: opts.Vocab, Task: TaskCTR}
	// Records below Start are never emitted: the stream begins there
	// instead of passing them one by one.
	return &Synthetic{plantedModel: m, opts: opts, next: opts.Start, schema: schema, pcg: rand.NewPCG(0, 0)}
}

func (g *Synthetic) Schema() Schema  { return g.schema }
func (g *Synthetic) BadLines() int64 { return 0 }
func (g *Synthetic) Close() error    { return nil }

// Config returns the generator's planted model's description.
func (g *Synthetic) Config() SyntheticConfig { return g.cfg }

// Next draws the next batch. Batch.Probs holds each sample's true click
// probability.
func (g *Synthetic) Next(ctx context.Context, size int) (*Batch, error) {
	if err := checkSize(size); err != nil {
		return nil, err
	}
	b := newBatch(g.schema, size, true)
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
			g.draw(i, b)
		}
	}
	if b.Size == 0 {
		return nil, io.EOF
	}
	return b, nil
}

// draw appends sample i to b. It reads the sample's random stream as
// math/rand/v2's Rand would (Float64 and Float32 of the stream's PCG),
// without Rand's indirect calls.
func (g *Synthetic) draw(i int64, b *Batch) {
	g.pcg.Seed(g.cfg.Seed, mix64(uint64(i)))
	logit := g.cfg.Bias
	for s := range g.planted {
		p := &g.planted[s][g.ranks.rank(unitFloat64(g.pcg))]
		b.IDs = append(b.IDs, p.id)
		b.Offsets = append(b.Offsets, int64(len(b.IDs)))
		logit += p.weight
	}
	for j := range g.denseW {
		x := unitFloat64(g.pcg)
		b.Dense = append(b.Dense, float32(x))
		logit += g.denseW[j] * (x - 0.5)
	}
	p := float32(1 / (1 + math.Exp(-logit)))
	b.Probs = append(b.Probs, p)
	var label float32
	if unitFloat32(g.pcg) < p {
		label = 1
	}
	b.Labels = append(b.Labels, label)
	b.Size++
}

// unitFloat64 is rand.Rand.Float64 over src.
func unitFloat64(src *rand.PCG) float64 { return float64(src.Uint64()<<11>>11) / (1 << 53) }

// unitFloat32 is rand.Rand.Float32 over src.
func unitFloat32(src *rand.PCG) float32 { return float32(uint32(src.Uint64()>>32)<<8>>8) / (1 << 24) }

// BayesAUC is the AUC that the true click probabilities reach on the first n
// samples of the generator's eval split (the same seed and hold-out fraction,
// unsharded, without a limit): the best AUC any model can expect on that
// held-out stream.
func (g *Synthetic) BayesAUC(n int) (float64, error) {
	if n <= 0 {
		return 0, fmt.Errorf("data: Bayes AUC over %d samples", n)
	}
	opts := g.opts
	opts.Split, opts.Shard, opts.Shards, opts.Limit = SplitEval, 0, 1, 0
	b, err := g.plantedModel.stream(opts).Next(context.Background(), n)
	if err != nil {
		return 0, err
	}
	return AUC(b.Probs, b.Labels)
}
