package data

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// WordsConfig describes the synthetic corpus for word-embedding models. The
// vocabulary is Words word ids, numbered by decreasing frequency: a sample's
// centre word c has probability proportional to 1/(c+1)^Zipf. Its Context
// context words (one slot each) carry the planted structure: context word k
// is partner_k(c) — partner_k being a permutation of the vocabulary drawn
// once from the seed — except with probability Noise, when it is a word
// drawn from the frequency law instead. So the context determines the centre
// word up to the noise.
type WordsConfig struct {
	Seed    uint64
	Words   int     // vocabulary size; word ids are 0..Words-1, unhashed
	Context int     // context words per sample
	Zipf    float64 // frequency exponent (> 0)
	Noise   float64 // probability that a context word is random, in [0, 1]
}

// DefaultWords is shaped for the nce model: 10,000 words (within its
// 100,000 classes), 4 context words.
func DefaultWords(seed uint64) WordsConfig {
	return WordsConfig{Seed: seed, Words: 10000, Context: 4, Zipf: 1, Noise: 0.2}
}

func (c WordsConfig) validate(vocab int64) error {
	switch {
	case c.Words < 2 || c.Context < 1:
		return fmt.Errorf("data: words: %d words and %d context words, want >= 2 and >= 1", c.Words, c.Context)
	case int64(c.Words) > vocab:
		return fmt.Errorf("data: words: %d words do not fit in the vocabulary of %d", c.Words, vocab)
	case !(c.Zipf > 0) || math.IsInf(c.Zipf, 0) || !(c.Noise >= 0 && c.Noise <= 1):
		return fmt.Errorf("data: words: zipf %g, noise %g; want zipf > 0 and noise in [0, 1]", c.Zipf, c.Noise)
	}
	return nil
}

// Words generates (context, centre word) samples: Batch.Slots holds the
// context words, one id per slot, and Batch.Classes the centre word (also
// in Labels, as a number). The schema is a classifier's with NumClasses =
// Words. Like Synthetic, sample i is drawn from its own random stream
// seeded by (Seed, i); without a limit the stream never ends.
type Words struct {
	*sampleStream
	cfg     WordsConfig
	cdf     []float64  // frequency CDF over word ids
	law     *rankTable // draws from cdf
	partner [][]int    // [context position][centre word]: the context word
}

// NewWords builds the generator's planted partners and opens a stream.
func NewWords(cfg WordsConfig, opts Options) (*Words, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.validate(opts.Vocab); err != nil {
		return nil, err
	}
	g := &Words{cfg: cfg, cdf: zipfCDF(cfg.Words, cfg.Zipf)}
	g.law = newRankTable(g.cdf)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x776f726473)) // "words"
	g.partner = make([][]int, cfg.Context)
	for k := range g.partner {
		g.partner[k] = rng.Perm(cfg.Words)
	}
	schema := Schema{Slots: cfg.Context, Vocab: opts.Vocab, NumClasses: cfg.Words, Task: TaskClassify}
	g.sampleStream = newSampleStream(cfg.Seed, opts, schema, g.draw)
	return g, nil
}

// Config returns the generator's description.
func (g *Words) Config() WordsConfig { return g.cfg }

// Partner returns the context word that position k plants for centre word c.
func (g *Words) Partner(k, c int) int { return g.partner[k][c] }

func (g *Words) draw(rng *rand.Rand, rec *record) {
	c := g.word(rng)
	for k := range g.cfg.Context {
		w := g.partner[k][c]
		if rng.Float64() < g.cfg.Noise {
			w = g.word(rng)
		}
		rec.ids = append(rec.ids, int64(w))
		rec.endBag()
	}
	rec.class = int64(c)
	rec.label = float32(c)
}

// word draws a word id from the frequency law.
func (g *Words) word(rng *rand.Rand) int {
	return g.law.rank(rng.Float64())
}
