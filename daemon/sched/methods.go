package sched

import (
	"context"
	"fmt"
	"math"
)

func init() {
	Register("exact", "optimal under the cost model: DP over layer prefixes per throughput breakpoint", newExact)
	Register("bf", "brute force over every assignment (refuses above --max-plans)", newBruteForce)
	Register("greedy", "layer by layer, the type that makes the plan of the layers so far cheapest", newGreedy)
	Register("cpu", "every layer on the cheapest CPU type", func(o Options) Method { return baseline{o, allCPU} })
	Register("gpu", "every layer on the GPU type that gives the cheapest plan", func(o Options) Method { return baseline{o, allGPU} })
	Register("heuristic", "first layer on the cheapest CPU type, the rest on the best GPU type (AIBox/BytePS rule)",
		func(o Options) Method { return baseline{o, firstOnCPU} })
}

// methodFunc adapts a function to Method.
type methodFunc func(ctx context.Context, p *Problem) (*Plan, error)

func (f methodFunc) Schedule(ctx context.Context, p *Problem) (*Plan, error) { return f(ctx, p) }

func newExact(o Options) Method {
	return methodFunc(func(ctx context.Context, p *Problem) (*Plan, error) {
		s := newExactSolver(p, exactOptions{maxLabels: o.MaxLabels})
		sol, reason, err := s.solve(ctx)
		if err != nil {
			return nil, err
		}
		var plan *Plan
		if sol == nil {
			plan = p.infeasiblePlan(nil, RuleBreakpoints, reason)
		} else {
			plan = p.newPlan(sol.assign, sol.segs, sol.ps, RuleBreakpoints)
		}
		plan.Evaluations = s.levels + 1
		return plan, nil
	})
}

// newBruteForce enumerates every assignment and provisions each.
func newBruteForce(o Options) Method {
	return methodFunc(func(ctx context.Context, p *Problem) (*Plan, error) {
		n, nt := len(p.Layers), len(p.Types)
		if count := math.Pow(float64(nt), float64(n)); count > float64(o.MaxPlans) {
			return nil, fmt.Errorf("%w: %d types ^ %d layers = %.3g assignments, more than --max-plans %d",
				ErrRefused, nt, n, count, o.MaxPlans)
		}
		evals := 0
		assign := make([]int, n)
		var best []int
		bestCost := inf
		var firstReason string
		for step := 0; ; step++ {
			if step%8192 == 0 && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			pr, pruned, err := p.provisionBelow(assign, o.Provision, bestCost)
			if err != nil {
				return nil, err
			}
			evals++
			switch {
			case pruned: // cannot beat the best so far
			case pr.Feasible && pr.Cost < bestCost:
				best, bestCost = append(best[:0], assign...), pr.Cost
			case !pr.Feasible && firstReason == "":
				firstReason = pr.Reason
			}
			if !nextAssignment(assign, nt) {
				break
			}
		}
		if best == nil {
			plan := p.infeasiblePlan(nil, o.Provision, "no assignment is feasible; e.g. all on "+p.Types[0].Name+": "+firstReason)
			plan.Evaluations = evals
			return plan, nil
		}
		pr, _ := p.Provision(best, o.Provision)
		plan := p.Plan("", best, pr)
		plan.Evaluations = evals
		return plan, nil
	})
}

// provisionBelow provisions assign by rule; with the breakpoint rule it
// stops early (pruned) once it is sure assign cannot cost less than bound.
func (p *Problem) provisionBelow(assign []int, rule string, bound float64) (Provisioning, bool, error) {
	if rule != RuleBreakpoints {
		pr, err := p.Provision(assign, rule)
		return pr, false, err
	}
	pr, pruned := p.cheapestUnits(Segments(assign), bound)
	return pr, pruned, nil
}

// nextAssignment steps an odometer over assignments; false after the last.
func nextAssignment(assign []int, nt int) bool {
	for i := len(assign) - 1; i >= 0; i-- {
		assign[i]++
		if assign[i] < nt {
			return true
		}
		assign[i] = 0
	}
	return false
}

