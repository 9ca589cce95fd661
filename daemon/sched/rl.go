package sched

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/heterps/heterps/native"
)

func init() {
	Register("rl", "HeterPS: LSTM policy over the layers trained with REINFORCE (native LSTM kernels)",
		func(o Options) Method { return reinforce{o, CellLSTM} })
	Register("rl-rnn", "the rl method with an Elman RNN policy", func(o Options) Method { return reinforce{o, CellElman} })
}

// REINFORCE settings; Options.Budget overrides the sampled plans. They are
// variables so that tests can shrink the budget.
var (
	rlHidden     = 32
	rlBatch      = 64     // plans sampled per policy update
	rlSamples    = 100000 // plans sampled in all, at most
	rlLR         = 0.003
	rlEntropy    = 0.05 // weight of the entropy bonus that keeps the policy exploring
	rlBaseline   = 0.9  // moving-average decay of the reward baseline
	rlClip       = 5.0  // gradient norm cap
	rlConverged  = 0.995
	rlPatience   = 20  // updates with a converged policy before stopping
	rlInfeasible = 1.0 // reward below the reference plan's for an infeasible one
	rlStayInit   = float32(2)
)

// reinforce trains a Policy on the problem with REINFORCE: it samples
// batches of assignments, rewards each with minus the log of its cost
// relative to the first feasible plan seen (infeasible plans get less than
// any feasible one, graded by how far their stages fall short), subtracts a
// moving-average baseline, and steps Adam on the policy gradient. The answer
// is the cheaper of the final policy's most likely assignment and the best
// one sampled. Seeded by Options.Seed. Options.Policy, when set, receives
// the trained policy; unless it is the zero Policy, it is also the starting
// point.
type reinforce struct {
	o    Options
	cell string
}

var (
	rlBackendOnce sync.Once
	rlBackend     native.Backend
	rlBackendErr  error
)

func backend() (native.Backend, error) {
	rlBackendOnce.Do(func() { rlBackend, rlBackendErr = native.NewCPU(native.CPUOptions{}) })
	return rlBackend, rlBackendErr
}

func (m reinforce) Schedule(ctx context.Context, p *Problem) (*Plan, error) {
	be, err := backend()
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(m.o.Seed, 0x5ca1ab1e))
	pol := newPolicy(m.cell, len(p.Types), rlHidden, r)
	if m.o.Policy != nil && m.o.Policy.Types != 0 {
		if m.o.Policy.Cell != m.cell || m.o.Policy.Types != len(p.Types) {
			return nil, fmt.Errorf("%w: the policy is a %s over %d types, the problem has %d types", errPolicyShape, m.o.Policy.Cell, m.o.Policy.Types, len(p.Types))
		}
		if err := m.o.Policy.check(); err != nil {
			return nil, err
		}
		pol = m.o.Policy.clone()
	}
	t := &trainer{p: p, be: be, pol: pol, r: r, e: newEvaluator(p, m.o.Provision), feats: layerFeatures(p)}
	if err := t.train(ctx, m.budget()); err != nil {
		return nil, err
	}
	final, err := pol.forward(be, t.feats, 1, mostLikely)
	if err != nil {
		return nil, err
	}
	choice := final.actions[0]
	if t.best != nil && t.e.cost(t.best) < t.e.cost(choice) {
		choice = t.best
	}
	if m.o.Policy != nil {
		*m.o.Policy = *pol
	}
	return t.e.plan(choice), nil
}

func (m reinforce) budget() int {
	if m.o.Budget > 0 {
		return m.o.Budget
	}
	return rlSamples
}

type trainer struct {
	p     *Problem
	be    native.Backend
	pol   *Policy
	r     *rand.Rand
	e     *evaluator
	feats [][]float32

	ref      float64 // cost of the first feasible plan, the reward's unit
	baseline float64
	updates  int
	adam     [5][2]native.HostBuffer // first and second moments of W, B, V, C, Stay
	best     []int
	bestCost float64
}

