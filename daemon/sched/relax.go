package sched

import "math"

// rlRelaxLevels are the throughput levels, relative to the best plan's
// throughput, at which relax searches; nil switches it off.
var rlRelaxLevels = []float64{0.8, 0.9, 1.1, 1.2, 1.35, 1.5, 1.75, 2}

// relax escapes the true cost's plateaus. A plan's throughput is its
// slowest stage's, so a plan whose stages all run near one throughput
// only gets cheaper by raising every stage at once (each one alone buys
// units and no throughput): no single move of descend pays off. At a
// fixed throughput level x the stages separate: levelCost prices every
// stage at the fewest units that reach x, and one stage's move lowers it
// on its own. So for each level around the best plan's throughput, relax
// descends on levelCost(x) from the best plan, then on the true cost from
// there, and offers what it reaches; it starts again from a plan it
// improved, until no level improves it. Every move spends one of
// sr.evalsLeft, as in descend.
func (sr *search) relax() {
	for sr.best != nil && sr.evalsLeft > 0 {
		from, fromCost := sr.best, sr.bestCost
		x := sr.e.eval(from).Throughput
		for _, r := range rlRelaxLevels {
			level := x * r
			if level < sr.p.ThroughputLimit {
				continue
			}
			a, _ := sr.descend(from, func(a []int) float64 { return sr.p.levelCost(a, level) })
			sr.offer(sr.improve(a))
		}
		if sr.bestCost >= fromCost {
			return
		}
	}
}

// levelCost is what a would cost if every stage had the fewest units
// reaching x samples/s and the plan ran at x. A stage that cannot reach x
// gets all its type's units, and a type's stages together over its
// max_units get them anyway: each multiplies the cost by the square of
// how far it falls short (x over the stage's best, or units wanted over
// units there are), so that a search can pass through such plans on its
// way to splitting the stage.
func (p *Problem) levelCost(a []int, x float64) float64 {
	segs := Segments(a)
	used := make([]int, len(p.Types))
	shortfall := 1.0
	for i := range segs {
		s := &segs[i]
		sh := p.shape(s.First, s.Last, s.Type)
		most := p.Types[s.Type].MaxUnits
		need := p.stageUnits(sh, x, most)
		s.Units = need.units
		if need.why != reached {
			s.Units = most
			shortfall *= math.Max(1, x*sh.et(most)/p.Batch)
		}
		used[s.Type] += s.Units
	}
	for t, u := range used {
		shortfall *= math.Max(1, float64(u)/float64(p.Types[t].MaxUnits))
	}
	hourly := p.hourlyPrice(segs, p.PSCores(totalUnits(segs)))
	return p.costFactor() * hourly / x * shortfall * shortfall
}
