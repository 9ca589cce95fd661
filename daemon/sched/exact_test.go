package sched

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func relClose(a, b, tol float64) bool {
	return a == b || math.Abs(a-b) <= tol*math.Max(math.Abs(a), math.Abs(b))
}

func mustRun(t *testing.T, method string, p *Problem, o Options) *Plan {
	t.Helper()
	plan, err := Run(context.Background(), method, p, o)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return plan
}

// TestExactMatchesBruteForce compares exact with brute force on hundreds of
// random small problems, many with binding and summed unit limits and PS
// cores that round up.
func TestExactMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := 400
	if testing.Short() {
		cases = 100
	}
	feasible := 0
	for c := range cases {
		p := randomProblem(r, 1+r.IntN(6), 1+r.IntN(4))
		ex := mustRun(t, "exact", p, Options{})
		bf := mustRun(t, "bf", p, Options{})
		if ex.Feasible != bf.Feasible {
			t.Fatalf("case %d: exact feasible=%v (%s), bf feasible=%v (%s)", c, ex.Feasible, ex.Reason, bf.Feasible, bf.Reason)
		}
		if !ex.Feasible {
			continue
		}
		feasible++
		if !relClose(ex.Cost, bf.Cost, 1e-9) {
			t.Fatalf("case %d: exact cost %.12g (%v), bf %.12g (%v)", c, ex.Cost, ex.Assign, bf.Cost, bf.Assign)
		}
	}
	if feasible < cases/4 {
		t.Fatalf("only %d of %d random problems feasible: the generator tests too little", feasible, cases)
	}
	t.Logf("%d of %d feasible", feasible, cases)
}

// exhaustiveFor is an oracle that shares no reasoning with the methods:
// the cheapest cost of assign over every unit count of every stage up to its
// type's limit (+Inf if none is feasible).
func exhaustiveFor(p *Problem, assign []int) float64 {
	segs := Segments(assign)
	best := math.Inf(1)
	var try func(i int)
	try = func(i int) {
		if i < len(segs) {
			for k := 1; k <= p.Types[segs[i].Type].MaxUnits; k++ {
				segs[i].Units = k
				try(i + 1)
			}
			return
		}
		if !withinLimits(p, segs) || p.PipelineThroughput(segs) < p.ThroughputLimit {
			return
		}
		best = math.Min(best, p.Cost(segs, p.PSCores(totalUnits(segs))).Cost)
	}
	try(0)
	return best
}

// exhaustive is the oracle over all assignments.
func exhaustive(p *Problem) (float64, bool) {
	best := math.Inf(1)
	for _, a := range allAssignments(len(p.Layers), len(p.Types)) {
		best = math.Min(best, exhaustiveFor(p, a))
	}
	return best, !math.IsInf(best, 1)
}

func allAssignments(n, nt int) [][]int {
	var all [][]int
	a := make([]int, n)
	for {
		all = append(all, append([]int(nil), a...))
		if !nextAssignment(a, nt) {
			return all
		}
	}
}

func withinLimits(p *Problem, segs []Segment) bool {
	used := make([]int, len(p.Types))
	for _, s := range segs {
		used[s.Type] += s.Units
	}
	for t, u := range used {
		if u > p.Types[t].MaxUnits {
			return false
		}
	}
	return true
}

func TestExactMatchesExhaustiveUnits(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cases := 300
	if testing.Short() {
		cases = 50
	}
	feasible := 0
	defer func() { t.Logf("%d of %d feasible", feasible, cases) }()
	for c := range cases {
		p := randomProblem(r, 2+r.IntN(3), 2+r.IntN(2))
		for i := range p.Types {
			p.Types[i].MaxUnits = 1 + r.IntN(7)
		}
		want, ok := exhaustive(p)
		if ok {
			feasible++
		}
		ex := mustRun(t, "exact", p, Options{})
		if ex.Feasible != ok || (ok && !relClose(ex.Cost, want, 1e-9)) {
			t.Fatalf("case %d: exact %v %.12g (%s), exhaustive %v %.12g", c, ex.Feasible, ex.Cost, ex.Reason, ok, want)
		}
		for _, a := range allAssignments(len(p.Layers), len(p.Types)) {
			pr, err := p.Provision(a, RuleBreakpoints)
			if err != nil {
				t.Fatal(err)
			}
			sub := exhaustiveFor(p, a)
			if pr.Feasible != !math.IsInf(sub, 1) || (pr.Feasible && !relClose(pr.Cost, sub, 1e-9)) {
				t.Fatalf("case %d, assignment %v: breakpoints %v %.12g (%s), exhaustive %.12g", c, a, pr.Feasible, pr.Cost, pr.Reason, sub)
			}
		}
	}
}

func TestExactExplainsInfeasibility(t *testing.T) {
	p := handProblem()
	p.Layers[1].Alpha[1] = 0.5
	p.Layers[1].ODT = []float64{0.001, 0.001}
	p.Types[1].MaxUnits = 1
	// Layer 1: on cpu at most 512/(0.1*2*0.05) = 51200 samples/s; on the
	// GPU 0.004 + 0.004/k <= 512/90000 needs k = 3 > 1.
	p.ThroughputLimit = 90000
	plan := mustRun(t, "exact", p, Options{})
	for _, want := range []string{"layer 1 (fc) cannot reach 90000", "on cpu at most 51200 samples/s (Amdahl limit)", "on gpu it needs 3 units, max_units is 1 (unit limit)"} {
		if plan.Feasible || !strings.Contains(plan.Reason, want) {
			t.Errorf("reason %q lacks %q", plan.Reason, want)
		}
	}
}
