package sched

import (
	"math"
	"slices"

	"github.com/heterps/heterps/config"
)

// Per-type features: what the policy sees of type t at layer l. The static
// ones describe the layer on the type relative to the layer's best type, so
// that one policy reads problems with any number of types in any order; the
// dynamic ones depend on the type chosen for the previous layer.
const (
	featRelRate    = iota // log of price*oct over the layer's least price*oct
	featRelOCT            // log of oct over the layer's least oct
	featRelODT            // log of odt over the layer's least odt
	featAlpha             // parallel fraction of compute
	featBeta              // parallel fraction of transfer
	featSerial            // serial compute time over the time budget per batch
	featUnits             // units the layer alone needs at the limit, over max units
	featRelPrice          // log of the price over the least price
	featCheapest          // 1 for the type of least price*oct
	featCPU               // 1 for CPU types
	featOne               // constant
	featSwitch            // dynamic: 1 when t is not the previous layer's type
	featSwitchCost        // dynamic: the stage boundary's transfer time over the budget, when switching
	featMarginal          // dynamic: log of the hourly price the choice adds at the limit over the least added
	featFree              // dynamic: 1 when the choice adds no unit (the current stage has room)
	featInfeasible        // dynamic: 1 when the choice's stage cannot reach the limit on its type's units
	typeFeatures          // count
)

// dynamicFeatures is the number of dynamic features, the last ones.
const dynamicFeatures = typeFeatures - featSwitch

// Per-layer features, the recurrent cell's input besides the previous
// choice's type features: one-hot kind, log sizes, position, the layer's
// share of the model's least compute cost.
func layerFeatureCount() int { return len(kindFeatures) + 5 }

var kindFeatures = append(slices.Clone(config.LayerKinds), "other")

// policyInput is a problem as the policy reads it.
type policyInput struct {
	types  int
	layers [][]float32 // [layers][layerFeatureCount]
	static [][]float32 // [layers][types*typeFeatures], dynamic features zero
	// boundary[l][t] is featSwitchCost for leaving type t after layer l.
	boundary [][]float32
	p        *Problem
	tau      float64 // budgetPerBatch
}

// capLog is log(x) clipped to [0, 6] and scaled to about [0, 2].
func capLog(x float64) float32 {
	if !(x > 1) {
		return 0
	}
	return float32(math.Min(math.Log(x), 6) / 3)
}

// budgetPerBatch is the seconds a stage may take per batch: B over the
// throughput limit, or without a floor over the throughput of the model's
// least compute time on one unit.
func (p *Problem) budgetPerBatch() float64 {
	if p.ThroughputLimit > 0 {
		return p.Batch / p.ThroughputLimit
	}
	var sum float64
	for _, ly := range p.Layers {
		sum += slices.Min(ly.OCT) * p.scale()
	}
	return math.Max(sum, 1e-12)
}

func newPolicyInput(p *Problem) *policyInput {
	n, nt := len(p.Layers), len(p.Types)
	tau, sc := p.budgetPerBatch(), p.scale()
	in := &policyInput{types: nt, layers: make([][]float32, n), static: make([][]float32, n), boundary: make([][]float32, n), p: p, tau: tau}
	minPrice := math.Inf(1)
	for _, ty := range p.Types {
		minPrice = math.Min(minPrice, ty.Price)
	}
	minRates := make([]float64, n)
	var totalRate float64
	for l, ly := range p.Layers {
		minRates[l] = math.Inf(1)
		for t, ty := range p.Types {
			minRates[l] = math.Min(minRates[l], ty.Price*ly.OCT[t])
		}
		totalRate += minRates[l]
	}
	for l, ly := range p.Layers {
		minOCT, minODT := slices.Min(ly.OCT), slices.Min(ly.ODT)
		row := make([]float32, nt*typeFeatures)
		in.boundary[l] = make([]float32, nt)
		for t, ty := range p.Types {
			f := row[t*typeFeatures : (t+1)*typeFeatures]
			rate := ty.Price * ly.OCT[t]
			f[featRelRate] = capLog(rate / minRates[l])
			f[featRelOCT] = capLog(ly.OCT[t] / minOCT)
			if minODT > 0 {
				f[featRelODT] = capLog(ly.ODT[t] / minODT)
			} else if ly.ODT[t] > 0 {
				f[featRelODT] = 2
			}
			f[featAlpha], f[featBeta] = float32(ly.Alpha[t]), float32(ly.Beta[t])
			serial := sc * ly.OCT[t] * (1 - ly.Alpha[t]) / tau
			f[featSerial] = float32(math.Log1p(serial))
			need := math.Max(0, sc*ly.OCT[t]*ly.Alpha[t]/tau/math.Max(1-serial, 0.05)) // alpha < 0 shares no work
			f[featUnits] = float32(math.Log1p(need / float64(ty.MaxUnits)))
			f[featRelPrice] = capLog(ty.Price / minPrice)
			if rate == minRates[l] {
				f[featCheapest] = 1
			}
			if ty.Kind == CPU {
				f[featCPU] = 1
			}
			f[featOne] = 1
			if l < n-1 {
				dt := sc * ly.ODT[t] * (1 - ly.Beta[t] + ly.Beta[t]/float64(ty.MaxUnits))
				in.boundary[l][t] = float32(math.Log1p(dt / tau))
			}
		}
		in.static[l] = row
		lf := make([]float32, layerFeatureCount())
		kind := slices.Index(kindFeatures, ly.Kind)
		if kind < 0 {
			kind = len(kindFeatures) - 1
		}
		lf[kind] = 1
		at := len(kindFeatures)
		lf[at] = float32(math.Log1p(float64(ly.InputSize)) / 20)
		lf[at+1] = float32(math.Log1p(float64(ly.WeightSize)) / 20)
		lf[at+2] = float32(l) / float32(max(n-1, 1))
		lf[at+3] = float32(minRates[l] / totalRate)
		if l == n-1 {
			lf[at+4] = 1
		}
		in.layers[l] = lf
	}
	return in
}

