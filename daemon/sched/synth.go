package sched

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/heterps/heterps/config"
)

// Synthetic catalogs and problems for benchmarks and experiments. As in the
// HeterPS paper, many GPU types are simulated as one GPU model at different
// prices; here their speed varies too. Layer times are roofline estimates
// from the device descriptors, not measurements.

// MaxSynthTypes bounds SynthCatalog.
const MaxSynthTypes = 64

// Reference devices of the synthetic catalogs (vendor peak figures).
var (
	xeonCore = config.CatalogType{Name: "cpu", Kind: config.KindCPU, Model: "Xeon Gold 6130 core (reference)",
		Price: 0.04, MaxUnits: 1024, PeakFLOPS: 1.344e11, MemBandwidth: 8.0e9, LinkBandwidth: 3.9e8}
	v100PCIe = config.CatalogType{Kind: config.KindGPU, Model: "V100-PCIe (reference)",
		Price: 2.48, PeakFLOPS: 1.4e13, MemBandwidth: 9.0e11, LinkBandwidth: 1.575e10}
)

// SynthCatalog makes a catalog of n types (1..64): type 0 is CPU cores, the
// others the reference GPU scaled in speed by a factor between 0.35 and 2.5
// (compute and memory; the link by its square root) and priced roughly in
// proportion to speed^0.8 with +-30% noise. The same seed gives the same
// catalog.
func SynthCatalog(n int, seed uint64) (*config.Catalog, error) {
	if n < 1 || n > MaxSynthTypes {
		return nil, fmt.Errorf("sched: synth: %d types, want 1..%d", n, MaxSynthTypes)
	}
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	c := &config.Catalog{Version: 1, Name: fmt.Sprintf("synth-%d-%d", n, seed), Types: []config.CatalogType{xeonCore}}
	for i := 1; i < n; i++ {
		speed := math.Exp(math.Log(0.35) + r.Float64()*math.Log(2.5/0.35))
		g := v100PCIe
		g.Name = fmt.Sprintf("gpu%02d", i)
		g.Model = fmt.Sprintf("reference GPU at %.2fx speed", speed)
		g.PeakFLOPS = round3(g.PeakFLOPS * speed)
		g.MemBandwidth = round3(g.MemBandwidth * speed)
		g.LinkBandwidth = round3(g.LinkBandwidth * math.Sqrt(speed))
		g.Price = round3(g.Price * math.Pow(speed, 0.8) * (0.7 + 0.6*r.Float64()))
		g.MaxUnits = 8 * (1 + r.IntN(8))
		c.Types = append(c.Types, g)
	}
	return c, c.Validate()
}

// round3 keeps 3 significant digits, so that printed catalogs stay readable
// and reparse to the same values.
func round3(v float64) float64 { return roundDigits(v, 3) }

func roundDigits(v float64, digits int) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', digits, 64), 64)
	return r
}

// CTRDNNShapes returns the layers of a CTR-DNN-like model with n >= 3
// layers, shaped like the zoo's ctrdnn-N: a 26-slot embedding (dim 9, a
// million rows), a concat with 13 dense features, n-3 hidden fully connected
// layers (512 wide, halving after the first half down to 32) and a logit.
func CTRDNNShapes(n int) ([]config.LayerShape, error) {
	if n < 3 {
		return nil, fmt.Errorf("sched: ctrdnn needs at least 3 layers, got %d", n)
	}
	const slots, dim, dense, vocab = 26, 9, 13, 1000001
	shapes := []config.LayerShape{
		{Name: "emb", Kind: "embedding", In: 0, Out: slots * dim, Weights: vocab * dim},
		{Name: "concat", Kind: "concat", In: slots * dim, Out: slots*dim + dense},
	}
	in, hidden := slots*dim+dense, n-3
	for i := range hidden {
		out := 512
		if i >= hidden/2 {
			out = max(32, 512>>(i-hidden/2+1))
		}
		shapes = append(shapes, config.LayerShape{Name: fmt.Sprintf("fc%d", i+1), Kind: "fc", In: in, Out: out, Weights: int64(in*out + out)})
		in = out
	}
	return append(shapes, config.LayerShape{Name: "logit", Kind: "fc", In: in, Out: 1, Weights: int64(in + 1)}), nil
}

// EstimateSpec holds the problem-wide numbers of an estimated problem.
type EstimateSpec struct {
	Batch, ProfileBatch int
	Epochs              float64
	Samples             int64
	Limit               float64 // samples/s; 0 picks a quarter of the fastest single-type plan
	// Whole plans the model as one layer, so in one stage: models with
	// towers run only as a whole (config.Model.HasTowers).
	Whole   bool
	PSType  string
	PSRatio float64
}

// DefaultEstimateSpec is the spec of the synthetic benchmark problems.
func DefaultEstimateSpec() EstimateSpec {
	return EstimateSpec{Batch: 4096, ProfileBatch: 1024, Epochs: 1, Samples: 100_000_000}
}

// Roofline constants: the fraction of peak a layer reaches, per-layer
// launch and synchronisation overheads, and how many bytes a sparse row
// access really moves.
const (
	flopEfficiency = 0.4
	memEfficiency  = 0.6
	cpuOverhead    = 5e-6 // seconds per layer, forward+backward
	gpuOverhead    = 20e-6
	linkLatency    = 20e-6
	cacheLine      = 64
)

