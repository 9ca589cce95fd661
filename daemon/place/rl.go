package place

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/heterps/heterps/native"
)

// RLOptions are the rl method's settings; zero fields take the defaults.
type RLOptions struct {
	Hidden   int     // LSTM units (default 32)
	Batch    int     // placements sampled per policy update (default 32)
	Samples  int     // placements sampled in all per restart, at most (default 1000 per group, 10000..50000)
	LR       float64 // Adam's learning rate (default 0.003); negative means 0, for tests
	Entropy  float64 // initial weight of the entropy bonus, annealed to 0 (default 0.3)
	Baseline float64 // moving-average decay of the reward baseline (default 0.9)
	Restarts int     // policies trained side by side from different seeds (default 2)
	// Replay is how many samples of each batch replay the best placement
	// found so far instead of sampling (self-imitation; default 2,
	// negative means none).
	Replay int
}

func (o RLOptions) withDefaults(groups int) RLOptions {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Hidden, 32)
	def(&o.Batch, 32)
	def(&o.Restarts, 2)
	def(&o.Samples, min(max(1000*groups, 10000), 50000))
	switch {
	case o.Replay == 0:
		o.Replay = 2
	case o.Replay < 0:
		o.Replay = 0
	}
	o.Replay = min(o.Replay, o.Batch/2)
	switch {
	case o.LR == 0:
		o.LR = 0.003
	case o.LR < 0:
		o.LR = 0
	}
	if o.Entropy == 0 {
		o.Entropy = 0.3
	}
	if o.Baseline == 0 {
		o.Baseline = 0.9
	}
	return o
}

const (
	rlClip      = 5.0   // gradient norm cap
	rlConverged = 0.995 // mean largest probability at which the policy is decided
	rlPatience  = 10    // decided updates in a row before stopping
	rlAnneal    = 0.6   // share of the samples over which the entropy bonus falls to 0
)

var (
	cpuOnce sync.Once
	cpuBE   native.Backend
	cpuErr  error
)

// policyBackend is the CPU backend the policy's LSTM cells run on.
func policyBackend() (native.Backend, error) {
	cpuOnce.Do(func() { cpuBE, cpuErr = native.NewCPU(native.CPUOptions{Threads: 1}) })
	return cpuBE, cpuErr
}

// reinforce is the paper's method: the seq2seq policy places the
// co-location groups, trained with REINFORCE on the reward -sqrt(cost /
// ref) (ref: the best single-device step) minus a moving-average baseline,
// the advantages scaled by the batch's standard deviation, an entropy bonus
// annealed to zero, Adam, and self-imitation: a few samples of each batch
// replay the best placement found so far, pulled towards while it beats
// the baseline (Oh et al., ICML 2018). Without it the policy drifts away
// from rare good placements it sampled once and settles on a worse mode
// (matchnet on cpu-gpu: its own placement 37% above the best it sampled).
// RLOptions.Restarts policies train side by side
// from different seeds (REINFORCE can settle in a poor local optimum); the
// answer is the most likely placement of the policy whose own placement is
// best. The best placement sampled on the way is only reported.
func reinforce(ctx context.Context, s *Simulator, o Options, out *Outcome) ([]int, error) {
	be, err := policyBackend()
	if err != nil {
		return nil, err
	}
	ro := o.RL.withDefaults(len(s.g.Groups))
	ref, err := singleCost(s)
	if err != nil {
		return nil, err
	}
	x := groupFeatures(s)
	runs := make([]restart, ro.Restarts)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = trainPolicy(ctx, s.clone(), be, x, ro, ref, rand.New(rand.NewPCG(o.Seed, 0x91ace+uint64(i))))
		}()
	}
	wg.Wait()
	best := -1
	out.BestSampledCost = math.Inf(1)
	for i, r := range runs {
		if r.err != nil {
			return nil, r.err
		}
		out.Evaluated += r.sampled + 1
		out.BestSampledCost = math.Min(out.BestSampledCost, r.bestSampled)
		if best < 0 || r.cost < runs[best].cost {
			best = i
		}
	}
	out.PolicyCost = runs[best].cost
	return runs[best].placement, nil
}

