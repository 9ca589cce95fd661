package sched

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// Provisioning rules: how a given assignment gets its units.
const (
	// RuleBreakpoints is the exact rule: the cheapest units for the
	// assignment, found by walking the stages' throughput breakpoints.
	RuleBreakpoints = "breakpoints"
	// RuleNewton is HeterPS' rule: equal stage throughputs expressed in the
	// first stage's units k_1, Newton's method on k_1 to reach the limit,
	// then rounding up.
	RuleNewton = "newton"
	// RuleStaRatio gives every GPU stage g units and every CPU stage 6g
	// cores, with the smallest g that meets the limit.
	RuleStaRatio = "sta-ratio"
	// RuleStaPSRatio is RuleStaRatio with 6g parameter-server cores
	// (1 GPU : 6 CPU cores : 6 PS cores) instead of the ps_ratio rule.
	RuleStaPSRatio = "sta-ps-ratio"
)

// Rules lists the provisioning rules, the default first.
func Rules() []string { return []string{RuleBreakpoints, RuleNewton, RuleStaRatio, RuleStaPSRatio} }

// staticRatio is the CPU cores per GPU of the static-ratio baselines.
const staticRatio = 6

// Provisioning is one rule's units for one assignment.
type Provisioning struct {
	Rule     string
	Feasible bool
	Reason   string    // why not, when not Feasible
	Segments []Segment // with their units
	PSCores  int
	Costing
}

// Provision gives the assignment's stages their units by rule.
func (p *Problem) Provision(assign []int, rule string) (Provisioning, error) {
	if len(assign) != len(p.Layers) {
		return Provisioning{}, fmt.Errorf("sched: provision: %d layers assigned, the problem has %d", len(assign), len(p.Layers))
	}
	for l, t := range assign {
		if t < 0 || t >= len(p.Types) {
			return Provisioning{}, fmt.Errorf("sched: provision: layer %d on type %d of %d", l, t, len(p.Types))
		}
	}
	segs := Segments(assign)
	switch rule {
	case RuleBreakpoints, "":
		return p.provisionBreakpoints(segs), nil
	case RuleNewton:
		return p.provisionNewton(segs), nil
	case RuleStaRatio:
		return p.provisionStatic(segs, false), nil
	case RuleStaPSRatio:
		return p.provisionStatic(segs, true), nil
	}
	return Provisioning{}, fmt.Errorf("sched: %w %q (want one of %v)", ErrUnknownRule, rule, Rules())
}

// ErrUnknownRule is returned for a provisioning rule that does not exist.
var ErrUnknownRule = errors.New("unknown provisioning rule")

// ProvisionAll reports every rule's provisioning of the assignment.
func (p *Problem) ProvisionAll(assign []int) ([]Provisioning, error) {
	var all []Provisioning
	for _, r := range Rules() {
		pr, err := p.Provision(assign, r)
		if err != nil {
			return nil, err
		}
		all = append(all, pr)
	}
	return all, nil
}

// Plan turns a provisioning of assign into a plan of method.
func (p *Problem) Plan(method string, assign []int, pr Provisioning) *Plan {
	var plan *Plan
	if pr.Feasible {
		plan = p.newPlan(assign, pr.Segments, pr.PSCores, pr.Rule)
	} else {
		plan = p.infeasiblePlan(assign, pr.Rule, pr.Reason)
	}
	plan.Method = method
	return plan
}

// provisionBreakpoints finds the cheapest units for segs.
func (p *Problem) provisionBreakpoints(segs []Segment) Provisioning {
	pr, _ := p.cheapestUnits(segs, math.Inf(1))
	return pr
}

