package sched

import (
	"math"
	"strings"
	"testing"
)

func randomAssignment(r interface{ IntN(int) int }, n, nt int) []int {
	a := make([]int, n)
	for i := range a {
		a[i] = r.IntN(nt)
	}
	return a
}

// TestProvisioningKeepsLimits checks every rule on random assignments: a
// feasible provisioning meets the throughput floor and every summed unit
// limit, re-costs to what it reports, and the breakpoint rule is never
// beaten by another rule on the same assignment (it is optimal for it).
func TestProvisioningKeepsLimits(t *testing.T) {
	r := newRand(7)
	feasible := map[string]int{}
	for c := range 300 {
		p := randomProblem(r, 1+r.IntN(7), 1+r.IntN(4))
		a := randomAssignment(r, len(p.Layers), len(p.Types))
		all, err := p.ProvisionAll(a)
		if err != nil {
			t.Fatal(err)
		}
		exact := all[0]
		for _, pr := range all {
			if !pr.Feasible {
				if pr.Reason == "" {
					t.Fatalf("case %d %s: infeasible without a reason", c, pr.Rule)
				}
				continue
			}
			feasible[pr.Rule]++
			plan := p.Plan(pr.Rule, a, pr)
			if err := Check(plan, p); err != nil {
				t.Fatalf("case %d %s: %v", c, pr.Rule, err)
			}
			if got, err := Recost(plan, p); err != nil || got.Cost != pr.Cost {
				t.Fatalf("case %d %s: recost %v (%v), reported %v", c, pr.Rule, got.Cost, err, pr.Cost)
			}
			if !exact.Feasible || exact.Cost > pr.Cost*(1+1e-12) {
				t.Fatalf("case %d: %s costs %.12g, breakpoints %v %.12g (%s)", c, pr.Rule, pr.Cost, exact.Feasible, exact.Cost, exact.Reason)
			}
		}
	}
	t.Logf("feasible provisionings per rule: %v", feasible)
	for _, rule := range Rules() {
		if feasible[rule] < 20 {
			t.Errorf("rule %s feasible only %d times: the test exercises too little", rule, feasible[rule])
		}
	}
}

func TestNewtonBalancesAtTheLimit(t *testing.T) {
	p := handProblem()
	p.ThroughputLimit = 150000
	pr, err := p.Provision([]int{0, 1}, RuleNewton)
	if err != nil || !pr.Feasible {
		t.Fatalf("%v %+v", err, pr)
	}
	for i, s := range pr.Segments {
		x := p.StageThroughput(s)
		fewer := s
		fewer.Units--
		if x < p.ThroughputLimit || (fewer.Units >= 1 && p.StageThroughput(fewer) >= p.ThroughputLimit) {
			t.Errorf("stage %d: %d units give %.0f samples/s; want the fewest reaching %.0f", i, s.Units, x, p.ThroughputLimit)
		}
	}
}

func TestNewtonUnitsSolvesTheThroughputEquation(t *testing.T) {
	sh := shape{cs: 0.001, cp: 0.2, ds: 0.0005, dp: 0.3}
	for _, x := range []float64{1000, 50000, 300000} {
		k, err := newtonUnits(512, sh, x)
		if err != nil {
			t.Fatal(err)
		}
		if got := 512 / sh.etReal(k); k > 1 && !relClose(got, x, 1e-9) {
			t.Errorf("x=%g: k=%g gives %g", x, k, got)
		}
	}
	if _, err := newtonUnits(512, sh, 600000); err == nil || !strings.Contains(err.Error(), "Amdahl") {
		t.Errorf("want an Amdahl error above 512/0.001 samples/s, got %v", err)
	}
}

func TestStaticRatios(t *testing.T) {
	p := handProblem()
	p.ThroughputLimit = 100000
	p.PSType, p.PSRatio = 0, 0.5
	for _, rule := range []string{RuleStaRatio, RuleStaPSRatio} {
		pr, err := p.Provision([]int{0, 1}, rule)
		if err != nil || !pr.Feasible {
			t.Fatalf("%s: %v %+v", rule, err, pr)
		}
		cpu, gpu := pr.Segments[0].Units, pr.Segments[1].Units
		if cpu != 6*gpu {
			t.Errorf("%s: %d CPU cores for %d GPUs, want 1:6", rule, cpu, gpu)
		}
		wantPS := p.PSCores(cpu + gpu)
		if rule == RuleStaPSRatio {
			wantPS = 6 * gpu
		}
		if pr.PSCores != wantPS {
			t.Errorf("%s: %d PS cores, want %d", rule, pr.PSCores, wantPS)
		}
		// The smallest ratio unit: one GPU fewer misses the limit.
		if gpu > 1 {
			fewer := []Segment{pr.Segments[0], pr.Segments[1]}
			fewer[0].Units, fewer[1].Units = 6*(gpu-1), gpu-1
			if p.PipelineThroughput(fewer) >= p.ThroughputLimit {
				t.Errorf("%s: %d GPUs is not the fewest", rule, gpu)
			}
		}
	}
}

