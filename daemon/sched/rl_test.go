package sched

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// surrogate is the loss whose gradient backward computes, evaluated by a
// forward pass with the actions fixed.
func surrogate(t *testing.T, pol *Policy, feats *policyInput, actions [][]int, adv []float64, entropy float64) float64 {
	t.Helper()
	be, err := backend()
	if err != nil {
		t.Fatal(err)
	}
	ro, err := pol.forward(be, feats, len(actions), func(i, l int, _ []float32) int { return actions[i][l] })
	if err != nil {
		t.Fatal(err)
	}
	var loss float64
	for l, probs := range ro.probs {
		T := feats.types
		for i := range actions {
			q := probs[i*T : (i+1)*T]
			loss += (-adv[i]*math.Log(float64(q[actions[i][l]])) - entropy*entropyOf(q)) / float64(len(actions))
		}
	}
	return loss
}

func TestPolicyGradientMatchesFiniteDifferences(t *testing.T) {
	for _, cell := range []string{CellLSTM, CellElman} {
		t.Run(cell, func(t *testing.T) {
			r := newRand(21)
			p := randomProblem(r, 4, 3)
			pol := newPolicy(cell, 5, r)
			for i := range pol.W { // larger weights: probabilities far from uniform
				pol.W[i] *= 3
			}
			for i := range pol.Ca {
				pol.Ca[i] = 0.3 * pol.Va[i]
			}
			for i := range pol.M {
				pol.M[i] *= 3
				pol.Mb[i%len(pol.Mb)] = pol.M[i]
			}
			feats := newPolicyInput(p)
			actions := [][]int{{0, 2, 2, 1}, {1, 1, 0, 2}, {2, 0, 1, 1}}
			adv := []float64{0.7, -1.3, 0.4}
			const entropy = 0.05
			be, _ := backend()
			ro, err := pol.forward(be, feats, len(actions), func(i, l int, _ []float32) int { return actions[i][l] })
			if err != nil {
				t.Fatal(err)
			}
			g, err := pol.backward(be, ro, adv, entropy)
			if err != nil {
				t.Fatal(err)
			}
			params := map[string][2][]float32{"W": {pol.W, g.w}, "B": {pol.B, g.b}, "M": {pol.M, g.m}, "Mb": {pol.Mb, g.mb},
				"A": {pol.A, g.a}, "U": {pol.U, g.u}, "Ca": {pol.Ca, g.ca}, "Va": {pol.Va, g.va}}
			for name, pg := range params {
				w, grad := pg[0], pg[1]
				for k := 0; k < len(w); k += 1 + len(w)/300 {
					const eps = 1e-2
					orig := w[k]
					w[k] = orig + eps
					up := surrogate(t, pol, feats, actions, adv, entropy)
					w[k] = orig - eps
					down := surrogate(t, pol, feats, actions, adv, entropy)
					w[k] = orig
					num := (up - down) / (2 * eps)
					if math.Abs(num-float64(grad[k])) > 2e-3+3e-2*math.Abs(num) {
						t.Errorf("%s[%d]: backward %.6g, finite differences %.6g", name, k, grad[k], num)
					}
				}
			}
		})
	}
}

func tinyProblem(t *testing.T) *Problem {
	r := newRand(31)
	for {
		p := randomProblem(r, 4, 2)
		if mustRun(t, "exact", p, Options{}).Feasible {
			return p
		}
	}
}

// TestRLPolicyDecidesTheOptimumOfATinyProblem checks the trained policy's
// own decision, not the best plan it sampled, from a fresh policy; a policy
// that does not learn (learning rate 0) fails it.
func TestRLPolicyDecidesTheOptimumOfATinyProblem(t *testing.T) {
	p := tinyProblem(t)
	opt := mustRun(t, "exact", p, Options{})
	for _, m := range []string{"rl", "rl-rnn"} {
		plan := mustRun(t, m, p, Options{Seed: 3, Budget: 640, FreshPolicy: true})
		if !plan.Feasible || !relClose(plan.PolicyCost, opt.Cost, 1e-12) || plan.Decision != DecisionPolicy {
			t.Errorf("%s: policy %v (plan %v, %s), exact %v %v", m, plan.PolicyCost, plan.Cost, plan.Decision, opt.Cost, opt.Assign)
		}
		if c, err := Recost(plan, p); err != nil || c.Cost != plan.Cost {
			t.Errorf("%s: recost %v %v", m, c.Cost, err)
		}
	}
}

// TestRLPolicyDecisionWithinTwoPercent: on seeded small random problems the
// policy's own decision is within 2% of exact's cost, with a reduced budget.
func TestRLPolicyDecisionWithinTwoPercent(t *testing.T) {
	r := newRand(5)
	checked := 0
	for checked < 12 {
		p := randomProblem(r, 3+r.IntN(4), 1+r.IntN(3))
		opt := mustRun(t, "exact", p, Options{})
		if !opt.Feasible {
			continue
		}
		checked++
		plan := mustRun(t, "rl", p, Options{Seed: 1, Budget: 1280})
		if plan.PolicyCost == 0 || plan.PolicyCost > opt.Cost*1.02 {
			t.Errorf("problem %d (%d layers, %d types): policy %v, best sampled %v, exact %v", checked, len(p.Layers), len(p.Types),
				plan.PolicyCost, plan.BestSampledCost, opt.Cost)
		}
		if plan.Cost != min(plan.PolicyCost, plan.BestSampledCost) && plan.BestSampledCost != 0 {
			t.Errorf("problem %d: plan %v is not the cheaper of %v and %v", checked, plan.Cost, plan.PolicyCost, plan.BestSampledCost)
		}
	}
}