// cheapestUnits walks the breakpoints of segs for the cheapest units; it
// gives up early, returning pruned, once no provisioning of segs can cost
// less than bound.
//
// A plan's cost is costFactor * hourly price / X. Whatever units an optimum
// uses, giving every stage only the fewest units that reach the optimum's own
// throughput X* keeps X >= X*, never adds units (so no limit breaks) and
// never raises the price: the optimum is "fewest units for a target x" at
// x = X*, and X* is a breakpoint, a throughput some stage has at some unit
// count. So we walk the targets upwards from the limit: at x, take the fewest
// units, cost the result at its real throughput X >= x, and move the target
// past X (every target up to X gives the same units). The fewest units only
// grow with x, so the hourly price h(x) bounds that of every plan reaching
// x: none with throughput below costFactor*h(x)/best beats best, and the
// target jumps there. The walk stops when a stage or a type runs out of
// units, or when the lower bound on any plan reaching x, the sum over stages
// of price*k/X_i(k), reaches the best cost; it is non-decreasing in x
// because k*ET(k) is non-decreasing in k.
func (p *Problem) cheapestUnits(segs []Segment, bound float64) (best Provisioning, pruned bool) {
	shapes := make([]shape, len(segs))
	for i, s := range segs {
		shapes[i] = p.shape(s.First, s.Last, s.Type)
	}
	best = Provisioning{Rule: RuleBreakpoints, Costing: Costing{Cost: math.Inf(1)}}
	cand := slices.Clone(segs)
	for x := p.startThroughput(); ; {
		why := p.fewestUnits(cand, shapes, x)
		if why == "" {
			why = p.typeLimits(cand)
		}
		if why != "" {
			if !best.Feasible {
				best.Reason = why
			}
			return best, false
		}
		beat := math.Min(bound, best.Cost)
		if p.lowerBound(cand, shapes) >= beat {
			return best, !best.Feasible
		}
		ps := p.PSCores(totalUnits(cand))
		c := p.Cost(cand, ps)
		if c.Cost < best.Cost {
			best = Provisioning{Rule: RuleBreakpoints, Feasible: true, Segments: slices.Clone(cand), PSCores: ps, Costing: c}
		}
		x = math.Nextafter(c.Throughput, math.Inf(1))
		if beat = math.Min(bound, best.Cost); !math.IsInf(beat, 1) {
			x = math.Max(x, p.costFactor()*p.hourlyPrice(cand, ps)/beat*(1-1e-12))
		}
	}
}

// fewestUnits sets each segment's units to the fewest that reach x, or says
// which stage cannot.
func (p *Problem) fewestUnits(segs []Segment, shapes []shape, x float64) string {
	for i := range segs {
		need := p.stageUnits(shapes[i], x, p.Types[segs[i].Type].MaxUnits)
		if need.why != reached {
			return p.reason(i, segs[i], shapes[i], need, x)
		}
		segs[i].Units = need.units
	}
	return ""
}

// typeLimits says which type's units, summed over its stages, exceed its
// max_units, or "".
func (p *Problem) typeLimits(segs []Segment) string {
	used := make([]int, len(p.Types))
	for _, s := range segs {
		used[s.Type] += s.Units
	}
	for t, u := range used {
		if u <= p.Types[t].MaxUnits {
			continue
		}
		var parts []int
		var stages []int
		for i, s := range segs {
			if s.Type == t {
				parts = append(parts, s.Units)
				stages = append(stages, i)
			}
		}
		return fmt.Sprintf("type %s: stages %v need %s = %d units together, max_units is %d (unit limit)",
			p.Types[t].Name, stages, joinInts(parts), u, p.Types[t].MaxUnits)
	}
	return ""
}

func totalUnits(segs []Segment) int {
	n := 0
	for _, s := range segs {
		n += s.Units
	}
	return n
}

// lowerBound is a lower bound on the cost of any plan whose stages have at
// least segs' units: price*k/X <= price*k/X_i(k) stage by stage, with the
// PS cores counted linearly. A hair of slack absorbs rounding.
func (p *Problem) lowerBound(segs []Segment, shapes []shape) float64 {
	var perSample float64
	for i, s := range segs {
		perSample += p.linPrice(s.Type) * float64(s.Units) * shapes[i].et(s.Units) / p.Batch
	}
	return p.costFactor() * perSample * (1 - 1e-12)
}

// provisionNewton is HeterPS' provisioning: all stages run at the throughput
// of the first, X_1(k_1); Newton's method finds the k_1 at which that
// throughput meets the limit; every stage's continuous units follow from
// k_1, and all are rounded up (stages whose one unit already beats the
// target keep one unit). Unit limits are checked after rounding.
func (p *Problem) provisionNewton(segs []Segment) Provisioning {
	out := Provisioning{Rule: RuleNewton}
	shapes := make([]shape, len(segs))
	for i, s := range segs {
		shapes[i] = p.shape(s.First, s.Last, s.Type)
	}
	target := p.ThroughputLimit
	k1, err := newtonUnits(p.Batch, shapes[0], target)
	if err != nil {
		out.Reason = fmt.Sprintf("%s: %v", p.describe(0, segs[0]), err)
		return out
	}
	x1 := p.Batch / shapes[0].etReal(k1)
	if k1 == 1 { // stage 1 beats the target on one unit: balance the others at the target
		x1 = target
	}
	cand := slices.Clone(segs)
	for i := range cand {
		k, ok := continuousUnits(p.Batch, shapes[i], x1)
		if !ok {
			need := p.stageUnits(shapes[i], target, math.MaxInt32)
			out.Reason = p.reason(i, segs[i], shapes[i], need, target)
			return out
		}
		cand[i].Units = roundUp(k)
		// Rounding in the continuous solution may leave a stage a hair short.
		for cand[i].Units < math.MaxInt32 && p.Batch/shapes[i].et(cand[i].Units) < target {
			cand[i].Units++
		}
		if max := p.Types[cand[i].Type].MaxUnits; cand[i].Units > max {
			out.Reason = fmt.Sprintf("%s needs %d units to reach %.6g samples/s, max_units of %s is %d (unit limit)",
				p.describe(i, cand[i]), cand[i].Units, target, p.Types[cand[i].Type].Name, max)
			return out
		}
	}
	if why := p.typeLimits(cand); why != "" {
		out.Reason = why
		return out
	}
	out.Feasible, out.Segments = true, cand
	out.PSCores = p.PSCores(totalUnits(cand))
	out.Costing = p.Cost(cand, out.PSCores)
	return out
}

