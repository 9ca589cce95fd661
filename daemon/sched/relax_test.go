package sched

import (
	"context"
	"math"
	"testing"
)

// The true cost's local optima that relax must leave: descend from a
// random start on random problems, keep those it leaves above the optimum.
func TestRelaxLeavesLocalOptimaForTheOptimum(t *testing.T) {
	stuck, reached := 0, 0
	for seed := uint64(0); seed < 200; seed++ {
		r := newRand(seed)
		p := randomProblem(r, 4+r.IntN(8), 2+r.IntN(5))
		sr := newSearch(p, "")
		sr.evalsLeft = math.MaxInt
		start := make([]int, len(p.Layers))
		for l := range start {
			start[l] = r.IntN(len(p.Types))
		}
		local, c := sr.improve(start)
		if math.IsInf(c, 1) {
			continue
		}
		ex, err := Run(context.Background(), "exact", p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if c <= ex.Cost*(1+1e-9) {
			continue
		}
		stuck++
		sr.offer(local, c)
		sr.relax()
		if sr.bestCost > c || sr.e.cost(sr.best) != sr.bestCost {
			t.Fatalf("seed %d: relax left %v (recosted %v) from a local optimum at %v", seed, sr.bestCost, sr.e.cost(sr.best), c)
		}
		if sr.bestCost <= ex.Cost*(1+1e-9) {
			reached++
		}
	}
	// Measured: 114 of 145 over 400 seeds.
	if stuck < 20 || float64(reached) < 0.6*float64(stuck) {
		t.Fatalf("relax reached the optimum from %d of %d local optima above it", reached, stuck)
	}
}

// At the throughput of the breakpoint rule's plan, every stage's fewest
// units are the plan's own (the rule takes the fewest units for a
// target), so levelCost is that plan's cost.
func TestLevelCostAtAPlansThroughputIsItsCost(t *testing.T) {
	checked := 0
	for seed := uint64(0); seed < 100; seed++ {
		r := newRand(seed)
		p := randomProblem(r, 3+r.IntN(6), 1+r.IntN(4))
		a := make([]int, len(p.Layers))
		for l := range a {
			a[l] = r.IntN(len(p.Types))
		}
		pr, err := p.Provision(a, RuleBreakpoints)
		if err != nil {
			t.Fatal(err)
		}
		if !pr.Feasible {
			continue
		}
		checked++
		if got := p.levelCost(a, pr.Throughput); math.Abs(got-pr.Cost) > 1e-9*pr.Cost {
			t.Fatalf("seed %d: levelCost at %v = %v, the plan costs %v", seed, pr.Throughput, got, pr.Cost)
		}
		if higher := p.levelCost(a, pr.Throughput*1.5); higher <= 0 || math.IsInf(higher, 0) {
			t.Fatalf("seed %d: levelCost above the plan's throughput = %v", seed, higher)
		}
	}
	if checked < 20 {
		t.Fatalf("only %d feasible plans checked", checked)
	}
}
