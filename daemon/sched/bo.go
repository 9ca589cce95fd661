package sched

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat/distuv"
)

func init() {
	Register("bo", "Bayesian optimisation: Gaussian process over assignments (Hamming kernel), expected improvement", newBO)
}

// Bayesian optimisation settings; Options.Budget overrides the evaluations.
const (
	boEvaluations = 150
	boInitial     = 12  // random block assignments besides the single-type ones
	boCandidates  = 256 // acquisition candidates per step
	boNugget      = 1e-6
	boRefit       = 10  // observations between length-scale selections
	boMaxBudget   = 400 // the GP's cost grows with the cube of the evaluations
)

// boLengths are the kernel length scales tried, as fractions of the layers.
var boLengths = []float64{0.05, 0.1, 0.2, 0.4, 0.8}

func newBO(o Options) Method {
	return methodFunc(func(ctx context.Context, p *Problem) (*Plan, error) {
		budget := o.Budget
		if budget <= 0 {
			budget = boEvaluations
		}
		budget = min(budget, boMaxBudget)
		b := &bayesOpt{p: p, e: newEvaluator(p, o.Provision), r: rand.New(rand.NewPCG(o.Seed, 0xb0b0b0b0))}
		b.initial()
		for b.e.count < budget {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			next := b.propose()
			if next == nil {
				break // every candidate was seen
			}
			b.observe(next)
		}
		return b.e.plan(b.best()), nil
	})
}

type bayesOpt struct {
	p      *Problem
	e      *evaluator
	r      *rand.Rand
	xs     [][]int
	seen   map[string]bool
	length float64 // kernel length scale, re-chosen every boRefit observations
	fitAt  int
}

func (b *bayesOpt) observe(a []int) {
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	key := assignKey(a)
	if b.seen[key] {
		return
	}
	b.seen[key] = true
	b.xs = append(b.xs, a)
	b.e.eval(a)
}

func (b *bayesOpt) initial() {
	n, nt := len(b.p.Layers), len(b.p.Types)
	for t := range nt {
		b.observe(uniform(n, t))
	}
	for range boInitial {
		b.observe(randomBlocks(b.r, n, nt))
	}
}

func (b *bayesOpt) best() []int {
	best := b.xs[0]
	for _, a := range b.xs[1:] {
		if b.e.cost(a) < b.e.cost(best) {
			best = a
		}
	}
	return best
}

// targets are the observations the GP models: log cost, and for infeasible
// assignments one more than the worst feasible log cost (or 0 when none is
// feasible), standardised.
func (b *bayesOpt) targets() []float64 {
	ys := make([]float64, len(b.xs))
	worst, any := math.Inf(-1), false
	for i, a := range b.xs {
		if c := b.e.cost(a); !math.IsInf(c, 1) {
			ys[i], any = math.Log(c), true
			worst = math.Max(worst, ys[i])
		}
	}
	for i, a := range b.xs {
		if math.IsInf(b.e.cost(a), 1) {
			ys[i] = 0
			if any {
				ys[i] = worst + 1
			}
		}
	}
	return standardise(ys)
}

func standardise(ys []float64) []float64 {
	var mean, sq float64
	for _, y := range ys {
		mean += y
	}
	mean /= float64(len(ys))
	for _, y := range ys {
		sq += (y - mean) * (y - mean)
	}
	sd := math.Sqrt(sq / float64(len(ys)))
	if sd == 0 {
		sd = 1
	}
	out := make([]float64, len(ys))
	for i, y := range ys {
		out[i] = (y - mean) / sd
	}
	return out
}

