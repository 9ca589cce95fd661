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
// variables so that tests can shrink the budget and switch learning off.
var (
	rlHidden      = 32
	rlBatch       = 64    // plans per policy update, the imitated best one included
	rlSamples     = 20000 // plans sampled in all, at most
	rlWork        = 24_000_000
	rlRestarts    = 4 // independent policies trained on shares of the budget
	rlLR          = 0.01
	rlEntropy     = 0.05 // initial weight of the entropy bonus, annealed to 0
	rlImitate     = 5.0  // advantage of the best plan found so far (self-imitation)
	rlClip        = 5.0  // gradient norm cap
	rlConverged   = 0.995
	rlPatience    = 20   // updates with a converged policy before a restart stops
	rlInfeasble   = 1.0  // reward below the reference plan's for an infeasible one
	rlSettle      = 200  // updates at most, after the budget, for the decision to reach the best plan
	rlFinalSettle = 1000 // the same for the chosen policy and the best plan of all restarts
	// rlImprovePasses bounds the local search that improves each new best
	// sample before the policy imitates it; 0 switches it off.
	rlImprovePasses = 8
	rlImproveRun    = 3
	// rlPromising: a batch's best plan starts a local search when it costs
	// less than this times the restart's best.
	rlPromising = math.Inf(1)
	// rlImproveEvals caps the local search's cost evaluations per problem,
	// in multiples of the sampled plans' budget.
	rlImproveEvals = 40
)

// reinforce trains policies on the problem with REINFORCE; the policy's
// decision is the most likely assignment of the best of them. Each of
// rlRestarts restarts trains its own policy on a share of the budget: the
// even ones fine-tune the start policy (Options.Policy when set, else the
// shipped pre-trained one for an LSTM, see Pretrain), the odd ones and all
// of them with Options.FreshPolicy a fresh seeded one. A restart samples
// batches of assignments, rewards each with minus the log of its cost
// relative to the first feasible plan seen (infeasible plans get less than
// any feasible one, graded by how far their stages fall short), normalises
// the rewards over the batch, and steps Adam on the policy gradient, with
// an entropy bonus annealed to zero. The best plan of each batch starts a
// local search on the cost model (improve.go); the best plan the restart
// has reached so far is replayed in every batch with a fixed positive
// advantage (self-imitation of an improved plan: expert iteration), and
// after the budget the restart trains on that plan alone until its
// policy's most likely assignment costs no more (settle). The policy with
// the cheapest decision then settles on the best plan of all restarts.
// This pulls the policy's own decision to the best plan the search found.
//
// The plan is the cheaper of the policy's decision and the best plan
// found (sampled or reached by the local search from a sample), and
// reports both costs (PolicyCost, BestSampledCost, Decision).
// Options.Policy, when set, receives the chosen policy.
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
	start, err := m.startPolicy()
	if err != nil {
		return nil, err
	}
	sr := newSearch(p, m.o.Provision)
	budget := m.budget(p)
	restarts := max(1, min(rlRestarts, budget/(rlBatch*4)))
	var chosen *trainer
	var chosenAssign []int
	chosenCost := math.Inf(1)
	for k := range restarts {
		r := rand.New(rand.NewPCG(m.o.Seed, 0x5ca1ab1e+uint64(k)))
		// Every other restart starts fresh: a pre-trained policy is
		// decided, and its restarts would search one neighbourhood.
		var pol *Policy
		if start == nil || k%2 == 1 {
			pol = newPolicy(m.cell, rlHidden, r)
		} else {
			pol = start.clone()
		}
		sr.evalsLeft = rlImproveEvals * budget / restarts
		t := newTrainer(be, pol, r, sr)
		if err := t.train(ctx, budget/restarts); err != nil {
			return nil, err
		}
		assign, err := t.settle(ctx, rlSettle)
		if err != nil {
			return nil, err
		}
		if c := sr.e.cost(assign); chosen == nil || c < chosenCost {
			chosen, chosenAssign, chosenCost = t, assign, c
		}
	}
	// The restarts' local searches stop at their share of evaluations: the
	// best plan of all gets a last one. Another restart may have found a
	// cheaper plan than the chosen policy's: the chosen policy imitates it.
	if sr.best != nil {
		sr.evalsLeft = rlImproveEvals * budget
		sr.offer(sr.improve(sr.best))
		sr.evalsLeft = rlImproveEvals * budget
		sr.relax()
	}
	if sr.best != nil && sr.bestCost < chosenCost {
		chosen.best, chosen.bestCost = sr.best, sr.bestCost
		if chosenAssign, err = chosen.settle(ctx, rlFinalSettle); err != nil {
			return nil, err
		}
	}
	if m.o.Policy != nil {
		*m.o.Policy = *chosen.pol
	}
	return sr.answer(chosenAssign), nil
}