func TestInfeasibleReasonsNameStageAndLimit(t *testing.T) {
	p := handProblem()
	p.Layers[1].Alpha[1] = 0.5
	p.Layers[1].ODT = []float64{0.001, 0.001}
	// Stage 1 (fc on gpu) has serial compute 0.004*2*0.5 = 0.004 s per
	// batch: at most 128000 samples/s however many GPUs. Stage 0 reaches
	// 150000 with 13 cores.
	p.ThroughputLimit = 150000
	pr, _ := p.Provision([]int{0, 1}, RuleBreakpoints)
	if pr.Feasible || !strings.Contains(pr.Reason, "stage 1 (layer 1 on gpu)") || !strings.Contains(pr.Reason, "Amdahl limit") {
		t.Errorf("Amdahl: got %q", pr.Reason)
	}
	// At 100000, stage 1 needs 0.004 + 0.004/k <= 0.00512: k = 4 > 3 GPUs.
	p.ThroughputLimit = 100000
	p.Types[1].MaxUnits = 3
	pr, _ = p.Provision([]int{0, 1}, RuleBreakpoints)
	if pr.Feasible || !strings.Contains(pr.Reason, "stage 1 (layer 1 on gpu) needs 4 units") || !strings.Contains(pr.Reason, "unit limit") {
		t.Errorf("unit limit: got %q", pr.Reason)
	}
	// At 30000 each CPU stage needs 2 cores: together 4 > 3.
	p.ThroughputLimit = 30000
	p.Types[0].MaxUnits = 3
	p.Layers = append(p.Layers, p.Layers[0])
	pr, _ = p.Provision([]int{0, 1, 0}, RuleBreakpoints)
	if pr.Feasible || !strings.Contains(pr.Reason, "type cpu: stages [0 2] need 2 + 2 = 4 units") || !strings.Contains(pr.Reason, "unit limit") {
		t.Errorf("summed limit: got %q", pr.Reason)
	}
	plan := mustRun(t, "exact", p, Options{})
	if plan.Feasible {
		t.Fatalf("exact found %v", plan.Assign)
	}
}

func TestBreakpointsMayRunFasterThanTheLimit(t *testing.T) {
	// One stage whose first unit already beats the limit: the cheapest plan
	// is that unit, running well above the limit (cost falls with speed).
	p := handProblem()
	p.ThroughputLimit = 1000
	pr, _ := p.Provision([]int{1, 1}, RuleBreakpoints)
	if !pr.Feasible || pr.Segments[0].Units != 1 || pr.Throughput < 10*p.ThroughputLimit {
		t.Fatalf("%+v", pr)
	}
	if math.IsInf(pr.Cost, 0) || pr.Cost <= 0 {
		t.Fatalf("cost %v", pr.Cost)
	}
}

// A stage that more units slow down (alpha < 0, as a profile fits it when
// its replicas' synchronisation outgrows the work they share) gets one
// unit, is priced slower on more, and says why when one is not enough —
// also when its transfer needs more units than its compute can take.
func TestStagesThatMoreUnitsSlowDown(t *testing.T) {
	p := handProblem()
	p.Layers[0].Alpha[0], p.Layers[1].Alpha[0] = -0.5, -0.5
	one := Segment{First: 0, Last: 1, Type: 0, Units: 1}
	two := one
	two.Units = 2
	// CT(1) = 0.11*2 = 0.22 s; CT(2) = 0.22*(1.5 - 0.25) = 0.275 s.
	if x1, x2 := p.StageThroughput(one), p.StageThroughput(two); !relClose(x1, 512/0.22, 1e-12) || !relClose(x2, 512/0.275, 1e-12) {
		t.Errorf("throughput on 1 and 2 units %g, %g; want %g, %g", x1, x2, 512/0.22, 512/0.275)
	}
	p.ThroughputLimit = 2000 // below 512/0.22 = 2327
	if pr, err := p.Provision([]int{0, 0}, RuleBreakpoints); err != nil || !pr.Feasible || pr.Segments[0].Units != 1 {
		t.Errorf("at 2000 samples/s: %v %+v, want one unit", err, pr)
	}
	// The static ratio gives a CPU stage 6g units: 1643 samples/s at g = 1,
	// 1560 at the most g the limits allow (10).
	p.ThroughputLimit = 1600
	if pr, err := p.Provision([]int{0, 0}, RuleStaRatio); err != nil || !pr.Feasible || pr.Segments[0].Units != staticRatio {
		t.Errorf("static ratio at 1600 samples/s: %v %+v, want g = 1", err, pr)
	}
	p.ThroughputLimit = 2400
	pr, _ := p.Provision([]int{0, 0}, RuleBreakpoints)
	if pr.Feasible || !strings.Contains(pr.Reason, "one unit, its fastest (alpha < 0: more units are slower), reaches only 2327.27") {
		t.Errorf("at 2400: %+v", pr)
	}
	// Layer 0 alone on the CPU at 20000 samples/s (0.0256 s a batch): its
	// compute, 0.02 s on one unit, takes 0.025 on two and 0.0267 on three;
	// its transfer, 0.036 (0.5 + 0.5/k), needs three (0.027 on two).
	p.Layers[0].ODT[0] = 0.018
	p.ThroughputLimit = 20000
	pr, _ = p.Provision([]int{0, 1}, RuleBreakpoints)
	if pr.Feasible || !strings.Contains(pr.Reason, "its transfer needs 3 units to reach 20000 samples/s, and more units slow its compute (alpha < 0) to 19200 samples/s there") {
		t.Errorf("transfer against compute: %+v", pr)
	}
	if plan := mustRun(t, "exact", p, Options{}); plan.Feasible && plan.Assign[0] == "cpu" && plan.Stages[0].Last == 0 {
		t.Errorf("exact put layer 0 on the CPU, where no unit count reaches the limit: %+v", plan)
	}
}
