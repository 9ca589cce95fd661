package sched

import (
	"fmt"
	"math"
)

// limit says why a stage cannot reach a throughput.
type limit uint8

const (
	reached limit = iota
	unitLimit
	amdahlLimit // even unlimited units cannot: the serial part alone is too slow
	// slowerLimit: the transfer needs more units than the compute can take,
	// more units slowing it (alpha < 0).
	slowerLimit
)

// partUnits returns the fewest units k in [1, max] for which a part taking
// c + v/k seconds per batch of b samples runs at x samples/s or more. On
// failure it returns the units the part would need (0 when no number would
// do) and why.
//
// The test b/(c+v/k) >= x is exactly the one the cost functions make, so the
// answer is consistent with them to the last bit; the closed form
// k = v/(b/x - c) only gives the starting point.
func partUnits(b, c, v, x float64, max int) (int, limit) {
	ok := func(k int) bool { return b/(c+v/float64(k)) >= x }
	if ok(1) {
		return 1, reached
	}
	if b/c < x || v == 0 {
		return 0, amdahlLimit
	}
	need := v / (b/x - c)
	if math.IsInf(need, 0) || math.IsNaN(need) || need > float64(max)+1 {
		if ok(max) { // only rounding stood between us and max
			return lowest(ok, max), reached
		}
		return ceilUnits(need), unitLimit
	}
	k := min(max, int(math.Ceil(need)))
	for k < max && !ok(k) {
		k++
	}
	if !ok(k) {
		return k + 1, unitLimit
	}
	return lowest(ok, k), reached
}

// lowest steps k down while ok still holds (the closed form may overshoot by
// a rounding step).
func lowest(ok func(int) bool, k int) int {
	for k > 1 && ok(k-1) {
		k--
	}
	return k
}

func ceilUnits(need float64) int {
	if need > math.MaxInt32 || math.IsNaN(need) {
		return math.MaxInt32
	}
	return int(math.Ceil(need))
}

// stageNeed is the fewest units that bring a stage of shape sh to x samples/s.
type stageNeed struct {
	units int
	why   limit
	part  string // "compute" or "transfer": which part fails when why != reached
}

func (p *Problem) stageUnits(sh shape, x float64, max int) stageNeed {
	kc, why := partUnits(p.Batch, sh.cs, sh.cp, x, max)
	if why != reached {
		return stageNeed{units: kc, why: why, part: "compute"}
	}
	kd, why := partUnits(p.Batch, sh.ds, sh.dp, x, max)
	if why != reached {
		return stageNeed{units: kd, why: why, part: "transfer"}
	}
	k, ok := bothParts(p.Batch, sh, x, kc, kd)
	if !ok {
		return stageNeed{units: k, why: slowerLimit, part: "compute"}
	}
	return stageNeed{units: k}
}

// bothParts is the units of a stage whose compute reaches x on kc units
// and its transfer on kd (each the fewest, from partUnits): the larger,
// and whether the compute still reaches x there — not when kd > kc and
// more units slow the compute down (alpha < 0), in which case no count of
// units reaches x.
func bothParts(b float64, sh shape, x float64, kc, kd int) (int, bool) {
	k := max0(kc, kd)
	return k, k == kc || b/sh.ct(k) >= x
}

func max0(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// reason explains why stage i cannot reach x.
func (p *Problem) reason(i int, s Segment, sh shape, need stageNeed, x float64) string {
	name := p.Types[s.Type]
	switch {
	case need.why == slowerLimit:
		return fmt.Sprintf("%s: its transfer needs %d units to reach %.6g samples/s, and more units slow its compute (alpha < 0) to %.6g samples/s there",
			p.describe(i, s), need.units, x, p.Batch/sh.ct(need.units))
	case need.why == amdahlLimit && need.part == "compute" && sh.cp < 0:
		return fmt.Sprintf("%s: one unit, its fastest (alpha < 0: more units are slower), reaches only %.6g samples/s < %.6g",
			p.describe(i, s), p.Batch/sh.ct(1), x)
	case need.why == amdahlLimit:
		serial := sh.cs
		if need.part == "transfer" {
			serial = sh.ds
		}
		return fmt.Sprintf("%s: even unlimited units reach only %.6g samples/s < %.6g (Amdahl limit: the serial %s part takes %.4g s per batch)",
			p.describe(i, s), p.Batch/serial, x, need.part, serial)
	}
	return fmt.Sprintf("%s needs %d units to reach %.6g samples/s, max_units of %s is %d (unit limit)",
		p.describe(i, s), need.units, x, name.Name, name.MaxUnits)
}

// startThroughput is the lowest pipeline throughput a plan may have.
func (p *Problem) startThroughput() float64 {
	if p.ThroughputLimit > 0 {
		return p.ThroughputLimit
	}
	return math.SmallestNonzeroFloat64
}

// linPrice is the price of one unit of type t per hour with the parameter-
// server cores it brings (ps_ratio of a core each) counted linearly, a lower
// bound on what the unit really adds because ps_cores is rounded up.
func (p *Problem) linPrice(t int) float64 { return p.Types[t].Price + p.PSPrice()*p.PSRatio }
