package sched

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
)

// PretrainOptions configure Pretrain; zero values select the defaults.
type PretrainOptions struct {
	Seed     uint64 // the problems and the initial weights
	Problems int    // random problems trained on, one after another
	Budget   int    // plans sampled per problem
	// Progress, when set, receives a line per problem.
	Progress io.Writer
}

// Pretraining defaults: the shipped policy (pretrained_policy.json) is
// Pretrain(ctx, PretrainOptions{Seed: DefaultPretrainSeed}).
const (
	DefaultPretrainSeed     = 1
	DefaultPretrainProblems = 96
	DefaultPretrainBudget   = 384
)

// pretrainTypes and pretrainLayers span the benchmark's shapes.
var (
	pretrainTypes  = []int{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}
	pretrainLayers = []int{3, 4, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64}
)

// Pretrain trains one LSTM policy on a sequence of random problems: synthetic
// catalogs (SynthCatalog, seeds from 1_000_000 on, disjoint from the
// benchmark's and the tests') under ctrdnn-like models, with 1..64 types and
// 3..64 layers, random parameter-server ratios and throughput limits around
// the automatic one. On each problem it runs the rl trainer (sampling,
// self-imitation of the locally improved best plan, settle) from the policy
// the previous problem left, so the result has seen every shape the
// per-problem fine-tuning meets. The same options give the same policy.
func Pretrain(ctx context.Context, o PretrainOptions) (*Policy, error) {
	if o.Problems <= 0 {
		o.Problems = DefaultPretrainProblems
	}
	if o.Budget <= 0 {
		o.Budget = DefaultPretrainBudget
	}
	be, err := backend()
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(o.Seed, 0x9e3779b9))
	pol := newPolicy(CellLSTM, rlHidden, r)
	for i := range o.Problems {
		p, err := pretrainProblem(r, o.Seed, i)
		if err != nil {
			return nil, err
		}
		sr := newSearch(p, RuleBreakpoints)
		sr.evalsLeft = rlImproveEvals * o.Budget
		t := newTrainer(be, pol, r, sr)
		if err := t.train(ctx, o.Budget); err != nil {
			return nil, fmt.Errorf("sched: pretrain: problem %d: %w", i, err)
		}
		if _, err := t.settle(ctx, rlSettle); err != nil {
			return nil, fmt.Errorf("sched: pretrain: problem %d: %w", i, err)
		}
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "problem %d: %d types x %d layers, best %.4g\n", i, len(p.Types), len(p.Layers), sr.bestCost)
		}
	}
	return pol, nil
}

// pretrainProblem is the i-th random problem of a pretraining run.
func pretrainProblem(r *rand.Rand, seed uint64, i int) (*Problem, error) {
	types := pretrainTypes[r.IntN(len(pretrainTypes))]
	layers := pretrainLayers[r.IntN(len(pretrainLayers))]
	shapes, err := CTRDNNShapes(layers)
	if err != nil {
		return nil, err
	}
	cat, err := SynthCatalog(types, 1_000_000+seed*10_000+uint64(i))
	if err != nil {
		return nil, err
	}
	spec := DefaultEstimateSpec()
	spec.PSType, spec.PSRatio = "cpu", []float64{0, 0.1, 0.25}[r.IntN(3)]
	c, err := EstimateProblem(shapes, cat, spec)
	if err != nil {
		return nil, err
	}
	c.ThroughputLimit *= 0.5 + r.Float64()
	p, err := NewProblem(c)
	if err != nil {
		return nil, fmt.Errorf("sched: pretrain: problem %d: %w", i, err)
	}
	return p, nil
}

//go:embed pretrained_policy.json
var pretrainedJSON []byte

var (
	pretrainedOnce sync.Once
	pretrained     *Policy
	pretrainedErr  error
)

// Pretrained is the shipped pre-trained policy, the rl method's default
// start.
func Pretrained() (*Policy, error) {
	pretrainedOnce.Do(func() {
		pretrained, pretrainedErr = LoadPolicy(bytes.NewReader(pretrainedJSON))
		if pretrainedErr != nil {
			pretrainedErr = fmt.Errorf("the shipped policy (daemon/sched/pretrained_policy.json): %w", pretrainedErr)
		}
	})
	return pretrained, pretrainedErr
}