// restart is one trained policy's outcome.
type restart struct {
	placement   []int
	cost        float64 // of placement, the policy's most likely
	bestSampled float64
	sampled     int
	err         error
}

// trainPolicy trains one policy on s (its own simulator) and returns its
// most likely placement.
func trainPolicy(ctx context.Context, s *Simulator, be native.Backend, x [][]float32, ro RLOptions, ref float64, r *rand.Rand) restart {
	pol := newPolicy(len(x[0]), len(s.devs), ro.Hidden, r)
	t := &rlTrainer{s: s, be: be, pol: pol, o: ro, x: x, ref: ref, bestCost: math.Inf(1)}
	if err := t.train(ctx, r); err != nil {
		return restart{err: err}
	}
	ep, err := pol.forward(be, x, 1, argmax)
	if err != nil {
		return restart{err: err}
	}
	p := GroupPlacement(s.g, ep.actions[0])
	return restart{placement: p, cost: s.Cost(p), bestSampled: t.bestCost, sampled: t.sampled}
}

// singleCost is the cost of the best single-device placement.
func singleCost(s *Simulator) (float64, error) {
	p, err := single(context.Background(), s, Options{}, &Outcome{})
	if err != nil {
		return 0, err
	}
	return s.Cost(p), nil
}

type rlTrainer struct {
	s        *Simulator
	be       native.Backend
	pol      *policy
	o        RLOptions
	x        [][]float32
	ref      float64
	baseline float64
	updates  int
	sampled  int
	moments  [][2]native.HostBuffer
	bestCost float64
	best     []int // device per group of the best placement sampled
}

// pick samples each group's device, but for the batch's last Replay
// samples, which replay the best placement found so far.
func (t *rlTrainer) pick(r *rand.Rand) pickFunc {
	sample := sampleFrom(r)
	return func(i, g int, probs []float32) int {
		if t.best != nil && i >= t.o.Batch-t.o.Replay {
			return t.best[g]
		}
		return sample(i, g, probs)
	}
}

func (t *rlTrainer) train(ctx context.Context, r *rand.Rand) error {
	for _, w := range t.pol.params() {
		t.moments = append(t.moments, [2]native.HostBuffer{make(native.HostBuffer, len(w)), make(native.HostBuffer, len(w))})
	}
	decided := 0
	for t.sampled < t.o.Samples && decided < rlPatience {
		if err := ctx.Err(); err != nil {
			return err
		}
		ep, err := t.pol.forward(t.be, t.x, t.o.Batch, t.pick(r))
		if err != nil {
			return err
		}
		t.sampled += t.o.Batch
		entropy := t.o.Entropy * math.Max(0, 1-float64(t.sampled)/(rlAnneal*float64(t.o.Samples)))
		grads, err := t.pol.backward(t.be, ep, t.advantages(ep.actions), entropy)
		if err != nil {
			return err
		}
		clipNorm(grads, rlClip)
		if err := t.step(grads); err != nil {
			return err
		}
		if meanMaxProb(ep) > rlConverged && entropy == 0 {
			decided++
		} else {
			decided = 0
		}
	}
	return nil
}

// advantages rewards each sampled placement with -sqrt(cost/ref), subtracts
// the baseline, scales by the batch's standard deviation, and moves the
// baseline towards the batch's mean. A replayed placement's advantage is
// never negative (self-imitation only pulls). The best placement is
// chosen before the batch's replays are (they are the previous best).
func (t *rlTrainer) advantages(actions [][]int) []float64 {
	rewards := make([]float64, len(actions))
	replayed := t.best != nil
	var mean float64
	for i, a := range actions {
		c := t.s.Cost(GroupPlacement(t.s.g, a))
		if c < t.bestCost {
			t.bestCost, t.best = c, slices.Clone(a)
		}
		rewards[i] = -math.Sqrt(c / t.ref)
		mean += rewards[i] / float64(len(actions))
	}
	if t.updates == 0 {
		t.baseline = mean
	}
	adv := make([]float64, len(rewards))
	var sq float64
	for i, rw := range rewards {
		adv[i] = rw - t.baseline
		if replayed && i >= len(rewards)-t.o.Replay {
			adv[i] = math.Max(adv[i], 0)
		}
		sq += (rw - mean) * (rw - mean)
	}
	if sd := math.Sqrt(sq / float64(len(rewards))); sd > 1e-9 {
		for i := range adv {
			adv[i] /= sd
		}
	}
	t.baseline = t.o.Baseline*t.baseline + (1-t.o.Baseline)*mean
	return adv
}

