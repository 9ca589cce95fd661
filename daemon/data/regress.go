package data

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// RegressConfig describes the regression generator's planted linear model.
// Each sample has NumDense features x[j], independent standard normals, and
// the real-valued target
//
//	y = Bias + sum over j of w[j]*x[j] + e,   e ~ N(0, NoiseStd^2)
//
// where w[j] ~ N(0, WeightStd^2) is drawn once from the seed. The best any
// model can do is predict Bias + w·x: its mean squared error is NoiseStd^2,
// and since Var(y) = |w|^2 + NoiseStd^2, its R² is |w|^2 / Var(y).
type RegressConfig struct {
	Seed      uint64
	NumDense  int     // dense features
	WeightStd float64 // spread of the planted weights
	Bias      float64 // intercept
	NoiseStd  float64 // standard deviation of the target noise
}

// DefaultRegress is shaped like the linreg model: 13 dense features. With
// noise 2 against a signal variance of |w|^2 (about 13), the optimal R² lies
// near 0.75, between about 0.6 and 0.85 depending on the seed.
func DefaultRegress(seed uint64) RegressConfig {
	return RegressConfig{Seed: seed, NumDense: 13, WeightStd: 1, Bias: 1, NoiseStd: 2}
}

// maxRegressDense bounds NumDense so that a bad config cannot allocate
// gigabytes of planted weights.
const maxRegressDense = 1 << 20

func (c RegressConfig) validate() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case c.NumDense < 1 || c.NumDense > maxRegressDense:
		return fmt.Errorf("data: regress: %d dense features, want 1..%d", c.NumDense, maxRegressDense)
	case !(c.WeightStd >= 0) || !(c.NoiseStd >= 0) || !finite(c.WeightStd) || !finite(c.NoiseStd) || !finite(c.Bias):
		return fmt.Errorf("data: regress: weight std %g, noise std %g, bias %g; want finite, stds >= 0",
			c.WeightStd, c.NoiseStd, c.Bias)
	case c.WeightStd == 0 && c.NoiseStd == 0:
		return fmt.Errorf("data: regress: weight std and noise std are both 0: the targets are constant and R² undefined")
	}
	return nil
}

// Regress generates samples of a planted linear model with Gaussian noise
// (see RegressConfig). Like Synthetic, sample i is drawn from its own random
// stream seeded by (Seed, i), and options select samples as they select the
// lines of a file; without a limit the stream never ends.
type Regress struct {
	*sampleStream
	cfg     RegressConfig
	weights []float64
}

// NewRegress draws the generator's planted weights and opens a stream.
func NewRegress(cfg RegressConfig, opts Options) (*Regress, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Regress{cfg: cfg, weights: make([]float64, cfg.NumDense)}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x72656772657373)) // "regress"
	for j := range g.weights {
		g.weights[j] = rng.NormFloat64() * cfg.WeightStd
	}
	schema := Schema{NumDense: cfg.NumDense, Task: TaskRegress}
	g.sampleStream = newSampleStream(cfg.Seed, opts, schema, g.draw)
	return g, nil
}

// Config returns the generator's description.
func (g *Regress) Config() RegressConfig { return g.cfg }

// Weights returns a copy of the planted weights w.
func (g *Regress) Weights() []float64 { return append([]float64(nil), g.weights...) }

func (g *Regress) draw(rng *rand.Rand, rec *record) {
	y := g.cfg.Bias
	for j, w := range g.weights {
		x := rng.NormFloat64()
		rec.dense[j] = float32(x)
		y += w * x
	}
	rec.label = float32(y + rng.NormFloat64()*g.cfg.NoiseStd)
}

// TargetVariance is Var(y) = |w|^2 + NoiseStd^2 over the generator's
// distribution.
func (g *Regress) TargetVariance() float64 {
	v := g.cfg.NoiseStd * g.cfg.NoiseStd
	for _, w := range g.weights {
		v += w * w
	}
	return v
}

// OptimalMSE is the Bayes-optimal mean squared error, NoiseStd^2: that of
// the planted model's own prediction, the least any model can expect.
func (g *Regress) OptimalMSE() float64 { return g.cfg.NoiseStd * g.cfg.NoiseStd }

// OptimalR2 is the planted model's R², 1 - OptimalMSE / TargetVariance: the
// most any model can expect.
func (g *Regress) OptimalR2() float64 { return 1 - g.OptimalMSE()/g.TargetVariance() }