// stageState is where one assignment stands: the type of its current
// stage and the stage's scaled serial and parallel compute time.
type stageState struct {
	typ    int // -1 before the first layer
	cs, cp float64
}

// units is the fewest units of type t that run a stage of compute shape
// (cs, cp) and transfer shape (ds, dp) within the budget per batch, and
// whether that fits t's unit limit.
func (in *policyInput) units(t int, cs, cp, ds, dp float64) (int, bool) {
	k := 1.0
	for _, part := range [][2]float64{{cs, cp}, {ds, dp}} {
		if part[1] == 0 && part[0] <= in.tau {
			continue
		}
		if part[0] >= in.tau {
			return 0, false
		}
		k = math.Max(k, math.Ceil(part[1]/(in.tau-part[0])-1e-9))
	}
	return int(k), k <= float64(in.p.Types[t].MaxUnits)
}

// extend is the state after choosing type t for layer l.
func (in *policyInput) extend(st stageState, l, t int) stageState {
	ly, sc := in.p.Layers[l], in.p.scale()
	if t != st.typ {
		st = stageState{typ: t}
	}
	st.cs += sc * ly.OCT[t] * (1 - ly.Alpha[t])
	st.cp += sc * ly.OCT[t] * ly.Alpha[t]
	return st
}

// dynamic writes the dynamic features of every type at layer l for an
// assignment in state st into dyn [types x dynamicFeatures]: whether t
// switches, the boundary's transfer cost, and the hourly price that
// choosing t adds when every stage is provisioned for the budget per batch
// (staying may fill the current stage's units; switching pays a new stage
// and the old one's transfer).
func (in *policyInput) dynamic(dyn []float32, l int, st stageState) {
	D, sc := dynamicFeatures, in.p.scale()
	added := make([]float64, in.types)
	ok := make([]bool, in.types)
	least := math.Inf(1)
	var closing float64 // what ending the current stage at l-1 adds
	closingOK := true
	if st.typ >= 0 {
		prev := in.p.Layers[l-1]
		old, _ := in.units(st.typ, st.cs, st.cp, 0, 0)
		a, b := prev.ODT[st.typ], prev.Beta[st.typ]
		k, fits := in.units(st.typ, st.cs, st.cp, sc*a*(1-b), sc*a*b)
		closing, closingOK = in.p.Types[st.typ].Price*float64(k-old), fits
	}
	for t := range in.types {
		if t == st.typ {
			next := in.extend(st, l, t)
			old, _ := in.units(t, st.cs, st.cp, 0, 0)
			k, fits := in.units(t, next.cs, next.cp, 0, 0)
			added[t], ok[t] = in.p.Types[t].Price*float64(k-old), fits
		} else {
			next := in.extend(stageState{typ: -1}, l, t)
			k, fits := in.units(t, next.cs, next.cp, 0, 0)
			added[t], ok[t] = in.p.Types[t].Price*float64(k)+closing, fits && closingOK
		}
		if ok[t] {
			least = math.Min(least, added[t])
		}
	}
	minPrice := in.p.Types[0].Price
	for _, ty := range in.p.Types {
		minPrice = math.Min(minPrice, ty.Price)
	}
	for t := range in.types {
		f := dyn[t*D : (t+1)*D]
		if st.typ >= 0 && t != st.typ {
			f[featSwitch-featSwitch] = 1
			f[featSwitchCost-featSwitch] = in.boundary[l-1][st.typ]
		}
		if !ok[t] {
			f[featInfeasible-featSwitch] = 1
			f[featMarginal-featSwitch] = 2
			continue
		}
		f[featMarginal-featSwitch] = capLog((added[t] + minPrice) / (least + minPrice))
		if added[t] == 0 {
			f[featFree-featSwitch] = 1
		}
	}
}

// typeRow writes type t's features at layer l into f.
func (in *policyInput) typeRow(f []float32, l, t int, dyn []float32) {
	copy(f, in.static[l][t*typeFeatures:(t+1)*typeFeatures])
	copy(f[featSwitch:], dyn[t*dynamicFeatures:(t+1)*dynamicFeatures])
}
