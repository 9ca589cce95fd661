package sched

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/heterps/heterps/config"
)

func synth(t *testing.T, types, layers int, seed uint64) *Problem {
	t.Helper()
	c, err := SynthProblem(types, layers, seed)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProblem(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func exampleProblem(t *testing.T) *Problem {
	t.Helper()
	c, err := config.LoadProblem("../../config/examples/problems/two-types.toml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProblem(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func testProblems(t *testing.T) []*Problem {
	r := newRand(11)
	ps := []*Problem{exampleProblem(t), synth(t, 4, 8, 1), synth(t, 8, 12, 2), handProblem()}
	for range 6 {
		ps = append(ps, randomProblem(r, 2+r.IntN(5), 2+r.IntN(3)))
	}
	return ps
}

func TestMethodsRegistered(t *testing.T) {
	for _, m := range []string{"exact", "bf", "rl", "rl-rnn", "bo", "genetic", "greedy", "heuristic", "cpu", "gpu"} {
		if !slices.Contains(Methods(), m) || Summary(m) == "" {
			t.Errorf("method %s missing or without a summary", m)
		}
	}
	if _, err := Run(context.Background(), "nope", handProblem(), Options{}); !errors.Is(err, ErrUnknownMethod) {
		t.Errorf("unknown method: %v", err)
	}
	if _, err := Run(context.Background(), "cpu", handProblem(), Options{Provision: "nope"}); !errors.Is(err, ErrUnknownRule) {
		t.Errorf("unknown provisioning rule accepted")
	}
}

// TestEveryPlanRecostsFromItsJSON runs every method and checks that the
// plan's JSON alone, with the problem, gives back the cost, throughput and
// time it reports, that feasible plans keep the constraints, and that no
// method beats exact.
func TestEveryPlanRecostsFromItsJSON(t *testing.T) {
	for i, p := range testProblems(t) {
		opt := mustRun(t, "exact", p, Options{})
		for _, m := range Methods() {
			plan, err := Run(context.Background(), m, p, Options{Seed: 1, Budget: 60, MaxPlans: 4096})
			if errors.Is(err, ErrRefused) {
				continue
			}
			if err != nil {
				t.Fatalf("problem %d %s: %v", i, m, err)
			}
			raw, err := json.Marshal(plan)
			if err != nil {
				t.Fatal(err)
			}
			var back Plan
			if err := json.Unmarshal(raw, &back); err != nil {
				t.Fatal(err)
			}
			if !back.Feasible {
				if back.Reason == "" {
					t.Errorf("problem %d %s: infeasible without a reason: %s", i, m, raw)
				}
				continue
			}
			c, err := Recost(&back, p)
			if err != nil {
				t.Fatalf("problem %d %s: %v\n%s", i, m, err, raw)
			}
			if c.Cost != back.Cost || c.Throughput != back.Throughput || c.TimeS != back.TimeS {
				t.Errorf("problem %d %s: recost %+v, reported cost %v throughput %v time %v", i, m, c, back.Cost, back.Throughput, back.TimeS)
			}
			if err := Check(&back, p); err != nil {
				t.Errorf("problem %d %s: %v", i, m, err)
			}
			if !opt.Feasible || back.Cost < opt.Cost*(1-1e-9) {
				t.Errorf("problem %d: %s costs %v, less than exact's %v", i, m, back.Cost, opt.Cost)
			}
		}
	}
}

func TestPlanJSONHasTheDesignFields(t *testing.T) {
	plan := mustRun(t, "exact", exampleProblem(t), Options{})
	raw, _ := json.Marshal(plan)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"method", "feasible", "cost", "throughput", "time_s", "assign", "stages", "ps_cores", "ps_type", "sched_seconds", "provision"} {
		if _, ok := m[k]; !ok {
			t.Errorf("missing %q in %s", k, raw)
		}
	}
	st := m["stages"].([]any)[0].(map[string]any)
	for _, k := range []string{"first", "last", "type", "units", "throughput"} {
		if _, ok := st[k]; !ok {
			t.Errorf("stage lacks %q: %v", k, st)
		}
	}
}

func TestRecostRejectsInconsistentPlans(t *testing.T) {
	p := handProblem()
	plan := mustRun(t, "exact", p, Options{})
	bad := *plan
	bad.Stages = append([]Stage(nil), plan.Stages...)
	bad.Stages[0].Last++
	if _, err := Recost(&bad, p); !errors.Is(err, ErrPlan) {
		t.Errorf("shifted stage accepted: %v", err)
	}
	bad = *plan
	bad.Assign = []string{"cpu", "tpu"}
	if _, err := Recost(&bad, p); !errors.Is(err, ErrPlan) {
		t.Errorf("unknown type accepted: %v", err)
	}
	bad = *plan
	bad.Stages = append([]Stage(nil), plan.Stages...)
	bad.Stages[0].Units = p.Types[0].MaxUnits + p.Types[1].MaxUnits + 1
	if err := Check(&bad, p); !errors.Is(err, ErrPlan) {
		t.Errorf("units over the limit accepted: %v", err)
	}
}

func TestSeededMethodsAreReproducible(t *testing.T) {
	p := synth(t, 8, 12, 3)
	for _, m := range []string{"genetic", "bo"} {
		a := mustRun(t, m, p, Options{Seed: 42, Budget: 80})
		b := mustRun(t, m, p, Options{Seed: 42, Budget: 80})
		if !slices.Equal(a.Assign, b.Assign) || a.Cost != b.Cost {
			t.Errorf("%s: same seed, different plans: %v vs %v", m, a.Assign, b.Assign)
		}
	}
}

func TestBruteForceRefusesLargeProblems(t *testing.T) {
	p := synth(t, 4, 12, 1) // 4^12 = 16.8M assignments
	_, err := Run(context.Background(), "bf", p, Options{MaxPlans: 1000})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("got %v", err)
	}
}

func TestBaselineAssignments(t *testing.T) {
	p := synth(t, 6, 8, 4)
	cpu := p.Types[p.cheapestCPU()].Name
	plan := mustRun(t, "cpu", p, Options{})
	for _, a := range plan.Assign {
		if a != cpu {
			t.Fatalf("cpu: %v", plan.Assign)
		}
	}
	plan = mustRun(t, "heuristic", p, Options{})
	if plan.Assign[0] != cpu || len(plan.Stages) != 2 || p.Types[mustIndex(t, p, plan.Assign[1])].Kind != GPU {
		t.Fatalf("heuristic: %v", plan.Assign)
	}
	plan = mustRun(t, "gpu", p, Options{})
	if len(plan.Stages) != 1 || p.Types[mustIndex(t, p, plan.Assign[0])].Kind != GPU {
		t.Fatalf("gpu: %v", plan.Assign)
	}
	// The best GPU type: no other single GPU type is cheaper.
	for ti, ty := range p.Types {
		if ty.Kind != GPU {
			continue
		}
		pr, _ := p.Provision(uniform(len(p.Layers), ti), RuleBreakpoints)
		if pr.Feasible && pr.Cost < plan.Cost {
			t.Errorf("gpu chose %s at %v, %s costs %v", plan.Assign[0], plan.Cost, ty.Name, pr.Cost)
		}
	}
}

func mustIndex(t *testing.T, p *Problem, name string) int {
	t.Helper()
	i, ok := p.TypeIndex(name)
	if !ok {
		t.Fatalf("no type %s", name)
	}
	return i
}

func TestNoCPUTypeIsInfeasibleForCPUMethods(t *testing.T) {
	p := handProblem()
	p.Types[0].Kind = GPU
	for _, m := range []string{"cpu", "heuristic"} {
		if plan := mustRun(t, m, p, Options{}); plan.Feasible || plan.Reason == "" {
			t.Errorf("%s: %+v", m, plan)
		}
	}
}

func TestExactSolvesSixtyFourBySixtyFour(t *testing.T) {
	p := synth(t, 64, 64, 1)
	plan := mustRun(t, "exact", p, Options{})
	if !plan.Feasible {
		t.Fatal(plan.Reason)
	}
	heur := mustRun(t, "heuristic", p, Options{})
	if heur.Feasible && heur.Cost < plan.Cost {
		t.Fatalf("heuristic %v beats exact %v", heur.Cost, plan.Cost)
	}
	t.Logf("64x64: cost %.4g in %.3f s (%d levels); heuristic %.4g", plan.Cost, plan.SchedSeconds, plan.Evaluations, heur.Cost)
}

func TestContextCancelStopsMethods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, m := range []string{"exact", "bf", "genetic", "bo", "greedy", "rl", "rl-rnn"} {
		if _, err := Run(ctx, m, synth(t, 4, 8, 1), Options{}); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: got %v", m, err)
		}
	}
}