func (t *trainer) train(ctx context.Context, budget int) error {
	t.bestCost = inf
	for i, n := range []int{len(t.pol.W), len(t.pol.B), len(t.pol.V), len(t.pol.C), 1} {
		t.adam[i] = [2]native.HostBuffer{make(native.HostBuffer, n), make(native.HostBuffer, n)}
	}
	converged := 0
	for sampled := 0; sampled < budget && converged < rlPatience; sampled += rlBatch {
		if err := ctx.Err(); err != nil {
			return err
		}
		ro, err := t.pol.forward(t.be, t.feats, rlBatch, sampler(t.r))
		if err != nil {
			return err
		}
		adv := t.advantages(ro.actions)
		g, err := t.pol.backward(t.be, ro, adv, rlEntropy)
		if err != nil {
			return err
		}
		g.clip(rlClip)
		if err := t.step(g); err != nil {
			return err
		}
		if meanMaxProb(ro) > rlConverged {
			converged++
		} else {
			converged = 0
		}
	}
	return nil
}

// advantages rewards each sampled assignment and subtracts the baseline,
// which then moves towards the batch's mean reward.
func (t *trainer) advantages(actions [][]int) []float64 {
	rewards := make([]float64, len(actions))
	var mean float64
	for i, a := range actions {
		rewards[i] = t.reward(a)
		mean += rewards[i] / float64(len(actions))
	}
	if t.updates == 0 {
		t.baseline = mean
	}
	adv := make([]float64, len(actions))
	var sq float64
	for i, r := range rewards {
		adv[i] = r - t.baseline
		sq += (r - mean) * (r - mean)
	}
	if sd := math.Sqrt(sq / float64(len(rewards))); sd > 1e-9 {
		for i := range adv {
			adv[i] /= sd
		}
	}
	t.baseline = rlBaseline*t.baseline + (1-rlBaseline)*mean
	return adv
}

// reward is -log(cost/ref) for a feasible assignment; an infeasible one gets
// rlInfeasible less than the reference, minus the log of how far the
// slowest stage, on all its type's units, falls short of the limit.
func (t *trainer) reward(a []int) float64 {
	if c := t.e.cost(a); !math.IsInf(c, 1) {
		if t.ref == 0 {
			t.ref = c
		}
		if c < t.bestCost {
			t.best, t.bestCost = append([]int(nil), a...), c
		}
		return -math.Log(c / t.ref)
	}
	segs := Segments(a)
	for i := range segs {
		segs[i].Units = t.p.Types[segs[i].Type].MaxUnits
	}
	shortfall := math.Max(t.p.ThroughputLimit/t.p.PipelineThroughput(segs), 1)
	return -rlInfeasible - math.Log(shortfall)
}

// step applies Adam to every parameter.
func (t *trainer) step(g *policyGrads) error {
	t.updates++
	o := native.Optim{Kind: native.Adam, LR: float32(rlLR), Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: int64(t.updates)}
	params := []native.HostBuffer{t.pol.W, t.pol.B, t.pol.V, t.pol.C, t.pol.Stay}
	for i, grad := range []native.HostBuffer{g.w, g.b, g.v, g.c, g.stay} {
		if err := t.be.Update(o, params[i], grad, t.adam[i][0], t.adam[i][1]); err != nil {
			return fmt.Errorf("rl: adam: %w", err)
		}
	}
	return nil
}

// meanMaxProb is how decided the policy is: the average over samples and
// layers of the largest type probability.
func meanMaxProb(ro *rollout) float64 {
	var sum float64
	count := 0
	for _, probs := range ro.probs {
		T := len(probs) / ro.s
		for i := range ro.s {
			m := float32(0)
			for _, q := range probs[i*T : (i+1)*T] {
				m = max(m, q)
			}
			sum += float64(m)
			count++
		}
	}
	return sum / float64(count)
}
