package sched

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
)

// The exact method.
//
// Write N(plan) for a plan's hourly price (units and PS cores) and X for its
// throughput; its cost is costFactor * N / X. For a target throughput x let
// D(x) be the least N over all plans in which every stage reaches x with the
// fewest units it needs for x (and within the unit limits).
//
// Claim: the optimum is min over x >= limit of D(x)/x. A plan attaining D(x)
// has X >= x, so it costs at most D(x)/x: opt <= D(x)/x. Conversely take an optimal plan with
// throughput X*: cutting each stage to the fewest units that reach X* keeps
// every stage at or above X*, removes units (limits still hold) and does not
// raise N (ps_cores only grows with the units), so D(X*) <= N* and
// opt = N*/X* >= D(X*)/X*.
//
// D is a non-decreasing step function that only changes just above a stage
// breakpoint (a throughput B/ET some stage has at some unit count), so D(x)/x
// is smallest at the right ends of its steps. The solver walks them: at
// target x it computes D(x) and a plan attaining it with the largest real
// throughput X (>= x, and still in the same step of D), costs that plan, and
// moves the target just past X, into the next step or further right in this
// one. Every step is visited and the walk ends after finitely many (the
// breakpoints are finite): when no plan reaches x, or when a lower bound on
// the cost of every plan with throughput >= x passes the best cost found.
// That bound is the least over assignments of the sum over stages of
// price*k/X_i(k) at the fewest units k for x; it is non-decreasing in x
// because k*ET(k) is non-decreasing in k.
//
// D(x) itself: with x fixed, each stage's units, hence its price, depend only
// on its own layers and type, so the cheapest assignment is a shortest path
// over layer prefixes, DP[i][t] = min over j and t' != t of DP[j][t'] +
// price(stage j..i-1 on t): O(layers^2 * types) with the best and second-best
// of each prefix. Two things couple stages and break that separability: a
// type's unit limit is summed over all its stages, and ps_cores rounds up the
// total units. The DP therefore solves a relaxation (limits per stage only,
// PS cores priced linearly) and, when its answer breaks a summed limit or
// rounds PS cores up, a best-first label search (search.go) solves the
// level exactly, tracking the units used per offending type and the total
// units, with the relaxation's DP as an admissible heuristic.

// exactOptions tune the exact solver.
type exactOptions struct {
	maxLabels int // label search budget per level; exceeding it is an error
}

// ErrSearchLimit is returned when the exact method's label search (needed
// only when unit limits bind across stages) exceeds its budget.
var ErrSearchLimit = errors.New("exact: label search exceeded its budget")

type exactSolver struct {
	p      *Problem
	n, nt  int
	lin    []float64 // linPrice per type
	opts   exactOptions
	levels int // targets visited, for the report

	// Per-level scratch, indexed [i*nt + t].
	dtUnits []int // fewest units for the transfer part of a stage ending at layer i; -1 if none
	ds, dp  []float64
	// DP over prefixes, indexed [i*nt + t] for a prefix of length i whose
	// last stage is on t.
	val, minX, lb []float64
	from, prevT   []int
	units         []int
}

func newExactSolver(p *Problem, o exactOptions) *exactSolver {
	n, nt := len(p.Layers), len(p.Types)
	s := &exactSolver{p: p, n: n, nt: nt, opts: o,
		lin:     make([]float64, nt),
		dtUnits: make([]int, n*nt), ds: make([]float64, n*nt), dp: make([]float64, n*nt),
		val: make([]float64, (n+1)*nt), minX: make([]float64, (n+1)*nt), lb: make([]float64, (n+1)*nt),
		from: make([]int, (n+1)*nt), prevT: make([]int, (n+1)*nt), units: make([]int, (n+1)*nt),
	}
	for t := range nt {
		s.lin[t] = p.linPrice(t)
	}
	for i := range n {
		for t := range nt {
			s.ds[i*nt+t] = p.scale() * p.dtSerial(i, t)
			s.dp[i*nt+t] = p.scale() * p.dtParallel(i, t)
		}
	}
	return s
}

// solution is a provisioned assignment.
type solution struct {
	assign []int
	segs   []Segment
	cost   Costing
	ps     int
}

// solve walks the targets and returns the optimum, or a reason why no plan
// is feasible.
func (s *exactSolver) solve(ctx context.Context) (*solution, string, error) {
	p := s.p
	var best *solution
	for x := p.startThroughput(); ; s.levels++ {
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		segs, price, lb, ok := s.level(x)
		if !ok {
			if best == nil {
				return nil, s.explainInfeasible(x), nil
			}
			return best, "", nil
		}
		if best != nil && lb >= best.cost.Cost {
			return best, "", nil
		}
		if best != nil && s.skip(price, best) > x {
			x = s.skip(price, best)
			continue
		}
		exact, err := s.exactLevel(ctx, x, segs)
		if err != nil {
			return nil, "", err
		}
		if exact == nil { // the summed unit limits rule out every plan from here on
			if best == nil {
				return nil, "no assignment reaches the throughput limit within the unit limits summed over stages of one type: " + p.typeLimits(segs), nil
			}
			return best, "", nil
		}
		ps := p.PSCores(totalUnits(exact))
		c := p.Cost(exact, ps)
		if best == nil || c.Cost < best.cost.Cost {
			best = &solution{assign: assignOf(exact, s.n), segs: exact, cost: c, ps: ps}
		}
		x = math.Max(math.Nextafter(c.Throughput, math.Inf(1)), s.skip(price, best))
	}
}