func TestRLIsReproducible(t *testing.T) {
	p := synth(t, 4, 8, 2)
	a := mustRun(t, "rl", p, Options{Seed: 9, Budget: 1280})
	b := mustRun(t, "rl", p, Options{Seed: 9, Budget: 1280})
	if !reflect.DeepEqual(a.Assign, b.Assign) || a.Cost != b.Cost || a.Evaluations != b.Evaluations {
		t.Fatalf("same seed: %v %v vs %v %v", a.Assign, a.Cost, b.Assign, b.Cost)
	}
}

func TestPolicySavedAndReused(t *testing.T) {
	p := synth(t, 4, 8, 2)
	var pol Policy
	mustRun(t, "rl", p, Options{Seed: 1, Budget: 640, Policy: &pol})
	if pol.Cell != CellLSTM || pol.check() != nil {
		t.Fatalf("trained policy not returned: %+v", pol.Cell)
	}
	var buf bytes.Buffer
	if err := pol.Save(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := LoadPolicy(&buf)
	if err != nil || !reflect.DeepEqual(*back, pol) {
		t.Fatalf("round trip: %v", err)
	}
	// The policy reads types through their features: it is reused on
	// another depth of model and on another number of types.
	for _, q := range []*Problem{synth(t, 4, 12, 2), synth(t, 8, 8, 2)} {
		if plan := mustRun(t, "rl", q, Options{Seed: 1, Budget: 640, Policy: back}); !plan.Feasible {
			t.Fatalf("reused policy: %s", plan.Reason)
		}
	}
	if _, err := Run(t.Context(), "rl-rnn", p, Options{Policy: back}); !errors.Is(err, errPolicyShape) {
		t.Fatalf("LSTM policy used as an Elman RNN: %v", err)
	}
	if _, err := LoadPolicy(bytes.NewReader([]byte(`{"cell":"lstm","inputs":3,"features":2,"hidden":1}`))); !errors.Is(err, errPolicyShape) {
		t.Fatalf("bad shapes loaded: %v", err)
	}
}

func TestSamplerFollowsTheProbabilities(t *testing.T) {
	pick := sampler(rand.New(rand.NewPCG(1, 1)))
	probs := []float32{0.1, 0.6, 0.3}
	counts := make([]int, 3)
	for range 20000 {
		counts[pick(0, 0, probs)]++
	}
	for i, q := range probs {
		if got := float64(counts[i]) / 20000; math.Abs(got-float64(q)) > 0.02 {
			t.Errorf("type %d drawn %.3f of the time, want %.1f", i, got, q)
		}
	}
	if mostLikely(0, 0, probs) != 1 {
		t.Error("mostLikely")
	}
}

// TestRLRelaxesOffPlateaus: on larger random problems with a small budget,
// rl's decision reaches 2% of exact on 37 of 40 with relax and on 33
// without it (measured on an AVX2 machine; other kernels may round the
// policy differently, hence the slack).
func TestRLRelaxesOffPlateaus(t *testing.T) {
	within := func() (n, ok int) {
		for seed := uint64(0); seed < 40; seed++ {
			r := newRand(seed)
			p := randomProblem(r, 8+r.IntN(6), 3+r.IntN(4))
			opt := mustRun(t, "exact", p, Options{})
			if !opt.Feasible {
				continue
			}
			n++
			plan := mustRun(t, "rl", p, Options{Seed: 1, Budget: 256, FreshPolicy: true})
			if plan.PolicyCost > 0 && plan.PolicyCost <= opt.Cost*1.02 {
				ok++
			}
		}
		return n, ok
	}
	n, relaxed := within()
	saved := rlRelaxLevels
	rlRelaxLevels = nil
	_, plain := within()
	rlRelaxLevels = saved
	if n < 30 || relaxed < n-6 || relaxed < plain+2 {
		t.Fatalf("rl's decision within 2%% of exact on %d of %d problems with relax, %d without", relaxed, n, plain)
	}
}

// The policy's features stay finite for layers that more units slow down
// (alpha < 0), which the pretrained policy never saw: such a layer needs
// no units for its parallel part.
func TestPolicyFeaturesOfLayersSlowerOnMoreUnits(t *testing.T) {
	p := handProblem()
	p.Layers[0].Alpha[0], p.Layers[1].Alpha[0] = -10, -0.5
	p.ThroughputLimit = 1e6 // a budget far below the layers' time: a large need
	in := newPolicyInput(p)
	for l, row := range in.static {
		for i, v := range row {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Errorf("layer %d: static feature %d is %g", l, i, v)
			}
		}
	}
	mustRun(t, "rl", p, Options{Seed: 1}) // runs to a plan or a reason on them
}
