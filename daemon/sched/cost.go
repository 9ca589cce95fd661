package sched

import (
	"math"

	"github.com/heterps/heterps/config"
)

// Segment is one pipeline stage: layers First..Last (0-based, inclusive) on
// type Type with Units units.
type Segment struct {
	First, Last int
	Type        int
	Units       int
}

// Segments splits an assignment (a type index per layer) into its stages,
// the maximal runs of consecutive layers on one type, with Units unset.
func Segments(assign []int) []Segment {
	var segs []Segment
	for l, t := range assign {
		if n := len(segs); n > 0 && segs[n-1].Type == t {
			segs[n-1].Last = l
			continue
		}
		segs = append(segs, Segment{First: l, Last: l, Type: t})
	}
	return segs
}

// shape is a stage's batch times on k units, split by Amdahl's law into a
// serial and a parallel part: CT(k) = cs + cp/k and DT(k) = ds + dp/k.
//
// Every time and throughput in this package is computed from a shape made by
// adding the layers' parts in layer order, first to last, then scaling by
// B/B_o. The exact method builds shapes incrementally in the same order, so
// its throughputs are bit-identical to those of the cost functions below and
// the breakpoints it enumerates are exactly those the cost model sees.
type shape struct{ cs, cp, ds, dp float64 }

// shape returns the shape of layers first..last on type t; the stage has a
// transfer time unless it ends the pipeline.
func (p *Problem) shape(first, last, t int) shape {
	var serial, parallel float64
	for l := first; l <= last; l++ {
		serial, parallel = addLayer(serial, parallel, p.Layers[l], t)
	}
	s := p.scale()
	return shape{cs: s * serial, cp: s * parallel, ds: s * p.dtSerial(last, t), dp: s * p.dtParallel(last, t)}
}

// addLayer adds layer l's serial and parallel compute parts on type t.
func addLayer(serial, parallel float64, l Layer, t int) (float64, float64) {
	oct, a := l.OCT[t], l.Alpha[t]
	return serial + oct*(1-a), parallel + oct*a
}

// dtSerial and dtParallel are the unscaled parts of the transfer time of a
// stage ending at layer last (none for the last layer of the pipeline).
func (p *Problem) dtSerial(last, t int) float64 {
	if last == len(p.Layers)-1 {
		return 0
	}
	l := p.Layers[last]
	return l.ODT[t] * (1 - l.Beta[t])
}

func (p *Problem) dtParallel(last, t int) float64 {
	if last == len(p.Layers)-1 {
		return 0
	}
	l := p.Layers[last]
	return l.ODT[t] * l.Beta[t]
}

func (p *Problem) scale() float64 { return p.Batch / p.ProfileBatch }

func (s shape) ct(k int) float64 { return s.cs + s.cp/float64(k) }
func (s shape) dt(k int) float64 { return s.ds + s.dp/float64(k) }
func (s shape) et(k int) float64 { return math.Max(s.ct(k), s.dt(k)) }

// CT is a stage's compute time per batch:
// sum over its layers of oct*(B/B_o)*((1-alpha) + alpha/k).
func (p *Problem) CT(s Segment) float64 { return p.shape(s.First, s.Last, s.Type).ct(s.Units) }

// DT is a stage's time per batch to send its output activations and receive
// their gradients; 0 for the last stage.
func (p *Problem) DT(s Segment) float64 { return p.shape(s.First, s.Last, s.Type).dt(s.Units) }

// ET is a stage's time per batch: computation and communication overlap.
func (p *Problem) ET(s Segment) float64 { return p.shape(s.First, s.Last, s.Type).et(s.Units) }

// StageThroughput is X_i = B / ET_i in samples/s.
func (p *Problem) StageThroughput(s Segment) float64 { return p.Batch / p.ET(s) }

// PipelineThroughput is the throughput of the slowest stage.
func (p *Problem) PipelineThroughput(segs []Segment) float64 {
	x := math.Inf(1)
	for _, s := range segs {
		x = math.Min(x, p.StageThroughput(s))
	}
	return x
}

// RunTime is T = epochs * M / X, the seconds a run takes at throughput x.
func (p *Problem) RunTime(x float64) float64 { return p.Epochs * p.Samples / x }

// psEpsilon keeps ceil(ratio*units) from rounding up a product that is an
// integer but comes out a hair above it in floating point (0.1*30).
const psEpsilon = 1e-9

// PSCores is the parameter-server core rule of problem files:
// ceil(ps_ratio * total units).
func (p *Problem) PSCores(totalUnits int) int {
	if p.PSRatio == 0 {
		return 0
	}
	return int(math.Ceil(p.PSRatio*float64(totalUnits) - psEpsilon))
}

// Costing is what a provisioned plan costs and how fast it runs.
type Costing struct {
	Cost       float64 // money for the whole run, in the unit of the prices
	Throughput float64 // samples/s
	TimeS      float64 // seconds
}

// Cost is the cost of running the stages segs (with their units) and psCores
// parameter-server cores: T * (sum price*k + ps price * ps cores) / 3600.
func (p *Problem) Cost(segs []Segment, psCores int) Costing {
	return p.costing(p.PipelineThroughput(segs), p.hourlyPrice(segs, psCores))
}

// costing is the Costing of a run at throughput x paying hourly per hour.
func (p *Problem) costing(x, hourly float64) Costing {
	t := p.RunTime(x)
	return Costing{Cost: t * hourly / 3600, Throughput: x, TimeS: t}
}

// hourlyPrice is what the stages' units and the PS cores cost per hour.
func (p *Problem) hourlyPrice(segs []Segment, psCores int) float64 {
	var price float64
	for _, s := range segs {
		price += p.Types[s.Type].Price * float64(s.Units)
	}
	return price + p.PSPrice()*float64(psCores)
}

// costFactor is the factor from "price per hour divided by samples/s"
// to the cost of the run: epochs * M / 3600.
func (p *Problem) costFactor() float64 { return p.Epochs * p.Samples / 3600 }

// AutoLimit is the throughput floor EstimateProblem picks when its spec
// gives none, computed on c's layer times as they are now (for a problem
// whose times were replaced after the estimate, such as by a measured
// profile). It sets c.ThroughputLimit to 0 first.
func AutoLimit(c *config.Problem) (float64, error) { return autoLimit(c) }