// step applies Adam (the native optimiser kernel) to every parameter.
func (t *rlTrainer) step(grads [][]float32) error {
	t.updates++
	o := native.Optim{Kind: native.Adam, LR: float32(t.o.LR), Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: int64(t.updates)}
	for k, w := range t.pol.params() {
		if err := t.be.Update(o, native.HostBuffer(w), native.HostBuffer(grads[k]), t.moments[k][0], t.moments[k][1]); err != nil {
			return fmt.Errorf("rl: adam: %w", err)
		}
	}
	return nil
}

func clipNorm(grads [][]float32, limit float64) {
	var sq float64
	for _, g := range grads {
		for _, v := range g {
			sq += float64(v) * float64(v)
		}
	}
	if norm := math.Sqrt(sq); norm > limit {
		f := float32(limit / norm)
		for _, g := range grads {
			for i := range g {
				g[i] *= f
			}
		}
	}
}

// meanMaxProb is how decided the policy is: the mean over samples and
// groups of the largest device probability.
func meanMaxProb(ep *episode) float64 {
	var sum float64
	n := 0
	for _, probs := range ep.probs {
		D := len(probs) / ep.S
		for i := range ep.S {
			sum += float64(slices.Max(probs[i*D : (i+1)*D]))
			n++
		}
	}
	return sum / float64(n)
}

// groupFeatures embeds each co-location group (the paper embeds each op
// from its type, output shape and adjacency): the share of each op kind,
// log sizes (FLOPs, output and held bytes, bytes in from other groups and
// out to them), its memory against the smallest device's, its position,
// the position of the earliest group it reads from, and per device its time
// relative to its fastest.
func groupFeatures(s *Simulator) [][]float32 {
	G, K, D := len(s.g.Groups), len(Kinds), len(s.devs)
	F := K + 8 + D
	x := make([][]float32, G)
	for g := range x {
		x[g] = make([]float32, F)
	}
	counts := make([]float64, G)
	flops, outB, memB, inB, sendB := make([]float64, G), make([]float64, G), make([]float64, G), make([]float64, G), make([]float64, G)
	firstPred := make([]int, G)
	for g := range firstPred {
		firstPred[g] = g
	}
	for _, op := range s.g.Ops {
		g := op.Group
		x[g][slices.Index(Kinds, op.Kind)]++
		counts[g]++
		flops[g] += op.FLOPs
		outB[g] += float64(op.Out)
		memB[g] += float64(op.Mem)
		for _, in := range op.Inputs {
			if pg := s.g.Ops[in].Group; pg != g {
				inB[g] += float64(s.g.Ops[in].Out)
				sendB[pg] += float64(s.g.Ops[in].Out)
				firstPred[g] = min(firstPred[g], pg)
			}
		}
	}
	minMem := math.Inf(1)
	for _, d := range s.devs {
		minMem = math.Min(minMem, float64(d.Memory))
	}
	times := groupTimes(s)
	for g := range G {
		f := x[g]
		for k := range K {
			f[k] /= float32(max(counts[g], 1))
		}
		f[K] = float32(math.Log1p(flops[g]) / 30)
		f[K+1] = float32(math.Log1p(outB[g]) / 30)
		f[K+2] = float32(math.Log1p(memB[g]) / 30)
		f[K+3] = float32(math.Log1p(inB[g]) / 30)
		f[K+4] = float32(math.Log1p(sendB[g]) / 30)
		f[K+5] = float32(math.Min(memB[g]/minMem, 2))
		f[K+6] = float32(g) / float32(G)
		f[K+7] = float32(firstPred[g]) / float32(G)
		fastest := slices.Min(times[g])
		for d := range D {
			ratio := 1.0
			if fastest > 0 {
				ratio = times[g][d] / fastest
			}
			f[K+8+d] = float32(math.Log(math.Min(ratio, 1e4)) / 4)
		}
	}
	return x
}