// startPolicy is Options.Policy when it is set and not the zero Policy,
// else the shipped pre-trained policy for an LSTM unless
// Options.FreshPolicy asks for a fresh one (nil).
func (m reinforce) startPolicy() (*Policy, error) {
	if m.o.Policy == nil || m.o.Policy.Cell == "" {
		if m.cell != CellLSTM || m.o.FreshPolicy {
			return nil, nil
		}
		return Pretrained()
	}
	if m.o.Policy.Cell != m.cell {
		return nil, fmt.Errorf("%w: the policy is a %s, the method trains a %s", errPolicyShape, m.o.Policy.Cell, m.cell)
	}
	if err := m.o.Policy.check(); err != nil {
		return nil, err
	}
	return m.o.Policy, nil
}

// budget is Options.Budget, else rlSamples capped so that the sampled
// layer decisions over every type stay within rlWork: the fine-tuning time
// grows with layers x types.
func (m reinforce) budget(p *Problem) int {
	if m.o.Budget > 0 {
		return m.o.Budget
	}
	return max(rlBatch*4, min(rlSamples, rlWork/(len(p.Layers)*len(p.Types))))
}

// search is what the restarts share: the evaluator and the best plan
// sampled.
type search struct {
	p         *Problem
	e         *evaluator
	in        *policyInput
	ref       float64 // cost of the first feasible plan, the reward's unit
	best      []int
	bestCost  float64
	improved  map[string]bool // the starts of the local search so far
	evalsLeft int             // the local search's evaluation budget
}

func newSearch(p *Problem, rule string) *search {
	return &search{p: p, e: newEvaluator(p, rule), in: newPolicyInput(p), bestCost: inf, improved: map[string]bool{}}
}

// firstStart says whether a is a new start for the local search, and
// records it.
func (sr *search) firstStart(a []int) bool {
	k := assignKey(a)
	if sr.improved[k] {
		return false
	}
	sr.improved[k] = true
	return true
}

// answer is the plan of the policy's decision, or of the best plan sampled
// when that is cheaper, with both costs.
func (sr *search) answer(decision []int) *Plan {
	pc := sr.e.cost(decision)
	choice, which := decision, DecisionPolicy
	if sr.best != nil && sr.bestCost < pc {
		choice, which = sr.best, DecisionSampled
	}
	plan := sr.e.plan(choice)
	plan.Decision = which
	plan.PolicyCost, plan.BestSampledCost = finiteOrZero(pc), finiteOrZero(sr.bestCost)
	return plan
}

func finiteOrZero(c float64) float64 {
	if math.IsInf(c, 0) {
		return 0
	}
	return c
}

// offer records a plan the local search reached as the best found when it
// is cheaper.
func (sr *search) offer(a []int, c float64) {
	if c < sr.bestCost {
		sr.best, sr.bestCost = append([]int(nil), a...), c
	}
}

// reward is -log(cost/ref) for a feasible assignment; an infeasible one gets
// rlInfeasble less than the reference, minus the log of how far the
// slowest stage, on all its type's units, falls short of the limit.
func (sr *search) reward(a []int) float64 {
	if c := sr.e.cost(a); !math.IsInf(c, 1) {
		if sr.ref == 0 {
			sr.ref = c
		}
		if c < sr.bestCost {
			sr.best, sr.bestCost = append([]int(nil), a...), c
		}
		return -math.Log(c / sr.ref)
	}
	segs := Segments(a)
	for i := range segs {
		segs[i].Units = sr.p.Types[segs[i].Type].MaxUnits
	}
	shortfall := math.Max(sr.p.ThroughputLimit/sr.p.PipelineThroughput(segs), 1)
	return -rlInfeasble - math.Log(shortfall)
}

type trainer struct {
	sr      *search
	be      native.Backend
	pol     *Policy
	r       *rand.Rand
	updates int
	// best is the cheapest plan this restart sampled, the one it imitates:
	// restarts imitating only their own keep searching apart.
	best     []int
	bestCost float64
	// lastMaxProb is meanMaxProb of the last batch.
	lastMaxProb float64
	adam        [][2]native.HostBuffer // first and second moments per parameter
}

func newTrainer(be native.Backend, pol *Policy, r *rand.Rand, sr *search) *trainer {
	t := &trainer{sr: sr, be: be, pol: pol, r: r, bestCost: inf}
	for _, w := range pol.params() {
		t.adam = append(t.adam, [2]native.HostBuffer{make(native.HostBuffer, len(w)), make(native.HostBuffer, len(w))})
	}
	return t
}