// skip is where the walk may jump after a target whose relaxation pays
// price per hour: every plan reaching a throughput x' at or above that
// target pays at least price, so it costs at least costFactor*price/x',
// and beats best only for x' beyond costFactor*price/best.
func (s *exactSolver) skip(price float64, best *solution) float64 {
	return s.p.costFactor() * price / best.cost.Cost * (1 - 1e-12)
}

// level solves the relaxation at target x: the cheapest assignment (PS cores
// priced linearly, limits per stage), with ties broken towards the highest
// throughput; its hourly price, a lower bound on that of any plan reaching
// x; and the lower bound on the cost of any plan reaching x.
func (s *exactSolver) level(x float64) (segs []Segment, price, lb float64, ok bool) {
	s.fillTransferUnits(x)
	for i := range s.val {
		s.val[i], s.minX[i], s.lb[i] = math.Inf(1), 0, math.Inf(1)
	}
	for j := 0; j < s.n; j++ {
		top, ltop := s.topTwo(j)
		if math.IsInf(top.v1, 1) {
			continue
		}
		for t := range s.nt {
			s.extend(j, t, x, top, ltop)
		}
	}
	t, ok := s.bestLast()
	if !ok {
		return nil, 0, 0, false
	}
	lb = math.Inf(1)
	for u := range s.nt {
		lb = math.Min(lb, s.lb[s.n*s.nt+u])
	}
	return s.reconstruct(t), s.val[s.n*s.nt+t], s.p.costFactor() * lb * (1 - 1e-12), true
}

// extend relaxes every stage that starts at layer j on type t.
func (s *exactSolver) extend(j, t int, x float64, top, ltop topTwo) {
	p, nt := s.p, s.nt
	fv, fx, ft := top.excluding(t)
	if math.IsInf(fv, 1) {
		return
	}
	flb, _, _ := ltop.excluding(t)
	max, scale, b := p.Types[t].MaxUnits, p.scale(), p.Batch
	var serial, parallel float64
	for i := j; i < s.n; i++ {
		serial, parallel = addLayer(serial, parallel, p.Layers[i], t)
		sh := shape{cs: scale * serial, cp: scale * parallel, ds: s.ds[i*nt+t], dp: s.dp[i*nt+t]}
		kc, why := partUnits(b, sh.cs, sh.cp, x, max)
		if why != reached {
			return // compute only grows with more layers
		}
		kd := s.dtUnits[i*nt+t]
		if kd < 0 {
			continue
		}
		k, ok := bothParts(b, sh, x, kc, kd)
		if !ok {
			continue
		}
		et := sh.et(k)
		v, mx := fv+s.lin[t]*float64(k), math.Min(fx, b/et)
		at := (i+1)*nt + t
		if better(v, mx, s.val[at], s.minX[at]) {
			s.val[at], s.minX[at], s.from[at], s.prevT[at], s.units[at] = v, mx, j, ft, k
		}
		s.lb[at] = math.Min(s.lb[at], flb+s.lin[t]*float64(k)*et/b)
	}
}

// better orders (price, throughput) pairs: cheaper first, then faster.
func better(v, x, w, y float64) bool { return v < w || (v == w && x > y) }

func (s *exactSolver) fillTransferUnits(x float64) {
	for i := range s.n {
		for t := range s.nt {
			at := i*s.nt + t
			k, why := partUnits(s.p.Batch, s.ds[at], s.dp[at], x, s.p.Types[t].MaxUnits)
			if why != reached {
				k = -1
			}
			s.dtUnits[at] = k
		}
	}
}

// topTwo holds the best and second-best prefix ends of one length, on
// different types, so that a stage on t can extend the best prefix not
// ending on t.
type topTwo struct {
	v1, x1, v2, x2 float64
	t1, t2         int
}

func (tt topTwo) excluding(t int) (float64, float64, int) {
	if tt.t1 != t {
		return tt.v1, tt.x1, tt.t1
	}
	return tt.v2, tt.x2, tt.t2
}

func (tt *topTwo) offer(v, x float64, t int) {
	switch {
	case better(v, x, tt.v1, tt.x1):
		tt.v2, tt.x2, tt.t2 = tt.v1, tt.x1, tt.t1
		tt.v1, tt.x1, tt.t1 = v, x, t
	case better(v, x, tt.v2, tt.x2):
		tt.v2, tt.x2, tt.t2 = v, x, t
	}
}

func emptyTopTwo() topTwo { return topTwo{v1: math.Inf(1), v2: math.Inf(1), t1: -2, t2: -2} }