// baseline is a fixed-rule method: rule picks the assignment.
type baseline struct {
	o    Options
	rule func(e *evaluator) ([]int, string)
}

func (b baseline) Schedule(ctx context.Context, p *Problem) (*Plan, error) {
	e := newEvaluator(p, b.o.Provision)
	assign, why := b.rule(e)
	if assign == nil {
		return p.infeasiblePlan(nil, b.o.Provision, why), nil
	}
	return e.plan(assign), nil
}

func uniform(n, t int) []int {
	a := make([]int, n)
	for i := range a {
		a[i] = t
	}
	return a
}

// cheapestCPU is the CPU type with the lowest price, -1 if none.
func (p *Problem) cheapestCPU() int {
	best := -1
	for t, ty := range p.Types {
		if ty.Kind == CPU && (best < 0 || ty.Price < p.Types[best].Price) {
			best = t
		}
	}
	return best
}

func allCPU(e *evaluator) ([]int, string) {
	t := e.p.cheapestCPU()
	if t < 0 {
		return nil, "the problem has no CPU type"
	}
	return uniform(len(e.p.Layers), t), ""
}

// bestGPU is the GPU type whose plan, with layers from..n-1 on it and the
// layers before on prefix, is cheapest (or, when none is feasible, the first
// GPU type).
func bestGPU(e *evaluator, prefix []int) ([]int, string) {
	var best []int
	bestCost := inf
	for t, ty := range e.p.Types {
		if ty.Kind != GPU {
			continue
		}
		a := append(append([]int{}, prefix...), uniform(len(e.p.Layers)-len(prefix), t)...)
		if best == nil || e.cost(a) < bestCost {
			best, bestCost = a, e.cost(a)
		}
	}
	if best == nil {
		return nil, "the problem has no GPU type"
	}
	return best, ""
}

func allGPU(e *evaluator) ([]int, string) { return bestGPU(e, nil) }

func firstOnCPU(e *evaluator) ([]int, string) {
	c := e.p.cheapestCPU()
	if c < 0 {
		return nil, "the problem has no CPU type"
	}
	if len(e.p.Layers) == 1 {
		return []int{c}, ""
	}
	return bestGPU(e, []int{c})
}

// newGreedy fixes layers in order: layer l gets the type under which the
// plan of layers 0..l alone (a prefix problem) is cheapest; when no type
// makes that prefix feasible, the one whose layer alone runs fastest.
func newGreedy(o Options) Method {
	return methodFunc(func(ctx context.Context, p *Problem) (*Plan, error) {
		var assign []int
		evals := 0
		for l := range p.Layers {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			prefix := p.prefix(l + 1)
			e := newEvaluator(prefix, o.Provision)
			best, bestCost := -1, inf
			for t := range p.Types {
				if c := e.cost(append(assign, t)); best < 0 || c < bestCost {
					best, bestCost = t, c
				}
			}
			if math.IsInf(bestCost, 1) {
				best = p.fastestAlone(l)
			}
			assign = append(assign, best)
			evals += e.count
		}
		e := newEvaluator(p, o.Provision)
		plan := e.plan(assign)
		plan.Evaluations += evals
		return plan, nil
	})
}

// prefix is the problem made of the first n layers (the last of them ends
// the pipeline, so it has no transfer).
func (p *Problem) prefix(n int) *Problem {
	q := *p
	q.Layers = p.Layers[:n]
	return &q
}

// fastestAlone is the type on which layer l alone, with its type's max
// units and no transfer, reaches the highest throughput.
func (p *Problem) fastestAlone(l int) int {
	best, bestX := 0, -1.0
	for t, ty := range p.Types {
		sh := p.shape(l, l, t)
		if x := p.Batch / sh.ct(ty.MaxUnits); x > bestX {
			best, bestX = t, x
		}
	}
	return best
}
