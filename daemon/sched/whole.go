package sched

import (
	"math"
	"slices"

	"github.com/heterps/heterps/config"
)

// wholeModel merges a problem's layers into one, so that every plan puts
// the whole model in one stage (EstimateSpec.Whole): compute times add up,
// the Amdahl fraction is their time-weighted mean (which keeps the stage's
// compute time exact for every unit count), and the transfer is the last
// layer's.
func wholeModel(pc *config.Problem) {
	layers := pc.Layers
	last := layers[len(layers)-1]
	whole := config.ProblemLayer{Name: "model", Kind: "model", InputSize: layers[0].InputSize,
		ODT: slices.Clone(last.ODT), Beta: slices.Clone(last.Beta)}
	for t := range layers[0].OCT {
		oct, par := 0.0, 0.0
		for _, l := range layers {
			oct += l.OCT[t]
			par += l.OCT[t] * l.Alpha[t]
		}
		alpha := 0.0
		if oct > 0 && !math.IsInf(oct, 1) {
			alpha = par / oct
		}
		whole.OCT, whole.Alpha = append(whole.OCT, oct), append(whole.Alpha, alpha)
	}
	for _, l := range layers {
		whole.WeightSize += l.WeightSize
	}
	pc.Layers = []config.ProblemLayer{whole}
}