// EstimateProblem builds a problem from layer shapes and a catalog with
// roofline estimates of oct, odt, alpha and beta on one unit of each type at
// the profiling batch. Compute and memory traffic take max(flops/peak,
// bytes/bandwidth); the serial part (alpha's complement) is the per-layer
// overhead plus the dense gradient's exchange over the unit's link, which do
// not shrink with more units; embeddings on a GPU also pull their rows over
// the link (the table lives with the parameter servers).
func EstimateProblem(shapes []config.LayerShape, cat *config.Catalog, spec EstimateSpec) (*config.Problem, error) {
	if len(shapes) == 0 {
		return nil, fmt.Errorf("sched: estimate: no layers")
	}
	c := &config.Problem{Version: 1, Batch: spec.Batch, ProfileBatch: spec.ProfileBatch, Epochs: spec.Epochs,
		Samples: spec.Samples, PSType: spec.PSType, PSRatio: spec.PSRatio}
	for _, t := range cat.Types {
		c.Types = append(c.Types, config.ProblemType{Name: t.Name, Kind: t.Kind, Price: t.Price, MaxUnits: t.MaxUnits})
	}
	bo := float64(spec.ProfileBatch)
	for _, s := range shapes {
		l := config.ProblemLayer{Name: s.Name, Kind: s.Kind, InputSize: int64(s.In), WeightSize: s.Weights}
		for _, t := range cat.Types {
			oct, alpha := estimateCompute(s, t, bo)
			odt, beta := estimateTransfer(s, t, bo)
			l.OCT = append(l.OCT, round3(oct))
			l.Alpha = append(l.Alpha, math.Round(alpha*1000)/1000)
			l.ODT = append(l.ODT, round3(odt))
			l.Beta = append(l.Beta, math.Round(beta*1000)/1000)
		}
		c.Layers = append(c.Layers, l)
	}
	if spec.Whole {
		wholeModel(c)
	}
	c.ThroughputLimit = spec.Limit
	if spec.Limit == 0 {
		limit, err := autoLimit(c)
		if err != nil {
			return nil, err
		}
		c.ThroughputLimit = limit
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("sched: estimate: %w", err)
	}
	return c, nil
}

// estimateCompute returns oct and alpha of layer s on one unit of t.
func estimateCompute(s config.LayerShape, t config.CatalogType, bo float64) (float64, float64) {
	var flops, bytes, link, sync float64
	switch s.Kind {
	case "embedding":
		rows := float64(s.Out - s.In) // floats gathered per sample
		bytes = 3 * bo * math.Max(rows*4, cacheLine)
		if t.Kind == config.KindGPU {
			link = 2 * bo * rows * 4 // rows in, gradients out
		}
	case "fc":
		flops = 6 * bo * float64(s.Weights)
		bytes = 3*4*float64(s.Weights) + 3*4*bo*float64(s.In+s.Out)
		sync = 2 * 4 * float64(s.Weights) / syncBandwidth(t)
	case "nce": // a sparse table: a batch touches its targets' rows and K negatives', whatever the class count
		k, row := float64(s.Out-1), float64(s.In+1)
		flops = 6 * bo * (1 + k) * row
		bytes = 3*4*(bo+k)*row + 3*4*bo*float64(s.In+s.Out)
		sync = 2 * 4 * (bo + k) * row / syncBandwidth(t)
	default: // concat, dense, cosine, dot: elementwise
		flops = 4 * bo * float64(s.In+s.Out)
		bytes = 3 * 4 * bo * float64(s.In+s.Out)
	}
	work := math.Max(flops/(t.PeakFLOPS*flopEfficiency), bytes/(t.MemBandwidth*memEfficiency)) + link/t.LinkBandwidth
	overhead := cpuOverhead
	if t.Kind == config.KindGPU {
		overhead = gpuOverhead
	}
	oct := work + overhead + sync
	return oct, work / oct
}

// syncBandwidth is how fast a unit exchanges dense gradients: GPUs over
// their link; CPU cores aggregate in the shared memory of their node first.
func syncBandwidth(t config.CatalogType) float64 {
	if t.Kind == config.KindCPU {
		return t.MemBandwidth
	}
	return t.LinkBandwidth
}

// estimateTransfer returns odt and beta: the output activations forward and
// their gradients back over the unit's link, plus a latency that does not
// shrink with more units.
func estimateTransfer(s config.LayerShape, t config.CatalogType, bo float64) (float64, float64) {
	move := 2 * 4 * bo * float64(s.Out) / t.LinkBandwidth
	return move + linkLatency, move / (move + linkLatency)
}

// autoLimit is the geometric mean of the highest throughput a single-type
// plan reaches on one unit and with all of its type's units, to two
// significant digits: high enough that stages need several units, and
// never above what all units reach (rounding up could pass it when one
// unit is all a type has).
func autoLimit(c *config.Problem) (float64, error) {
	c.ThroughputLimit = 0
	p, err := NewProblem(c)
	if err != nil {
		return 0, err
	}
	one, all := 0.0, 0.0
	for t, ty := range p.Types {
		segs := Segments(uniform(len(p.Layers), t))
		segs[0].Units = 1
		one = math.Max(one, p.PipelineThroughput(segs))
		segs[0].Units = ty.MaxUnits
		all = math.Max(all, p.PipelineThroughput(segs))
	}
	return math.Min(roundDigits(math.Sqrt(one*all), 2), all), nil
}

// SynthProblem is the benchmark problem with n types and a ctrdnn-like
// model of the given number of layers.
func SynthProblem(types, layers int, seed uint64) (*config.Problem, error) {
	cat, err := SynthCatalog(types, seed)
	if err != nil {
		return nil, err
	}
	shapes, err := CTRDNNShapes(layers)
	if err != nil {
		return nil, err
	}
	return EstimateProblem(shapes, cat, DefaultEstimateSpec())
}