// topTwo returns the best two (price, throughput) and lower-bound values of
// prefixes of length j; the empty prefix is free, infinitely fast and on no
// type.
func (s *exactSolver) topTwo(j int) (topTwo, topTwo) {
	if j == 0 {
		free := topTwo{v1: 0, x1: math.Inf(1), t1: -1, v2: math.Inf(1), t2: -2}
		return free, free
	}
	top, ltop := emptyTopTwo(), emptyTopTwo()
	for t := range s.nt {
		at := j*s.nt + t
		top.offer(s.val[at], s.minX[at], t)
		ltop.offer(s.lb[at], 0, t)
	}
	return top, ltop
}

func (s *exactSolver) bestLast() (int, bool) {
	best := -1
	for t := range s.nt {
		at := s.n*s.nt + t
		if math.IsInf(s.val[at], 1) {
			continue
		}
		if best < 0 || better(s.val[at], s.minX[at], s.val[s.n*s.nt+best], s.minX[s.n*s.nt+best]) {
			best = t
		}
	}
	return best, best >= 0
}

func (s *exactSolver) reconstruct(t int) []Segment {
	var rev []Segment
	for i := s.n; i > 0; {
		at := i*s.nt + t
		j := s.from[at]
		rev = append(rev, Segment{First: j, Last: i - 1, Type: t, Units: s.units[at]})
		i, t = j, s.prevT[at]
	}
	segs := make([]Segment, len(rev))
	for i, sg := range rev {
		segs[len(rev)-1-i] = sg
	}
	return segs
}

func assignOf(segs []Segment, n int) []int {
	assign := make([]int, n)
	for _, sg := range segs {
		for l := sg.First; l <= sg.Last; l++ {
			assign[l] = sg.Type
		}
	}
	return assign
}

// exactLevel returns the true D(x) plan given the relaxation's answer: that
// answer itself when it keeps every summed limit and its PS cores need no
// rounding, otherwise the label search's, which tracks the offending types
// (and the total units) until its answer breaks nothing it does not track.
// nil means no plan reaches x.
func (s *exactSolver) exactLevel(ctx context.Context, x float64, segs []Segment) ([]Segment, error) {
	tracked := make([]bool, s.nt)
	trackTotal := false
	for {
		over := s.overLimit(segs)
		gap := !trackTotal && s.psRounds(totalUnits(segs))
		if len(over) == 0 && !gap {
			return segs, nil
		}
		for _, t := range over {
			tracked[t] = true
		}
		trackTotal = trackTotal || gap
		var err error
		segs, err = s.search(ctx, x, tracked, trackTotal)
		if err != nil || segs == nil {
			return nil, err
		}
	}
}

func (s *exactSolver) overLimit(segs []Segment) []int {
	used := make([]int, s.nt)
	for _, sg := range segs {
		used[sg.Type] += sg.Units
	}
	var over []int
	for t, u := range used {
		if u > s.p.Types[t].MaxUnits {
			over = append(over, t)
		}
	}
	return over
}

// psRounds says whether ceil(ps_ratio*total) costs more than its linear
// price, i.e. whether the relaxation under-priced the plan.
func (s *exactSolver) psRounds(total int) bool {
	p := s.p
	if p.PSPrice() == 0 || p.PSRatio == 0 {
		return false
	}
	return float64(p.PSCores(total))-p.PSRatio*float64(total) > psEpsilon
}

// explainInfeasible says why no plan reaches x: a layer that no type can run
// fast enough on its own, or else the transfers between stages.
func (s *exactSolver) explainInfeasible(x float64) string {
	p := s.p
	for l := range s.n {
		var why []string
		for t := range s.nt {
			sh := p.shape(l, l, t)
			sh.ds, sh.dp = 0, 0
			need := p.stageUnits(sh, x, p.Types[t].MaxUnits)
			if need.why == reached {
				why = nil
				break
			}
			why = append(why, p.shortReason(t, sh, need))
		}
		if why != nil {
			if len(why) > 3 {
				why = append(why[:3], fmt.Sprintf("and %d more types", len(why)-3))
			}
			return fmt.Sprintf("layer %d (%s) cannot reach %.6g samples/s on any type, even alone in its stage: %s",
				l, p.Layers[l].Name, x, strings.Join(why, "; "))
		}
	}
	return fmt.Sprintf("no assignment reaches %.6g samples/s: every split leaves a stage whose activation transfer is too slow within max_units", x)
}

// shortReason says why a stage of shape sh on type t misses a throughput.
func (p *Problem) shortReason(t int, sh shape, need stageNeed) string {
	ty := p.Types[t]
	switch {
	case need.why == amdahlLimit && sh.cp < 0:
		return fmt.Sprintf("on %s at most %.6g samples/s, on one unit (alpha < 0: more units are slower)", ty.Name, p.Batch/sh.ct(1))
	case need.why == amdahlLimit:
		return fmt.Sprintf("on %s at most %.6g samples/s (Amdahl limit)", ty.Name, p.Batch/sh.cs)
	}
	return fmt.Sprintf("on %s it needs %d units, max_units is %d (unit limit)", ty.Name, need.units, ty.MaxUnits)
}