// decide is the policy's own decision: its most likely assignment.
func (t *trainer) decide() ([]int, error) {
	ro, err := t.pol.forward(t.be, t.sr.in, 1, mostLikely)
	if err != nil {
		return nil, err
	}
	return ro.actions[0], nil
}

// settle ends self-imitation: it trains the policy on the best plan
// sampled alone (the REINFORCE gradient of a batch of that one plan with a
// positive advantage, i.e. its log-likelihood) until the policy's decision
// costs no more than that plan, for at most limit updates, and returns
// the cheapest decision on the way, leaving the policy as it was then.
func (t *trainer) settle(ctx context.Context, limit int) ([]int, error) {
	// Imitation can pass through worse decisions on its way (and stall
	// there, when types look alike to the policy): the policy ends as it
	// was at its cheapest decision.
	var kept *Policy
	var keptAssign []int
	keptCost := inf
	defer func() {
		if kept != nil {
			*t.pol = *kept
		}
	}()
	for u := 0; ; u++ {
		assign, err := t.decide()
		if err != nil {
			return nil, err
		}
		c := t.sr.e.cost(assign)
		if keptAssign == nil || c < keptCost {
			kept, keptAssign, keptCost = t.pol.clone(), assign, c
		}
		if u >= limit || t.best == nil || c <= t.bestCost {
			return keptAssign, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		best := t.best
		ro, err := t.pol.forward(t.be, t.sr.in, 1, func(_, l int, _ []float32) int { return best[l] })
		if err != nil {
			return nil, err
		}
		g, err := t.pol.backward(t.be, ro, []float64{1}, 0)
		if err != nil {
			return nil, err
		}
		g.clip(rlClip)
		if err := t.step(g); err != nil {
			return nil, err
		}
	}
}

func (t *trainer) train(ctx context.Context, budget int) error {
	converged := 0
	for sampled := 0; sampled < budget && converged < rlPatience; sampled += rlBatch {
		if err := t.update(ctx, rlEntropy*math.Max(0, 1-float64(sampled)/float64(budget))); err != nil {
			return err
		}
		if t.lastMaxProb > rlConverged {
			converged++
		} else {
			converged = 0
		}
	}
	return nil
}

// update samples a batch, replays the best plan so far in its last row,
// and steps the policy.
func (t *trainer) update(ctx context.Context, entropy float64) error {
	{
		if err := ctx.Err(); err != nil {
			return err
		}
		best := t.best // replayed as the batch's last row
		pick := sampler(t.r)
		if best != nil {
			sample := pick
			pick = func(i, l int, probs []float32) int {
				if i == rlBatch-1 {
					return best[l]
				}
				return sample(i, l, probs)
			}
		}
		ro, err := t.pol.forward(t.be, t.sr.in, rlBatch, pick)
		if err != nil {
			return err
		}
		adv := t.advantages(ro.actions, best != nil)
		g, err := t.pol.backward(t.be, ro, adv, entropy)
		if err != nil {
			return err
		}
		g.clip(rlClip)
		t.lastMaxProb = meanMaxProb(ro)
		return t.step(g)
	}
}

// advantages rewards each sampled assignment and normalises the rewards to
// zero mean and unit deviation over the batch; the replayed best plan, when
// replayed is set (the last row), gets rlImitate.
func (t *trainer) advantages(actions [][]int, replayed bool) []float64 {
	sampled := actions
	if replayed {
		sampled = actions[:len(actions)-1]
	}
	rewards := make([]float64, len(sampled))
	var mean float64
	batchBest, batchCost := -1, inf
	for i, a := range sampled {
		rewards[i] = t.sr.reward(a)
		if c := t.sr.e.cost(a); c < batchCost {
			batchBest, batchCost = i, c
		}
		mean += rewards[i] / float64(len(sampled))
	}
	if batchCost < t.bestCost*rlPromising && t.sr.firstStart(sampled[batchBest]) {
		if a, c := t.sr.improve(sampled[batchBest]); c < t.bestCost {
			t.best, t.bestCost = a, c
			t.sr.offer(a, c)
		}
	}
	var sq float64
	for _, r := range rewards {
		sq += (r - mean) * (r - mean)
	}
	sd := math.Sqrt(sq / float64(len(rewards)))
	adv := make([]float64, len(actions))
	for i, r := range rewards {
		if sd > 1e-9 {
			adv[i] = (r - mean) / sd
		}
	}
	if replayed {
		adv[len(adv)-1] = rlImitate
	}
	return adv
}

// step applies Adam to every parameter.
func (t *trainer) step(g *policyGrads) error {
	t.updates++
	o := native.Optim{Kind: native.Adam, LR: float32(rlLR), Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: int64(t.updates)}
	params := t.pol.params()
	for i, grad := range g.all() {
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