// etReal is ET at a real number of units.
func (s shape) etReal(k float64) float64 { return math.Max(s.cs+s.cp/k, s.ds+s.dp/k) }

// newtonUnits solves b/ET(k) = x for k >= 1 with Newton's method. The
// throughput is concave and increasing in k, so iterates started left of
// the root climb to it monotonically.
func newtonUnits(b float64, sh shape, x float64) (float64, error) {
	if b/sh.etReal(1) >= x {
		return 1, nil
	}
	if b/math.Max(sh.cs, sh.ds) <= x {
		return 0, fmt.Errorf("even unlimited units stay below %.6g samples/s (Amdahl limit)", x)
	}
	k := 1.0
	for range 100 {
		c, v := sh.cs, sh.cp
		if sh.ds+sh.dp/k > sh.cs+sh.cp/k {
			c, v = sh.ds, sh.dp
		}
		g := b/(c+v/k) - x
		dg := b * v / ((c*k + v) * (c*k + v))
		step := g / dg
		k -= step
		if math.Abs(step) < 1e-9*k {
			break
		}
	}
	return k, nil
}

// continuousUnits is the real number of units at which a stage of shape sh
// runs at x (at least 1).
func continuousUnits(b float64, sh shape, x float64) (float64, bool) {
	e := b / x
	k := 1.0
	for _, part := range [][2]float64{{sh.cs, sh.cp}, {sh.ds, sh.dp}} {
		c, v := part[0], part[1]
		if c+v <= e {
			continue
		}
		if c >= e {
			return 0, false
		}
		k = math.Max(k, v/(e-c))
	}
	return k, true
}

func roundUp(k float64) int {
	if k > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(math.Ceil(k - 1e-9))
}

// provisionStatic is the static-ratio baseline: GPU stages get g units, CPU
// stages staticRatio*g, with the smallest g that reaches the limit (a
// binary search: the throughput grows with g unless a stage's alpha is
// below 0, where g = 1 is tried first). With ps, the
// plan also pays staticRatio*g parameter-server cores.
func (p *Problem) provisionStatic(segs []Segment, ps bool) Provisioning {
	rule := RuleStaRatio
	if ps {
		rule = RuleStaPSRatio
	}
	out := Provisioning{Rule: rule}
	at := func(g int) []Segment {
		cand := slices.Clone(segs)
		for i := range cand {
			cand[i].Units = g
			if p.Types[cand[i].Type].Kind == CPU {
				cand[i].Units = staticRatio * g
			}
		}
		return cand
	}
	gmax := p.staticMax(segs)
	if gmax < 1 {
		out.Reason = p.typeLimits(at(1))
		return out
	}
	reaches := func(g int) bool { return p.PipelineThroughput(at(g)) >= p.ThroughputLimit }
	if reaches(1) { // also where more units are slower (alpha < 0), which the search below assumes away
		return p.staticAt(out, at(1), ps, 1)
	}
	if !reaches(gmax) {
		out.Reason = fmt.Sprintf("%s: at the most units the limits allow (g = %d), the pipeline reaches only %.6g samples/s < %.6g",
			rule, gmax, p.PipelineThroughput(at(gmax)), p.ThroughputLimit)
		return out
	}
	g := 1 + sort.Search(gmax-1, func(i int) bool { return reaches(i + 1) })
	return p.staticAt(out, at(g), ps, g)
}

// staticAt is the static-ratio plan cand at g, with its PS cores and cost.
func (p *Problem) staticAt(out Provisioning, cand []Segment, ps bool, g int) Provisioning {
	out.Feasible, out.Segments = true, cand
	out.PSCores = p.PSCores(totalUnits(cand))
	if ps {
		out.PSCores = staticRatio * g
	}
	out.Costing = p.Cost(cand, out.PSCores)
	return out
}

// staticMax is the largest g whose static-ratio units fit every type's limit.
func (p *Problem) staticMax(segs []Segment) int {
	per := make([]int, len(p.Types)) // units per g, per type
	for _, s := range segs {
		if p.Types[s.Type].Kind == CPU {
			per[s.Type] += staticRatio
		} else {
			per[s.Type]++
		}
	}
	g := math.MaxInt32
	for t, n := range per {
		if n > 0 {
			g = min(g, p.Types[t].MaxUnits/n)
		}
	}
	return g
}