// propose fits the GP and returns the unseen candidate with the largest
// expected improvement.
func (b *bayesOpt) propose() []int {
	ys := b.targets()
	gp := b.fit(ys)
	if gp == nil {
		return nil
	}
	best := slices.Min(ys)
	var fresh [][]int
	for _, c := range b.candidates() {
		if !b.seen[assignKey(c)] {
			fresh = append(fresh, c)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	mu, sd := gp.predict(fresh)
	pick, pickEI := 0, -1.0
	for i := range fresh {
		if ei := expectedImprovement(best, mu[i], sd[i]); ei > pickEI {
			pick, pickEI = i, ei
		}
	}
	return fresh[pick]
}

// candidates are mutations of the best observations and random assignments.
func (b *bayesOpt) candidates() [][]int {
	n, nt := len(b.p.Layers), len(b.p.Types)
	ranked := slices.Clone(b.xs)
	slices.SortStableFunc(ranked, func(x, y []int) int {
		cx, cy := b.e.cost(x), b.e.cost(y)
		switch {
		case cx < cy:
			return -1
		case cx > cy:
			return 1
		}
		return 0
	})
	parents := ranked[:min(5, len(ranked))]
	var cands [][]int
	for len(cands) < boCandidates*3/4 {
		c := slices.Clone(parents[b.r.IntN(len(parents))])
		if b.r.IntN(2) == 0 {
			c[b.r.IntN(n)] = b.r.IntN(nt)
		} else {
			mutateBlock(b.r, c, nt)
		}
		cands = append(cands, c)
	}
	for len(cands) < boCandidates {
		cands = append(cands, randomBlocks(b.r, n, nt))
	}
	return cands
}

// gaussianProcess is a fitted GP with kernel exp(-hamming/(length*n)).
type gaussianProcess struct {
	xs     [][]int
	length float64
	alpha  *mat.VecDense
	chol   *mat.Cholesky
}

func (g *gaussianProcess) kernel(a, c []int) float64 {
	d := 0
	for i := range a {
		if a[i] != c[i] {
			d++
		}
	}
	return math.Exp(-float64(d) / (g.length * float64(len(a))))
}

// fit conditions the GP on the observations, choosing the length scale with
// the highest marginal likelihood every boRefit observations.
func (b *bayesOpt) fit(ys []float64) *gaussianProcess {
	lengths := []float64{b.length}
	if b.length == 0 || len(b.xs)-b.fitAt >= boRefit {
		lengths, b.fitAt = boLengths, len(b.xs)
	}
	y := mat.NewVecDense(len(ys), ys)
	var best *gaussianProcess
	bestLL := math.Inf(-1)
	for _, l := range lengths {
		g := &gaussianProcess{xs: b.xs, length: l}
		if !g.condition(y) {
			continue
		}
		if ll := -0.5*mat.Dot(y, g.alpha) - 0.5*g.chol.LogDet(); ll > bestLL {
			best, bestLL = g, ll
		}
	}
	if best != nil {
		b.length = best.length
	}
	return best
}

// condition factors the kernel matrix of the observations and solves for
// the weights of the posterior mean.
func (g *gaussianProcess) condition(y *mat.VecDense) bool {
	m := len(g.xs)
	k := mat.NewSymDense(m, nil)
	for i := range m {
		for j := i; j < m; j++ {
			v := g.kernel(g.xs[i], g.xs[j])
			if i == j {
				v += boNugget
			}
			k.SetSym(i, j, v)
		}
	}
	g.chol = &mat.Cholesky{}
	if !g.chol.Factorize(k) {
		return false
	}
	g.alpha = &mat.VecDense{}
	return g.chol.SolveVecTo(g.alpha, y) == nil
}

// predict returns the posterior mean and standard deviation at each
// assignment, solving for all of them at once.
func (g *gaussianProcess) predict(as [][]int) (mu, sd []float64) {
	m, c := len(g.xs), len(as)
	ks := mat.NewDense(m, c, nil)
	for i, x := range g.xs {
		for j, a := range as {
			ks.Set(i, j, g.kernel(a, x))
		}
	}
	var v mat.Dense // K^-1 ks
	if err := g.chol.SolveTo(&v, ks); err != nil {
		return make([]float64, c), make([]float64, c)
	}
	mu, sd = make([]float64, c), make([]float64, c)
	for j := range c {
		var mean, quad float64
		for i := range m {
			k := ks.At(i, j)
			mean += k * g.alpha.AtVec(i)
			quad += k * v.At(i, j)
		}
		mu[j], sd[j] = mean, math.Sqrt(math.Max(1+boNugget-quad, 0))
	}
	return mu, sd
}

// expectedImprovement below best of a normal prediction (minimisation).
func expectedImprovement(best, mu, sd float64) float64 {
	if sd <= 0 {
		return math.Max(best-mu, 0)
	}
	z := (best - mu) / sd
	return (best-mu)*distuv.UnitNormal.CDF(z) + sd*distuv.UnitNormal.Prob(z)
}
