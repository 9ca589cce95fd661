package sched

import (
	"fmt"
	"math/rand/v2"
)

// randomProblem makes a small problem with random profiles. Unit limits are
// small so that they bind, and some types share little, so that summed
// limits across stages of one type matter.
func randomProblem(r *rand.Rand, layers, types int) *Problem {
	p := &Problem{
		Batch: float64(64 * (1 + r.IntN(8))), ProfileBatch: 64, Epochs: 1 + float64(r.IntN(3)),
		Samples: 1e6, PSType: -1,
	}
	for t := range types {
		kind := GPU
		if t == 0 || r.IntN(3) == 0 {
			kind = CPU
		}
		p.Types = append(p.Types, Type{Name: fmt.Sprintf("t%d", t), Kind: kind,
			Price: 0.05 + r.Float64()*3, MaxUnits: 1 + r.IntN(12)})
	}
	if r.IntN(2) == 0 {
		p.PSType = r.IntN(types)
		p.PSRatio = []float64{0.1, 0.25, 0.5, 1}[r.IntN(4)]
	}
	for l := range layers {
		ly := Layer{Name: fmt.Sprintf("l%d", l), Kind: "fc"}
		for range types {
			ly.OCT = append(ly.OCT, 0.001+r.Float64()*0.05)
			ly.ODT = append(ly.ODT, r.Float64()*0.01)
			ly.Alpha = append(ly.Alpha, []float64{-0.5, 0, 0.5, 0.8, 0.9, 0.95, 0.99, 1}[r.IntN(8)]) // below 0: more units are slower
			ly.Beta = append(ly.Beta, []float64{0, 0.5, 0.9, 1}[r.IntN(4)])
		}
		p.Layers = append(p.Layers, ly)
	}
	// A limit somewhere between trivial and impossible.
	single := p.Batch / p.shape(0, layers-1, 0).et(1)
	p.ThroughputLimit = single * (0.2 + r.Float64()*6)
	if r.IntN(10) == 0 {
		p.ThroughputLimit = 0 // no floor
	}
	return p
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed+1)) }
